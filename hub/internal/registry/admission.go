package registry

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
func Admit(ctx context.Context, r client.Reader, spoke identity.Spoke) error {
	var mc clusterv1.ManagedCluster
	if err := r.Get(ctx, client.ObjectKey{Name: spoke.Cluster}, &mc); err != nil {
		if apierrors.IsNotFound(err) {
			return Admission(nil, spoke, time.Now())
		}
		return fmt.Errorf("reading ManagedCluster %q: %w", spoke.Cluster, err)
	}
	return Admission(&mc, spoke, time.Now())
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

// Admitter returns Admit reading the ManagedCluster from cached and, when
// that refuses, again from live: a cluster that has just joined, or
// registered again, may not be in the cache yet.
func Admitter(cached, live client.Reader) func(ctx context.Context, spoke identity.Spoke) error {
	return func(ctx context.Context, spoke identity.Spoke) error {
		if err := Admit(ctx, cached, spoke); err == nil {
			return nil
		}
		return Admit(ctx, live, spoke)
	}
}
