package query

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/holds"
	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=managedclusters,verbs=delete

const (
	// deregisterCallLimit bounds a DeregisterCluster call: releasing holds
	// waits for their spokes' answers (up to the hold deadline each).
	deregisterCallLimit = 2 * time.Minute
	// forgottenWithin is how long DeregisterCluster waits for this
	// replica to forget the cluster once its ManagedCluster is deleted,
	// so that the caller's next ListClusters no longer shows it.
	forgottenWithin = 10 * time.Second
)

// SetRegistry lets the service deregister clusters by deleting their
// ManagedCluster through c (a client of the hub cluster's API server);
// without it DeregisterCluster answers Unimplemented. Call it before the
// hub serves.
func (s *Service) SetRegistry(c client.Client) { s.registry = c }

// DeregisterCluster implements queryv1.QueryServer.
func (s *Service) DeregisterCluster(ctx context.Context, req *queryv1.DeregisterClusterRequest) (*queryv1.DeregisterClusterResponse, error) {
	caller, err := authorize(ctx, RoleAdmin)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if name == "" {
		return nil, invalid("name", "required: the cluster to deregister")
	}
	if err := dnsLabel("name", name); err != nil {
		return nil, err
	}
	if why := join.ReservedName(name, ""); why != "" {
		return nil, status.Errorf(codes.NotFound, "cluster %q is not registered at the hub: %s, so no spoke joins as it", name, why)
	}
	if s.registry == nil {
		return nil, status.Error(codes.Unimplemented, "this hub does not deregister clusters")
	}
	ctx, cancel := context.WithTimeout(ctx, deregisterCallLimit)
	defer cancel()

	mc := &clusterv1.ManagedCluster{}
	if err := s.registry.Get(ctx, client.ObjectKey{Name: name}, mc); apierrors.IsNotFound(err) {
		return nil, status.Errorf(codes.NotFound, "cluster %q is not registered at the hub (imperatorctl clusters lists those that are)", name)
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading the ManagedCluster of cluster %q: %v", name, err)
	}
	// The hub cluster may be an OCM hub whose other ManagedClusters are
	// not ours to delete: only a cluster a spoke joined as (the hub's
	// certificate record, or an inventory the hub keeps) is deregistered.
	if _, known := s.store.Get(name); !known && mc.Annotations[registry.CertificatesAnnotation] == "" {
		return nil, status.Errorf(codes.NotFound, "cluster %q is a ManagedCluster no spoke joined as (no certificate record of the hub, no inventory): not Imperator's to deregister; remove it with the tool that registered it", name)
	}

	placing, err := s.holdsPlacingOn(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(placing) > 0 && !req.GetReleaseHolds() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"fleet holds still place units on cluster %q: %s; release them first (imperatorctl hold release NAME), or deregister with --release-holds, which releases them on every cluster they hold units on",
			name, strings.Join(placing, ", "))
	}
	for _, h := range placing {
		if _, err := s.holds.Release(ctx, h); err != nil && !errors.Is(err, holds.ErrNotFound) {
			return nil, status.Errorf(codes.Unavailable, "releasing fleet hold %q before deregistering cluster %q: %v", h, name, err)
		}
		ctrl.LoggerFrom(ctx).Info("Fleet hold released to deregister a cluster", "caller", caller, "fleetHold", h, "cluster", name)
	}

	// The precondition keeps a registration made since the read (the
	// cluster joined again) from being deleted by an answer to this one.
	err = s.registry.Delete(ctx, mc, client.Preconditions{UID: &mc.UID})
	switch {
	case apierrors.IsNotFound(err):
		return nil, status.Errorf(codes.NotFound, "cluster %q is not registered at the hub (deregistered meanwhile)", name)
	case apierrors.IsConflict(err):
		return nil, status.Errorf(codes.Aborted, "cluster %q registered again while being deregistered; look at imperatorctl clusters and try again", name)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "deleting the ManagedCluster of cluster %q: %v", name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Cluster deregistered on request", "caller", caller, "cluster", name, "releasedHolds", placing)

	// The hub's deregistration controller forgets the cluster when it sees
	// the deletion; wait for it here so that the caller's next query
	// agrees. A ManagedCluster with finalizers (an OCM hub's) goes later:
	// the answer says it is deregistered all the same.
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, forgottenWithin, true, func(context.Context) (bool, error) {
		_, known := s.store.Get(name)
		return !known, nil
	})
	return &queryv1.DeregisterClusterResponse{ReleasedHolds: placing}, nil
}

// holdsPlacingOn names, sorted, the fleet holds that may still hold units
// on cluster.
func (s *Service) holdsPlacingOn(ctx context.Context, cluster string) ([]string, error) {
	if s.holds == nil {
		return nil, nil
	}
	list, err := s.holds.List(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing fleet holds: %v", err)
	}
	return placingOn(list, cluster), nil
}

// placingOn names, sorted, the holds of list that are Pending or Held with
// a part on cluster that the spoke may hold (neither refused nor
// released).
func placingOn(list []imperatorv1alpha1.FleetHold, cluster string) []string {
	var out []string
	for i := range list {
		fh := &list[i]
		if fh.Status.Phase != imperatorv1alpha1.FleetHoldPending && fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld && fh.Status.Phase != "" {
			continue
		}
		if slices.ContainsFunc(fh.Status.Clusters, func(cl imperatorv1alpha1.FleetHoldCluster) bool {
			return cl.Cluster == cluster && cl.Result != holds.ResultRefused && cl.Result != holds.ResultReleased
		}) {
			out = append(out, fh.Name)
		}
	}
	slices.Sort(out)
	return out
}
