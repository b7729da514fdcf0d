package loadgen

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

const (
	// Env names the job file of a load generator process.
	Env = "IMPERATOR_BENCH_LOADGEN"
	// HookTest is the test function that runs Serve in every test binary
	// that starts load generators.
	HookTest = "TestLoadGenerator"
	// SpokesPerProcess is how many spokes one load generator plays: both
	// ends of a connection need a descriptor, so a hub of 10,000 spokes in
	// the benchmark process and its spokes in two processes stay within a
	// hard limit of 20,000 each.
	SpokesPerProcess = 5000
	// connectParallelism is how many spokes of one generator connect at once.
	connectParallelism = 64
	// answerPrefix starts every line a load generator answers with, so that
	// nothing else the test binary prints is mistaken for one.
	answerPrefix = "loadgen "
)

// SpokesEnv chooses the fleet sizes of the hub's fleet benchmarks: a
// comma-separated list of numbers of spokes.
const SpokesEnv = "IMPERATOR_BENCH_SPOKES"

// FleetSizes returns the fleet sizes SpokesEnv lists, or defaults when it is
// not set; an entry that is not a positive number is an error naming it.
func FleetSizes(defaults ...int) ([]int, error) {
	v := os.Getenv(SpokesEnv)
	if v == "" {
		return defaults, nil
	}
	var sizes []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: %q is not a number of spokes", SpokesEnv, v, f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// Job is what a fleet of load generators plays.
type Job struct {
	// Addr is the hub every spoke dials unless its Spoke.Addr says otherwise.
	Addr string
	// CAPEM is the hub's CA bundle, which its serving certificate is of.
	CAPEM []byte
	// AgentVersion is what each spoke's Hello says.
	AgentVersion string
	// Snapshot is the inventory every spoke reports when it connects.
	Snapshot []*federationv1.Machine
	// Rounds are what the Deltas of "round K" upsert: Rounds[K mod
	// len(Rounds)]. A job with rounds has no HeartbeatInterval: a round
	// reads each spoke's Ack from its stream.
	Rounds []*federationv1.Machine
	// HeartbeatInterval, when set, makes every spoke heartbeat at that
	// interval once connected, as the agent's reporter does (its default is
	// 5 s), the first at a random point of the first interval, as a fleet's
	// agents are spread; the hub's answers are read and dropped. Unlike the
	// reporter, a spoke whose stream ends does not reconnect (the hub's
	// maximum connection age, 30 minutes by default, is longer than the
	// benchmarks): it stops, and the hub sees it go silent.
	HeartbeatInterval time.Duration
	// Spokes are the spokes to play.
	Spokes []Spoke
}

// Spoke is one spoke of a Job: its cluster name and the client certificate
// the hub admits it with.
type Spoke struct {
	Cluster string `json:"cluster"`
	// Addr, when set, is the hub replica this spoke dials.
	Addr    string `json:"addr,omitempty"`
	CertPEM []byte `json:"certPEM"`
	KeyPEM  []byte `json:"keyPEM"`
}

// jobFile is the part of a Job one load generator reads, with the Machines
// in protobuf's wire format.
type jobFile struct {
	Addr              string        `json:"addr"`
	CAPEM             []byte        `json:"caPEM"`
	AgentVersion      string        `json:"agentVersion"`
	Snapshot          [][]byte      `json:"snapshot"`
	Rounds            [][]byte      `json:"rounds,omitempty"`
	HeartbeatInterval time.Duration `json:"heartbeatInterval,omitempty"`
	Spokes            []Spoke       `json:"spokes"`
}

// validate says what is wrong with the job, naming the field.
func (j *jobFile) validate() error {
	switch {
	case len(j.CAPEM) == 0:
		return fmt.Errorf("caPEM: the hub's CA bundle is missing")
	case j.HeartbeatInterval < 0:
		return fmt.Errorf("heartbeatInterval: %s is negative", j.HeartbeatInterval)
	case j.HeartbeatInterval > 0 && len(j.Rounds) > 0:
		return fmt.Errorf("rounds: a job with heartbeatInterval cannot have rounds, which read each spoke's Ack from its stream")
	case len(j.Spokes) == 0:
		return fmt.Errorf("spokes: none to play")
	}
	for i, s := range j.Spokes {
		switch {
		case s.Cluster == "":
			return fmt.Errorf("spokes[%d].cluster: empty", i)
		case s.Addr == "" && j.Addr == "":
			return fmt.Errorf("spokes[%d].addr: empty, and the job has no addr either", i)
		case len(s.CertPEM) == 0 || len(s.KeyPEM) == 0:
			return fmt.Errorf("spokes[%d] (%s): certPEM and keyPEM are both needed", i, s.Cluster)
		}
	}
	return nil
}

func marshalMachines(machines []*federationv1.Machine) ([][]byte, error) {
	out := make([][]byte, len(machines))
	for i, m := range machines {
		raw, err := proto.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encoding Machine %q: %w", m.GetName(), err)
		}
		out[i] = raw
	}
	return out, nil
}

func unmarshalMachines(field string, raw [][]byte) ([]*federationv1.Machine, error) {
	out := make([]*federationv1.Machine, len(raw))
	for i, b := range raw {
		out[i] = &federationv1.Machine{}
		if err := proto.Unmarshal(b, out[i]); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
	}
	return out, nil
}

// formatLatencies and parseLatencies are the answer line's format: the
// prefix, then nanoseconds separated by commas.
func formatLatencies(latencies []time.Duration) string {
	fields := make([]string, len(latencies))
	for i, d := range latencies {
		fields[i] = strconv.FormatInt(int64(d), 10)
	}
	return answerPrefix + strings.Join(fields, ",")
}

// parseLatencies reads an answer line; ok is false for a line that is not
// one (the test binary's own output).
func parseLatencies(line string) (latencies []time.Duration, ok bool, err error) {
	rest, ok := strings.CutPrefix(line, answerPrefix)
	if !ok {
		return nil, false, nil
	}
	for f := range strings.SplitSeq(rest, ",") {
		if f == "" {
			continue
		}
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, true, fmt.Errorf("latency %q: %w", f, err)
		}
		latencies = append(latencies, time.Duration(ns))
	}
	return latencies, true, nil
}
