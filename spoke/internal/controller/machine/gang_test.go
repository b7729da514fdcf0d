package machine

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// member is a gated guest of compute-small created at second s, member of
// our own gang gang of size members, with a UID of its name.
func member(namespace, name string, s int, gang string, size int) *corev1.Pod {
	pod := withUID(gatedGuest(namespace, name, s), name)
	pod.Labels[imperatorv1alpha1.GangKey] = gang
	pod.Annotations[imperatorv1alpha1.GangSizeAnnotation] = strconv.Itoa(size)
	return pod
}

// members are n members of gang in team-a, created from second s on,
// named <gang>-0 ...
func members(gang string, size, n, s int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, member("team-a", gang+"-"+strconv.Itoa(i), s+i, gang, size))
	}
	return out
}

func TestGangMembership(t *testing.T) {
	guest := func() *corev1.Pod { return gatedGuest("team-a", "w", 1) }
	cases := map[string]struct {
		pod         *corev1.Pod
		wantID      gangID
		wantSize    int32
		wantProblem string
		wantOK      bool
	}{
		"a single guest": {pod: guest()},
		"our own gang": {
			pod:    member("team-a", "w", 1, "train-7", 4),
			wantID: gangID{namespace: "team-a", source: "gang", name: "train-7"}, wantSize: 4, wantOK: true,
		},
		"a Kueue pod group: its total count is the size": {
			pod: func() *corev1.Pod {
				p := guest()
				p.Labels[imperatorv1alpha1.KueuePodGroupNameKey] = "job-1"
				p.Annotations[imperatorv1alpha1.KueuePodGroupTotalCountAnnotation] = "3"
				return p
			}(),
			wantID: gangID{namespace: "team-a", source: "kueue", name: "job-1"}, wantSize: 3, wantOK: true,
		},
		"a coscheduling PodGroup wins over our own gang label, its size from gang-size": {
			pod: func() *corev1.Pod {
				p := member("team-a", "w", 1, "train-7", 2)
				p.Labels[imperatorv1alpha1.CoschedulingPodGroupKey] = "pg"
				return p
			}(),
			wantID: gangID{namespace: "team-a", source: "coscheduling", name: "pg"}, wantSize: 2, wantOK: true,
		},
		"a native PodGroup (spec.schedulingGroup) wins over every label": {
			pod: func() *corev1.Pod {
				p := member("team-a", "w", 1, "train-7", 2)
				p.Labels[imperatorv1alpha1.KueuePodGroupNameKey] = "job-1"
				p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("native")}
				return p
			}(),
			wantID: gangID{namespace: "team-a", source: "podgroup", name: "native"}, wantSize: 2, wantOK: true,
		},
		"no size": {
			pod: func() *corev1.Pod {
				p := member("team-a", "w", 1, "train-7", 2)
				delete(p.Annotations, imperatorv1alpha1.GangSizeAnnotation)
				return p
			}(),
			wantID: gangID{namespace: "team-a", source: "gang", name: "train-7"}, wantOK: true,
			wantProblem: "annotation imperator.tenzen-y.io/gang-size is missing",
		},
		"a size that is not a positive number": {
			pod: func() *corev1.Pod {
				p := member("team-a", "w", 1, "train-7", 2)
				p.Annotations[imperatorv1alpha1.GangSizeAnnotation] = "0"
				return p
			}(),
			wantID: gangID{namespace: "team-a", source: "gang", name: "train-7"}, wantOK: true,
			wantProblem: `annotation imperator.tenzen-y.io/gang-size="0" is not a positive number`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			id, size, problem, ok := gangMembership(tc.pod)
			if diff := cmp.Diff(tc.wantID, id, cmp.AllowUnexported(gangID{})); diff != "" {
				t.Errorf("gang (-want +got):\n%s", diff)
			}
			if size != tc.wantSize || problem != tc.wantProblem || ok != tc.wantOK {
				t.Errorf("size, problem, ok = %d, %q, %v; want %d, %q, %v", size, problem, ok, tc.wantSize, tc.wantProblem, tc.wantOK)
			}
		})
	}
}

func TestFormGangs(t *testing.T) {
	id := gangID{namespace: "team-a", source: "gang", name: "train-7"}
	single := withUID(gatedGuest("team-b", "single", 0), "single")
	cases := map[string]struct {
		maximum     int32
		gated       []*corev1.Pod
		holding     int32
		types       []string
		wantGated   []string
		wantGangs   map[string]int32 // member -> need
		wantParked  []string
		wantNote    string
		unplaceable int32
	}{
		"every member here: a gang needing all of them": {
			maximum: 6, gated: append(members("train-7", 4, 4, 1), single),
			wantGated: []string{"team-a/train-7-0", "team-a/train-7-1", "team-a/train-7-2", "team-a/train-7-3", "team-b/single"},
			wantGangs: map[string]int32{"train-7-0": 4, "train-7-1": 4, "train-7-2": 4, "train-7-3": 4},
		},
		"one member holds a unit already (created again after a failure): it needs the rest": {
			maximum: 6, gated: members("train-7", 4, 3, 1), holding: 1,
			wantGated: []string{"team-a/train-7-0", "team-a/train-7-1", "team-a/train-7-2"},
			wantGangs: map[string]int32{"train-7-0": 3, "train-7-1": 3, "train-7-2": 3},
		},
		"as many members hold units as its size: the others are single guests": {
			maximum: 6, gated: members("train-7", 2, 1, 1), holding: 2,
			wantGated: []string{"team-a/train-7-0"},
		},
		"bigger than the type: parked, never let through": {
			maximum: 4, gated: append(members("train-7", 5, 5, 1), single),
			wantGated:   []string{"team-b/single"},
			wantParked:  []string{"team-a/train-7-0", "team-a/train-7-1", "team-a/train-7-2", "team-a/train-7-3", "team-a/train-7-4"},
			wantNote:    "gang team-a/train-7: 5 needed at once, compute-small has 4 available; Unschedulable (NotEnoughResources): never let through while available is below its size, it holds no unit",
			unplaceable: 5,
		},
		"a member missing (deleted while waiting): parked until it is created": {
			maximum: 6, gated: members("train-7", 4, 3, 1),
			wantParked:  []string{"team-a/train-7-0", "team-a/train-7-1", "team-a/train-7-2"},
			wantNote:    "gang team-a/train-7: 3 of 4 members here; Pending (NotEnoughTasks): it holds no unit until every member is created",
			unplaceable: 3,
		},
		"members disagree about the size": {
			maximum: 6, gated: []*corev1.Pod{member("team-a", "a", 1, "train-7", 2), member("team-a", "b", 2, "train-7", 3)},
			wantParked:  []string{"team-a/a", "team-a/b"},
			wantNote:    "gang team-a/train-7: members give sizes 2 and 3; Unschedulable (InvalidGang): its members wait, holding no unit, until they agree",
			unplaceable: 2,
		},
		"members of two types: told why": {
			maximum: 6, gated: members("train-7", 2, 2, 1), types: []string{"compute-large", "compute-small"},
			wantParked: []string{"team-a/train-7-0", "team-a/train-7-1"},
			wantNote: "gang team-a/train-7: members of machine types compute-large, compute-small; Unschedulable (MixedGang): " +
				"a gang's members share one namespace and one machine type, delete and create again those of the wrong type",
			unplaceable: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := &typeUsage{Usage: imperatorv1alpha1.Usage{Maximum: tc.maximum, Waiting: int32(len(tc.gated)), Queued: int32(len(tc.gated))},
				gated: tc.gated, gangHolding: map[gangID]int32{id: tc.holding}}
			if tc.types != nil {
				u.gangTypes = map[gangID][]string{id: tc.types}
			}
			formGangs(u, "compute-small", nil)
			if diff := cmp.Diff(tc.wantGated, names(u.gated)); diff != "" {
				t.Errorf("gated (-want +got):\n%s", diff)
			}
			gangs := map[string]int32{}
			for uid, g := range u.gangs {
				gangs[string(uid)] = g.need
			}
			if tc.wantGangs == nil {
				tc.wantGangs = map[string]int32{}
			}
			if diff := cmp.Diff(tc.wantGangs, gangs); diff != "" {
				t.Errorf("gang members and needs (-want +got):\n%s", diff)
			}
			var parked []*corev1.Pod
			for _, q := range u.parked {
				parked = append(parked, q.pod)
				if q.note != tc.wantNote {
					t.Errorf("%s is told %q, want %q", q.pod.Name, q.note, tc.wantNote)
				}
			}
			if diff := cmp.Diff(tc.wantParked, names(parked)); diff != "" {
				t.Errorf("parked (-want +got):\n%s", diff)
			}
			if u.Unplaceable != tc.unplaceable {
				t.Errorf("unplaceable = %d, want %d", u.Unplaceable, tc.unplaceable)
			}
			if want := reservationReplicas(tc.maximum, u.Usage); len(tc.wantParked) > 0 && u.replicas != want {
				t.Errorf("replicas = %d, want %d (parked members hold no unit)", u.replicas, want)
			}
		})
	}
}

func TestFormGangsOfPodGroups(t *testing.T) {
	worker := func(name string, s int, podGroup string) *corev1.Pod {
		pod := withUID(gatedGuest("team-a", name, s), name)
		pod.Labels[imperatorv1alpha1.CoschedulingPodGroupKey] = podGroup
		return pod
	}
	sizes := func(id gangID) int32 {
		if id == (gangID{namespace: "team-a", source: "coscheduling", name: "pg"}) {
			return 2
		}
		return 0
	}
	cases := map[string]struct {
		gated      []*corev1.Pod
		groupSize  func(gangID) int32
		wantNeed   int32
		wantParked string
	}{
		"members without gang-size take the PodGroup's minMember": {
			gated: []*corev1.Pod{worker("w0", 1, "pg"), worker("w1", 2, "pg")}, groupSize: sizes, wantNeed: 2,
		},
		"gang-size on the members wins, the PodGroup is not read": {
			gated: func() []*corev1.Pod {
				a, b := worker("w0", 1, "pg"), worker("w1", 2, "pg")
				a.Annotations[imperatorv1alpha1.GangSizeAnnotation] = "1"
				b.Annotations[imperatorv1alpha1.GangSizeAnnotation] = "1"
				return []*corev1.Pod{a, b}
			}(),
			groupSize: func(gangID) int32 { panic("read the PodGroup") }, wantNeed: 1,
		},
		"no PodGroup and no gang-size: told why": {
			gated: []*corev1.Pod{worker("w0", 1, "other")}, groupSize: sizes,
			wantParked: "gang team-a/other: annotation imperator.tenzen-y.io/gang-size is missing, PodGroup team-a/other gives no size (minMember, gang minCount); " +
				"Unschedulable (InvalidGang): its members wait, holding no unit, until every member gives its size",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			u := &typeUsage{Usage: imperatorv1alpha1.Usage{Maximum: 4}, gated: tc.gated}
			formGangs(u, "compute-small", tc.groupSize)
			if tc.wantParked != "" {
				if len(u.parked) != len(tc.gated) || u.parked[0].note != tc.wantParked {
					t.Fatalf("parked %v, want every member told %q", u.parked, tc.wantParked)
				}
				return
			}
			g := u.gangs[tc.gated[0].UID]
			if g == nil || g.need != tc.wantNeed {
				t.Fatalf("gang %+v, want one needing %d", g, tc.wantNeed)
			}
		})
	}
}

// gangLine is a line of compute-small whose gated guests' gangs formGangs
// found.
func gangLine(available, held int32, gated ...*corev1.Pod) line {
	u := &typeUsage{Usage: imperatorv1alpha1.Usage{Maximum: available}, gated: gated}
	formGangs(u, "compute-small", nil)
	return line{machineType: "compute-small", available: available, held: held, gated: u.gated,
		placeable: func(*corev1.Pod) bool { return true }, gangs: u.gangs, parked: u.parked}
}

func TestPlanSlotsWithGangs(t *testing.T) {
	gangA := members("a", 4, 4, 1)
	gangB := func() []*corev1.Pod {
		var out []*corev1.Pod
		for i := range 4 {
			out = append(out, member("team-b", "b-"+strconv.Itoa(i), 10+i, "b", 4))
		}
		return out
	}()
	single := func(name string, s int) *corev1.Pod { return withUID(gatedGuest("team-c", name, s), name) }
	cases := map[string]struct {
		line       line
		wantGrant  []string
		wantQueued []string
		wantNotes  []string
	}{
		"two 4-pod gangs and 6 free units: the older runs whole, the other waits whole": {
			line:       gangLine(6, 0, append(append([]*corev1.Pod{}, gangB...), gangA...)...),
			wantGrant:  names(gangA),
			wantQueued: []string{"team-b/b-0", "team-b/b-1", "team-b/b-2", "team-b/b-3"},
			wantNotes:  repeat(4, "gang team-b/b: 4 of 4 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-small, 1st in line, 4 of 6 in use"),
		},
		"a gang that does not fit keeps its place: the free units are set aside for it, a single guest behind it waits": {
			line:       gangLine(6, 4, append(members("a", 4, 4, 1), single("late", 20))...),
			wantQueued: append(names(gangA), "team-c/late"),
			wantNotes: append(repeat(4, "gang team-a/a: 4 of 4 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-small, 1st in line, 4 of 6 in use"),
				"waiting for compute-small: 2nd in line, 4 of 6 in use"),
		},
		"units beyond what the waiting gang needs go to the guests behind it": {
			line:      gangLine(10, 3, append(members("a", 4, 4, 1), single("late", 20), single("later", 21), single("latest", 22))...),
			wantGrant: []string{"team-a/a-0", "team-a/a-1", "team-a/a-2", "team-a/a-3", "team-c/late", "team-c/later", "team-c/latest"},
		},
		"a gang needing more than is free sets aside only what it needs": {
			line:       gangLine(10, 5, append(members("a", 8, 8, 1), single("late", 20))...),
			wantGrant:  nil,
			wantQueued: append(names(members("a", 8, 8, 1)), "team-c/late"),
			wantNotes: append(repeat(8, "gang team-a/a: 8 of 8 needed, 5 free; Pending (NotEnoughResources): waiting whole for compute-small, 1st in line, 5 of 10 in use"),
				"waiting for compute-small: 2nd in line, 5 of 10 in use"),
		},
		"an older single guest goes first, then the gang when the rest fits": {
			line:      gangLine(5, 0, append([]*corev1.Pod{single("early", 0)}, gangA...)...),
			wantGrant: append([]string{"team-c/early"}, names(gangA)...),
		},
		"a gang bigger than the type is parked and the single behind it passes": {
			line:       gangLine(4, 0, append(members("big", 5, 5, 1), single("late", 20))...),
			wantGrant:  []string{"team-c/late"},
			wantQueued: names(members("big", 5, 5, 1)),
			wantNotes:  repeat(5, "gang team-a/big: 5 needed at once, compute-small has 4 available; Unschedulable (NotEnoughResources): never let through while available is below its size, it holds no unit"),
		},
		"a member beyond what the gang needs waits and is told why": {
			line: gangLine(6, 0, append(members("a", 2, 2, 1), func() *corev1.Pod {
				return member("team-a", "a-extra", 9, "a", 2)
			}())...),
			wantGrant:  []string{"team-a/a-0", "team-a/a-1"},
			wantQueued: []string{"team-a/a-extra"},
			wantNotes:  []string{"gang team-a/a: a member beyond the 2 it needs at once; it waits until the gang holds its units, then as a single guest"},
		},
		"a reservation pod is making room: the gang waits for it, holding its place": {
			line: func() line {
				l := gangLine(4, 0, members("a", 2, 2, 1)...)
				l.releasing = true
				return l
			}(),
			wantQueued: names(members("a", 2, 2, 1)),
			wantNotes:  repeat(2, "gang team-a/a: 2 of 2 needed, 2 free; Pending (NotEnoughResources): waiting whole for compute-small, 1st in line, 0 of 4 in use; a reservation pod is making room"),
		},
		"a member no ready node can take: the gang is passed over and holds nothing": {
			line: func() line {
				l := gangLine(4, 0, append(members("a", 2, 2, 1), single("late", 20))...)
				l.placeable = func(p *corev1.Pod) bool { return p.Name != "a-1" }
				return l
			}(),
			wantGrant:  []string{"team-c/late"},
			wantQueued: names(members("a", 2, 2, 1)),
			wantNotes: repeat(2, "gang team-a/a: 2 of 2 needed; Pending (Unschedulable): no imperator.tenzen-y.io/node-pool=ready node of compute-small "+
				"can take member team-a/a-1 now, the gang keeps its place and holds no unit until one can"),
		},
		"a gang claiming a hold that covers it is let through ahead of the line": {
			line: func() line {
				l := gangLine(4, 2, append([]*corev1.Pod{single("early", 0)}, members("a", 2, 2, 1)...)...)
				l.holds = &holdLine{claims: map[types.UID]string{"a-0": "h", "a-1": "h"}, holdFree: map[string]int32{"h": 2}, held: 2}
				return l
			}(),
			wantGrant:  []string{"team-a/a-0", "team-a/a-1"},
			wantQueued: []string{"team-c/early"},
			wantNotes:  []string{"waiting for compute-small: 1st in line, 4 of 4 in use, 2 held for capacity holds"},
		},
		"a gang claiming a hold with fewer free units than it needs waits whole for them": {
			line: func() line {
				l := gangLine(4, 0, members("a", 2, 2, 1)...)
				l.holds = &holdLine{claims: map[types.UID]string{"a-0": "h", "a-1": "h"}, holdFree: map[string]int32{"h": 1}, ordinaryFree: 3, held: 1}
				return l
			}(),
			wantQueued: names(members("a", 2, 2, 1)),
			wantNotes:  repeat(2, "gang team-a/a: 2 of 2 needed, 1 free of CapacityHold h; Pending (NotEnoughResources): waiting whole for units of compute-small held by CapacityHold h"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			plan := planSlots(tc.line)
			var queued []*corev1.Pod
			var notes []string
			for _, q := range plan.queued {
				queued = append(queued, q.pod)
				notes = append(notes, q.note)
			}
			if diff := cmp.Diff(tc.wantGrant, names(plan.grant)); diff != "" {
				t.Errorf("granted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantQueued, names(queued)); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantNotes, notes); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}

func repeat(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestPodCountsFindsGangs checks what podCounts records for formGangs: the
// members of a gang holding units, and the types a gang's members ask for.
func TestPodCountsFindsGangs(t *testing.T) {
	enabled := func(ns string) bool { return ns == guestNS }
	ready := func(string) string { return string(imperatorv1alpha1.NodePoolReady) }
	anywhere := func(string) []*corev1.Node { return []*corev1.Node{{}} }
	gate := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}}
		return p
	}
	running := wrappers.MakePod(guestNS, "train-0").InjectedGuest(group, "compute-small").Gang("train", 3).NodeName("kasumi").Obj()
	waiting := gate(wrappers.MakePod(guestNS, "train-1").InjectedGuest(group, "compute-small").Gang("train", 3).Obj())
	odd := gate(wrappers.MakePod(guestNS, "mixed-0").InjectedGuest(group, "compute-large").Gang("mixed", 2).Obj())
	oddSmall := gate(wrappers.MakePod(guestNS, "mixed-1").InjectedGuest(group, "compute-small").Gang("mixed", 2).Obj())
	third := gate(wrappers.MakePod(guestNS, "train-2").InjectedGuest(group, "compute-small").Gang("train", 3).Obj())
	var pods []corev1.Pod
	for _, p := range []*corev1.Pod{running, waiting, third, odd, oddSmall} {
		pods = append(pods, *withUID(p, p.Name))
	}
	waiting = &pods[1]
	usage := podCounts(pods, group, agentNS, lookups{enabled: enabled, nodeState: ready, readyNodes: anywhere},
		map[string]int32{"compute-small": 4, "compute-large": 2}, time.Time{})
	small := usage["compute-small"]
	train := gangID{namespace: guestNS, source: "gang", name: "train"}
	mixed := gangID{namespace: guestNS, source: "gang", name: "mixed"}
	if got := small.gangHolding[train]; got != 1 {
		t.Errorf("members of train holding a unit = %d, want 1", got)
	}
	if diff := cmp.Diff([]string{"compute-large", "compute-small"}, small.gangTypes[mixed]); diff != "" {
		t.Errorf("types of gang mixed (-want +got):\n%s", diff)
	}
	formGangs(small, "compute-small", nil)
	if g := small.gangs[waiting.UID]; g == nil {
		t.Errorf("train-1 is not in a gang: %+v", small.parked)
	} else if g.need != 2 {
		t.Errorf("train needs %d more, want 2 (one of 3 runs)", g.need)
	}
	if len(small.parked) != 1 || small.parked[0].pod.Name != "mixed-1" {
		t.Errorf("parked %+v, want mixed-1 (its gang spans two types)", small.parked)
	}
}
