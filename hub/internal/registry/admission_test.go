package registry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/schemes"
)

const currentUID = "2f1d7e0a-6c55-4a8e-8d3b-7a9e0c1b2d3e"

// managedCluster is cluster a's ManagedCluster of registration currentUID.
func managedCluster(accepts bool, deleting bool) *clusterv1.ManagedCluster {
	mc := &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "a", UID: types.UID(currentUID)},
		Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: accepts},
	}
	if deleting {
		now := metav1.Now()
		mc.DeletionTimestamp = &now
		mc.Finalizers = []string{"example.com/keep"}
	}
	return mc
}

func TestAdmission(t *testing.T) {
	cases := map[string]struct {
		mc         *clusterv1.ManagedCluster
		spoke      identity.Spoke
		wantReason RefusalReason
		wantMsg    string
	}{
		"certificate of the current registration": {
			mc:    managedCluster(true, false),
			spoke: identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"certificate of an earlier registration": {
			mc:         managedCluster(true, false),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: "9c0b6a4e-0000-4000-8000-000000000001"},
			wantReason: RefusedEarlierRegistration,
			wantMsg:    `certificate was issued for an earlier registration of cluster "a"; join again with a new token`,
		},
		"certificate without registration": {
			mc:         managedCluster(true, false),
			spoke:      identity.Spoke{Cluster: "a"},
			wantReason: RefusedNoRegistration,
			wantMsg:    `certificate of cluster "a" names no registration (issued by an older hub); join again with a new token`,
		},
		"current registration not accepted": {
			mc:         managedCluster(false, false),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReason: RefusedNotAccepted,
			wantMsg:    `the hub does not accept cluster "a": its ManagedCluster has spec.hubAcceptsClient=false`,
		},
		"earlier registration of a cluster not accepted names the registration": {
			mc:         managedCluster(false, false),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: "other"},
			wantReason: RefusedEarlierRegistration,
			wantMsg:    `certificate was issued for an earlier registration of cluster "a"; join again with a new token`,
		},
		"cluster deregistered": {
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReason: RefusedNotRegistered,
			wantMsg:    `cluster "a" is not registered at the hub (its ManagedCluster is missing or being deleted); join again with a new token`,
		},
		"cluster being deregistered": {
			mc:         managedCluster(true, true),
			spoke:      identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReason: RefusedNotRegistered,
			wantMsg:    `cluster "a" is not registered at the hub (its ManagedCluster is missing or being deleted); join again with a new token`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Admission(tc.mc, tc.spoke, time.Now())
			var gotReason RefusalReason
			var refused *RefusedError
			if errors.As(err, &refused) {
				gotReason = refused.Reason
			} else if err != nil {
				t.Fatalf("Admission returned %v, want nil or a *RefusedError", err)
			}
			if gotReason != tc.wantReason {
				t.Errorf("refusal = %q, want %q (error %v)", gotReason, tc.wantReason, err)
			}
			if err != nil && err.Error() != tc.wantMsg {
				t.Errorf("message:\n got %s\nwant %s", err.Error(), tc.wantMsg)
			}
		})
	}
}

func TestAdmitterReadsLiveWhenTheCacheRefuses(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	failing := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewServiceUnavailable("hub API down")
	}}
	stale := managedCluster(true, false)
	stale.UID = "earlier"
	current := managedCluster(true, false)
	cases := map[string]struct {
		cached, live  client.Reader
		spoke         identity.Spoke
		wantRefusal   RefusalReason
		wantReadError bool
	}{
		"cache admits": {
			cached: fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			live:   fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(failing).Build(),
			spoke:  identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"cache has not seen the new registration yet": {
			cached: fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale).Build(),
			live:   fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			spoke:  identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"cache has not seen the cluster yet": {
			cached: fake.NewClientBuilder().WithScheme(scheme).Build(),
			live:   fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			spoke:  identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
		},
		"both refuse": {
			cached:      fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			live:        fake.NewClientBuilder().WithScheme(scheme).WithObjects(current.DeepCopy()).Build(),
			spoke:       identity.Spoke{Cluster: "a", RegistrationUID: "earlier"},
			wantRefusal: RefusedEarlierRegistration,
		},
		"live read fails": {
			cached:        fake.NewClientBuilder().WithScheme(scheme).Build(),
			live:          fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(failing).Build(),
			spoke:         identity.Spoke{Cluster: "a", RegistrationUID: currentUID},
			wantReadError: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := NewAdmitter(tc.cached, tc.live, nil).Admit(context.Background(), tc.spoke)
			var refused *RefusedError
			var gotRefusal RefusalReason
			if errors.As(err, &refused) {
				gotRefusal = refused.Reason
			}
			if diff := cmp.Diff(tc.wantRefusal, gotRefusal); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			if gotReadError := err != nil && refused == nil; gotReadError != tc.wantReadError {
				t.Errorf("read error = %v, want one: %t", err, tc.wantReadError)
			}
		})
	}
}

func TestAdmitterReadsTheAPIServerOnlyWhenTheCacheMayBeStaleInTheCertificatesFavour(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	joinedAt := created.Add(time.Minute)
	// withRecord is cluster a's current registration, created at created,
	// whose last Join issued serial "join" and a Renew since "current".
	withRecord := func() *clusterv1.ManagedCluster {
		mc := managedCluster(true, false)
		mc.CreationTimestamp = metav1.NewTime(created)
		mc.Annotations = map[string]string{CertificatesAnnotation: `{"current":"current","joinSerial":"join","joinedAt":"` + joinedAt.Format(time.RFC3339) + `","renewed":["current"]}`}
		return mc
	}
	renewedLive := withRecord()
	renewedLive.Annotations[CertificatesAnnotation] = `{"current":"fresh","joinSerial":"join","joinedAt":"` + joinedAt.Format(time.RFC3339) + `","renewed":["current","fresh"]}`
	cases := map[string]struct {
		cached, live  []client.Object
		spoke         identity.Spoke
		cacheOnly     bool
		calls         int
		wantLiveReads int
		wantRefusal   RefusalReason
	}{
		"deregistered cluster's certificate calling in a loop": {
			spoke:         identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "current", NotBefore: joinedAt},
			calls:         50,
			wantLiveReads: 1,
			wantRefusal:   RefusedNotRegistered,
		},
		"certificate retired by a Renew the cache shows": {
			cached:      []client.Object{withRecord()},
			live:        []client.Object{withRecord()},
			spoke:       identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "join", NotBefore: joinedAt},
			calls:       50,
			wantRefusal: RefusedReplacedCertificate,
		},
		"certificate of a registration older than the cached one": {
			cached:      []client.Object{withRecord()},
			live:        []client.Object{withRecord()},
			spoke:       identity.Spoke{Cluster: "a", RegistrationUID: "earlier", Serial: "old", NotBefore: created.Add(-time.Hour)},
			calls:       50,
			wantRefusal: RefusedEarlierRegistration,
		},
		"certificate of a cluster the cache shows not accepted": {
			cached:      []client.Object{managedCluster(false, false)},
			live:        []client.Object{managedCluster(true, false)},
			spoke:       identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "current"},
			calls:       50,
			wantRefusal: RefusedNotAccepted,
		},
		"certificate renewed since the cache's record is admitted from the API server": {
			cached:        []client.Object{withRecord()},
			live:          []client.Object{renewedLive},
			spoke:         identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "fresh", NotBefore: joinedAt.Add(time.Hour)},
			calls:         3,
			wantLiveReads: 3,
		},
		"health check of a cluster the cache has not seen reads nothing live": {
			live:        []client.Object{withRecord()},
			spoke:       identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "current", NotBefore: joinedAt},
			cacheOnly:   true,
			calls:       50,
			wantRefusal: RefusedNotRegistered,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var liveReads int
			counting := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				liveReads++
				return c.Get(ctx, key, obj, opts...)
			}}
			cached := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.cached...).Build()
			live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.live...).WithInterceptorFuncs(counting).Build()
			admit := NewAdmitter(cached, live, clocktesting.NewFakePassiveClock(joinedAt.Add(2*time.Hour))).Admit
			ctx := context.Background()
			if tc.cacheOnly {
				ctx = CacheOnly(ctx)
			}
			for i := range tc.calls {
				err := admit(ctx, tc.spoke)
				var refused *RefusedError
				var gotRefusal RefusalReason
				if errors.As(err, &refused) {
					gotRefusal = refused.Reason
				} else if err != nil {
					t.Fatalf("call %d: %v, want nil or a refusal", i, err)
				}
				if gotRefusal != tc.wantRefusal {
					t.Fatalf("call %d: refusal %q, want %q", i, gotRefusal, tc.wantRefusal)
				}
			}
			if liveReads != tc.wantLiveReads {
				t.Errorf("%d calls read the API server %d times, want %d", tc.calls, liveReads, tc.wantLiveReads)
			}
		})
	}
}

func TestAdmitterReadsARefusedCertificateAgainAfterItsMemory(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	var liveReads int
	counting := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		liveReads++
		return c.Get(ctx, key, obj, opts...)
	}}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	live := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(counting).Build()
	admit := NewAdmitter(fake.NewClientBuilder().WithScheme(scheme).Build(), live, clk).Admit
	spoke := identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "s1"}
	for range 3 {
		_ = admit(context.Background(), spoke)
	}
	clk.SetTime(clk.Now().Add(refusalMemory))
	// The cluster registered meanwhile: the API server admits now.
	if err := live.Create(context.Background(), managedCluster(true, false)); err != nil {
		t.Fatal(err)
	}
	if err := admit(context.Background(), spoke); err != nil {
		t.Errorf("after %s the certificate is still refused: %v", refusalMemory, err)
	}
	if liveReads != 2 {
		t.Errorf("API server reads = %d, want 2 (one per refusal memory)", liveReads)
	}
}

// laggingCache is an informer cache that shows what its Reader holds: a
// snapshot of the API server until the test swaps in a later one.
type laggingCache struct{ client.Reader }

// snapshotOf is a reader holding cluster a's ManagedCluster as live has it
// now, resourceVersion included.
func snapshotOf(t *testing.T, live client.Reader) client.Reader {
	t.Helper()
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	var mc clusterv1.ManagedCluster
	if err := live.Get(context.Background(), client.ObjectKey{Name: "a"}, &mc); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(&mc).Build()
}

func TestAdmitterRefusesACertificateItsOwnJoinOrRenewRetiredWhileTheCacheShowsTheRecordBefore(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	joinedAt := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := joinedAt.Add(time.Hour)
	joined := identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "joined", NotBefore: joinedAt}
	lost := identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "lost", NotBefore: now.Add(-time.Minute)}
	cases := map[string]struct {
		// before are the writes the cache shows; retire is the write this
		// replica answers, which retires the certificate retired.
		before      []func(client.Client) (string, error)
		retire      func(client.Client) (string, error)
		retired     identity.Spoke
		current     identity.Spoke
		wantRefusal RefusalReason
	}{
		"re-join of the registration": {
			retire: func(c client.Client) (string, error) {
				return RecordJoin(context.Background(), c, "a", currentUID, "rejoined", "key-rejoined", now)
			},
			retired:     joined,
			current:     identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "rejoined", NotBefore: now},
			wantRefusal: RefusedEarlierRegistration,
		},
		"Renew retried by the replaced certificate, retiring the lost one": {
			before: []func(client.Client) (string, error){func(c client.Client) (string, error) {
				return RecordRenewal(context.Background(), c, "a", currentUID, joined, "lost", "key-lost", now.Add(-time.Minute), 10*time.Minute)
			}},
			retire: func(c client.Client) (string, error) {
				return RecordRenewal(context.Background(), c, "a", currentUID, joined, "renewed", "key-renewed", now, 10*time.Minute)
			},
			retired:     lost,
			current:     identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "renewed", NotBefore: now},
			wantRefusal: RefusedReplacedCertificate,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var liveReads int
			counting := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				liveReads++
				return c.Get(ctx, key, obj, opts...)
			}}
			mc := managedCluster(true, false)
			mc.CreationTimestamp = metav1.NewTime(joinedAt.Add(-time.Hour))
			live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc).WithInterceptorFuncs(counting).Build()
			if _, err := RecordJoin(ctx, live, "a", currentUID, joined.Serial, "key-joined", joined.NotBefore); err != nil {
				t.Fatal(err)
			}
			for _, write := range tc.before {
				if _, err := write(live); err != nil {
					t.Fatal(err)
				}
			}
			cache := &laggingCache{Reader: snapshotOf(t, live)}
			admitter := NewAdmitter(cache, live, clocktesting.NewFakePassiveClock(now))
			if err := admitter.Admit(ctx, tc.retired); err != nil {
				t.Fatalf("before the write, the cache admits the certificate it retires: %v", err)
			}

			written, err := tc.retire(live)
			if err != nil {
				t.Fatal(err)
			}
			admitter.Wrote("a", written)
			liveReads = 0
			for i := range 5 {
				if got := refusalOf(admitter.Admit(ctx, tc.retired)); got != tc.wantRefusal {
					t.Fatalf("call %d of the retired certificate after the write, cache still before it: refusal %q, want %q", i, got, tc.wantRefusal)
				}
			}
			if liveReads != 1 {
				t.Errorf("5 calls of the retired certificate read the API server %d times, want 1", liveReads)
			}
			for _, spoke := range []identity.Spoke{tc.retired, tc.current} {
				if err := admitter.Admit(CacheOnly(ctx), spoke); !errors.Is(err, ErrCacheBehindWrite) {
					t.Errorf("health check of %s while the cache is behind: %v, want ErrCacheBehindWrite", spoke.Serial, err)
				}
			}
			if err := admitter.Admit(ctx, tc.current); err != nil {
				t.Errorf("the certificate the write made current is refused while the cache is behind: %v", err)
			}
			if liveReads != 2 {
				t.Errorf("API server reads while the cache is behind = %d, want 2 (one per certificate)", liveReads)
			}

			cache.Reader = snapshotOf(t, live)
			liveReads = 0
			for range 3 {
				if err := admitter.Admit(ctx, tc.current); err != nil {
					t.Errorf("the current certificate is refused once the cache shows the write: %v", err)
				}
				if err := admitter.Admit(CacheOnly(ctx), tc.current); err != nil {
					t.Errorf("the current certificate's health check is refused once the cache shows the write: %v", err)
				}
				if got := refusalOf(admitter.Admit(CacheOnly(ctx), tc.retired)); got != tc.wantRefusal {
					t.Errorf("health check of the retired certificate once the cache shows the write: refusal %q, want %q", got, tc.wantRefusal)
				}
			}
			if liveReads != 0 {
				t.Errorf("once the cache shows the write, admissions read the API server %d times, want 0", liveReads)
			}
			if n := admitter.writes.Len(); n != 0 {
				t.Errorf("%d writes remembered once the cache shows them, want 0", n)
			}
		})
	}
}

func TestAdmitterForgetsItsWritesWithinBounds(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	stale := managedCluster(true, false)
	stale.ResourceVersion = "10"
	spoke := identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "s"}
	newAdmitter := func(clk *clocktesting.FakePassiveClock) (*Admitter, *int) {
		var liveReads int
		counting := interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			liveReads++
			return apierrors.NewServiceUnavailable("hub API down")
		}}
		cached := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stale.DeepCopy()).Build()
		live := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(counting).Build()
		return NewAdmitter(cached, live, clk), &liveReads
	}

	t.Run("a cache that lags longer than the allowance is trusted again", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(time.Now())
		admitter, liveReads := newAdmitter(clk)
		admitter.Wrote("a", "11")
		if err := admitter.Admit(context.Background(), spoke); err == nil || *liveReads != 1 {
			t.Fatalf("while the cache is behind: %v after %d API reads, want the API server's error after 1", err, *liveReads)
		}
		clk.SetTime(clk.Now().Add(cacheLagAllowance))
		if err := admitter.Admit(context.Background(), spoke); err != nil || *liveReads != 1 {
			t.Errorf("after %s: %v after %d API reads, want the cache's admission after 1", cacheLagAllowance, err, *liveReads)
		}
		if n := admitter.writes.Len(); n != 0 {
			t.Errorf("%d writes remembered after the allowance, want 0", n)
		}
	})
	t.Run("two writes answered out of order wait for the later one", func(t *testing.T) {
		admitter, _ := newAdmitter(clocktesting.NewFakePassiveClock(time.Now()))
		admitter.Wrote("a", "12")
		admitter.Wrote("a", "11")
		if !admitter.cacheBehind("a", &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "11"}}, time.Now()) {
			t.Error("a cache at the earlier write is trusted")
		}
		if admitter.cacheBehind("a", &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "13"}}, time.Now()) {
			t.Error("a cache past the later write is not trusted")
		}
	})
	t.Run("writes of more clusters than the bound", func(t *testing.T) {
		admitter, _ := newAdmitter(clocktesting.NewFakePassiveClock(time.Now()))
		for i := range maxPendingWrites + 100 {
			admitter.Wrote(fmt.Sprintf("cluster-%d", i), "11")
		}
		if n := admitter.writes.Len(); n != maxPendingWrites {
			t.Errorf("%d writes remembered, want the bound %d", n, maxPendingWrites)
		}
	})
}

// refusalOf is err's refusal reason, "" for nil or another error.
func refusalOf(err error) RefusalReason {
	var refused *RefusedError
	if errors.As(err, &refused) {
		return refused.Reason
	}
	return ""
}
