package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/identity"
)

// CertificatesAnnotation is, on a ManagedCluster, the hub's record of the
// spoke certificates of its registration that are still good (a
// CertificateRecord in JSON). Every Join and Renew writes it; Admission
// reads it.
//
// It is an annotation on the ManagedCluster, not an object of its own,
// because it is the registration's state: it goes when the ManagedCluster
// goes, it is written with the ManagedCluster's resourceVersion as
// optimistic lock (two replicas cannot both make their certificate
// current), and Admission reads it from the object it reads anyway.
const CertificatesAnnotation = imperatorv1alpha1.Prefix + "certificates"

// CertificateRecord says which certificates of a registration the hub
// accepts: the one the last Join or Renew issued, and, until ReplacedUntil,
// the one that Renew replaced. Every other certificate of the registration
// is retired: one issued before the last Join (JoinedAt) was of an earlier
// join; one issued since was replaced by a later Renew.
//
// A ManagedCluster without a record (registered by a hub that did not keep
// one) accepts every certificate of its registration until its next Join
// or Renew.
type CertificateRecord struct {
	// Current is the serial (identity.SerialOf) of the newest certificate.
	Current string `json:"current"`
	// CurrentKey is the KeyDigest of Current's public key. An agent that
	// holds that key but lost the certificate (an answer lost, or not
	// stored, and a restart past the overlap) renews with a retired
	// certificate of the registration and a CSR of that key: the CSR's
	// signature proves it holds the current key (RecordRenewal).
	CurrentKey string `json:"currentKey,omitempty"`
	// JoinSerial and JoinedAt are the serial and NotBefore of the
	// certificate the last Join issued.
	JoinSerial string    `json:"joinSerial"`
	JoinedAt   time.Time `json:"joinedAt"`
	// Replaced is the serial of the certificate the last Renew replaced;
	// it stays good until ReplacedUntil (the renewal overlap) so that the
	// spoke can move its stream to the new certificate.
	Replaced      string     `json:"replaced,omitempty"`
	ReplacedUntil *time.Time `json:"replacedUntil,omitempty"`
	// Renewed are the serials the last renewals since the last Join issued
	// (at most maxRenewedSerials), so that a retired one is told apart from
	// one of an earlier join also within the second of NotBefore's
	// precision.
	Renewed []string `json:"renewed,omitempty"`
}

// maxRenewedSerials bounds CertificateRecord.Renewed.
const maxRenewedSerials = 8

// certificateRecordOf reads the record of mc; nil when it has none.
func certificateRecordOf(mc *clusterv1.ManagedCluster) (*CertificateRecord, error) {
	raw, ok := mc.Annotations[CertificatesAnnotation]
	if !ok {
		return nil, nil
	}
	var rec CertificateRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("reading annotation %s of ManagedCluster %q: %w", CertificatesAnnotation, mc.Name, err)
	}
	if rec.Current == "" {
		return nil, fmt.Errorf("reading annotation %s of ManagedCluster %q: current serial is empty", CertificatesAnnotation, mc.Name)
	}
	return &rec, nil
}

// recordAdmission refuses spoke's certificate when rec, the certificate
// record of its registration's ManagedCluster (err: it could not be read),
// retires it; see CertificateRecord.
func recordAdmission(rec *CertificateRecord, err error, spoke identity.Spoke, now time.Time) error {
	if err != nil {
		// Fail closed: an unreadable record admits nobody, and the next
		// Join writes a good one.
		return &RefusedError{Reason: RefusedEarlierRegistration, Cluster: spoke.Cluster, detail: err.Error()}
	}
	switch {
	case rec == nil, spoke.Serial == rec.Current:
		return nil
	case spoke.Serial == rec.Replaced && rec.ReplacedUntil != nil && now.Before(*rec.ReplacedUntil):
		return nil
	case spoke.Serial == rec.JoinSerial, slices.Contains(rec.Renewed, spoke.Serial), spoke.NotBefore.After(rec.JoinedAt):
		// Issued by the last Join or since: a Renew replaced it.
		return &RefusedError{Reason: RefusedReplacedCertificate, Cluster: spoke.Cluster}
	default:
		// Issued before the last Join (or in its second: NotBefore has
		// second precision, and the safer guess is the one that makes the
		// agent join again).
		return &RefusedError{Reason: RefusedEarlierRegistration, Cluster: spoke.Cluster}
	}
}

// KeyDigest identifies a public key by the SHA-256 of its DER
// SubjectPublicKeyInfo (x509.Certificate and x509.CertificateRequest
// RawSubjectPublicKeyInfo), in hex.
func KeyDigest(rawSubjectPublicKeyInfo []byte) string {
	sum := sha256.Sum256(rawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}

// RecordJoin makes the certificate (serial, notBefore, of the key with
// KeyDigest key) that a Join issued for registration uid of cluster its
// only good one: every certificate issued for the name before is retired.
// It returns the resourceVersion of the ManagedCluster it wrote, for
// Admitter.Wrote.
func RecordJoin(ctx context.Context, c client.Client, cluster string, uid types.UID, serial, key string, notBefore time.Time) (string, error) {
	return updateRecord(ctx, c, cluster, uid, func(_ *clusterv1.ManagedCluster, _ *CertificateRecord) (*CertificateRecord, error) {
		return &CertificateRecord{Current: serial, CurrentKey: key, JoinSerial: serial, JoinedAt: notBefore.UTC()}, nil
	})
}

// RecordRenewal makes the certificate newSerial (of the key with KeyDigest
// newKey) that a Renew issued at now the current one of cluster's
// registration uid, and keeps the renewed certificate replaced good for
// overlap. Only the current certificate may renew, or, within its overlap,
// the one the last Renew replaced: that is the agent retrying a Renew whose
// answer it lost (or could not store); the certificate that Renew issued is
// then retired unused, and the overlap is not extended, so that a copy of an
// old key cannot keep itself alive.
//
// Past the overlap, a retired certificate of the registration may still
// renew for the current certificate's own key (CurrentKey), while the
// cluster is accepted: the agent stores the key of its next certificate
// before it calls Renew, so an agent that lost the answer, or restarted
// before it could store the certificate, and came back after the overlap
// holds that key and proves it with the CSR's signature. Only the holder of
// the current key gets a certificate this way, which it could get anyway;
// the current certificate is then the replaced one, for the overlap.
//
// It returns the resourceVersion of the ManagedCluster it wrote, for
// Admitter.Wrote.
func RecordRenewal(ctx context.Context, c client.Client, cluster string, uid types.UID, replaced identity.Spoke, newSerial, newKey string, now time.Time, overlap time.Duration) (string, error) {
	return updateRecord(ctx, c, cluster, uid, func(mc *clusterv1.ManagedCluster, old *CertificateRecord) (*CertificateRecord, error) {
		rec := &CertificateRecord{Current: newSerial, CurrentKey: newKey, Replaced: replaced.Serial, ReplacedUntil: ptrTo(now.Add(overlap).UTC())}
		switch {
		case old == nil:
			// First record of a registration from an older hub: the
			// renewed certificate counts as joined.
			rec.JoinSerial, rec.JoinedAt = replaced.Serial, replaced.NotBefore.UTC()
		case old.Current == replaced.Serial:
			rec.JoinSerial, rec.JoinedAt = old.JoinSerial, old.JoinedAt
		case old.Replaced == replaced.Serial && old.ReplacedUntil != nil && now.Before(*old.ReplacedUntil):
			rec.JoinSerial, rec.JoinedAt = old.JoinSerial, old.JoinedAt
			rec.ReplacedUntil = old.ReplacedUntil
		case old.CurrentKey != "" && newKey == old.CurrentKey:
			if !mc.Spec.HubAcceptsClient {
				return nil, &RefusedError{Reason: RefusedNotAccepted, Cluster: cluster}
			}
			rec.JoinSerial, rec.JoinedAt = old.JoinSerial, old.JoinedAt
			rec.Replaced = old.Current
		default:
			return nil, &RefusedError{Reason: RefusedReplacedCertificate, Cluster: cluster}
		}
		if old != nil {
			rec.Renewed = old.Renewed
		}
		rec.Renewed = append(rec.Renewed, newSerial)
		if len(rec.Renewed) > maxRenewedSerials {
			rec.Renewed = rec.Renewed[len(rec.Renewed)-maxRenewedSerials:]
		}
		return rec, nil
	})
}

// updateRecord rewrites the record of cluster's ManagedCluster with
// mutate, under optimistic locking, retrying on conflict; the ManagedCluster
// must be of registration uid. It returns the resourceVersion the write
// gave the ManagedCluster.
func updateRecord(ctx context.Context, c client.Client, cluster string, uid types.UID, mutate func(*clusterv1.ManagedCluster, *CertificateRecord) (*CertificateRecord, error)) (string, error) {
	var written string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var mc clusterv1.ManagedCluster
		if err := c.Get(ctx, client.ObjectKey{Name: cluster}, &mc); err != nil {
			if apierrors.IsNotFound(err) {
				return &RefusedError{Reason: RefusedNotRegistered, Cluster: cluster}
			}
			return fmt.Errorf("reading ManagedCluster %q: %w", cluster, err)
		}
		if mc.UID != uid || !mc.DeletionTimestamp.IsZero() {
			return &RefusedError{Reason: RefusedEarlierRegistration, Cluster: cluster}
		}
		old, err := certificateRecordOf(&mc)
		if err != nil {
			// An unreadable record is replaced by the new one.
			old = nil
		}
		rec, err := mutate(&mc, old)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("encoding certificate record of %q: %w", cluster, err)
		}
		patch := client.MergeFromWithOptions(mc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if mc.Annotations == nil {
			mc.Annotations = map[string]string{}
		}
		mc.Annotations[CertificatesAnnotation] = string(raw)
		if err := c.Patch(ctx, &mc, patch); err != nil {
			return fmt.Errorf("recording certificate of ManagedCluster %q: %w", cluster, err)
		}
		written = mc.ResourceVersion
		return nil
	})
	return written, err
}

func ptrTo[T any](v T) *T { return &v }
