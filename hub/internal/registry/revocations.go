package registry

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/identity"
)

// The revocation list is a ConfigMap in the hub's namespace: one data key
// per revoked serial (identity.SerialOf), its value a Revocation in JSON.
// A ConfigMap, not a CRD, because it is a small list every replica reads
// whole, written rarely by people (hub client-cert revoke), and needs no
// schema beyond this file. Entries are dropped RevocationRetention after
// they were made, when every certificate the hub issues has expired.
const (
	RevocationsConfigMap = "imperator-hub-revoked-certificates"
	// RevocationRetention outlives every certificate the hub issues:
	// viewer and admin certificates live at most a year
	// (query.MaxClientCertValidity), spoke certificates a year by default.
	RevocationRetention = 2 * 365 * 24 * time.Hour
	// maxRevocations keeps the ConfigMap well below its 1 MiB limit.
	maxRevocations = 5000
	// DefaultRevocationsRefresh is how often every replica rereads the list.
	DefaultRevocationsRefresh = 5 * time.Second
)

// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=configmaps,verbs=get;create;patch

var serialPattern = regexp.MustCompile(`^[0-9a-f]{1,40}$`)

// ValidSerial reports whether serial is a certificate serial as the hub
// writes it: lowercase hex, at most 20 bytes (RFC 5280).
func ValidSerial(serial string) bool { return serialPattern.MatchString(serial) }

// Revocation is one revoked certificate.
type Revocation struct {
	RevokedAt time.Time `json:"revokedAt"`
	// Reason is the operator's note.
	Reason string `json:"reason,omitempty"`
}

// Revoke adds serial to the revocation list of namespace, dropping entries
// older than RevocationRetention. Revoking a serial twice keeps the first
// entry.
func Revoke(ctx context.Context, c client.Client, namespace, serial, reason string, now time.Time) error {
	if !ValidSerial(serial) {
		return fmt.Errorf("revoking certificate %q: a serial is 1 to 40 lowercase hex digits (as imperatorctl and the hub log print it)", serial)
	}
	entry, err := json.Marshal(Revocation{RevokedAt: now.UTC().Truncate(time.Second), Reason: reason})
	if err != nil {
		return fmt.Errorf("encoding revocation of %s: %w", serial, err)
	}
	key := client.ObjectKey{Namespace: namespace, Name: RevocationsConfigMap}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := c.Get(ctx, key, &cm)
		if apierrors.IsNotFound(err) {
			cm = corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RevocationsConfigMap, Labels: map[string]string{ManagedByLabel: ManagedByValue}},
				Data:       map[string]string{serial: string(entry)},
			}
			if err := c.Create(ctx, &cm); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(corev1.Resource("configmaps"), RevocationsConfigMap, err)
				}
				return fmt.Errorf("creating revocation list %s: %w", key, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading revocation list %s: %w", key, err)
		}
		patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		for s, raw := range cm.Data {
			var r Revocation
			if json.Unmarshal([]byte(raw), &r) == nil && now.Sub(r.RevokedAt) > RevocationRetention {
				delete(cm.Data, s)
			}
		}
		if _, ok := cm.Data[serial]; ok {
			return nil
		}
		if len(cm.Data) >= maxRevocations {
			return fmt.Errorf("revoking certificate %s: the revocation list %s holds %d entries already; rotate the hub CA instead", serial, key, len(cm.Data))
		}
		cm.Data[serial] = string(entry)
		if err := c.Patch(ctx, &cm, patch); err != nil {
			return fmt.Errorf("writing revocation list %s: %w", key, err)
		}
		return nil
	})
}

// Revocations keeps every replica's copy of the revocation list: Load reads
// it, Start rereads it every Refresh until stopped; a failed read keeps the
// last list (revocations are never forgotten by a hiccup of the API
// server). It is a controller-runtime Runnable.
type Revocations struct {
	Reader    client.Reader
	Namespace string
	Refresh   time.Duration
	Clock     clock.WithTicker
	Log       logr.Logger

	serials atomic.Pointer[map[string]struct{}]
}

// NeedLeaderElection is false: every replica refuses revoked certificates.
func (r *Revocations) NeedLeaderElection() bool { return false }

// Load reads the list once.
func (r *Revocations) Load(ctx context.Context) error {
	var cm corev1.ConfigMap
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: RevocationsConfigMap}, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading revocation list %s/%s: %w", r.Namespace, RevocationsConfigMap, err)
	}
	serials := make(map[string]struct{}, len(cm.Data))
	for s := range cm.Data {
		serials[s] = struct{}{}
	}
	r.serials.Store(&serials)
	return nil
}

// Start rereads the list every Refresh until ctx is done.
func (r *Revocations) Start(ctx context.Context) error {
	refresh := r.Refresh
	if refresh <= 0 {
		refresh = DefaultRevocationsRefresh
	}
	clk := r.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	ticker := clk.NewTicker(refresh)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			if err := r.Load(ctx); err != nil && ctx.Err() == nil {
				r.Log.Error(err, "Rereading the revocation list failed; keeping the last one")
			}
		}
	}
}

// Revoked reports whether cert's serial is on the list.
func (r *Revocations) Revoked(cert *x509.Certificate) bool {
	serials := r.serials.Load()
	if serials == nil {
		return false
	}
	_, ok := (*serials)[identity.SerialOf(cert)]
	return ok
}
