package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FaultKind is one kind of fault the schedule applies.
type FaultKind string

const (
	// AgentKill SIGKILLs a spoke's agent and starts it again when it ends.
	AgentKill FaultKind = "agent-kill"
	// AgentFreeze stops a spoke's agent with SIGSTOP and resumes it (SIGCONT).
	AgentFreeze FaultKind = "agent-freeze"
	// HubKill SIGKILLs a hub replica and starts it again on its address.
	HubKill FaultKind = "hub-kill"
	// APIServerFreeze stops a cluster's kube-apiserver with SIGSTOP.
	APIServerFreeze FaultKind = "apiserver-freeze"
	// LinkCut closes the connections between a spoke's agent and its hub
	// replica and refuses new ones.
	LinkCut FaultKind = "link-cut"
	// LinkBlackhole keeps the connections open and forwards nothing.
	LinkBlackhole FaultKind = "link-blackhole"
	// LinkSlow delays every chunk both ways.
	LinkSlow FaultKind = "link-slow"
	// NodeFlap cordons a pool node (the pool reads its unschedulable taint
	// as not-ready) and uncordons it.
	NodeFlap FaultKind = "node-flap"
)

// Fault is one entry of a schedule: what, on which target, from At for For.
type Fault struct {
	// Index is the fault's place in the full schedule of its seed; a
	// shrunk schedule keeps the indexes (SOAK_FAULTS replays them).
	Index  int
	Kind   FaultKind
	Target string
	// At is counted from the start of the storm the fault belongs to.
	At, For time.Duration
	// Round is the storm the fault belongs to.
	Round int
	// Latency is the delay of a LinkSlow.
	Latency time.Duration
}

func (f Fault) String() string {
	s := fmt.Sprintf("#%d round %d +%s %s %s for %s", f.Index, f.Round, f.At.Round(100*time.Millisecond), f.Kind, f.Target, f.For.Round(100*time.Millisecond))
	if f.Latency > 0 {
		s += fmt.Sprintf(" (%s each way)", f.Latency)
	}
	return s
}

// resource is what two faults must not act on at once: a process, a link, a
// node. Faults of different resources overlap freely.
func (f Fault) resource() string {
	switch f.Kind {
	case AgentKill, AgentFreeze:
		return "agent/" + f.Target
	case LinkCut, LinkBlackhole, LinkSlow:
		return "link/" + f.Target
	default:
		return string(f.Kind) + "/" + f.Target
	}
}

// Topology is what the schedule can aim at.
type Topology struct {
	Spokes []string
	// Replicas are the hub replicas: "hub" (the fleet's hub) and the
	// further ones by name.
	Replicas []string
	// Clusters have an API server to freeze: "hub" and the spokes.
	Clusters []string
	// Nodes are pool nodes as spoke/node.
	Nodes []string
}

// Round is one storm (faults and work) followed by a calm in which every
// fault is over, the work stops and the settling invariants must hold.
type Round struct {
	Storm  time.Duration
	Faults []Fault
}

// Schedule is the whole plan of a run.
type Schedule struct {
	Seed   uint64
	Rounds []Round
}

// kindWeights are how often each kind is drawn.
var kindWeights = []struct {
	kind   FaultKind
	weight int
}{
	{AgentKill, 3}, {AgentFreeze, 3}, {HubKill, 2}, {APIServerFreeze, 2},
	{LinkCut, 2}, {LinkBlackhole, 2}, {LinkSlow, 2}, {NodeFlap, 3},
}

// faultLength bounds each kind's length. Freezes and partitions stay under
// the hub's grace period plus a little, and far under the node monitor's
// grace period, so that what they cost is a delay, never lost work.
func faultLength(r *rand.Rand, k FaultKind) time.Duration {
	switch k {
	case AgentKill, HubKill:
		return time.Duration(1+r.IntN(8)) * time.Second // down time before the restart
	case AgentFreeze, APIServerFreeze:
		return time.Duration(2+r.IntN(14)) * time.Second
	case LinkCut, LinkBlackhole:
		return time.Duration(3+r.IntN(20)) * time.Second
	case LinkSlow:
		return time.Duration(5+r.IntN(25)) * time.Second
	default:
		return time.Duration(2+r.IntN(20)) * time.Second
	}
}

// NewSchedule draws the faults of a run of total length from seed: storms
// of 40 to 80 s, each followed by a calm the run reserves calmReserve for,
// with about one fault every faultEvery of storm; faults on one resource
// never overlap, faults on different ones do.
func NewSchedule(seed uint64, total, calmReserve, faultEvery time.Duration, topo Topology) Schedule {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := Schedule{Seed: seed}
	index := 0
	for left := total; left >= 20*time.Second+calmReserve; {
		storm := time.Duration(40+r.IntN(41)) * time.Second
		storm = min(storm, left-calmReserve)
		round := Round{Storm: storm}
		busy := map[string][]Fault{}
		n := max(1, int(storm/faultEvery))
		for range n {
			kind := drawKind(r)
			f := Fault{Kind: kind, Round: len(s.Rounds), For: faultLength(r, kind)}
			f.Target = drawTarget(r, kind, topo)
			if f.For >= storm-5*time.Second {
				f.For = storm / 3
			}
			f.At = time.Duration(r.Int64N(int64(storm - f.For - 2*time.Second)))
			if kind == LinkSlow {
				f.Latency = time.Duration(100+r.IntN(900)) * time.Millisecond
			}
			if f.Target == "" || overlaps(busy[f.resource()], f) {
				continue
			}
			f.Index = index
			index++
			busy[f.resource()] = append(busy[f.resource()], f)
			round.Faults = append(round.Faults, f)
		}
		slices.SortFunc(round.Faults, func(a, b Fault) int { return int(a.At - b.At) })
		s.Rounds = append(s.Rounds, round)
		left -= storm + calmReserve
	}
	return s
}

func drawKind(r *rand.Rand) FaultKind {
	total := 0
	for _, w := range kindWeights {
		total += w.weight
	}
	n := r.IntN(total)
	for _, w := range kindWeights {
		if n < w.weight {
			return w.kind
		}
		n -= w.weight
	}
	return kindWeights[0].kind
}

func drawTarget(r *rand.Rand, k FaultKind, topo Topology) string {
	pick := func(from []string) string {
		if len(from) == 0 {
			return ""
		}
		return from[r.IntN(len(from))]
	}
	switch k {
	case HubKill:
		return pick(topo.Replicas)
	case APIServerFreeze:
		return pick(topo.Clusters)
	case NodeFlap:
		return pick(topo.Nodes)
	default:
		return pick(topo.Spokes)
	}
}

// overlaps reports whether f's time overlaps any of others', with a
// second's margin for the restart in between.
func overlaps(others []Fault, f Fault) bool {
	for _, o := range others {
		if f.At < o.At+o.For+time.Second && o.At < f.At+f.For+time.Second {
			return true
		}
	}
	return false
}

// Faults lists every fault of the schedule in order.
func (s Schedule) Faults() []Fault {
	var out []Fault
	for _, r := range s.Rounds {
		out = append(out, r.Faults...)
	}
	return out
}

// Keep returns the schedule with only the faults whose index keep holds; the
// rounds and their lengths stay.
func (s Schedule) Keep(keep func(index int) bool) Schedule {
	out := Schedule{Seed: s.Seed}
	for _, r := range s.Rounds {
		kept := Round{Storm: r.Storm}
		for _, f := range r.Faults {
			if keep(f.Index) {
				kept.Faults = append(kept.Faults, f)
			}
		}
		out.Rounds = append(out.Rounds, kept)
	}
	return out
}

// String is the schedule as people read it, one fault a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d rounds, %d faults\n", s.Seed, len(s.Rounds), len(s.Faults()))
	for i, r := range s.Rounds {
		fmt.Fprintf(&b, "  round %d: storm %s, %d faults\n", i, r.Storm, len(r.Faults))
		for _, f := range r.Faults {
			fmt.Fprintf(&b, "    %s\n", f)
		}
	}
	return b.String()
}

// Indexes is the SOAK_FAULTS value that replays exactly these faults.
func Indexes(faults []Fault) string {
	if len(faults) == 0 {
		return "none"
	}
	parts := make([]string, len(faults))
	for i, f := range faults {
		parts[i] = strconv.Itoa(f.Index)
	}
	return strings.Join(parts, ",")
}

// ParseIndexes reads a SOAK_FAULTS value: fault indexes separated by
// commas, or "none" for the work alone.
func ParseIndexes(s string) (map[int]bool, error) {
	out := map[int]bool{}
	if strings.TrimSpace(s) == "none" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("SOAK_FAULTS: %q is not a fault index (a number from the schedule's #N)", part)
		}
		out[n] = true
	}
	return out, nil
}
