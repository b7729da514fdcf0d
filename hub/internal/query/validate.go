package query

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/imperator-federation/imperator/hub/internal/capacity"
	"github.com/imperator-federation/imperator/hub/internal/join"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// Bounds of requests.
const (
	maxCount          = 100000
	maxGPUCount       = 1024
	maxWatchClusters  = 1000
	maxDescription    = 256
	minTokenTTL       = time.Minute
	maxTokenTTL       = 30 * 24 * time.Hour
	maxQuantityLength = 64
)

func invalid(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// dnsLabel checks an optional cluster or machine type name.
func dnsLabel(field, value string) error {
	if value == "" {
		return nil
	}
	if msgs := validation.IsDNS1123Label(value); len(msgs) > 0 {
		return invalid(field, "%q: %s", value, strings.Join(msgs, "; "))
	}
	return nil
}

// labelValue checks an optional machine group or GPU selector, which are
// label values.
func labelValue(field, value string) error {
	if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
		return invalid(field, "%q: %s", value, strings.Join(msgs, "; "))
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func validateListMachines(req *queryv1.ListMachinesRequest) (capacity.Filter, error) {
	f := capacity.Filter{Cluster: req.GetCluster(), Group: req.GetGroup(), Type: req.GetType(), GPUProduct: req.GetGpuProduct(), GPUFamily: req.GetGpuFamily()}
	return f, firstError(
		dnsLabel("cluster", f.Cluster),
		labelValue("group", f.Group),
		dnsLabel("type", f.Type),
		labelValue("gpu_product", f.GPUProduct),
		labelValue("gpu_family", f.GPUFamily),
	)
}

func quantity(field, value string, scale func(*resource.Quantity) int64) (int64, error) {
	if value == "" {
		return 0, nil
	}
	if len(value) > maxQuantityLength {
		return 0, invalid(field, "longer than %d characters", maxQuantityLength)
	}
	q, err := resource.ParseQuantity(value)
	if err != nil {
		return 0, invalid(field, "%q is not a Kubernetes quantity: %v", value, err)
	}
	if q.Sign() < 0 {
		return 0, invalid(field, "%q must not be negative", value)
	}
	return scale(&q), nil
}

func validateFindCapacity(req *queryv1.FindCapacityRequest) (capacity.Request, error) {
	out := capacity.Request{Count: req.GetCount()}
	switch req.GetMode() {
	case queryv1.CapacityMode_CAPACITY_MODE_UNSPECIFIED, queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER:
	case queryv1.CapacityMode_CAPACITY_MODE_SPREAD:
		out.Spread = true
	default:
		return out, invalid("mode", "unknown mode %d: want SAME_CLUSTER or SPREAD", req.GetMode())
	}
	if out.Count < 1 || out.Count > maxCount {
		return out, invalid("count", "%d: want 1 to %d", out.Count, maxCount)
	}
	switch target := req.GetTarget().(type) {
	case *queryv1.FindCapacityRequest_MachineType:
		ref := target.MachineType
		if ref.GetType() == "" {
			return out, invalid("machine_type.type", "required")
		}
		out.Group, out.Type = ref.GetGroup(), ref.GetType()
		return out, firstError(dnsLabel("machine_type.type", out.Type), labelValue("machine_type.group", out.Group))
	case *queryv1.FindCapacityRequest_Shape:
		s := target.Shape
		shape := &capacity.Shape{GPUs: s.GetGpuCount(), GPUProduct: s.GetGpuProduct(), GPUFamily: s.GetGpuFamily()}
		var err error
		if shape.MilliCPU, err = quantity("shape.cpu", s.GetCpu(), (*resource.Quantity).MilliValue); err != nil {
			return out, err
		}
		if shape.MemoryBytes, err = quantity("shape.memory", s.GetMemory(), (*resource.Quantity).Value); err != nil {
			return out, err
		}
		if shape.GPUs < 0 || shape.GPUs > maxGPUCount {
			return out, invalid("shape.gpu_count", "%d: want 0 to %d", shape.GPUs, maxGPUCount)
		}
		if err := firstError(labelValue("shape.gpu_product", shape.GPUProduct), labelValue("shape.gpu_family", shape.GPUFamily)); err != nil {
			return out, err
		}
		if *shape == (capacity.Shape{}) {
			return out, invalid("shape", "set at least one of cpu, memory, gpu_count, gpu_product, gpu_family")
		}
		out.Shape = shape
		return out, nil
	default:
		return out, invalid("target", "set machine_type or shape")
	}
}

func validateWatch(req *queryv1.WatchRequest) (map[string]bool, error) {
	if len(req.GetClusters()) > maxWatchClusters {
		return nil, invalid("clusters", "at most %d clusters", maxWatchClusters)
	}
	if len(req.GetClusters()) == 0 {
		return nil, nil
	}
	only := make(map[string]bool, len(req.GetClusters()))
	for i, c := range req.GetClusters() {
		if c == "" {
			return nil, invalid(fmt.Sprintf("clusters[%d]", i), "empty cluster name")
		}
		if err := dnsLabel(fmt.Sprintf("clusters[%d]", i), c); err != nil {
			return nil, err
		}
		only[c] = true
	}
	return only, nil
}

func validateCreateToken(req *queryv1.CreateTokenRequest) (time.Duration, error) {
	var ttl time.Duration
	if req.GetTtl() != nil {
		if err := req.GetTtl().CheckValid(); err != nil {
			return 0, invalid("ttl", "%v", err)
		}
		ttl = req.GetTtl().AsDuration()
		if ttl < minTokenTTL || ttl > maxTokenTTL {
			return 0, invalid("ttl", "%s: want %s to %s", ttl, minTokenTTL, maxTokenTTL)
		}
	}
	if len(req.GetDescription()) > maxDescription {
		return 0, invalid("description", "longer than %d bytes", maxDescription)
	}
	return ttl, dnsLabel("cluster_name", req.GetClusterName())
}

func validateRevokeToken(req *queryv1.RevokeTokenRequest) error {
	if !join.ValidTokenID(req.GetId()) {
		return invalid("id", "%q: want the 6-character token ID (the part before the dot)", req.GetId())
	}
	return nil
}
