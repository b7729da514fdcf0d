package holds

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// fakeSpoke is a spoke agent: the CapacityHolds it keeps, by name, with
// the booking each was made for.
type fakeSpoke struct {
	mu     sync.Mutex
	holds  map[string]string
	refuse bool
	asked  int
}

func (s *fakeSpoke) answer(req *federationv1.HoldRequest) *federationv1.HoldResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked++
	if req.GetRelease() {
		if s.holds[req.GetName()] == req.GetBooking() {
			delete(s.holds, req.GetName())
		}
		return &federationv1.HoldResponse{Result: federationv1.HoldResult_HOLD_RESULT_RELEASED}
	}
	if s.refuse {
		return &federationv1.HoldResponse{Result: federationv1.HoldResult_HOLD_RESULT_REFUSED, Reason: "NotEnoughFree", Message: "too few free units"}
	}
	s.holds[req.GetName()] = req.GetBooking()
	return &federationv1.HoldResponse{Result: federationv1.HoldResult_HOLD_RESULT_HELD, Held: req.GetCount()}
}

// held is how many CapacityHolds the spoke keeps.
func (s *fakeSpoke) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.holds)
}

// fleet is the spokes and which replica each streams to ("" offline).
type fleet struct {
	mu     sync.Mutex
	spokes map[string]*fakeSpoke
	stream map[string]string
}

func (f *fleet) move(cluster, replica string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stream[cluster] = replica
}

// replicaSpokes is one replica's view of the fleet's streams (Spokes).
type replicaSpokes struct {
	fleet   *fleet
	replica string
}

func (r replicaSpokes) HoldStream(cluster string) (bool, bool) {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	here := r.fleet.stream[cluster] == r.replica
	return here, here
}

func (r replicaSpokes) RequestHold(ctx context.Context, cluster string, req *federationv1.HoldRequest) (*federationv1.HoldResponse, error) {
	if here, _ := r.HoldStream(cluster); !here {
		return nil, ErrNotConnectedHere
	}
	return r.fleet.spokes[cluster].answer(req), nil
}

// twoReplicas is a hub of two replicas, "a" and "b", sharing one API, with
// spokes spoke-a (streaming to a) and spoke-b (to b), 2 free units each;
// every replica's Deliverer runs until the test ends.
type twoReplicas struct {
	api      client.Client
	fleet    *fleet
	replicas map[string]*Coordinator
}

func newTwoReplicas(t *testing.T) *twoReplicas {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := imperatorv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// The API server stamps creation times; the fake client does not.
	stamp := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		obj.SetCreationTimestamp(metav1.Now())
		obj.SetUID(types.UID(fmt.Sprintf("uid-%d", time.Now().UnixNano())))
		return c.Create(ctx, obj, opts...)
	}}
	api := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&imperatorv1alpha1.FleetHold{}).WithInterceptorFuncs(stamp).Build()
	h := &twoReplicas{
		api: api,
		fleet: &fleet{
			spokes: map[string]*fakeSpoke{"spoke-a": {holds: map[string]string{}}, "spoke-b": {holds: map[string]string{}}},
			stream: map[string]string{"spoke-a": "a", "spoke-b": "b"},
		},
		replicas: map[string]*Coordinator{},
	}
	st := store.New(nil, time.Minute)
	for _, name := range []string{"spoke-a", "spoke-b"} {
		st.Connect(name, &federationv1.Hello{Epoch: 1})
		st.ApplySnapshot(name, 1, &federationv1.Snapshot{Generation: 1, Machines: []*federationv1.Machine{{
			Name: "m-team", Group: "team", Types: []*federationv1.MachineType{unitType("compute-xlarge", 1, 2, 0)},
		}}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, r := range []string{"a", "b"} {
		c := New(Options{Client: api, Namespace: "imperator-system", Store: st, Spokes: replicaSpokes{fleet: h.fleet, replica: r},
			Deadline: 2 * time.Second, Poll: 10 * time.Millisecond, UsageWait: time.Millisecond})
		h.replicas[r] = c
		d := &Deliverer{Coordinator: c}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var list imperatorv1alpha1.FleetHoldList
				if err := api.List(ctx, &list); err == nil {
					for _, fh := range list.Items {
						_, _ = d.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&fh)})
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	return h
}

func spreadSpec(name string, count int32) Spec {
	return Spec{Name: name, TTL: time.Hour, Request: capacity.Request{Type: "compute-xlarge", Count: count, Spread: true}}
}

// eventually fails the test unless cond holds within the timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within %s: %s", timeout, what)
}

// TestASpreadHoldAcrossSpokesOfBothReplicasIsHeldFromEither: each spoke
// streams to another replica; CreateHold on either replica holds both
// parts, and ReleaseHold on the other releases both.
func TestASpreadHoldAcrossSpokesOfBothReplicasIsHeldFromEither(t *testing.T) {
	for _, pair := range [][2]string{{"a", "b"}, {"b", "a"}} {
		t.Run("created on "+pair[0]+", released on "+pair[1], func(t *testing.T) {
			h := newTwoReplicas(t)
			ctx := context.Background()
			fh, err := h.replicas[pair[0]].Create(ctx, spreadSpec("train", 4))
			if err != nil {
				t.Fatalf("Create on replica %s: %v", pair[0], err)
			}
			if fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld || len(fh.Status.Clusters) != 2 {
				t.Fatalf("Create on replica %s = %s %+v (%s), want Held on both spokes", pair[0], fh.Status.Phase, fh.Status.Clusters, fh.Status.Message)
			}
			for name, s := range h.fleet.spokes {
				if s.held() != 1 {
					t.Errorf("%s keeps %d CapacityHolds, want 1", name, s.held())
				}
			}
			released, err := h.replicas[pair[1]].Release(ctx, "train")
			if err != nil {
				t.Fatalf("Release on replica %s: %v", pair[1], err)
			}
			if released.Status.Phase != imperatorv1alpha1.FleetHoldReleased || len(unreleased(released, time.Now())) != 0 {
				t.Errorf("Release on replica %s = %s %+v, want Released with every part released", pair[1], released.Status.Phase, released.Status.Clusters)
			}
			for name, s := range h.fleet.spokes {
				if s.held() != 0 {
					t.Errorf("%s keeps %d CapacityHolds after the release, want 0", name, s.held())
				}
			}
		})
	}
}

// TestOneSpokeRefusingFailsTheHoldAndTheOtherPartIsReleased: the spoke on
// replica b refuses; the hold coordinated by a is Failed and spoke-a's
// part, delivered by a, released.
func TestOneSpokeRefusingFailsTheHoldAndTheOtherPartIsReleased(t *testing.T) {
	h := newTwoReplicas(t)
	refusing := h.fleet.spokes["spoke-b"]
	refusing.mu.Lock()
	refusing.refuse = true
	refusing.mu.Unlock()
	fh, err := h.replicas["a"].Create(context.Background(), spreadSpec("train", 4))
	if err != nil {
		t.Fatal(err)
	}
	if fh.Status.Phase != imperatorv1alpha1.FleetHoldFailed {
		t.Fatalf("Create = %s, want Failed", fh.Status.Phase)
	}
	eventually(t, 5*time.Second, "spoke-a's part released", func() bool { return h.fleet.spokes["spoke-a"].held() == 0 })
}

// TestConcurrentCreateAndReleaseOnTwoReplicasEndInOnePhase: a Release on
// replica b lands while replica a is still deciding the hold. Whatever the
// interleaving, the hold ends Released in the API, Create on a answers the
// phase the API has or Released, and no spoke keeps a part.
func TestConcurrentCreateAndReleaseOnTwoReplicasEndInOnePhase(t *testing.T) {
	for i := range 5 {
		t.Run(fmt.Sprint("round ", i), func(t *testing.T) {
			h := newTwoReplicas(t)
			ctx := context.Background()
			done := make(chan *imperatorv1alpha1.FleetHold, 1)
			go func() {
				fh, err := h.replicas["a"].Create(ctx, spreadSpec("train", 4))
				if err != nil {
					t.Errorf("Create: %v", err)
				}
				done <- fh
			}()
			eventually(t, 5*time.Second, "the hold written", func() bool {
				_, err := h.replicas["b"].Get(ctx, "train")
				return err == nil
			})
			time.Sleep(time.Duration(i) * 3 * time.Millisecond)
			if _, err := h.replicas["b"].Release(ctx, "train"); err != nil {
				t.Fatalf("Release: %v", err)
			}
			created := <-done
			stored, err := h.replicas["a"].Get(ctx, "train")
			if err != nil {
				t.Fatal(err)
			}
			if stored.Status.Phase != imperatorv1alpha1.FleetHoldReleased {
				t.Errorf("the hold is %s after a Release, want Released (Create answered %s)", stored.Status.Phase, created.Status.Phase)
			}
			eventually(t, 5*time.Second, "no spoke keeps a part", func() bool {
				return h.fleet.spokes["spoke-a"].held() == 0 && h.fleet.spokes["spoke-b"].held() == 0
			})
			eventually(t, 5*time.Second, "every part confirmed released", func() bool {
				fh, err := h.replicas["a"].Get(ctx, "train")
				return err == nil && len(unreleased(fh, time.Now())) == 0
			})
		})
	}
}

// TestAReleaseWhileASpokeIsOfflineReachesItWhenItReturns: spoke-b is
// offline when the hold is released; its part is released as soon as its
// stream is back, on either replica, and the name can be booked again only
// then.
func TestAReleaseWhileASpokeIsOfflineReachesItWhenItReturns(t *testing.T) {
	h := newTwoReplicas(t)
	ctx := context.Background()
	if fh, err := h.replicas["a"].Create(ctx, spreadSpec("train", 4)); err != nil || fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld {
		t.Fatalf("Create = %v, %v; want Held", fh, err)
	}
	h.fleet.move("spoke-b", "")
	released, err := h.replicas["a"].Release(ctx, "train")
	if err != nil {
		t.Fatal(err)
	}
	if got := unreleased(released, time.Now()); len(got) != 1 || got[0] != "spoke-b" {
		t.Errorf("unreleased after a release with spoke-b offline = %v, want [spoke-b]", got)
	}
	if _, err := h.replicas["b"].Create(ctx, spreadSpec("train", 2)); err == nil {
		t.Errorf("Create of the name while spoke-b may hold a part of the last booking succeeded, want ErrAlreadyExists")
	}
	h.fleet.move("spoke-b", "a") // it comes back on the other replica
	eventually(t, 5*time.Second, "spoke-b's part released", func() bool { return h.fleet.spokes["spoke-b"].held() == 0 })
}

// TestAPendingHoldWhoseCoordinatorStoppedIsFailedAndItsPartsReleased: the
// replica that wrote the hold stopped before deciding; once well past the
// deadline any replica fails it, and its held parts are released.
func TestAPendingHoldWhoseCoordinatorStoppedIsFailedAndItsPartsReleased(t *testing.T) {
	h := newTwoReplicas(t)
	ctx := context.Background()
	fh := &imperatorv1alpha1.FleetHold{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "imperator-system"},
		Spec:       imperatorv1alpha1.FleetHoldSpec{Count: 2, ValidUntil: metav1.NewTime(time.Now().Add(time.Hour)), MachineType: &imperatorv1alpha1.FleetHoldMachineType{Type: "compute-xlarge"}},
	}
	if err := h.api.Create(ctx, fh); err != nil {
		t.Fatal(err)
	}
	before := fh.DeepCopy()
	fh.Status.Phase = imperatorv1alpha1.FleetHoldPending
	fh.Status.Clusters = []imperatorv1alpha1.FleetHoldCluster{{Cluster: "spoke-a", Group: "team", Type: "compute-xlarge", Count: 1}}
	if err := h.api.Status().Patch(ctx, fh, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "spoke-a holds its part", func() bool { return h.fleet.spokes["spoke-a"].held() == 1 })
	// Pretend the hold is old: the coordinator's deadline passed long ago.
	later := New(Options{Client: h.api, Namespace: "imperator-system", Store: h.replicas["b"].opts.Store,
		Spokes: replicaSpokes{fleet: h.fleet, replica: "b"}, Deadline: 2 * time.Second, Clock: shiftedClock{by: time.Hour}})
	got, err := later.Get(ctx, "train")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != imperatorv1alpha1.FleetHoldFailed {
		t.Fatalf("the orphaned hold is %s, want Failed", got.Status.Phase)
	}
	eventually(t, 5*time.Second, "spoke-a's part released", func() bool { return h.fleet.spokes["spoke-a"].held() == 0 })
}

type shiftedClock struct{ by time.Duration }

func (s shiftedClock) Now() time.Time                  { return time.Now().Add(s.by) }
func (s shiftedClock) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

// TestANewHoldAvoidsASpokeThatJustRefused: spoke-b reports the most free
// units but refuses every hold. After it refused a part, the next hold
// goes to spoke-a and says why spoke-b was left out; a hold that fits only
// on spoke-b still asks it.
func TestANewHoldAvoidsASpokeThatJustRefused(t *testing.T) {
	h := newTwoReplicas(t)
	ctx := context.Background()
	st := h.replicas["a"].opts.Store
	st.ApplySnapshot("spoke-b", 1, &federationv1.Snapshot{Generation: 2, Machines: []*federationv1.Machine{{
		Name: "m-team", Group: "team", Types: []*federationv1.MachineType{unitType("compute-xlarge", 1, 3, 0)},
	}}})
	refusing := h.fleet.spokes["spoke-b"]
	refusing.mu.Lock()
	refusing.refuse = true
	refusing.mu.Unlock()
	sameCluster := func(name string, count int32) Spec {
		return Spec{Name: name, TTL: time.Hour, Request: capacity.Request{Type: "compute-xlarge", Count: count}}
	}

	first, err := h.replicas["a"].Create(ctx, sameCluster("first", 2))
	if err != nil || first.Status.Phase != imperatorv1alpha1.FleetHoldFailed || first.Status.Clusters[0].Cluster != "spoke-b" {
		t.Fatalf("first hold = %v, %v; want Failed on spoke-b, the most free", first, err)
	}
	second, err := h.replicas["b"].Create(ctx, sameCluster("second", 2))
	if err != nil {
		t.Fatal(err)
	}
	if second.Status.Phase != imperatorv1alpha1.FleetHoldHeld || second.Status.Clusters[0].Cluster != "spoke-a" {
		t.Errorf("second hold = %s on %s, want Held on spoke-a", second.Status.Phase, second.Status.Clusters[0].Cluster)
	}
	if !strings.Contains(second.Status.Message, "spoke-b (Refused NotEnoughFree") {
		t.Errorf("second hold's message = %q, want it to say why spoke-b was avoided", second.Status.Message)
	}
	third, err := h.replicas["a"].Create(ctx, sameCluster("third", 3))
	if err != nil {
		t.Fatal(err)
	}
	refusing.mu.Lock()
	asked := refusing.asked
	refusing.mu.Unlock()
	if third.Status.Clusters[0].Cluster != "spoke-b" || asked < 2 {
		t.Errorf("third hold, that fits only on spoke-b, went to %s (spoke-b asked %d times), want spoke-b asked again", third.Status.Clusters[0].Cluster, asked)
	}
}
