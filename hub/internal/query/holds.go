package query

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	ctrl "sigs.k8s.io/controller-runtime"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/holds"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Bounds of CreateHold.
const (
	minHoldTTL     = time.Minute
	maxHoldTTL     = 7 * 24 * time.Hour
	maxHoldCount   = 10000
	maxNamespaces  = 64
	holdsCallLimit = 30 * time.Second
)

// SetHolds lets the service answer the hold calls with c; call it before
// the hub serves.
func (s *Service) SetHolds(c *holds.Coordinator) { s.holds = c }

func (s *Service) authorizeHolds(ctx context.Context, want Role) (string, error) {
	caller, err := authorize(ctx, want)
	if err != nil {
		return "", err
	}
	if s.holds == nil {
		return "", status.Error(codes.Unimplemented, "this hub does not run fleet holds")
	}
	return caller, nil
}

// validateCreateHold checks a CreateHold request; every error names the field.
func validateCreateHold(req *queryv1.CreateHoldRequest) (holds.Spec, error) {
	spec := holds.Spec{Name: req.GetName(), Namespaces: req.GetNamespaces()}
	if spec.Name == "" {
		return spec, invalid("name", "required: the name guests quote in the label imperator.tenzen-y.io/hold")
	}
	if err := dnsLabel("name", spec.Name); err != nil {
		return spec, err
	}
	find := &queryv1.FindCapacityRequest{Count: req.GetCount(), Mode: req.GetMode()}
	switch t := req.GetTarget().(type) {
	case *queryv1.CreateHoldRequest_MachineType:
		find.Target = &queryv1.FindCapacityRequest_MachineType{MachineType: t.MachineType}
	case *queryv1.CreateHoldRequest_Shape:
		find.Target = &queryv1.FindCapacityRequest_Shape{Shape: t.Shape}
	}
	if req.GetCount() < 1 || req.GetCount() > maxHoldCount {
		return spec, invalid("count", "%d: want 1 to %d", req.GetCount(), maxHoldCount)
	}
	var err error
	if spec.Request, err = validateFindCapacity(find); err != nil {
		return spec, err
	}
	if req.GetTtl() == nil {
		return spec, invalid("ttl", "required: how long unclaimed units stay held, %s to %s", minHoldTTL, maxHoldTTL)
	}
	if err := req.GetTtl().CheckValid(); err != nil {
		return spec, invalid("ttl", "%v", err)
	}
	spec.TTL = req.GetTtl().AsDuration()
	if spec.TTL < minHoldTTL || spec.TTL > maxHoldTTL {
		return spec, invalid("ttl", "%s: want %s to %s", spec.TTL, minHoldTTL, maxHoldTTL)
	}
	if len(spec.Namespaces) > maxNamespaces {
		return spec, invalid("namespaces", "%d namespaces: at most %d", len(spec.Namespaces), maxNamespaces)
	}
	seen := map[string]bool{}
	for _, ns := range spec.Namespaces {
		if ns == "" {
			return spec, invalid("namespaces", "an empty namespace name")
		}
		if err := dnsLabel("namespaces", ns); err != nil {
			return spec, err
		}
		if seen[ns] {
			return spec, invalid("namespaces", "%q is listed twice", ns)
		}
		seen[ns] = true
	}
	return spec, nil
}

func holdName(field, name string) error {
	if name == "" {
		return invalid(field, "required")
	}
	return dnsLabel(field, name)
}

// CreateHold implements queryv1.QueryServer.
func (s *Service) CreateHold(ctx context.Context, req *queryv1.CreateHoldRequest) (*queryv1.FleetHold, error) {
	caller, err := s.authorizeHolds(ctx, RoleHolder)
	if err != nil {
		return nil, err
	}
	spec, err := validateCreateHold(req)
	if err != nil {
		return nil, err
	}
	if err := authorizeHoldNamespaces(ctx, "create", spec.Namespaces); err != nil {
		return nil, err
	}
	if len(caller) > maxCreatorBytes {
		return nil, status.Errorf(codes.InvalidArgument, "creator: the caller's identity %.64q... is %d bytes, more than the %d a hold records", caller, len(caller), maxCreatorBytes)
	}
	spec.Creator = caller
	ctx, cancel := context.WithTimeout(ctx, holdsCallLimit)
	defer cancel()
	fh, err := s.holds.Create(ctx, spec)
	if err != nil {
		return nil, holdsError(err)
	}
	ctrl.LoggerFrom(ctx).Info("Fleet hold created", "caller", caller, "fleetHold", spec.Name, "phase", fh.Status.Phase, "count", spec.Request.Count)
	return FleetHoldOf(fh), nil
}

// GetHold implements queryv1.QueryServer.
func (s *Service) GetHold(ctx context.Context, req *queryv1.GetHoldRequest) (*queryv1.FleetHold, error) {
	if _, err := s.authorizeHolds(ctx, RoleViewer); err != nil {
		return nil, err
	}
	if err := holdName("name", req.GetName()); err != nil {
		return nil, err
	}
	fh, err := s.holds.Get(ctx, req.GetName())
	if err != nil {
		return nil, holdsError(err)
	}
	return FleetHoldOf(fh), nil
}

// ListHolds implements queryv1.QueryServer.
func (s *Service) ListHolds(ctx context.Context, _ *queryv1.ListHoldsRequest) (*queryv1.ListHoldsResponse, error) {
	if _, err := s.authorizeHolds(ctx, RoleViewer); err != nil {
		return nil, err
	}
	list, err := s.holds.List(ctx)
	if err != nil {
		return nil, holdsError(err)
	}
	resp := &queryv1.ListHoldsResponse{Holds: make([]*queryv1.FleetHold, 0, len(list))}
	for i := range list {
		resp.Holds = append(resp.Holds, FleetHoldOf(&list[i]))
	}
	return resp, nil
}

// ReleaseHold implements queryv1.QueryServer.
func (s *Service) ReleaseHold(ctx context.Context, req *queryv1.ReleaseHoldRequest) (*queryv1.FleetHold, error) {
	caller, err := s.authorizeHolds(ctx, RoleHolder)
	if err != nil {
		return nil, err
	}
	if err := holdName("name", req.GetName()); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, holdsCallLimit)
	defer cancel()
	// A holder certificate releases its own holds (the creator of the
	// certificate kind with its name, never a Kubernetes user's of the same
	// name), an admin any; a
	// Kubernetes identity those of the namespaces RBAC lets it delete holds
	// in, whoever created them.
	if _, ok := tokenCallerOf(ctx); ok {
		existing, err := s.holds.Get(ctx, req.GetName())
		if errors.Is(err, holds.ErrNotFound) {
			// As the API server answers a delete: refused before
			// NotFound to whoever may not delete holds anywhere it
			// could have been.
			if err := authorizeHoldNamespaces(ctx, "delete", nil); err != nil {
				return nil, err
			}
		}
		if err != nil {
			return nil, holdsError(err)
		}
		if err := authorizeHoldNamespaces(ctx, "delete", existing.Spec.Namespaces); err != nil {
			return nil, err
		}
	} else if name, role, err := callerOf(ctx); err == nil && role < RoleAdmin {
		existing, err := s.holds.Get(ctx, req.GetName())
		if err != nil {
			return nil, holdsError(err)
		}
		if !createdBy(existing.Spec.Creator, name) {
			return nil, status.Errorf(codes.PermissionDenied, "fleet hold %q was created by %q: only its creator or an admin (organization %s) may release it",
				req.GetName(), existing.Spec.Creator, AdminOrganization)
		}
	}
	fh, err := s.holds.Release(ctx, req.GetName())
	if err != nil {
		return nil, holdsError(err)
	}
	ctrl.LoggerFrom(ctx).Info("Fleet hold release asked", "caller", caller, "fleetHold", req.GetName(), "phase", fh.Status.Phase)
	return FleetHoldOf(fh), nil
}

// holdsError maps the coordinator's errors to status codes.
func holdsError(err error) error {
	switch {
	case errors.Is(err, holds.ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, holds.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, holds.ErrDoesNotFit):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	default:
		return status.Errorf(codes.Unavailable, "%v", err)
	}
}

var phases = map[imperatorv1alpha1.FleetHoldPhase]queryv1.FleetHoldPhase{
	imperatorv1alpha1.FleetHoldPending:  queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_PENDING,
	imperatorv1alpha1.FleetHoldHeld:     queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD,
	imperatorv1alpha1.FleetHoldFailed:   queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_FAILED,
	imperatorv1alpha1.FleetHoldReleased: queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_RELEASED,
	imperatorv1alpha1.FleetHoldExpired:  queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_EXPIRED,
}

var results = map[string]federationv1.HoldResult{
	holds.ResultHeld:     federationv1.HoldResult_HOLD_RESULT_HELD,
	holds.ResultRefused:  federationv1.HoldResult_HOLD_RESULT_REFUSED,
	holds.ResultTimedOut: federationv1.HoldResult_HOLD_RESULT_TIMED_OUT,
	holds.ResultReleased: federationv1.HoldResult_HOLD_RESULT_RELEASED,
}

// FleetHoldOf is the wire form of a FleetHold.
func FleetHoldOf(fh *imperatorv1alpha1.FleetHold) *queryv1.FleetHold {
	out := &queryv1.FleetHold{
		Name:       fh.Name,
		Phase:      phases[fh.Status.Phase],
		Message:    fh.Status.Message,
		Count:      fh.Spec.Count,
		Mode:       queryv1.CapacityMode_CAPACITY_MODE_SPREAD,
		ValidUntil: timestamppb.New(fh.Spec.ValidUntil.Time),
		Creator:    fh.Spec.Creator,
		Namespaces: fh.Spec.Namespaces,
		GuestLabels: map[string]string{
			imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest),
			imperatorv1alpha1.HoldKey:    fh.Name,
		},
	}
	if fh.Spec.SameCluster {
		out.Mode = queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER
	}
	if !fh.CreationTimestamp.IsZero() {
		out.CreatedAt = timestamppb.New(fh.CreationTimestamp.Time)
	}
	if t := fh.Spec.MachineType; t != nil {
		out.MachineType = &queryv1.MachineTypeRef{Group: t.Group, Type: t.Type}
	}
	if s := fh.Spec.Shape; s != nil {
		out.Shape = &queryv1.ResourceShape{Cpu: s.CPU, Memory: s.Memory, GpuCount: s.GPUCount, GpuProduct: s.GPUProduct, GpuFamily: s.GPUFamily}
	}
	for _, cl := range fh.Status.Clusters {
		out.Clusters = append(out.Clusters, &queryv1.FleetHoldCluster{
			Cluster: cl.Cluster, Group: cl.Group, Type: cl.Type, Count: cl.Count, Held: cl.Held,
			Result: results[cl.Result], Reason: cl.Reason, Message: cl.Message,
		})
	}
	return out
}
