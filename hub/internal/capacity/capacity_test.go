package capacity

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

var now = time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)

// clusterWrapper builds store.Cluster values for tests.
type clusterWrapper struct{ store.Cluster }

func makeCluster(name string) *clusterWrapper {
	return &clusterWrapper{store.Cluster{
		Name: name, Liveness: store.LivenessAvailable, AgentVersion: "v0.1.0",
		LastHeartbeat: now.Add(-2 * time.Second), ObservedAt: now.Add(-3 * time.Second),
	}}
}

func (w *clusterWrapper) Offline(silentFor time.Duration) *clusterWrapper {
	w.Liveness = store.LivenessUnknown
	w.LastHeartbeat = now.Add(-silentFor)
	return w
}

func (w *clusterWrapper) Restored() *clusterWrapper { w.Cluster.Restored = true; return w }

func (w *clusterWrapper) Machine(name, group string, types ...*federationv1.MachineType) *clusterWrapper {
	// Like the store, keep Machines sorted by name.
	w.Machines = append(w.Machines, &federationv1.Machine{Name: name, Group: group, Types: types})
	slices.SortFunc(w.Machines, func(a, b *federationv1.Machine) int { return strings.Compare(a.Name, b.Name) })
	return w
}

func (w *clusterWrapper) Obj() *store.Cluster { c := w.Cluster; return &c }

// typeWrapper builds MachineType messages.
type typeWrapper struct{ *federationv1.MachineType }

func makeType(name string) *typeWrapper {
	return &typeWrapper{&federationv1.MachineType{Name: name, Cpu: "4", Memory: "16Gi"}}
}

func (w *typeWrapper) Shape(cpu, memory string) *typeWrapper { w.Cpu, w.Memory = cpu, memory; return w }

func (w *typeWrapper) GPU(num int32, product, family string) *typeWrapper {
	w.Gpu = &federationv1.GPU{Type: "nvidia.com/gpu", Num: num, Product: product, Family: family}
	return w
}

// Usage sets maximum and used; reserved follows the spoke's steady state
// (maximum − used − waiting) unless set with Reserved.
func (w *typeWrapper) Usage(maximum, used, waiting int32) *typeWrapper {
	w.Available = maximum
	w.MachineType.Usage = &federationv1.Usage{Maximum: maximum, Used: used, Waiting: waiting, Reserved: max(0, maximum-used-waiting)}
	return w
}

func (w *typeWrapper) Reserved(n int32) *typeWrapper { w.MachineType.Usage.Reserved = n; return w }

// Queued sets how many of the waiting guests are held at the agent's slot
// gate.
func (w *typeWrapper) Queued(n int32) *typeWrapper { w.MachineType.Usage.Queued = n; return w }

// Unplaceable sets how many of the queued guests no ready node can take;
// reserved follows the spoke's steady state, which keeps their units.
func (w *typeWrapper) Unplaceable(n int32) *typeWrapper {
	u := w.MachineType.Usage
	u.Unplaceable = n
	u.Reserved = max(0, u.Maximum-u.Used-(u.Waiting-n))
	return w
}

// Held sets the units set aside for capacity holds.
func (w *typeWrapper) Held(n int32) *typeWrapper { w.MachineType.Usage.Held = n; return w }

func (w *typeWrapper) Obj() *federationv1.MachineType { return w.MachineType }

type candidate struct {
	Cluster    string
	Free, Take int32
}

func TestFree(t *testing.T) {
	cases := map[string]struct {
		typ  *federationv1.MachineType
		want int32
	}{
		"no usage reported yet":              {typ: makeType("a").Obj(), want: 0},
		"steady state: free equals reserved": {typ: makeType("a").Usage(4, 1, 0).Obj(), want: 3},
		"all used":                           {typ: makeType("a").Usage(4, 4, 0).Obj(), want: 0},
		"zero available":                     {typ: makeType("a").Usage(0, 0, 0).Obj(), want: 0},
		"handover: waiting guest claims a slot still reserved": {
			typ: makeType("a").Usage(4, 1, 1).Reserved(3).Obj(), want: 2,
		},
		"reservation pods not bound yet": {typ: makeType("a").Usage(4, 0, 0).Reserved(1).Obj(), want: 1},
		"more guests than units":         {typ: makeType("a").Usage(2, 2, 3).Obj(), want: 0},
		// The agent grants the oldest queued guest a slot by first releasing a
		// reservation pod: until that pod is gone, the slot is still reserved
		// but belongs to the guest, not to a newcomer.
		"queued guest about to take the last reserved slot": {
			typ: makeType("a").Usage(1, 0, 1).Queued(1).Reserved(1).Obj(), want: 0,
		},
		"one queued guest, two slots still reserved": {
			typ: makeType("a").Usage(3, 1, 1).Queued(1).Reserved(2).Obj(), want: 1,
		},
		"guests queued beyond available": {
			typ: makeType("a").Usage(1, 1, 2).Queued(2).Obj(), want: 0,
		},
		// A capacity hold's units stay reserved but are nobody else's.
		"hold of 2 of 4 free units":    {typ: makeType("a").Usage(4, 0, 0).Held(2).Obj(), want: 2},
		"every free unit held":         {typ: makeType("a").Usage(4, 1, 0).Held(3).Obj(), want: 0},
		"held during a handover":       {typ: makeType("a").Usage(4, 1, 1).Reserved(3).Held(1).Obj(), want: 1},
		"held beyond free never below": {typ: makeType("a").Usage(4, 4, 0).Held(2).Obj(), want: 0},
		// Guests no node can take (a nodeSelector matching nothing) cost
		// nothing to create: counted as claiming, four would zero the type.
		"four queued guests no node can take: every unit stays free": {
			typ: makeType("a").Usage(4, 0, 4).Queued(4).Unplaceable(4).Obj(), want: 4,
		},
		"one guest a node can take, one none can: one unit is about to go": {
			typ: makeType("a").Usage(4, 0, 2).Queued(2).Unplaceable(1).Obj(), want: 3,
		},
		"unplaceable guests beside a hold": {
			typ: makeType("a").Usage(4, 1, 3).Queued(3).Unplaceable(3).Held(2).Obj(), want: 1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Free(tc.typ); got != tc.want {
				t.Errorf("Free() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFind(t *testing.T) {
	xlarge := func(maximum, used int32) *federationv1.MachineType {
		return makeType("compute-xlarge").Shape("40", "128Gi").GPU(2, "NVIDIA-GeForce-RTX-3090", "ampere").Usage(maximum, used, 0).Obj()
	}
	small := func(maximum, used int32) *federationv1.MachineType {
		return makeType("compute-small").Shape("4", "16Gi").Usage(maximum, used, 0).Obj()
	}
	byType := func(count int32, spread bool) Request {
		return Request{Type: "compute-xlarge", Count: count, Spread: spread}
	}
	cases := map[string]struct {
		clusters        []*store.Cluster
		req             Request
		wantCandidates  []candidate
		wantExcluded    map[string]queryv1.ExclusionReason
		wantSatisfiable bool
	}{
		"same cluster: most free first, other lacks units": {
			clusters: []*store.Cluster{
				makeCluster("a").Machine("gpu", "team-a", xlarge(4, 3)).Obj(),
				makeCluster("b").Machine("gpu", "team-b", xlarge(4, 0)).Obj(),
			},
			req:             byType(2, false),
			wantCandidates:  []candidate{{"b", 4, 2}},
			wantExcluded:    map[string]queryv1.ExclusionReason{"a": queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH},
			wantSatisfiable: true,
		},
		"exact fit": {
			clusters:        []*store.Cluster{makeCluster("a").Machine("gpu", "g", xlarge(3, 1)).Obj()},
			req:             byType(2, false),
			wantCandidates:  []candidate{{"a", 2, 2}},
			wantExcluded:    map[string]queryv1.ExclusionReason{},
			wantSatisfiable: true,
		},
		"ties are broken by cluster name": {
			clusters: []*store.Cluster{
				makeCluster("b").Machine("gpu", "g", xlarge(2, 0)).Obj(),
				makeCluster("a").Machine("gpu", "g", xlarge(2, 0)).Obj(),
			},
			req:             byType(1, false),
			wantCandidates:  []candidate{{"a", 2, 1}, {"b", 2, 0}},
			wantExcluded:    map[string]queryv1.ExclusionReason{},
			wantSatisfiable: true,
		},
		"offline and stale clusters never count, whatever they reported": {
			clusters: []*store.Cluster{
				makeCluster("down").Offline(3*time.Minute).Machine("gpu", "g", xlarge(8, 0)).Obj(),
				makeCluster("restored").Restored().Machine("gpu", "g", xlarge(8, 0)).Obj(),
				makeCluster("up").Machine("gpu", "g", xlarge(1, 0)).Obj(),
			},
			req:            byType(2, false),
			wantCandidates: nil,
			wantExcluded: map[string]queryv1.ExclusionReason{
				"down":     queryv1.ExclusionReason_EXCLUSION_REASON_OFFLINE,
				"restored": queryv1.ExclusionReason_EXCLUSION_REASON_STALE,
				"up":       queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH,
			},
		},
		"zero free is not a candidate, even in spread mode": {
			clusters:     []*store.Cluster{makeCluster("a").Machine("gpu", "g", xlarge(2, 2)).Obj()},
			req:          byType(1, true),
			wantExcluded: map[string]queryv1.ExclusionReason{"a": queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH},
		},
		"no such type": {
			clusters:     []*store.Cluster{makeCluster("a").Machine("cpu", "g", small(4, 0)).Obj()},
			req:          byType(1, false),
			wantExcluded: map[string]queryv1.ExclusionReason{"a": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE},
		},
		"group narrows the type": {
			clusters: []*store.Cluster{
				makeCluster("a").Machine("gpu", "team-a", xlarge(4, 0)).Obj(),
				makeCluster("b").Machine("gpu", "team-b", xlarge(4, 0)).Obj(),
			},
			req:             Request{Group: "team-b", Type: "compute-xlarge", Count: 1},
			wantCandidates:  []candidate{{"b", 4, 1}},
			wantExcluded:    map[string]queryv1.ExclusionReason{"a": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE},
			wantSatisfiable: true,
		},
		"spread uses the fewest clusters": {
			clusters: []*store.Cluster{
				makeCluster("a").Machine("gpu", "g", xlarge(2, 0)).Obj(),
				makeCluster("b").Machine("gpu", "g", xlarge(5, 0)).Obj(),
				makeCluster("c").Machine("gpu", "g", xlarge(3, 0)).Obj(),
			},
			req:             byType(7, true),
			wantCandidates:  []candidate{{"b", 5, 5}, {"c", 3, 2}, {"a", 2, 0}},
			wantExcluded:    map[string]queryv1.ExclusionReason{},
			wantSatisfiable: true,
		},
		"spread not satisfiable places what fits": {
			clusters: []*store.Cluster{
				makeCluster("a").Machine("gpu", "g", xlarge(2, 0)).Obj(),
				makeCluster("b").Machine("gpu", "g", xlarge(1, 0)).Obj(),
			},
			req:            byType(4, true),
			wantCandidates: []candidate{{"a", 2, 2}, {"b", 1, 1}},
			wantExcluded:   map[string]queryv1.ExclusionReason{},
		},
		"types of the same name in two Machines add up": {
			clusters: []*store.Cluster{
				makeCluster("a").Machine("gpu-1", "g", xlarge(2, 0)).Machine("gpu-2", "h", xlarge(2, 0)).Obj(),
			},
			req:             byType(4, false),
			wantCandidates:  []candidate{{"a", 4, 4}},
			wantExcluded:    map[string]queryv1.ExclusionReason{},
			wantSatisfiable: true,
		},
		"shape: at least cpu and memory, any type": {
			clusters: []*store.Cluster{
				makeCluster("a").Machine("cpu", "g", small(4, 0)).Obj(),
				makeCluster("b").Machine("gpu", "g", xlarge(1, 0)).Obj(),
			},
			req:             Request{Shape: &Shape{MilliCPU: 8000, MemoryBytes: 32 << 30}, Count: 1},
			wantCandidates:  []candidate{{"b", 1, 1}},
			wantExcluded:    map[string]queryv1.ExclusionReason{"a": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE},
			wantSatisfiable: true,
		},
		"shape: GPU count, product case-insensitive": {
			clusters: []*store.Cluster{
				makeCluster("a").Machine("gpu", "g", makeType("one-gpu").GPU(1, "NVIDIA-GeForce-RTX-3090", "ampere").Usage(4, 0, 0).Obj()).Obj(),
				makeCluster("b").Machine("gpu", "g", xlarge(1, 0)).Obj(),
				makeCluster("c").Machine("gpu", "g", makeType("a100").GPU(2, "NVIDIA-A100", "ampere").Usage(4, 0, 0).Obj()).Obj(),
			},
			req:             Request{Shape: &Shape{GPUs: 2, GPUProduct: "nvidia-geforce-rtx-3090"}, Count: 1},
			wantCandidates:  []candidate{{"b", 1, 1}},
			wantExcluded:    map[string]queryv1.ExclusionReason{"a": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE, "c": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE},
			wantSatisfiable: true,
		},
		"shape: GPU family; a type selecting any product does not match a product": {
			clusters: []*store.Cluster{
				makeCluster("any").Machine("gpu", "g", makeType("anygpu").GPU(2, "", "").Usage(4, 0, 0).Obj()).Obj(),
				makeCluster("hopper").Machine("gpu", "g", makeType("h100").GPU(8, "NVIDIA-H100", "hopper").Usage(4, 0, 0).Obj()).Obj(),
				makeCluster("ampere").Machine("gpu", "g", makeType("a100").GPU(8, "NVIDIA-A100", "Ampere").Usage(4, 0, 0).Obj()).Obj(),
			},
			req:             Request{Shape: &Shape{GPUs: 1, GPUFamily: "ampere"}, Count: 3, Spread: true},
			wantCandidates:  []candidate{{"ampere", 4, 3}},
			wantExcluded:    map[string]queryv1.ExclusionReason{"any": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE, "hopper": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE},
			wantSatisfiable: true,
		},
		"shape: unparsable quantity never matches a cpu request": {
			clusters:     []*store.Cluster{makeCluster("a").Machine("cpu", "g", makeType("bad").Shape("lots", "1Gi").Usage(4, 0, 0).Obj()).Obj()},
			req:          Request{Shape: &Shape{MilliCPU: 1}, Count: 1},
			wantExcluded: map[string]queryv1.ExclusionReason{"a": queryv1.ExclusionReason_EXCLUSION_REASON_NO_SUCH_TYPE},
		},
		"empty fleet": {
			req:          byType(1, false),
			wantExcluded: map[string]queryv1.ExclusionReason{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Find(tc.clusters, tc.req, now)
			var gotCandidates []candidate
			for _, c := range got.Candidates {
				gotCandidates = append(gotCandidates, candidate{c.Cluster, c.Free, c.Take})
				if c.ObservedAt == nil {
					t.Errorf("candidate %s has no observedAt", c.Cluster)
				}
			}
			gotExcluded := map[string]queryv1.ExclusionReason{}
			for _, e := range got.Excluded {
				gotExcluded[e.Cluster] = e.Reason
				if e.Message == "" {
					t.Errorf("exclusion of %s has no message", e.Cluster)
				}
			}
			if tc.wantExcluded == nil {
				tc.wantExcluded = map[string]queryv1.ExclusionReason{}
			}
			if diff := cmp.Diff(tc.wantCandidates, gotCandidates); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantExcluded, gotExcluded); diff != "" {
				t.Errorf("excluded (-want +got):\n%s", diff)
			}
			if got.Satisfiable != tc.wantSatisfiable {
				t.Errorf("satisfiable = %t, want %t", got.Satisfiable, tc.wantSatisfiable)
			}
			var taken int32
			for _, c := range got.Candidates {
				taken += c.Take
			}
			if taken != got.Placed || (got.Satisfiable && got.Placed != tc.req.Count) {
				t.Errorf("placed = %d, takes sum to %d, count %d", got.Placed, taken, tc.req.Count)
			}
		})
	}
}

func TestExclusionMessages(t *testing.T) {
	clusters := []*store.Cluster{
		makeCluster("foo").Offline(3 * time.Minute).Obj(),
		makeCluster("never").Offline(0).Obj(),
	}
	clusters[1].LastHeartbeat = time.Time{}
	got := Find(clusters, Request{Type: "x", Count: 1}, now)
	want := map[string]string{
		"foo":   "offline since 3m (last heartbeat 2025-05-01T11:57:00Z)",
		"never": "offline: has not reported to this hub since it started",
	}
	gotMessages := map[string]string{}
	for _, e := range got.Excluded {
		gotMessages[e.Cluster] = e.Message
	}
	if diff := cmp.Diff(want, gotMessages); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}
