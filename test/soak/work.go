package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// actionTimeout bounds one action of the generator (an API server may be
// frozen under it).
const actionTimeout = 10 * time.Second

// maxGuests bounds the guests of one spoke: beyond it the generator deletes.
const maxGuests = 40

// SpokeWork is what the generator works on in one spoke: its Machine, the
// types its nodes serve (with the most units those nodes hold) and its pool
// nodes.
type SpokeWork struct {
	Spoke   string
	Machine *imperatorv1alpha1.Machine
	// Types are the machine types with nodes and how many units the nodes
	// hold; `available` is drawn up to two beyond.
	Types map[string]int32
	Nodes []string
}

// Group is the Machine's group.
func (s SpokeWork) Group() string { return s.Machine.Labels[imperatorv1alpha1.MachineGroupKey] }

// burstType is a type the generator adds and removes; no node serves it.
const burstType = "soak-burst"

// Namespaces are the injection-enabled namespaces guests are created in.
var Namespaces = []string{"soak-team-a", "soak-team-b", "soak-team-c"}

// Work counts what the generator did.
type Work struct {
	GuestsCreated, GuestsRefused, GuestsDeleted int
	AvailableChanges, TypesAdded, TypesRemoved  int
	MaintenanceFlips                            int
	HoldsCreated, HoldsDeleted, HoldClaims      int
	FleetHoldsCreated, FleetHoldsReleased       int
	FleetHoldsRefused                           int
	Errors                                      int
	// FirstErrors are the first errors and refusals of each kind, for the
	// report.
	FirstErrors []string
	seenErrors  map[string]int
}

// errorsPerKind is how many errors of one kind Work keeps.
const errorsPerKind = 2

func (w Work) String() string {
	return fmt.Sprintf("guests created %d (refused %d), deleted %d; available changed %d; types added %d, removed %d; maintenance flips %d; CapacityHolds created %d, deleted %d, claims %d; fleet holds created %d (refused %d), released %d; other errors %d",
		w.GuestsCreated, w.GuestsRefused, w.GuestsDeleted, w.AvailableChanges, w.TypesAdded, w.TypesRemoved, w.MaintenanceFlips,
		w.HoldsCreated, w.HoldsDeleted, w.HoldClaims, w.FleetHoldsCreated, w.FleetHoldsRefused, w.FleetHoldsReleased, w.Errors)
}

// Generator does random work drawn from its own stream of the seed.
type Generator struct {
	Env     *e2e.Env
	Spokes  []SpokeWork
	Checker *Checker

	rng *rand.Rand
	mu  sync.Mutex
	w   Work
	// fleetHolds are the fleet holds created and not yet released, with the
	// cluster and group each placed its units in.
	fleetHolds []placedHold
	next       int
}

type placedHold struct{ name, cluster, group, typ string }

// NewGenerator draws its choices from seed.
func NewGenerator(seed uint64, env *e2e.Env, spokes []SpokeWork, checker *Checker) *Generator {
	return &Generator{Env: env, Spokes: spokes, Checker: checker, rng: rand.New(rand.NewPCG(seed, 0x3017))}
}

// Work returns what the generator did so far.
func (g *Generator) Work() Work {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.w
}

func (g *Generator) count(f func(*Work)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(&g.w)
}

// Run does one action after another, a random pause apart, until ctx ends.
func (g *Generator) Run(ctx context.Context) {
	for ctx.Err() == nil {
		g.step(ctx)
		sleep(ctx, time.Duration(200+g.rng.IntN(600))*time.Millisecond)
	}
}

// step draws one action and does it.
func (g *Generator) step(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, actionTimeout)
	defer cancel()
	s := g.Spokes[g.rng.IntN(len(g.Spokes))]
	c := g.Env.Spokes[s.Spoke].Client
	var err error
	switch n := g.rng.IntN(100); {
	case n < 35:
		err = g.createGuest(ctx, s, c)
	case n < 60:
		err = g.deleteGuest(ctx, s, c)
	case n < 72:
		err = g.setAvailable(ctx, s, c)
	case n < 76:
		err = g.toggleBurstType(ctx, s, c)
	case n < 81:
		err = g.flipMaintenance(ctx, s, c)
	case n < 88:
		err = g.createHold(ctx, s, c)
	case n < 91:
		err = g.deleteHold(ctx, c)
	case n < 96:
		err = g.createFleetHold(ctx, s)
	default:
		err = g.releaseFleetHold(ctx)
	}
	if err != nil && ctx.Err() == nil {
		g.count(func(w *Work) { w.Errors++ })
		g.note("other", err)
	}
}

// note keeps the first errors of each kind.
func (g *Generator) note(kind string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.w.seenErrors == nil {
		g.w.seenErrors = map[string]int{}
	}
	if g.w.seenErrors[kind]++; g.w.seenErrors[kind] <= errorsPerKind {
		g.w.FirstErrors = append(g.w.FirstErrors, time.Now().UTC().Format("15:04:05 ")+kind+": "+err.Error())
	}
}

func (g *Generator) name(prefix string) string {
	g.next++
	return prefix + "-" + strconv.Itoa(g.next)
}

func (g *Generator) pickType(s SpokeWork) string {
	names := make([]string, 0, len(s.Types))
	for t := range s.Types {
		names = append(names, t)
	}
	slices.Sort(names)
	return names[g.rng.IntN(len(names))]
}

func (g *Generator) guests(ctx context.Context, s SpokeWork, c client.Client) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, ns := range Namespaces {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)}); err != nil {
			return nil, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// createGuest creates a guest of a random type in a random namespace; a
// third of them claim a CapacityHold or fleet hold of that type when one
// exists.
func (g *Generator) createGuest(ctx context.Context, s SpokeWork, c client.Client) error {
	typ := g.pickType(s)
	ns := Namespaces[g.rng.IntN(len(Namespaces))]
	pod := wrappers.MakePod(ns, g.name("guest")).Guest(s.Group(), typ)
	claims := false
	if g.rng.IntN(3) == 0 {
		if hold := g.holdOf(ctx, s, c, typ); hold != "" {
			pod.Label(imperatorv1alpha1.HoldKey, hold)
			claims = true
		}
	}
	if err := c.Create(ctx, pod.Obj()); err != nil {
		g.count(func(w *Work) { w.GuestsRefused++ })
		g.note("guest refused", err)
		return nil // refused while the agent or the API server is away: not an error of ours
	}
	g.count(func(w *Work) {
		w.GuestsCreated++
		if claims {
			w.HoldClaims++
		}
	})
	return nil
}

// holdOf names a hold of typ on the spoke: one of the generator's fleet
// holds placed there, else a live CapacityHold; "" when none.
func (g *Generator) holdOf(ctx context.Context, s SpokeWork, c client.Client, typ string) string {
	g.mu.Lock()
	for _, h := range g.fleetHolds {
		if h.cluster == s.Spoke && h.typ == typ && h.group == s.Group() {
			g.mu.Unlock()
			return h.name
		}
	}
	g.mu.Unlock()
	var holds imperatorv1alpha1.CapacityHoldList
	if err := c.List(ctx, &holds); err != nil {
		return ""
	}
	for _, h := range holds.Items {
		if h.Spec.MachineType == typ && h.Spec.MachineGroup == s.Group() && h.DeletionTimestamp.IsZero() && h.Spec.ValidUntil.After(time.Now()) {
			return h.Name
		}
	}
	return ""
}

func (g *Generator) deleteGuest(ctx context.Context, s SpokeWork, c client.Client) error {
	pods, err := g.guests(ctx, s, c)
	if err != nil || len(pods) == 0 {
		return err
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return compareStrings(a.Name, b.Name) })
	p := pods[g.rng.IntN(len(pods))]
	g.Checker.DeletedBySoak(p.UID)
	if err := c.Delete(ctx, &p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	g.count(func(w *Work) { w.GuestsDeleted++ })
	// Keep the spoke under maxGuests: delete more while above.
	if len(pods) > maxGuests {
		return g.deleteGuest(ctx, s, c)
	}
	return nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (g *Generator) setAvailable(ctx context.Context, s SpokeWork, c client.Client) error {
	typ := g.pickType(s)
	available := int32(g.rng.IntN(int(s.Types[typ]) + 3))
	err := e2e.UpdateMachine(ctx, c, s.Machine.Name, func(m *imperatorv1alpha1.Machine) {
		for i := range m.Spec.MachineTypes {
			if m.Spec.MachineTypes[i].Name == typ {
				m.Spec.MachineTypes[i].Available = available
			}
		}
	})
	if err == nil {
		g.count(func(w *Work) { w.AvailableChanges++ })
	}
	return err
}

// toggleBurstType adds the burst type (no node serves it) or removes it.
func (g *Generator) toggleBurstType(ctx context.Context, s SpokeWork, c client.Client) error {
	added := false
	err := e2e.UpdateMachine(ctx, c, s.Machine.Name, func(m *imperatorv1alpha1.Machine) {
		if i := slices.IndexFunc(m.Spec.MachineTypes, func(t imperatorv1alpha1.MachineType) bool { return t.Name == burstType }); i >= 0 {
			m.Spec.MachineTypes = slices.Delete(m.Spec.MachineTypes, i, i+1)
			added = false
			return
		}
		burst := wrappers.MakeMachine("x", "x").Type(burstType, "1", "1Gi", int32(1+g.rng.IntN(5))).Obj().Spec.MachineTypes[0]
		m.Spec.MachineTypes = append(m.Spec.MachineTypes, burst)
		added = true
	})
	if err != nil {
		return err
	}
	g.count(func(w *Work) {
		if added {
			w.TypesAdded++
		} else {
			w.TypesRemoved++
		}
	})
	return nil
}

func (g *Generator) flipMaintenance(ctx context.Context, s SpokeWork, c client.Client) error {
	node := s.Nodes[g.rng.IntN(len(s.Nodes))]
	err := e2e.UpdateMachine(ctx, c, s.Machine.Name, func(m *imperatorv1alpha1.Machine) {
		for i := range m.Spec.NodePool {
			if m.Spec.NodePool[i].Name != node {
				continue
			}
			if m.Spec.NodePool[i].Mode == imperatorv1alpha1.NodePoolModeMaintenance {
				m.Spec.NodePool[i].Mode = imperatorv1alpha1.NodePoolModeReady
			} else {
				m.Spec.NodePool[i].Mode = imperatorv1alpha1.NodePoolModeMaintenance
			}
		}
	})
	if err == nil {
		g.count(func(w *Work) { w.MaintenanceFlips++ })
	}
	return err
}

// createHold books 1 or 2 units for 15 to 60 s: most expire on their own.
func (g *Generator) createHold(ctx context.Context, s SpokeWork, c client.Client) error {
	typ := g.pickType(s)
	hold := wrappers.MakeCapacityHold(g.name("hold"), s.Group(), typ, int32(1+g.rng.IntN(2))).
		ValidUntil(time.Now().Add(time.Duration(15+g.rng.IntN(46)) * time.Second)).Obj()
	if err := c.Create(ctx, hold); err != nil {
		return err
	}
	g.count(func(w *Work) { w.HoldsCreated++ })
	return nil
}

// deleteHold deletes a CapacityHold the generator made (not the hub's).
func (g *Generator) deleteHold(ctx context.Context, c client.Client) error {
	var holds imperatorv1alpha1.CapacityHoldList
	if err := c.List(ctx, &holds); err != nil {
		return err
	}
	holds.Items = slices.DeleteFunc(holds.Items, func(h imperatorv1alpha1.CapacityHold) bool { return h.Spec.FleetHold != "" })
	if len(holds.Items) == 0 {
		return nil
	}
	slices.SortFunc(holds.Items, func(a, b imperatorv1alpha1.CapacityHold) int { return compareStrings(a.Name, b.Name) })
	h := holds.Items[g.rng.IntN(len(holds.Items))]
	if err := c.Delete(ctx, &h); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	g.count(func(w *Work) { w.HoldsDeleted++ })
	return nil
}

// createFleetHold asks the hub for 1 or 2 units of a type for one to two
// minutes, in one cluster.
func (g *Generator) createFleetHold(ctx context.Context, s SpokeWork) error {
	typ := g.pickType(s)
	name := g.name("fleet-hold")
	ttl := time.Duration(60+g.rng.IntN(61)) * time.Second
	args := []string{"hold", "create", name, s.Group() + "/" + typ, "--count", strconv.Itoa(1 + g.rng.IntN(2)), "--same-cluster", "--ttl", ttl.String()}
	fh := &queryv1.FleetHold{}
	if res, err := g.Env.Ctl.JSON(ctx, fh, args); err != nil || fh.GetPhase() != queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD {
		g.count(func(w *Work) { w.FleetHoldsRefused++ })
		g.note("fleet hold refused", fmt.Errorf("%s: %v %s %s", name, err, fh.GetMessage(), strings.TrimSpace(res.Stderr)))
		return nil // no room, or a replica away: the hub's answer, not an error of ours
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.w.FleetHoldsCreated++
	for _, part := range fh.GetClusters() {
		g.fleetHolds = append(g.fleetHolds, placedHold{name: name, cluster: part.GetCluster(), group: part.GetGroup(), typ: typ})
	}
	return nil
}

func (g *Generator) releaseFleetHold(ctx context.Context) error {
	g.mu.Lock()
	if len(g.fleetHolds) == 0 {
		g.mu.Unlock()
		return nil
	}
	h := g.fleetHolds[g.rng.IntN(len(g.fleetHolds))]
	g.mu.Unlock()
	if _, err := g.Env.Ctl.Run(ctx, "hold", "release", h.name); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fleetHolds = slices.DeleteFunc(g.fleetHolds, func(p placedHold) bool { return p.name == h.name })
	g.w.FleetHoldsReleased++
	return nil
}

// EnsureNamespaces creates the guests' namespaces, injection enabled, on a spoke.
func EnsureNamespaces(ctx context.Context, c client.Client) error {
	for _, name := range Namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled,
		}}}
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	return nil
}
