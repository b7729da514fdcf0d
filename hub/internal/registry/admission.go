package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/identity"
)

// RefusalReason says why Admit refuses a spoke certificate; the hub sends
// it to the spoke agent with the refusal.
type RefusalReason = identity.RefusalReason

// The reasons, as identity defines them for both sides.
const (
	RefusedNotRegistered       = identity.RefusedNotRegistered
	RefusedNotAccepted         = identity.RefusedNotAccepted
	RefusedEarlierRegistration = identity.RefusedEarlierRegistration
	RefusedNoRegistration      = identity.RefusedNoRegistration
	RefusedReplacedCertificate = identity.RefusedReplacedCertificate
)

// RefusedError is the error with which Admit refuses a spoke certificate.
// Its message says what the spoke's operator must do.
type RefusedError struct {
	Reason  RefusalReason
	Cluster string
	// detail, when set, says more about the refusal.
	detail string
}

func (e *RefusedError) Error() string {
	if e.detail != "" {
		return e.message() + " (" + e.detail + ")"
	}
	return e.message()
}

func (e *RefusedError) message() string {
	switch e.Reason {
	case RefusedNotRegistered:
		return fmt.Sprintf("cluster %q is not registered at the hub (its ManagedCluster is missing or being deleted); join again with a new token", e.Cluster)
	case RefusedNotAccepted:
		return fmt.Sprintf("the hub does not accept cluster %q: its ManagedCluster has spec.hubAcceptsClient=false", e.Cluster)
	case RefusedEarlierRegistration:
		return fmt.Sprintf("certificate was issued for an earlier registration of cluster %q; join again with a new token", e.Cluster)
	case RefusedReplacedCertificate:
		return fmt.Sprintf("certificate of cluster %q was replaced by a renewed one and is retired; use the renewed certificate", e.Cluster)
	case RefusedNoRegistration:
		return fmt.Sprintf("certificate of cluster %q names no registration (issued by an older hub); join again with a new token", e.Cluster)
	default:
		return fmt.Sprintf("the hub refuses cluster %q: %s", e.Cluster, e.Reason)
	}
}

// Admit decides whether spoke, the identity of a verified client
// certificate, may talk to the hub: its cluster's ManagedCluster must exist,
// not be being deleted, accept its client, and be the registration the
// certificate was issued for. It returns nil, a *RefusedError, or the error
// that kept it from reading the ManagedCluster.
// The certificate's validity is judged at clk's now (the real clock when nil).
func Admit(ctx context.Context, r client.Reader, clk clock.PassiveClock, spoke identity.Spoke) error {
	if clk == nil {
		clk = clock.RealClock{}
	}
	var mc clusterv1.ManagedCluster
	if err := r.Get(ctx, client.ObjectKey{Name: spoke.Cluster}, &mc); err != nil {
		if apierrors.IsNotFound(err) {
			return Admission(nil, spoke, clk.Now())
		}
		return fmt.Errorf("reading ManagedCluster %q: %w", spoke.Cluster, err)
	}
	return Admission(&mc, spoke, clk.Now())
}

// Admission is Admit's decision at now for the cluster's ManagedCluster mc
// (nil when it does not exist): the registration must be the certificate's,
// the certificate one the registration's record (CertificatesAnnotation)
// still accepts, and the cluster accepted.
func Admission(mc *clusterv1.ManagedCluster, spoke identity.Spoke, now time.Time) error {
	return admission(mc, certificateRecordOf, spoke, now)
}

// admission is Admission reading mc's certificate record with recordOf.
func admission(mc *clusterv1.ManagedCluster, recordOf func(*clusterv1.ManagedCluster) (*CertificateRecord, error), spoke identity.Spoke, now time.Time) error {
	refuse := func(reason RefusalReason) error { return &RefusedError{Reason: reason, Cluster: spoke.Cluster} }
	switch {
	case mc == nil || !mc.DeletionTimestamp.IsZero():
		return refuse(RefusedNotRegistered)
	case spoke.RegistrationUID == "":
		return refuse(RefusedNoRegistration)
	case string(mc.UID) != spoke.RegistrationUID:
		return refuse(RefusedEarlierRegistration)
	}
	rec, err := recordOf(mc)
	if err := recordAdmission(rec, err, spoke, now); err != nil {
		return err
	}
	switch {
	case !mc.Spec.HubAcceptsClient:
		return refuse(RefusedNotAccepted)
	default:
		return nil
	}
}

// cacheOnlyKey marks a context whose admission reads the cache only.
type cacheOnlyKey struct{}

// CacheOnly returns ctx for an admission that must not reach the hub
// cluster's API server (Admitter reads its cache only): calls any verified
// certificate could repeat cheaply, such as health checks and reflection.
func CacheOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, cacheOnlyKey{}, true)
}

func isCacheOnly(ctx context.Context) bool {
	only, _ := ctx.Value(cacheOnlyKey{}).(bool)
	return only
}

// Bounds of Admitter's memory of refusals.
const (
	// refusalMemory is how long a certificate the API server itself
	// refused is refused again without reading it: the refusals are final
	// (a registration does not come back, a retired serial is not current
	// again) but for hubAcceptsClient=false, which the cache then sees.
	refusalMemory = 10 * time.Second
	// maxRememberedRefusals bounds the serials remembered; the least
	// recently refused is forgotten first.
	maxRememberedRefusals = 4096
)

// Bounds of Admitter's memory of its own writes (Wrote).
const (
	// cacheLagAllowance is how long Admitter waits at most for its cache to
	// show a write: far longer than an informer's watch lag (milliseconds,
	// seconds while the API server is loaded). A cache that lags longer is
	// trusted again; a write then admits nothing new before the cache shows
	// it, but a certificate it retired is admitted from the stale cache
	// until then.
	cacheLagAllowance = 30 * time.Second
	// maxPendingWrites bounds the clusters remembered; the least recently
	// written is forgotten first. Entries go as soon as the cache shows the
	// write, so this many are held only when more than 16,384 Joins and
	// Renews are answered within one cache lag.
	maxPendingWrites = 16384
)

// ErrCacheBehindWrite is why Admit does not decide a CacheOnly admission of
// a cluster whose registration this replica wrote and its cache does not
// show yet. It is no refusal: the caller retries (the server answers
// Unavailable), and within the cache's lag it is decided.
var ErrCacheBehindWrite = errors.New("the hub's cache does not show its latest write of the cluster's registration yet; retry in a moment")

// Admitter is Admit reading the ManagedCluster from a cache and, only when
// the cache could be stale in the certificate's favour, again from the API
// server (live):
//
//   - a cluster that has just joined, or registered again, or a certificate
//     just renewed, may not be in the cache yet (see mayBeNewerThan);
//   - after a write of a cluster's certificate record by this replica (a
//     Join or Renew, reported with Wrote before its answer goes out), the
//     cache may still show the record before it, which admits the
//     certificates that write retired. Until the cache shows the write
//     (or for cacheLagAllowance at most), that cluster is decided live.
//
// A refusal from live is remembered for the certificate's serial for
// refusalMemory, so that a retired or deregistered certificate calling in a
// loop costs the API server at most one read per serial every
// refusalMemory, also while the cache is behind a write. A context from
// CacheOnly never reaches live.
//
// What this guarantees once a Join or Renew that retires a certificate has
// answered (see also docs/security.md):
//   - on the replica that answered, every admission after the answer
//     refuses the retired certificate: a Report stream or Renew it opens,
//     a query-API call, and any message (Snapshot, Delta, Heartbeat, hold
//     answer) on a Report stream it opened before, which ends that stream
//     unapplied; a health check or reflection call
//     (CacheOnly) gets ErrCacheBehindWrite until the cache shows the write,
//     then the refusal;
//   - on another replica, the same once that replica's cache shows the
//     write: within its watch lag, which nothing this replica does can
//     shorten;
//   - a Report stream already open is admitted again at each message it
//     sends and before each hold request sent on it, not when the
//     ManagedCluster changes: a silent one stays open, unable to change
//     anything or learn of a hold, until its cluster's new stream opens on
//     the same replica (which replaces it) or its connection reaches
//     --max-connection-age. Deleting
//     the ManagedCluster ends it at once.
type Admitter struct {
	cached, live client.Reader
	clock        clock.PassiveClock
	// refused maps a serial to its rememberedRefusal.
	refused *lru.Cache
	// writesMu makes the check and removal of a pendingWrite atomic
	// against Wrote.
	writesMu sync.Mutex
	// writes maps a cluster to the pendingWrite its cache must show.
	writes *lru.Cache
	// records maps a cluster to the parsedRecord of the certificate
	// record its cached ManagedCluster carries: every message of every
	// Report stream is admitted, and decoding the record's JSON each time
	// was most of the cost.
	records *lru.Cache
}

// parsedRecord is a certificate record as read from its annotation's
// value raw (rec and err as certificateRecordOf returns them). Records are
// only read once parsed, never changed.
type parsedRecord struct {
	raw string
	rec *CertificateRecord
	err error
}

type rememberedRefusal struct {
	err   error
	until time.Time
}

// pendingWrite is a write of a cluster's ManagedCluster that the cache must
// show (its resourceVersion or a later one) before it decides for the
// cluster; it is forgotten at until.
type pendingWrite struct {
	resourceVersion string
	until           time.Time
}

// NewAdmitter returns an Admitter reading cached first and live when needed;
// time is read from clk (the real clock when nil).
func NewAdmitter(cached, live client.Reader, clk clock.PassiveClock) *Admitter {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Admitter{cached: cached, live: live, clock: clk, refused: lru.New(maxRememberedRefusals), writes: lru.New(maxPendingWrites), records: lru.New(maxParsedRecords)}
}

// maxParsedRecords bounds the records an Admitter keeps parsed: one per
// cluster of a large fleet, the least recently admitted forgotten first.
const maxParsedRecords = 16384

// recordOf is certificateRecordOf for a cached ManagedCluster, parsed once
// per value of its annotation.
func (a *Admitter) recordOf(mc *clusterv1.ManagedCluster) (*CertificateRecord, error) {
	raw, ok := mc.Annotations[CertificatesAnnotation]
	if !ok {
		return nil, nil
	}
	if v, ok := a.records.Get(mc.Name); ok {
		if p := v.(parsedRecord); p.raw == raw {
			return p.rec, p.err
		}
	}
	rec, err := certificateRecordOf(mc)
	a.records.Add(mc.Name, parsedRecord{raw: raw, rec: rec, err: err})
	return rec, err
}

// Wrote tells a that this replica wrote cluster's ManagedCluster (its
// certificate record), which now has resourceVersion: until the cache shows
// it, a decides the cluster live. Call it after the write and before the
// answer that depends on it goes out (join.Service.RecordWritten).
func (a *Admitter) Wrote(cluster, resourceVersion string) {
	if cluster == "" || resourceVersion == "" {
		return
	}
	a.writesMu.Lock()
	defer a.writesMu.Unlock()
	if v, ok := a.writes.Get(cluster); ok {
		// Two writes answered out of order: wait for the later one.
		if prev := v.(pendingWrite).resourceVersion; resourceVersionShows(prev, resourceVersion) {
			resourceVersion = prev
		}
	}
	a.writes.Add(cluster, pendingWrite{resourceVersion: resourceVersion, until: a.clock.Now().Add(cacheLagAllowance)})
}

// cacheBehind reports whether the cache, which shows mc for cluster (nil:
// nothing), does not show a write of this replica yet. A write the cache
// shows, or one waited for long enough, is forgotten.
func (a *Admitter) cacheBehind(cluster string, mc *clusterv1.ManagedCluster, now time.Time) bool {
	a.writesMu.Lock()
	defer a.writesMu.Unlock()
	v, ok := a.writes.Get(cluster)
	if !ok {
		return false
	}
	w := v.(pendingWrite)
	if !now.Before(w.until) || (mc != nil && resourceVersionShows(mc.ResourceVersion, w.resourceVersion)) {
		a.writes.Remove(cluster)
		return false
	}
	return true
}

// resourceVersionShows reports whether an object at resourceVersion seen
// includes the write that made written: the same, or a later one of the
// same object. Resource versions are compared as the API server defines
// them (integers); ones that are not are only equal or not.
func resourceVersionShows(seen, written string) bool {
	order, err := resourceversion.CompareResourceVersion(seen, written)
	if err != nil {
		return seen == written
	}
	return order >= 0
}

// Admit decides whether spoke may talk to the hub, as the package-level
// Admit does: nil, a *RefusedError, or the error that kept it from
// deciding (ErrCacheBehindWrite for a CacheOnly ctx).
func (a *Admitter) Admit(ctx context.Context, spoke identity.Spoke) error {
	now := a.clock.Now()
	var mc clusterv1.ManagedCluster
	switch err := a.cached.Get(ctx, client.ObjectKey{Name: spoke.Cluster}, &mc); {
	case err == nil, apierrors.IsNotFound(err):
		cachedMC := &mc
		if err != nil {
			cachedMC = nil
		}
		if a.cacheBehind(spoke.Cluster, cachedMC, now) {
			if isCacheOnly(ctx) {
				// Neither answer the cache could give is right: it would
				// admit a certificate this replica has just said is
				// retired, and a refusal is final to an agent (it joins
				// again), wrong for the certificate the write made
				// current. Health checks and reflection retry; within the
				// cache's lag they are decided.
				return fmt.Errorf("admitting cluster %q from the cache: %w", spoke.Cluster, ErrCacheBehindWrite)
			}
			break
		}
		decision := admission(cachedMC, a.recordOf, spoke, now)
		if decision == nil || isCacheOnly(ctx) || !mayBeNewerThan(cachedMC, a.recordOf, spoke) {
			return decision
		}
	case isCacheOnly(ctx):
		return fmt.Errorf("reading ManagedCluster %q from the cache: %w", spoke.Cluster, err)
	}
	if v, ok := a.refused.Get(spoke.Serial); ok {
		if r := v.(rememberedRefusal); now.Before(r.until) {
			return r.err
		}
		a.refused.Remove(spoke.Serial)
	}
	err := Admit(ctx, a.live, a.clock, spoke)
	var refused *RefusedError
	if errors.As(err, &refused) && spoke.Serial != "" {
		a.refused.Add(spoke.Serial, rememberedRefusal{err: err, until: now.Add(refusalMemory)})
	}
	return err
}

// certificateBackdating is how far before its issue a certificate's
// NotBefore may lie (pki backdates by five minutes for clock skew), and a
// second of NotBefore's precision.
const certificateBackdating = 5*time.Minute + time.Second

// mayBeNewerThan reports whether spoke's certificate may be of a
// registration, a Join or a Renew that the cached ManagedCluster mc (nil:
// none cached) does not show yet, so that only the live one can admit it:
// nothing cached, a cached one being deleted (it may be registered again),
// or a certificate whose serial the cached record does not know and that
// was not issued before what the cache shows (a later registration's
// certificates are issued after the ManagedCluster was created; a later
// Join's or Renew's, not before the last Join the record holds).
func mayBeNewerThan(mc *clusterv1.ManagedCluster, recordOf func(*clusterv1.ManagedCluster) (*CertificateRecord, error), spoke identity.Spoke) bool {
	if mc == nil || !mc.DeletionTimestamp.IsZero() {
		return true
	}
	if spoke.RegistrationUID == "" {
		return false
	}
	if string(mc.UID) != spoke.RegistrationUID {
		// Second precision on both sides, and a certificate may be
		// backdated a little: only one clearly older than the cached
		// registration is known to be of an earlier one.
		return !spoke.NotBefore.Before(mc.CreationTimestamp.Add(-certificateBackdating))
	}
	if !mc.Spec.HubAcceptsClient {
		// The cache follows a change of hubAcceptsClient within moments;
		// the spoke retries.
		return false
	}
	rec, err := recordOf(mc)
	if err != nil || rec == nil {
		return err == nil
	}
	known := spoke.Serial == rec.Current || spoke.Serial == rec.JoinSerial || spoke.Serial == rec.Replaced || slices.Contains(rec.Renewed, spoke.Serial)
	return !known && !spoke.NotBefore.Before(rec.JoinedAt)
}
