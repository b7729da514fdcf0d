package ingest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// machineWrapper builds wire Machines for tests: valid unless changed.
type machineWrapper struct{ *federationv1.Machine }

func makeMachine(name string) *machineWrapper {
	return &machineWrapper{&federationv1.Machine{
		Name: name, Group: "team-a", ObjectGeneration: 2, ObservedGeneration: 2,
		Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
		Types: []*federationv1.MachineType{{
			Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: 4,
			Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090", Family: "ampere"},
			Usage: &federationv1.Usage{Maximum: 4, Reserved: 3, Used: 1},
			Nodes: &federationv1.NodeCounts{Ready: 2},
		}},
		Nodes: []*federationv1.PoolNode{
			{Name: "node-1", MachineType: "compute-xlarge", Condition: federationv1.NodeCondition_NODE_CONDITION_READY},
			{Name: "node-2.example.com", MachineType: "compute-xlarge", Condition: federationv1.NodeCondition_NODE_CONDITION_MISSING},
		},
	}}
}

func (w *machineWrapper) with(change func(m *federationv1.Machine)) *machineWrapper {
	change(w.Machine)
	return w
}

func (w *machineWrapper) Obj() *federationv1.Machine { return w.Machine }

type problem struct{ Reason, Field string }

func problems(t *testing.T, err error) []problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var ie *Error
	if !errors.As(err, &ie) {
		t.Fatalf("%v is not an *Error", err)
	}
	out := make([]problem, 0, len(ie.Errs))
	for _, e := range ie.Errs {
		out = append(out, problem{string(e.Type), e.Field})
	}
	return out
}

func TestValidateSnapshot(t *testing.T) {
	many := func(n int) []*federationv1.Machine {
		out := make([]*federationv1.Machine, n)
		for i := range out {
			out[i] = makeMachine(fmt.Sprintf("m%05d", i)).Obj()
		}
		return out
	}
	cases := map[string]struct {
		machines     []*federationv1.Machine
		observedAt   *timestamppb.Timestamp
		limits       func(*Limits)
		wantProblems []problem
	}{
		"what a spoke sends is accepted": {
			machines: []*federationv1.Machine{makeMachine("gpu").Obj(), makeMachine("cpu").with(func(m *federationv1.Machine) {
				m.Group, m.Types[0].Gpu, m.Types[0].Usage, m.Nodes = "", nil, nil, nil
			}).Obj()},
		},
		"an empty Snapshot is accepted": {},
		"10,001 Machines": {
			machines:     many(10_001),
			wantProblems: []problem{{"FieldValueTooMany", "snapshot.machines"}},
		},
		"two Machines of one name": {
			machines:     []*federationv1.Machine{makeMachine("gpu").Obj(), makeMachine("gpu").Obj()},
			wantProblems: []problem{{"FieldValueDuplicate", "snapshot.machines[1].name"}},
		},
		"duplicate type names": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types = append(m.Types, m.Types[0])
			}).Obj()},
			wantProblems: []problem{{"FieldValueDuplicate", "snapshot.machines[0].types[1].name"}},
		},
		"duplicate node names": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Nodes = append(m.Nodes, m.Nodes[0])
			}).Obj()},
			wantProblems: []problem{{"FieldValueDuplicate", "snapshot.machines[0].nodes[2].name"}},
		},
		"negative counts": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Available = -1
				m.Types[0].Usage.Waiting = -2
				m.Types[0].Nodes.NotReady = -3
				m.ObservedGeneration = -4
			}).Obj()},
			wantProblems: []problem{
				{"FieldValueInvalid", "snapshot.machines[0].observedGeneration"},
				{"FieldValueInvalid", "snapshot.machines[0].types[0].available"},
				{"FieldValueInvalid", "snapshot.machines[0].types[0].usage.waiting"},
				{"FieldValueInvalid", "snapshot.machines[0].types[0].nodes.notReady"},
			},
		},
		"a negative queued figure": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Usage.Queued = -1
			}).Obj()},
			wantProblems: []problem{{"FieldValueInvalid", "snapshot.machines[0].types[0].usage.queued"}},
		},
		"more guests queued than waiting": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Usage.Waiting, m.Types[0].Usage.Queued = 2, 3
			}).Obj()},
			wantProblems: []problem{{"FieldValueInvalid", "snapshot.machines[0].types[0].usage.queued"}},
		},
		"more guests unplaceable than queued": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Usage.Waiting, m.Types[0].Usage.Queued, m.Types[0].Usage.Unplaceable = 3, 2, 3
			}).Obj()},
			wantProblems: []problem{{"FieldValueInvalid", "snapshot.machines[0].types[0].usage.unplaceable"}},
		},
		"a negative unplaceable figure": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Usage.Unplaceable = -1
			}).Obj()},
			wantProblems: []problem{{"FieldValueInvalid", "snapshot.machines[0].types[0].usage.unplaceable"}},
		},
		"every waiting guest queued is accepted": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Usage.Waiting, m.Types[0].Usage.Queued = 3, 3
			}).Obj()},
		},
		"names that are no DNS-1123 names": {
			machines: []*federationv1.Machine{makeMachine("GPU_1").with(func(m *federationv1.Machine) {
				m.Group = "team.a"
				m.Types[0].Name = "compute.xlarge"
				m.Nodes[0].Name = ""
				m.Nodes[1].MachineType = strings.Repeat("x", 64)
			}).Obj()},
			wantProblems: []problem{
				{"FieldValueInvalid", "snapshot.machines[0].name"},
				{"FieldValueInvalid", "snapshot.machines[0].group"},
				{"FieldValueInvalid", "snapshot.machines[0].types[0].name"},
				{"FieldValueRequired", "snapshot.machines[0].nodes[0].name"},
				{"FieldValueTooLong", "snapshot.machines[0].nodes[1].machineType"},
			},
		},
		"unknown enum values": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Ready = 9
				m.Nodes[0].Condition = federationv1.NodeCondition_NODE_CONDITION_UNSPECIFIED
				m.Nodes[1].Condition = 6
			}).Obj()},
			wantProblems: []problem{
				{"FieldValueNotSupported", "snapshot.machines[0].ready"},
				{"FieldValueNotSupported", "snapshot.machines[0].nodes[0].condition"},
				{"FieldValueNotSupported", "snapshot.machines[0].nodes[1].condition"},
			},
		},
		"quantities that do not parse or are not positive": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Cpu = "forty"
				m.Types[0].Memory = "-1Gi"
			}).Obj(), makeMachine("cpu").with(func(m *federationv1.Machine) {
				m.Types[0].Cpu = ""
				m.Types[0].Memory = strings.Repeat("9", 65)
			}).Obj()},
			wantProblems: []problem{
				{"FieldValueInvalid", "snapshot.machines[0].types[0].cpu"},
				{"FieldValueInvalid", "snapshot.machines[0].types[0].memory"},
				{"FieldValueRequired", "snapshot.machines[1].types[0].cpu"},
				{"FieldValueTooLong", "snapshot.machines[1].types[0].memory"},
			},
		},
		"a GPU the CRD would refuse": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				m.Types[0].Gpu = &federationv1.GPU{Num: 0, Family: strings.Repeat("a", 64)}
			}).Obj()},
			wantProblems: []problem{
				{"FieldValueRequired", "snapshot.machines[0].types[0].gpu.type"},
				{"FieldValueInvalid", "snapshot.machines[0].types[0].gpu.num"},
				{"FieldValueTooLong", "snapshot.machines[0].types[0].gpu.family"},
			},
		},
		"more types in a Machine than the CRD allows": {
			machines: []*federationv1.Machine{makeMachine("gpu").with(func(m *federationv1.Machine) {
				for i := range 64 {
					m.Types = append(m.Types, &federationv1.MachineType{Name: fmt.Sprintf("t-%d", i), Cpu: "4", Memory: "16Gi"})
				}
			}).Obj()},
			wantProblems: []problem{{"FieldValueTooMany", "snapshot.machines[0].types"}},
		},
		"more types in the cluster than its cap": {
			machines: []*federationv1.Machine{makeMachine("a").Obj(), makeMachine("b").Obj(), makeMachine("c").Obj()},
			limits:   func(l *Limits) { l.MaxTypes = 2 },
			wantProblems: []problem{
				{"FieldValueInvalid", "snapshot.machines.types"},
			},
		},
		"more nodes in the cluster than its cap": {
			machines:     []*federationv1.Machine{makeMachine("a").Obj(), makeMachine("b").Obj()},
			limits:       func(l *Limits) { l.MaxNodes = 3 },
			wantProblems: []problem{{"FieldValueInvalid", "snapshot.machines.nodes"}},
		},
		"a time the API cannot store": {
			observedAt:   &timestamppb.Timestamp{Seconds: 1 << 40},
			wantProblems: []problem{{"FieldValueInvalid", "snapshot.observedAt"}},
		},
		"a nil Machine": {
			machines:     []*federationv1.Machine{nil},
			wantProblems: []problem{{"FieldValueRequired", "snapshot.machines[0]"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := DefaultLimits()
			if tc.limits != nil {
				tc.limits(&l)
			}
			err := ValidateSnapshot(&federationv1.Snapshot{Generation: 1, ObservedAt: tc.observedAt, Machines: tc.machines}, l)
			if diff := cmp.Diff(tc.wantProblems, problems(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateDelta(t *testing.T) {
	cases := map[string]struct {
		delta        *federationv1.Delta
		wantProblems []problem
	}{
		"upserts and removals": {
			delta: &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{makeMachine("gpu").Obj()}, Removals: []string{"cpu"}},
		},
		"a Machine both upserted and removed": {
			delta:        &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{makeMachine("gpu").Obj()}, Removals: []string{"gpu"}},
			wantProblems: []problem{{"FieldValueInvalid", "delta.removals[0]"}},
		},
		"a removal that is no Machine name": {
			delta:        &federationv1.Delta{Generation: 2, Removals: []string{"Not a name"}},
			wantProblems: []problem{{"FieldValueInvalid", "delta.removals[0]"}},
		},
		"an upsert twice": {
			delta:        &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{makeMachine("gpu").Obj(), makeMachine("gpu").Obj()}},
			wantProblems: []problem{{"FieldValueDuplicate", "delta.upserts[1].name"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantProblems, problems(t, ValidateDelta(tc.delta, DefaultLimits()))); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// A message full of problems is refused with a bounded list, whose message
// never echoes a huge value back.
func TestRefusalIsBounded(t *testing.T) {
	var machines []*federationv1.Machine
	for i := range 100 {
		machines = append(machines, makeMachine(fmt.Sprintf("m-%d", i)).with(func(m *federationv1.Machine) {
			m.Types[0].Available = -1
		}).Obj())
	}
	machines = append(machines, makeMachine(strings.Repeat("x", 1<<20)).Obj())
	err := ValidateSnapshot(&federationv1.Snapshot{Machines: machines}, DefaultLimits())
	var ie *Error
	if !errors.As(err, &ie) || len(ie.Errs) != maxReportedErrors || !ie.More {
		t.Fatalf("refusal = %v, want %d problems and more", err, maxReportedErrors)
	}
	if len(err.Error()) > 4096 {
		t.Errorf("refusal message is %d bytes long", len(err.Error()))
	}
	err = ValidateSnapshot(&federationv1.Snapshot{Machines: machines[100:]}, DefaultLimits())
	if err == nil || len(err.Error()) > 4096 {
		t.Errorf("a 1 MiB name: refusal %d bytes long (%v)", len(fmt.Sprint(err)), err != nil)
	}
}

func TestValidateHello(t *testing.T) {
	if err := ValidateHello(&federationv1.Hello{ClusterName: "a", AgentVersion: "v0.1.0"}); err != nil {
		t.Errorf("a normal Hello: %v", err)
	}
	got := problems(t, ValidateHello(&federationv1.Hello{AgentVersion: strings.Repeat("v", MaxAgentVersionLength+1)}))
	if diff := cmp.Diff([]problem{{"FieldValueTooLong", "hello.agentVersion"}}, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	got = problems(t, ValidateHello(&federationv1.Hello{AgentVersion: "v1\n\x1b[2J"}))
	if diff := cmp.Diff([]problem{{"FieldValueInvalid", "hello.agentVersion"}}, got); diff != "" {
		t.Errorf("a version with control characters, problems (-want +got):\n%s", diff)
	}
}

// Checking the largest Snapshot the caps allow (10,000 Machines) costs the
// stream's goroutine, outside the store's lock:
//
//	go test -run '^$' -bench BenchmarkValidateSnapshot ./hub/internal/ingest/
func BenchmarkValidateSnapshot(b *testing.B) {
	machines := make([]*federationv1.Machine, DefaultMaxMachines)
	for i := range machines {
		machines[i] = makeMachine(fmt.Sprintf("m%05d", i)).Obj()
	}
	snap := &federationv1.Snapshot{Generation: 1, Machines: machines}
	b.ReportAllocs()
	for b.Loop() {
		if err := ValidateSnapshot(snap, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEntries(t *testing.T) {
	m := makeMachine("gpu").Obj() // 1 Machine, 1 type, 2 nodes
	cases := map[string]struct {
		msg  *federationv1.SpokeMessage
		want int
	}{
		"snapshot": {&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Machines: []*federationv1.Machine{m, m}}}}, 8},
		"delta": {&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Delta{Delta: &federationv1.Delta{
			Upserts: []*federationv1.Machine{m}, Removals: []string{"a", "b"},
		}}}, 6},
		"heartbeat": {&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{}}}, 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Entries(tc.msg); got != tc.want {
				t.Errorf("Entries = %d, want %d", got, tc.want)
			}
		})
	}
}
