package soak

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/e2e"
)

// fifoTolerance is how long before a guest is let through an earlier guest
// must have been visible for the FIFO check to count it: the agent decides
// from its cache, which may see a pod created at the same moment a little
// later than the soak's watch does.
const fifoTolerance = 2 * time.Second

// judgeDelay is how long a let-through waits before it is judged, so that a
// Machine change written before it (with a smaller resourceVersion) has
// reached the soak's Machine watch, which runs apart from its pod watch.
const judgeDelay = 3 * time.Second

// typeKey is a machine type of a group on one spoke.
type typeKey struct{ group, typ string }

// availableAt is the `available` a Machine's type had from resourceVersion rv on.
type availableAt struct {
	rv        int64
	available int32
}

// guest is what the checker knows of a guest pod.
type guest struct {
	name       string
	uid        types.UID
	key        typeKey
	claimsHold bool
	gated      bool
	bound      bool
	finished   bool
	deleting   bool
	order      orderKey
	seen       time.Time
}

// orderKey is the line's order (docs/contract.md, The queue): admitted-at,
// else creation time, then UID.
type orderKey struct {
	at  time.Time
	uid types.UID
}

func (a orderKey) before(b orderKey) bool {
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return a.uid < b.uid
}

// holding is a guest holding a unit: let through or bound, not finished; a
// leaving guest holds its unit until its pod is gone.
func (g *guest) holding() bool {
	if g.finished {
		return false
	}
	if g.deleting {
		return g.bound
	}
	return g.bound || !g.gated
}

// letThrough is a guest seen passing the gate, judged after judgeDelay.
type letThrough struct {
	guest   string
	key     typeKey
	rv      int64
	at      time.Time
	holders int
	// earlier are the guests of the same type, not claiming a hold, still
	// gated and ahead in line when it passed.
	earlier []string
}

// spokeState is one spoke's view.
type spokeState struct {
	name      string
	mu        sync.Mutex
	guests    map[types.UID]*guest
	available map[typeKey][]availableAt
	pending   []letThrough
}

// WatchSpoke starts informers on a spoke's pods and Machines; they stop with ctx.
func (c *Checker) WatchSpoke(ctx context.Context, name string, cl *e2e.Cluster) error {
	s := c.addSpoke(name)
	ca, err := cache.New(cl.Config, cache.Options{Scheme: cl.Client.Scheme()})
	if err != nil {
		return fmt.Errorf("soak: cache of %s: %w", name, err)
	}
	pods, err := ca.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.podChanged(s, nil, asPod(obj)) },
		UpdateFunc: func(old, obj any) { c.podChanged(s, asPod(old), asPod(obj)) },
		DeleteFunc: func(obj any) { c.podDeleted(s, obj) },
	}); err != nil {
		return err
	}
	machines, err := ca.GetInformer(ctx, &imperatorv1alpha1.Machine{})
	if err != nil {
		return err
	}
	if _, err := machines.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.machineChanged(obj) },
		UpdateFunc: func(_, obj any) { s.machineChanged(obj) },
	}); err != nil {
		return err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return fmt.Errorf("soak: the watches of %s did not sync", name)
	}
	go c.judgeLoop(ctx, s)
	return nil
}

func (c *Checker) addSpoke(name string) *spokeState {
	s := &spokeState{name: name, guests: map[types.UID]*guest{}, available: map[typeKey][]availableAt{}}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spokes[name] = s
	return s
}

func asPod(obj any) *corev1.Pod {
	p, _ := obj.(*corev1.Pod)
	return p
}

func resourceVersion(obj client.Object) int64 {
	n, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	return n
}

func (s *spokeState) machineChanged(obj any) {
	m, ok := obj.(*imperatorv1alpha1.Machine)
	if !ok {
		return
	}
	rv := resourceVersion(m)
	group := m.Labels[imperatorv1alpha1.MachineGroupKey]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, mt := range m.Spec.MachineTypes {
		k := typeKey{group, mt.Name}
		h := s.available[k]
		if len(h) > 0 && h[len(h)-1].available == mt.Available {
			continue
		}
		s.available[k] = append(h, availableAt{rv: rv, available: mt.Available})
	}
}

// availableBefore is the `available` of k in the last Machine version
// written before rv; false when none is known.
func (s *spokeState) availableBefore(k typeKey, rv int64) (int32, bool) {
	h := s.available[k]
	i := sort.Search(len(h), func(i int) bool { return h[i].rv >= rv })
	if i == 0 {
		return 0, false
	}
	return h[i-1].available, true
}

func toGuest(p *corev1.Pod, seen time.Time) *guest {
	if p == nil || p.Labels[imperatorv1alpha1.PodRoleKey] != string(imperatorv1alpha1.PodRoleGuest) {
		return nil
	}
	if _, ok := p.Annotations[imperatorv1alpha1.InjectedAnnotation]; !ok {
		return nil // not a guest the admission path made: counts as nothing
	}
	g := &guest{
		name:       p.Namespace + "/" + p.Name,
		uid:        p.UID,
		key:        typeKey{p.Labels[imperatorv1alpha1.MachineGroupKey], p.Labels[imperatorv1alpha1.MachineTypeKey]},
		claimsHold: p.Labels[imperatorv1alpha1.HoldKey] != "" || p.Annotations[imperatorv1alpha1.ConsumeProvisioningRequestAnnotation] != "",
		gated: slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
			return g.Name == imperatorv1alpha1.SlotSchedulingGate
		}),
		bound:    p.Spec.NodeName != "",
		finished: p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed,
		deleting: p.DeletionTimestamp != nil,
		order:    orderKey{at: p.CreationTimestamp.Time, uid: p.UID},
		seen:     seen,
	}
	if at, err := time.Parse(time.RFC3339Nano, p.Annotations[imperatorv1alpha1.AdmittedAtAnnotation]); err == nil {
		g.order.at = at
	}
	return g
}

// podChanged updates the spoke's view and records what the pod's change
// says about invariants 1 to 3.
func (c *Checker) podChanged(s *spokeState, _, p *corev1.Pod) {
	now := c.now()
	g := toGuest(p, now)
	if g == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.guests[g.uid]
	if before != nil {
		g.seen = before.seen
	}
	s.guests[g.uid] = g
	// Invariant 2: a guest that ran is never evicted or deleted by us.
	if before != nil && before.bound && !before.finished {
		c.Count(InvariantNoEvict, 1)
		_, ours := c.deletedBySoak.Load(g.uid)
		switch {
		case g.deleting && !before.deleting && !ours:
			c.Report(Violation{InvariantNoEvict, s.name + "/" + g.name, now, "a running guest is being deleted, and the soak did not delete it"})
		case p.Status.Phase == corev1.PodFailed && (p.Status.Reason == "Evicted" || p.Status.Reason == "Preempting"):
			c.Report(Violation{InvariantNoEvict, s.name + "/" + g.name, now, "a running guest failed with reason " + p.Status.Reason})
		}
	}
	// A let-through: the slot gate removed (or a guest created without it).
	passed := !g.gated && !g.finished && !g.deleting && (before == nil || before.gated)
	if !passed {
		return
	}
	lt := letThrough{guest: g.name, key: g.key, rv: resourceVersion(p), at: now}
	for _, o := range s.guests {
		if o.key != g.key {
			continue
		}
		if o.holding() {
			lt.holders++
		}
		if !g.claimsHold && !o.claimsHold && o.gated && !o.deleting && !o.finished &&
			o.order.before(g.order) && now.Sub(o.seen) >= fifoTolerance {
			lt.earlier = append(lt.earlier, o.name)
		}
	}
	s.pending = append(s.pending, lt)
}

func (c *Checker) podDeleted(s *spokeState, obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p := asPod(obj)
	if p == nil {
		return
	}
	now := c.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.guests[p.UID]
	delete(s.guests, p.UID)
	if before == nil || !before.bound || before.finished || before.deleting {
		return
	}
	c.Count(InvariantNoEvict, 1)
	if _, ours := c.deletedBySoak.Load(p.UID); !ours {
		c.Report(Violation{InvariantNoEvict, s.name + "/" + before.name, now, "a running guest disappeared, and the soak did not delete it"})
	}
}

// judgeLoop judges each let-through once judgeDelay has passed.
func (c *Checker) judgeLoop(ctx context.Context, s *spokeState) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.judge(s, c.now().Add(-judgeDelay))
	}
}

// judge decides every let-through seen before cutoff.
func (c *Checker) judge(s *spokeState, cutoff time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := s.pending[:0]
	for _, lt := range s.pending {
		if lt.at.After(cutoff) {
			keep = append(keep, lt)
			continue
		}
		obj := fmt.Sprintf("%s/%s (type %s/%s)", s.name, lt.guest, lt.key.group, lt.key.typ)
		if available, ok := s.availableBefore(lt.key, lt.rv); ok {
			c.Count(InvariantCap, 1)
			if int32(lt.holders) > available {
				c.Report(Violation{InvariantCap, obj, lt.at, fmt.Sprintf("let through while %d guests hold units of available %d", lt.holders, available)})
			}
		}
		c.Count(InvariantFIFO, 1)
		if len(lt.earlier) > 0 {
			slices.Sort(lt.earlier)
			c.Report(Violation{InvariantFIFO, obj, lt.at, "let through while earlier guests wait: " + strings.Join(lt.earlier, ", ")})
		}
	}
	s.pending = keep
}

// Drain judges every let-through still pending (at the end of a run).
func (c *Checker) Drain() {
	c.mu.Lock()
	spokes := make([]*spokeState, 0, len(c.spokes))
	for _, s := range c.spokes {
		spokes = append(spokes, s)
	}
	c.mu.Unlock()
	for _, s := range spokes {
		c.judge(s, c.now().Add(time.Hour))
	}
}
