package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	refuse := func(reason RefusalReason) error { return &RefusedError{Reason: reason, Cluster: spoke.Cluster} }
	switch {
	case mc == nil || !mc.DeletionTimestamp.IsZero():
		return refuse(RefusedNotRegistered)
	case spoke.RegistrationUID == "":
		return refuse(RefusedNoRegistration)
	case string(mc.UID) != spoke.RegistrationUID:
		return refuse(RefusedEarlierRegistration)
	}
	if err := certificateAdmission(mc, spoke, now); err != nil {
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

// Admitter returns Admit reading the ManagedCluster from cached and, only
// when the cache could be stale in the certificate's favour (see
// mayBeNewerThan), again from live: a cluster that has just joined, or
// registered again, or a certificate just renewed, may not be in the cache
// yet. A refusal from live is remembered for the certificate's serial for a
// few seconds, so that a retired or deregistered certificate calling in a
// loop costs the API server at most one read per serial every
// refusalMemory. A context from CacheOnly never reaches live. Time is read
// from clk (the real clock when nil).
func Admitter(cached, live client.Reader, clk clock.PassiveClock) func(ctx context.Context, spoke identity.Spoke) error {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return newAdmitter(cached, live, clk).admit
}

type admitter struct {
	cached, live client.Reader
	clock        clock.PassiveClock
	// refused maps a serial to its rememberedRefusal.
	refused *lru.Cache
}

type rememberedRefusal struct {
	err   error
	until time.Time
}

func newAdmitter(cached, live client.Reader, clk clock.PassiveClock) *admitter {
	return &admitter{cached: cached, live: live, clock: clk, refused: lru.New(maxRememberedRefusals)}
}

func (a *admitter) admit(ctx context.Context, spoke identity.Spoke) error {
	now := a.clock.Now()
	var mc clusterv1.ManagedCluster
	switch err := a.cached.Get(ctx, client.ObjectKey{Name: spoke.Cluster}, &mc); {
	case err == nil, apierrors.IsNotFound(err):
		cachedMC := &mc
		if err != nil {
			cachedMC = nil
		}
		decision := Admission(cachedMC, spoke, now)
		if decision == nil || isCacheOnly(ctx) || !mayBeNewerThan(cachedMC, spoke) {
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
func mayBeNewerThan(mc *clusterv1.ManagedCluster, spoke identity.Spoke) bool {
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
	rec, err := certificateRecordOf(mc)
	if err != nil || rec == nil {
		return err == nil
	}
	known := spoke.Serial == rec.Current || spoke.Serial == rec.JoinSerial || spoke.Serial == rec.Replaced || slices.Contains(rec.Renewed, spoke.Serial)
	return !known && !spoke.NotBefore.Before(rec.JoinedAt)
}
