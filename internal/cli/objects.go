package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/client-go/util/jsonpath"
)

// Output formats over the answer's objects, as kubectl's: -o name prints
// kind/name per object, -o jsonpath=TEMPLATE runs a JSONPath template
// (k8s.io/client-go/util/jsonpath, kubectl's engine) over the whole answer
// as -o json shows it, -o custom-columns=HEADER:PATH,... prints a table
// whose cells are JSONPath expressions over each object. kubectl's own
// printers (k8s.io/cli-runtime/pkg/printers) take runtime.Objects, which
// the query API's protobuf messages are not, so the two that need a
// template are built here on the same jsonpath engine and the same rules
// (a path without braces is wrapped in {}, a missing field is <none>).
const (
	formatName          = "name"
	formatJSONPath      = "jsonpath"
	formatCustomColumns = "custom-columns"
)

// customColumn is one column of -o custom-columns.
type customColumn struct {
	header string
	path   *jsonpath.JSONPath
}

// relaxedPath makes a bare path (.metadata.name) a template ({.metadata.name}), as kubectl does.
var bracedPath = regexp.MustCompile(`^\{.*\}$`)

func relaxed(path string) string {
	if bracedPath.MatchString(path) {
		return path
	}
	return "{" + path + "}"
}

// parseObjectFormat parses name, jsonpath=... and custom-columns=...; ok is
// false for every other format.
func parseObjectFormat(format string) (kind string, template *jsonpath.JSONPath, columns []customColumn, ok bool, err error) {
	name, arg, hasArg := strings.Cut(format, "=")
	switch name {
	case formatName:
		if hasArg {
			return "", nil, nil, true, fmt.Errorf("--output name takes no argument")
		}
		return formatName, nil, nil, true, nil
	case formatJSONPath:
		if strings.TrimSpace(arg) == "" {
			return "", nil, nil, true, fmt.Errorf("--output jsonpath: want a template, e.g. -o jsonpath='{.clusters[*].name}'")
		}
		template = jsonpath.New("output").AllowMissingKeys(true)
		if err := template.Parse(arg); err != nil {
			return "", nil, nil, true, fmt.Errorf("--output jsonpath %q: %v", arg, err)
		}
		return formatJSONPath, template, nil, true, nil
	case formatCustomColumns:
		if strings.TrimSpace(arg) == "" {
			return "", nil, nil, true, fmt.Errorf("--output custom-columns: want HEADER:PATH,... e.g. -o custom-columns=NAME:.name,STATE:.state")
		}
		for i, spec := range strings.Split(arg, ",") {
			header, path, found := strings.Cut(spec, ":")
			if !found || header == "" || path == "" {
				return "", nil, nil, true, fmt.Errorf("--output custom-columns: column %d (%q) must be HEADER:PATH", i+1, spec)
			}
			p := jsonpath.New(header).AllowMissingKeys(true)
			if err := p.Parse(relaxed(path)); err != nil {
				return "", nil, nil, true, fmt.Errorf("--output custom-columns: column %s path %q: %v", header, path, err)
			}
			columns = append(columns, customColumn{header: header, path: p})
		}
		return formatCustomColumns, nil, columns, true, nil
	}
	return "", nil, nil, false, nil
}

// objectFormat reports whether the printer prints objects (name, jsonpath,
// custom-columns) rather than tables or documents.
func (p *printer) objectFormat() bool {
	return p.format == formatName || p.format == formatJSONPath || p.format == formatCustomColumns
}

// jsonOf is m as -o json shows it, decoded for jsonpath.
func jsonOf(m proto.Message) (any, error) {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the answer: %w", err)
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("encoding the answer: %w", err)
	}
	return v, nil
}

// objects prints an answer in an object format: whole is the answer (what
// jsonpath runs over), items its objects (custom-columns' rows) and names
// their kind/name (-o name). header says whether custom-columns writes its
// header line (--no-headers and later events of a watch do not).
func (p *printer) objects(whole proto.Message, items []proto.Message, names []string, header bool) error {
	switch p.format {
	case formatName:
		for _, n := range names {
			p.printf("%s\n", n)
		}
		return nil
	case formatJSONPath:
		v, err := jsonOf(whole)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := p.template.Execute(&buf, v); err != nil {
			return fail(ExitUsage, "--output jsonpath: %v", err)
		}
		p.printf("%s", buf.String())
		if !strings.HasSuffix(buf.String(), "\n") && buf.Len() > 0 {
			p.printf("\n")
		}
		return nil
	case formatCustomColumns:
		t := &table{}
		for _, c := range p.columns {
			t.columns = append(t.columns, column{name: c.header})
		}
		for _, item := range items {
			v, err := jsonOf(item)
			if err != nil {
				return err
			}
			row := make([]string, 0, len(p.columns))
			for _, c := range p.columns {
				results, err := c.path.FindResults(v)
				if err != nil {
					return fail(ExitUsage, "--output custom-columns: column %s: %v", c.header, err)
				}
				var cells []string
				for _, r := range results {
					for _, val := range r {
						cells = append(cells, fmt.Sprint(val.Interface()))
					}
				}
				cell := strings.Join(cells, ",")
				if len(cells) == 0 {
					cell = "<none>"
				}
				row = append(row, cell)
			}
			t.add(row...)
		}
		return p.table(t, header)
	}
	return fmt.Errorf("format %q prints no objects", p.format)
}

// asMessages turns a slice of messages into proto.Messages.
func asMessages[M proto.Message](items []M) []proto.Message {
	out := make([]proto.Message, len(items))
	for i, m := range items {
		out[i] = m
	}
	return out
}

// namesOf is kind/name of each item, as -o name prints it.
func namesOf[M any](kind string, items []M, name func(M) string) []string {
	out := make([]string, len(items))
	for i, m := range items {
		out[i] = kind + "/" + name(m)
	}
	return out
}
