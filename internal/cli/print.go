package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// Output formats.
const (
	formatTable = "table"
	formatWide  = "wide"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// printer writes answers in the chosen format: tables for people, the API's
// JSON (protojson, camelCase fields, indented) or YAML for scripts.
type printer struct {
	format string
	out    *output
	now    func() time.Time
	// documents counts YAML documents written, for the --- separators.
	documents int
	// noHeaders leaves the header line out of tables (--no-headers).
	noHeaders bool
	// template is -o jsonpath's, columns -o custom-columns'.
	template *jsonpath.JSONPath
	columns  []customColumn
}

func newPrinter(format string, env Env) (printer, error) {
	switch format {
	case formatTable, formatWide, formatJSON, formatYAML:
		return printer{format: format, out: &output{w: env.Stdout}, now: env.Now}, nil
	}
	kind, template, columns, ok, err := parseObjectFormat(format)
	if !ok {
		return printer{}, fmt.Errorf("--output %q: want table, wide, json, yaml, name, jsonpath=TEMPLATE or custom-columns=HEADER:PATH[,HEADER:PATH]", format)
	}
	if err != nil {
		return printer{}, err
	}
	return printer{format: kind, out: &output{w: env.Stdout}, now: env.Now, template: template, columns: columns}, nil
}

// output is the printer's writer. It keeps the first failed write (a closed
// pipe, a full disk) and refuses what follows, so that lines need no error
// check each and the command still ends with that error (see execute).
type output struct {
	w   io.Writer
	err error
}

func (o *output) Write(b []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(b)
	o.err = err
	return n, err
}

// printf writes a line of text; a failed write is kept in p.out.
func (p *printer) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(p.out, format, args...)
}

func (p *printer) structured() bool { return p.format == formatJSON || p.format == formatYAML }

// column of a table; wide columns only show with -o wide.
type column struct {
	name string
	wide bool
}

// table is a set of rows under columns.
type table struct {
	columns []column
	rows    [][]string
}

// add appends a row. Control characters in a cell (a newline, a tab, a
// terminal escape sequence: spokes and the hub's users write some of the
// texts shown) become spaces, so that no text can forge a row or a column,
// or drive the terminal.
func (t *table) add(cells ...string) {
	for i, c := range cells {
		if strings.IndexFunc(c, unicode.IsControl) >= 0 {
			cells[i] = strings.Map(func(r rune) rune {
				if unicode.IsControl(r) {
					return ' '
				}
				return r
			}, c)
		}
	}
	t.rows = append(t.rows, cells)
}

// message writes m as JSON or YAML.
func (p *printer) message(m proto.Message) error {
	raw, err := protojson.MarshalOptions{UseEnumNumbers: false}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	return p.write(raw)
}

// write writes JSON raw in the printer's structured format.
func (p *printer) write(raw []byte) error {
	// protojson's spacing is deliberately unstable: normalise it.
	var buf bytes.Buffer
	if err := json.Indent(&buf, compact(raw), "", "  "); err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	if p.format == formatJSON {
		buf.WriteByte('\n')
		_, err := p.out.Write(buf.Bytes())
		return err
	}
	y, err := yaml.JSONToYAML(buf.Bytes())
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	if p.documents > 0 {
		p.printf("---\n")
	}
	p.documents++
	_, err = p.out.Write(y)
	return err
}

// rawJSON is already encoded JSON inside a value.
type rawJSON = json.RawMessage

// value writes v (plain Go data, encoding/json) as JSON or YAML, indented as
// message does.
func (p *printer) value(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	return p.write(raw)
}

func compact(raw []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// table writes t; header says whether to write the column names.
func (p *printer) table(t *table, header bool) error {
	w := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	var keep []int
	var names []string
	for i, c := range t.columns {
		if !c.wide || p.format == formatWide {
			keep = append(keep, i)
			names = append(names, c.name)
		}
	}
	// A failed write to p.out is kept there: Flush returns it.
	if header && !p.noHeaders {
		_, _ = fmt.Fprintln(w, strings.Join(names, "\t"))
	}
	for _, row := range t.rows {
		cells := make([]string, 0, len(keep))
		for _, i := range keep {
			cell := "-"
			if i < len(row) && row[i] != "" {
				cell = row[i]
			}
			cells = append(cells, cell)
		}
		_, _ = fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	return w.Flush()
}

// age formats how long ago ts was, kubectl style ("3m", "2d"); "-" when unset.
func (p *printer) age(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return duration.HumanDuration(p.now().Sub(ts.AsTime()))
}

func itoa(n int32) string { return fmt.Sprint(n) }

// enumName strips an enum value's prefix: CLUSTER_STATE_OFFLINE -> Offline.
func enumName(full, prefix string) string {
	s := strings.TrimPrefix(full, prefix)
	if s == "" || s == "UNSPECIFIED" {
		return "-"
	}
	parts := strings.Split(strings.ToLower(s), "_")
	for i, part := range parts {
		if part != "" {
			parts[i] = strings.ToUpper(part[:1]) + part[1:]
		}
	}
	return strings.Join(parts, "")
}
