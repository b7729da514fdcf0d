package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// podSet builds a pod set of count pods.
type podSetBuilder struct{ ps PodSet }

func makePodSet(name string, count int32) *podSetBuilder {
	return &podSetBuilder{ps: PodSet{Name: name, Count: count}}
}

func (b *podSetBuilder) machine(group, typ string) *podSetBuilder {
	b.ps.Template.Labels = map[string]string{imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: typ}
	if typ == "" {
		delete(b.ps.Template.Labels, imperatorv1alpha1.MachineTypeKey)
	}
	return b
}

func (b *podSetBuilder) container(requests map[corev1.ResourceName]string) *podSetBuilder {
	rl := corev1.ResourceList{}
	for n, q := range requests {
		rl[n] = resource.MustParse(q)
	}
	b.ps.Template.Spec.Containers = append(b.ps.Template.Spec.Containers, corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: rl}})
	return b
}

func (b *podSetBuilder) initContainer(requests map[corev1.ResourceName]string) *podSetBuilder {
	rl := corev1.ResourceList{}
	for n, q := range requests {
		rl[n] = resource.MustParse(q)
	}
	b.ps.Template.Spec.InitContainers = append(b.ps.Template.Spec.InitContainers, corev1.Container{Name: "i", Resources: corev1.ResourceRequirements{Limits: rl}})
	return b
}

func (b *podSetBuilder) obj() PodSet { return b.ps }

func TestDemands(t *testing.T) {
	cases := map[string]struct {
		podSets     []PodSet
		want        []Demand
		wantErrLike string
	}{
		"a Job of 4 pods of a machine type": {
			podSets: []PodSet{makePodSet("main", 4).machine("h100", "compute-xlarge").obj()},
			want:    []Demand{{Group: "h100", Type: "compute-xlarge", Count: 4}},
		},
		"a machine type without its group matches the type in any group": {
			podSets: []PodSet{makePodSet("main", 2).machine("", "compute-xlarge").obj()},
			want:    []Demand{{Type: "compute-xlarge", Count: 2}},
		},
		"a leader and workers of the same type add up, the larger demand first": {
			podSets: []PodSet{
				makePodSet("launcher", 1).machine("cpu", "small").obj(),
				makePodSet("leader", 1).machine("h100", "compute-xlarge").obj(),
				makePodSet("workers", 3).machine("h100", "compute-xlarge").obj(),
			},
			want: []Demand{{Group: "h100", Type: "compute-xlarge", Count: 4}, {Group: "cpu", Type: "small", Count: 1}},
		},
		"without labels the shape of a pod's requests, init containers counted as Kubernetes does": {
			podSets: []PodSet{makePodSet("main", 2).
				container(map[corev1.ResourceName]string{corev1.ResourceCPU: "8", corev1.ResourceMemory: "32Gi", gpuResource: "1"}).
				container(map[corev1.ResourceName]string{corev1.ResourceCPU: "2"}).
				initContainer(map[corev1.ResourceName]string{corev1.ResourceMemory: "64Gi"}).obj()},
			want: []Demand{{Shape: &queryv1.ResourceShape{Cpu: "10", Memory: "64Gi", GpuCount: 1}, Count: 2}},
		},
		"a pod set of count 0 needs nothing": {
			podSets: []PodSet{makePodSet("idle", 0).obj(), makePodSet("main", 1).machine("h100", "compute-xlarge").obj()},
			want:    []Demand{{Group: "h100", Type: "compute-xlarge", Count: 1}},
		},
		"a group without a type is refused naming the label": {
			podSets:     []PodSet{makePodSet("main", 1).machine("h100", "").obj()},
			wantErrLike: "spec.podSets[0].template.metadata.labels[imperator.tenzen-y.io/machine-type]",
		},
		"no label and no request is refused naming the pod set": {
			podSets:     []PodSet{makePodSet("main", 1).container(nil).obj()},
			wantErrLike: `spec.podSets[0].template.spec: Invalid value: "main"`,
		},
		"a fraction of a GPU is refused": {
			podSets:     []PodSet{makePodSet("main", 1).container(map[corev1.ResourceName]string{gpuResource: "500m"}).obj()},
			wantErrLike: "not a whole number of GPUs",
		},
		"no pod sets": {
			wantErrLike: "spec.podSets: Required value",
		},
		"more units than the hub can be asked": {
			podSets: []PodSet{
				makePodSet("a", 60000).machine("h100", "x").obj(),
				makePodSet("b", 60000).machine("h100", "x").obj(),
			},
			wantErrLike: "spec.podSets[1].count",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Demands(tc.podSets)
			if tc.wantErrLike != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrLike) {
					t.Fatalf("Demands() error = %v, want one containing %q", err, tc.wantErrLike)
				}
				return
			}
			if err != nil {
				t.Fatalf("Demands() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Demands() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDemandRequest(t *testing.T) {
	d := Demand{Group: "h100", Type: "compute-xlarge", Count: 3}
	want := &queryv1.FindCapacityRequest{Count: 3, Mode: queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER,
		Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Group: "h100", Type: "compute-xlarge"}}}
	if diff := cmp.Diff(want, d.Request(), protocmp.Transform()); diff != "" {
		t.Errorf("Request() (-want +got):\n%s", diff)
	}
	if got, want := d.String(), "3 units of h100/compute-xlarge"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
