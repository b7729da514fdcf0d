package cli

import (
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// targetFlags are the flags that name what units are wanted when no machine
// type is given: a resource shape (capacity, hold create).
type targetFlags struct {
	gpus  int
	shape queryv1.ResourceShape
}

func (f *targetFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&f.gpus, "gpu", 0, "Shape: GPUs per unit.")
	fs.StringVar(&f.shape.GpuProduct, "gpu-product", "", "Shape: GPU product (nvidia.com/gpu.product).")
	fs.StringVar(&f.shape.GpuFamily, "gpu-family", "", "Shape: GPU family (nvidia.com/gpu.family).")
	fs.StringVar(&f.shape.Cpu, "cpu", "", "Shape: CPU per unit, a quantity (8, 500m).")
	fs.StringVar(&f.shape.Memory, "memory", "", "Shape: memory per unit, a quantity (32Gi).")
}

// hasShape reports whether any shape flag is set.
func (f *targetFlags) hasShape() bool {
	return f.gpus != 0 || f.shape.GpuProduct != "" || f.shape.GpuFamily != "" || f.shape.Cpu != "" || f.shape.Memory != ""
}

// checkGPUs refuses a GPU count out of range.
func (f *targetFlags) checkGPUs() error {
	if f.gpus < 0 || f.gpus > 1024 {
		return fail(ExitUsage, "--gpu %d: want 0 to 1024", f.gpus)
	}
	return nil
}

// resourceShape is the shape the flags give, its quantities checked.
func (f *targetFlags) resourceShape() (*queryv1.ResourceShape, error) {
	for flagName, q := range map[string]string{"--cpu": f.shape.Cpu, "--memory": f.shape.Memory} {
		if _, err := resource.ParseQuantity(q); q != "" && err != nil {
			return nil, fail(ExitUsage, "%s %q: not a quantity (e.g. 8, 500m, 32Gi)", flagName, q)
		}
	}
	f.shape.GpuCount = int32(f.gpus)
	return &f.shape, nil
}

// machineTypeRef reads TYPE or GROUP/TYPE.
func machineTypeRef(arg string) (*queryv1.MachineTypeRef, error) {
	ref := &queryv1.MachineTypeRef{Type: arg}
	if group, typ, ok := strings.Cut(arg, "/"); ok {
		ref.Group, ref.Type = group, typ
	}
	if msgs := validation.IsDNS1123Label(ref.Type); len(msgs) > 0 {
		return nil, fail(ExitUsage, "machine type %q: %s", ref.Type, strings.Join(msgs, "; "))
	}
	return ref, nil
}

// capacityMode is the mode --same-cluster asks for.
func capacityMode(sameCluster bool) queryv1.CapacityMode {
	if sameCluster {
		return queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER
	}
	return queryv1.CapacityMode_CAPACITY_MODE_SPREAD
}
