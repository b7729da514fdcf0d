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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// SetAvailable sets ManagedClusterConditionAvailable to True or Unknown,
// writing only when the condition changes, and returns the ManagedCluster;
// nil when it does not exist (the platform team deregistered the cluster).
func SetAvailable(ctx context.Context, c client.Client, cluster string, available bool, message string) (*clusterv1.ManagedCluster, error) {
	var mc clusterv1.ManagedCluster
	if err := c.Get(ctx, client.ObjectKey{Name: cluster}, &mc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading ManagedCluster %q: %w", cluster, err)
	}
	cond := metav1.Condition{
		Type:               clusterv1.ManagedClusterConditionAvailable,
		Status:             metav1.ConditionTrue,
		Reason:             ReasonAvailable,
		Message:            message,
		ObservedGeneration: mc.Generation,
	}
	if !available {
		cond.Status = metav1.ConditionUnknown
		cond.Reason = ReasonUnknown
	}
	patch := client.MergeFrom(mc.DeepCopy())
	if !meta.SetStatusCondition(&mc.Status.Conditions, cond) {
		return &mc, nil
	}
	if err := c.Status().Patch(ctx, &mc, patch); err != nil {
		return nil, fmt.Errorf("patching ManagedCluster %q status: %w", cluster, err)
	}
	return &mc, nil
}
