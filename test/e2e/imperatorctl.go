package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// callTimeout is imperatorctl's --timeout for every call: short, so that a
// hub that does not answer turns into a retry of the surrounding Eventually.
const callTimeout = "5s"

// Imperatorctl runs the imperatorctl binary against the fleet's hub, as a
// platform engineer would.
type Imperatorctl struct {
	// Bin is the imperatorctl binary.
	Bin string
	// Config is its configuration file (an admin certificate for the hub).
	Config string
}

// Result is what one imperatorctl run printed and its exit code.
type Result struct {
	Args     []string
	Stdout   string
	Stderr   string
	ExitCode int
}

func (r Result) String() string {
	return fmt.Sprintf("imperatorctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.Args, " "), r.ExitCode, r.Stdout, r.Stderr)
}

// Run runs imperatorctl with args. The error is only about starting or
// waiting for the process; a non-zero exit code is in the Result.
func (c *Imperatorctl) Run(ctx context.Context, args ...string) (Result, error) {
	full := append(append([]string{}, args...), "--timeout", callTimeout)
	cmd := exec.CommandContext(ctx, c.Bin, full...)
	cmd.Env = append(environWithout("IMPERATOR_"), "IMPERATOR_CONFIG="+c.Config)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	case err != nil:
		return res, fmt.Errorf("running imperatorctl %s: %w", strings.Join(args, " "), err)
	}
	return res, nil
}

// TableColumn runs imperatorctl with args (a table command, `-o wide` for
// instance) and returns the column named column of each row, keyed by the
// row's first cell, read from the aligned table as a person reads it.
func (c *Imperatorctl) TableColumn(ctx context.Context, column string, args ...string) (map[string]string, Result, error) {
	res, err := c.Run(ctx, args...)
	if err != nil {
		return nil, res, err
	}
	if res.ExitCode != 0 {
		return nil, res, fmt.Errorf("%s", res)
	}
	lines := strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n")
	header := []rune(lines[0])
	start := slices.Index(strings.Fields(lines[0]), column)
	if start < 0 {
		return nil, res, fmt.Errorf("no column %s in:\n%s", column, res.Stdout)
	}
	// tabwriter aligns every cell of a column at its header's offset.
	offset := len([]rune(strings.Join(strings.Fields(string(header))[:start], " "))) // lower bound
	for offset < len(header) && !strings.HasPrefix(string(header[offset:]), column) {
		offset++
	}
	cells := map[string]string{}
	for _, line := range lines[1:] {
		row := []rune(line)
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		cell := ""
		if offset < len(row) {
			if rest := strings.Fields(string(row[offset:])); len(rest) > 0 {
				cell = rest[0]
			}
		}
		cells[fields[0]] = cell
	}
	return cells, res, nil
}

// JSON runs imperatorctl with args and `-o json` and decodes its answer into
// out. Exit codes other than those in okCodes (default: only 0) are errors.
func (c *Imperatorctl) JSON(ctx context.Context, out proto.Message, args []string, okCodes ...int) (Result, error) {
	res, err := c.Run(ctx, append(append([]string{}, args...), "-o", "json")...)
	if err != nil {
		return res, err
	}
	if len(okCodes) == 0 {
		okCodes = []int{0}
	}
	ok := false
	for _, code := range okCodes {
		ok = ok || res.ExitCode == code
	}
	if !ok {
		return res, fmt.Errorf("unexpected exit code: %s", res)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(res.Stdout), out); err != nil {
		return res, fmt.Errorf("decoding the answer of imperatorctl %s: %w\n%s", strings.Join(args, " "), err, res.Stdout)
	}
	return res, nil
}

// Clusters is `imperatorctl clusters -o json`.
func (c *Imperatorctl) Clusters(ctx context.Context) (*queryv1.ListClustersResponse, error) {
	out := &queryv1.ListClustersResponse{}
	_, err := c.JSON(ctx, out, []string{"clusters"})
	return out, err
}

// Usage is `imperatorctl usage -o json`, of every cluster.
func (c *Imperatorctl) Usage(ctx context.Context) (*queryv1.GetUsageResponse, error) {
	out := &queryv1.GetUsageResponse{}
	_, err := c.JSON(ctx, out, []string{"usage"})
	return out, err
}

// Machines is `imperatorctl machines -o json` with filter flags.
func (c *Imperatorctl) Machines(ctx context.Context, filters ...string) (*queryv1.ListMachinesResponse, error) {
	out := &queryv1.ListMachinesResponse{}
	_, err := c.JSON(ctx, out, append([]string{"machines"}, filters...))
	return out, err
}

// Capacity is `imperatorctl capacity ARGS -o json`; it answers the exit code
// too (0: the units fit, 1: they do not).
func (c *Imperatorctl) Capacity(ctx context.Context, args ...string) (*queryv1.FindCapacityResponse, int, error) {
	out := &queryv1.FindCapacityResponse{}
	res, err := c.JSON(ctx, out, append([]string{"capacity"}, args...), 0, 1)
	return out, res.ExitCode, err
}

// Tokens is `imperatorctl token list -o json`.
func (c *Imperatorctl) Tokens(ctx context.Context) (*queryv1.ListTokensResponse, error) {
	out := &queryv1.ListTokensResponse{}
	_, err := c.JSON(ctx, out, []string{"token", "list"})
	return out, err
}

// environWithout is the test's environment without the variables whose
// names start with prefix: imperatorctl must not pick up a developer's
// IMPERATOR_HUB or IMPERATOR_CONFIG.
func environWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

// ClusterNamed returns the cluster of a ListClusters answer, or nil.
func ClusterNamed(resp *queryv1.ListClustersResponse, name string) *queryv1.Cluster {
	for _, c := range resp.GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	return nil
}

// UsageOf returns the usage of group/type in cluster, or nil.
func UsageOf(resp *queryv1.GetUsageResponse, cluster, group, typ string) *queryv1.TypeUsage {
	for _, cu := range resp.GetClusters() {
		if cu.GetCluster() != cluster {
			continue
		}
		for _, t := range cu.GetTypes() {
			if t.GetGroup() == group && t.GetType() == typ {
				return t
			}
		}
	}
	return nil
}

// ClusterUsageOf returns the usage of cluster, or nil.
func ClusterUsageOf(resp *queryv1.GetUsageResponse, cluster string) *queryv1.ClusterUsage {
	for _, cu := range resp.GetClusters() {
		if cu.GetCluster() == cluster {
			return cu
		}
	}
	return nil
}

// ExclusionOf returns the exclusion of cluster in a capacity answer, or nil.
func ExclusionOf(resp *queryv1.FindCapacityResponse, cluster string) *queryv1.Exclusion {
	for _, e := range resp.GetExcluded() {
		if e.GetCluster() == cluster {
			return e
		}
	}
	return nil
}

// CandidateNames are the clusters of a capacity answer's candidates, best
// first.
func CandidateNames(resp *queryv1.FindCapacityResponse) []string {
	names := make([]string, 0, len(resp.GetCandidates()))
	for _, c := range resp.GetCandidates() {
		names = append(names, c.GetCluster())
	}
	return names
}

// CandidateOf returns the candidate cluster of a capacity answer, or nil.
func CandidateOf(resp *queryv1.FindCapacityResponse, cluster string) *queryv1.CapacityCandidate {
	for _, c := range resp.GetCandidates() {
		if c.GetCluster() == cluster {
			return c
		}
	}
	return nil
}
