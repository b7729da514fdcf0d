// Package registry keeps the hub's cluster registry in the hub cluster's
// Kubernetes API with OCM's ManagedCluster (cluster.open-cluster-management.io/v1),
// so that the hub is compatible with an existing OCM hub: a joining spoke gets
// a ManagedCluster (or adopts the existing one) and a namespace named like the
// cluster; the ManagedCluster's UID is the registration the spoke's
// certificates are bound to; Admit lets a certificate in only while its
// registration is the cluster's current ManagedCluster and that has
// spec.hubAcceptsClient=true; and the ManagedClusterConditionAvailable
// condition mirrors the spoke's liveness.
package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// ManagedByLabel marks ManagedClusters and namespaces this hub created.
const ManagedByLabel = imperatorv1alpha1.Prefix + "managed-by"

// ManagedByValue is the value of ManagedByLabel.
const ManagedByValue = "imperator-hub"

// Reasons of the ManagedClusterConditionAvailable condition the hub writes.
const (
	ReasonAvailable = "ImperatorSpokeHeartbeating"
	ReasonUnknown   = "ImperatorSpokeSilent"
)

// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=managedclusters,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=managedclusters/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;create

// EnsureCluster makes sure the ManagedCluster named cluster and its namespace
// exist and returns the ManagedCluster's UID, the registration the cluster's
// certificates are issued for. A new ManagedCluster accepts its client; an
// existing one is adopted as it is, including hubAcceptsClient=false, and
// keeps its UID: certificates issued for it before stay valid.
func EnsureCluster(ctx context.Context, c client.Client, cluster string) (types.UID, error) {
	mc := newManagedCluster(cluster)
	err := c.Create(ctx, mc)
	if apierrors.IsAlreadyExists(err) {
		err = c.Get(ctx, client.ObjectKey{Name: cluster}, mc)
	}
	if err != nil {
		return "", fmt.Errorf("creating ManagedCluster %q: %w", cluster, err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return "", fmt.Errorf("ManagedCluster %q is being deleted: join again once it is gone", cluster)
	}
	if err := EnsureNamespace(ctx, c, cluster); err != nil {
		return "", err
	}
	return mc.UID, nil
}

// ErrAlreadyRegistered is returned by Register when the cluster's
// ManagedCluster exists already.
var ErrAlreadyRegistered = errors.New("cluster is registered already")

// Register registers a new cluster: its namespace, then its ManagedCluster,
// which accepts its client. It returns the new ManagedCluster's UID.
// Creating the ManagedCluster is the claim on the name: of two joins racing
// for one new name, only one gets nil, the other ErrAlreadyRegistered.
func Register(ctx context.Context, c client.Client, cluster string) (types.UID, error) {
	if err := EnsureNamespace(ctx, c, cluster); err != nil {
		return "", err
	}
	mc := newManagedCluster(cluster)
	if err := c.Create(ctx, mc); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("registering %q: %w", cluster, ErrAlreadyRegistered)
		}
		return "", fmt.Errorf("creating ManagedCluster %q: %w", cluster, err)
	}
	return mc.UID, nil
}

func newManagedCluster(cluster string) *clusterv1.ManagedCluster {
	return &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: cluster, Labels: map[string]string{ManagedByLabel: ManagedByValue}},
		Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true, LeaseDurationSeconds: 60},
	}
}

// EnsureNamespace creates the cluster's namespace when it is missing.
func EnsureNamespace(ctx context.Context, c client.Client, cluster string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster, Labels: map[string]string{ManagedByLabel: ManagedByValue}}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %q: %w", cluster, err)
	}
	return nil
}

// Exists reports whether the cluster's ManagedCluster exists.
func Exists(ctx context.Context, r client.Reader, cluster string) (bool, error) {
	var mc clusterv1.ManagedCluster
	if err := r.Get(ctx, client.ObjectKey{Name: cluster}, &mc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading ManagedCluster %q: %w", cluster, err)
	}
	return true, nil
}

// FieldManager is the server-side apply field manager of what the hub writes
// on ManagedClusters: only the Available condition, so that conditions other
// writers own (OCM's ManagedClusterJoined, HubAcceptedManagedCluster, ...)
// stay as they are.
const FieldManager = "imperator-hub"

// ReasonAPIServerUnreachable is the reason of an Available=False condition:
// the spoke agent heartbeats but cannot reach its own cluster's API server.
// It is False, not Unknown, as OCM's own ManagedClusterKubeAPIServerUnavailable
// is: the hub knows the cluster's state, and it is degraded (its figures come
// from a stale cache, and nothing placed there would be applied); OCM
// Placements, which select Available=True clusters, leave it out until the
// agent reaches its API server again.
const ReasonAPIServerUnreachable = "ImperatorSpokeAPIServerUnreachable"

// Availability is what the hub knows about a cluster's spoke, from which its
// Available condition follows.
type Availability struct {
	// Heartbeating is true while the cluster's liveness is Available: its
	// spoke was heard from within the grace period.
	Heartbeating bool
	// Message says so, for people.
	Message string
	// APIServerUnreachable is non-empty while the spoke says that its agent
	// cannot reach its own API server: why, for people.
	APIServerUnreachable string
}

// Condition is the ManagedClusterConditionAvailable condition for a:
// True while the spoke heartbeats and reaches its API server, False while it
// heartbeats but cannot reach it, Unknown when it is silent.
func (a Availability) Condition(generation int64) metav1.Condition {
	cond := metav1.Condition{
		Type:               clusterv1.ManagedClusterConditionAvailable,
		Status:             metav1.ConditionTrue,
		Reason:             ReasonAvailable,
		Message:            a.Message,
		ObservedGeneration: generation,
	}
	switch {
	case !a.Heartbeating:
		cond.Status, cond.Reason = metav1.ConditionUnknown, ReasonUnknown
	case a.APIServerUnreachable != "":
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonAPIServerUnreachable, a.APIServerUnreachable
	}
	return cond
}

// SetAvailable sets the ManagedCluster's ManagedClusterConditionAvailable
// condition from a by server-side apply of that condition alone (field
// manager FieldManager; status.conditions is a map keyed by type, so the
// other conditions are left alone), writing only when the condition read
// (from c's cache) differs, and returns the ManagedCluster; nil when it does
// not exist (the platform team deregistered the cluster). The hub forces
// ownership of the Available condition: it is the authority on its spokes'
// liveness, and a hand edit of it is put right.
func SetAvailable(ctx context.Context, c client.Client, cluster string, a Availability) (*clusterv1.ManagedCluster, error) {
	var mc clusterv1.ManagedCluster
	if err := c.Get(ctx, client.ObjectKey{Name: cluster}, &mc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading ManagedCluster %q: %w", cluster, err)
	}
	if !meta.SetStatusCondition(&mc.Status.Conditions, a.Condition(mc.Generation)) {
		return &mc, nil
	}
	// SetStatusCondition kept LastTransitionTime when only the reason or
	// message changed: apply the condition as it now stands.
	cond := meta.FindStatusCondition(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable)
	apply := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": clusterv1.GroupVersion.String(),
		"kind":       "ManagedCluster",
		"metadata":   map[string]any{"name": cluster},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type":               cond.Type,
			"status":             string(cond.Status),
			"reason":             cond.Reason,
			"message":            cond.Message,
			"observedGeneration": cond.ObservedGeneration,
			"lastTransitionTime": cond.LastTransitionTime.UTC().Format(time.RFC3339),
		}}},
	}}
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(apply), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("applying ManagedCluster %q Available condition: %w", cluster, err)
	}
	return &mc, nil
}
