package provisioningrequest

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// template is a pod set's template of a guest of group/type whose first
// container asks for requests.
func template(name, group, typeName string, requests corev1.ResourceList) *corev1.PodTemplate {
	t := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}}
	t.Template.Labels = map[string]string{}
	if group != "" {
		t.Template.Labels[imperatorv1alpha1.MachineGroupKey] = group
	}
	if typeName != "" {
		t.Template.Labels[imperatorv1alpha1.MachineTypeKey] = typeName
	}
	t.Template.Spec.Containers = []corev1.Container{{Name: "train", Resources: corev1.ResourceRequirements{Requests: requests}}}
	return t
}

func xlargeUnit() corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("40"), corev1.ResourceMemory: resource.MustParse("128Gi"),
		"nvidia.com/gpu": resource.MustParse("2")}
}

func TestBookings(t *testing.T) {
	machines := []imperatorv1alpha1.Machine{*wrappers.GeneralMachine().Obj()}
	const group = "general-machine"
	mediumUnit := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6"), corev1.ResourceMemory: resource.MustParse("48Gi"),
		"nvidia.com/gpu": resource.MustParse("1")}
	cases := map[string]struct {
		podSets      []PodSet
		templates    []*corev1.PodTemplate
		wantBookings []Booking
		wantRefusal  *Refusal
	}{
		"pod sets of one type add up to one booking, pod sets of another type make another": {
			podSets: []PodSet{{PodTemplateRef: Reference{Name: "workers"}, Count: 2}, {PodTemplateRef: Reference{Name: "eval"}, Count: 1},
				{PodTemplateRef: Reference{Name: "driver"}, Count: 1}},
			templates: []*corev1.PodTemplate{template("workers", group, "compute-xlarge", xlargeUnit()),
				template("eval", group, "compute-xlarge", xlargeUnit()), template("driver", group, "compute-medium", mediumUnit)},
			wantBookings: []Booking{{MachineGroup: group, MachineType: "compute-xlarge", Count: 3}, {MachineGroup: group, MachineType: "compute-medium", Count: 1}},
		},
		"a template without the guest labels whose shape is one type's unit is refused, naming the labels to add": {
			podSets:   []PodSet{{PodTemplateRef: Reference{Name: "plain"}, Count: 1}},
			templates: []*corev1.PodTemplate{template("plain", "", "", xlargeUnit())},
			wantRefusal: &Refusal{Reason: ReasonPodSetNotMapped, Message: noLabels + `; container "train" asks for exactly one unit of machine type compute-xlarge of machine group general-machine: ` +
				"add the labels imperator.tenzen-y.io/machine-group=general-machine, imperator.tenzen-y.io/machine-type=compute-xlarge and imperator.tenzen-y.io/pod-role=guest to the Job's pod template"},
		},
		"a template without the guest labels whose shape is no type's unit is refused, naming the types": {
			podSets:   []PodSet{{PodTemplateRef: Reference{Name: "plain"}, Count: 1}},
			templates: []*corev1.PodTemplate{template("plain", "", "", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("40")})},
			wantRefusal: &Refusal{Reason: ReasonPodSetNotMapped, Message: noLabels + `; container "train" asks for no machine type's unit exactly ` +
				"(offered: compute-large of machine group general-machine, compute-medium of machine group general-machine, compute-xlarge of machine group general-machine): " +
				"label the Job's pod template with the machine group and type it runs on, and imperator.tenzen-y.io/pod-role=guest"},
		},
		"a unit's resources and one more are not its shape": {
			podSets: []PodSet{{PodTemplateRef: Reference{Name: "plain"}, Count: 1}},
			templates: []*corev1.PodTemplate{template("plain", "", "", func() corev1.ResourceList {
				l := xlargeUnit()
				l[corev1.ResourceEphemeralStorage] = resource.MustParse("1Gi")
				return l
			}())},
			wantRefusal: &Refusal{Reason: ReasonPodSetNotMapped, Message: noLabels + `; container "train" asks for no machine type's unit exactly ` +
				"(offered: compute-large of machine group general-machine, compute-medium of machine group general-machine, compute-xlarge of machine group general-machine): " +
				"label the Job's pod template with the machine group and type it runs on, and imperator.tenzen-y.io/pod-role=guest"},
		},
		"a type no Machine of the group offers is refused": {
			podSets:     []PodSet{{PodTemplateRef: Reference{Name: "w"}, Count: 1}},
			templates:   []*corev1.PodTemplate{template("w", group, "compute-huge", xlargeUnit())},
			wantRefusal: &Refusal{Reason: ReasonMachineTypeNotFound, Message: "spec.podSets[0]: no Machine of machine group general-machine offers machine type compute-huge"},
		},
		"a template relying on injection is refused: Kueue's quota would not count the unit": {
			podSets:   []PodSet{{PodTemplateRef: Reference{Name: "w"}, Count: 1}},
			templates: []*corev1.PodTemplate{template("w", group, "compute-xlarge", nil)},
			wantRefusal: &Refusal{Reason: ReasonResourcesNotStated, Message: `spec.podSets[0]: container "train" must request one unit of machine type compute-xlarge, so that Kueue's quota counts it: ` +
				"cpu 40 (asks nothing), memory 128Gi (asks nothing), nvidia.com/gpu 2 (asks nothing)"},
		},
		"a template asking for another shape is refused, naming the resources that differ": {
			podSets:   []PodSet{{PodTemplateRef: Reference{Name: "w"}, Count: 1}},
			templates: []*corev1.PodTemplate{template("w", group, "compute-xlarge", mediumUnit)},
			wantRefusal: &Refusal{Reason: ReasonResourcesNotStated, Message: `spec.podSets[0]: container "train" must request one unit of machine type compute-xlarge, so that Kueue's quota counts it: ` +
				"cpu 40 (asks 6), memory 128Gi (asks 48Gi), nvidia.com/gpu 2 (asks 1)"},
		},
		"a missing template is refused": {
			podSets:     []PodSet{{PodTemplateRef: Reference{Name: "gone"}, Count: 1}},
			wantRefusal: &Refusal{Reason: ReasonPodSetNotMapped, Message: `spec.podSets[0].podTemplateRef: PodTemplate "gone" does not exist`},
		},
		"no pod sets is refused": {
			wantRefusal: &Refusal{Reason: ReasonPodSetNotMapped, Message: "spec.podSets is empty: nothing to hold"},
		},
		"pod sets of one type adding up to more units than a hold can have are refused, their sum not wrapping round": {
			podSets: []PodSet{{PodTemplateRef: Reference{Name: "w"}, Count: math.MaxInt32}, {PodTemplateRef: Reference{Name: "w"}, Count: math.MaxInt32},
				{PodTemplateRef: Reference{Name: "w"}, Count: 2}},
			templates: []*corev1.PodTemplate{template("w", group, "compute-xlarge", xlargeUnit())},
			wantRefusal: &Refusal{Reason: ReasonTooManyUnits, Message: "spec.podSets[0]: the pod sets of machine type compute-xlarge of machine group general-machine " +
				"add up to 2147483647 units, more than a CapacityHold's 10000"},
		},
		"pod sets of one type adding up to one unit more than a hold can have are refused": {
			podSets:   []PodSet{{PodTemplateRef: Reference{Name: "w"}, Count: 6000}, {PodTemplateRef: Reference{Name: "w"}, Count: 4001}},
			templates: []*corev1.PodTemplate{template("w", group, "compute-xlarge", xlargeUnit())},
			wantRefusal: &Refusal{Reason: ReasonTooManyUnits, Message: "spec.podSets[1]: the pod sets of machine type compute-xlarge of machine group general-machine " +
				"add up to 10001 units, more than a CapacityHold's 10000"},
		},
		"pod sets adding up to a hold's maximum are one booking": {
			podSets:      []PodSet{{PodTemplateRef: Reference{Name: "w"}, Count: 9999}, {PodTemplateRef: Reference{Name: "w"}, Count: 1}},
			templates:    []*corev1.PodTemplate{template("w", group, "compute-xlarge", xlargeUnit())},
			wantBookings: []Booking{{MachineGroup: group, MachineType: "compute-xlarge", Count: 10000}},
		},
		"a count below 1 is refused": {
			podSets:     []PodSet{{PodTemplateRef: Reference{Name: "w"}, Count: 0}},
			templates:   []*corev1.PodTemplate{template("w", group, "compute-xlarge", xlargeUnit())},
			wantRefusal: &Refusal{Reason: ReasonPodSetNotMapped, Message: "spec.podSets[0].count is 0: it must be at least 1"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			templates := map[string]*corev1.PodTemplate{}
			for _, tpl := range tc.templates {
				templates[tpl.Name] = tpl
			}
			got, refusal := Bookings(tc.podSets, templates, machines)
			if diff := cmp.Diff(tc.wantBookings, got); diff != "" {
				t.Errorf("bookings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRefusal, refusal); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
		})
	}
}

// noLabels begins the refusal of the pod set "plain" without guest labels.
const noLabels = `spec.podSets[0]: PodTemplate "plain" has no imperator.tenzen-y.io/machine-group and imperator.tenzen-y.io/machine-type labels, ` +
	"which its pods need to use held units (the pod injector gives a unit, and a hold, only to guests)"

// A pod set without guest labels matches by shape among every Machine of
// the spoke: two groups offering one shape are both named, a type label
// alone narrows them, and a spoke without Machines says so.
func TestBookingsByShape(t *testing.T) {
	general := wrappers.GeneralMachine().Obj()
	hopper := general.DeepCopy()
	hopper.Name = "hopper"
	hopper.Labels[imperatorv1alpha1.MachineGroupKey] = "hopper-machine"
	podSets := []PodSet{{PodTemplateRef: Reference{Name: "plain"}, Count: 1}}
	cases := map[string]struct {
		machines []imperatorv1alpha1.Machine
		template *corev1.PodTemplate
		want     string
	}{
		"two groups offer the shape": {machines: []imperatorv1alpha1.Machine{*general, *hopper}, template: template("plain", "", "", xlargeUnit()),
			want: noLabels + `; container "train" asks for exactly one unit of each of compute-xlarge of machine group general-machine, compute-xlarge of machine group hopper-machine: ` +
				"label the Job's pod template with the machine group and type to use, and imperator.tenzen-y.io/pod-role=guest"},
		"the group label narrows them": {machines: []imperatorv1alpha1.Machine{*general, *hopper}, template: template("plain", "hopper-machine", "", xlargeUnit()),
			want: noLabels + `; container "train" asks for exactly one unit of machine type compute-xlarge of machine group hopper-machine: ` +
				"add the labels imperator.tenzen-y.io/machine-group=hopper-machine, imperator.tenzen-y.io/machine-type=compute-xlarge and imperator.tenzen-y.io/pod-role=guest to the Job's pod template"},
		"no Machine": {template: template("plain", "", "", xlargeUnit()),
			want: noLabels + "; no Machine of this cluster offers a machine type it could name: label the Job's pod template with the machine group and type it runs on"},
		"a template without containers": {machines: []imperatorv1alpha1.Machine{*general}, template: &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
			want: "spec.podSets[0]: the pod template has no containers"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, refusal := Bookings(podSets, map[string]*corev1.PodTemplate{"plain": tc.template}, tc.machines)
			if got != nil {
				t.Errorf("Bookings booked %v by shape", got)
			}
			if diff := cmp.Diff(&Refusal{Reason: ReasonPodSetNotMapped, Message: tc.want}, refusal); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHoldNameIsAShortDNSLabelOfItsInputs(t *testing.T) {
	long := "a-workload-name-kueue-gave-that-is-much-longer-than-sixty-three-characters-imperator-capacity-1"
	name := HoldName("team-a", long, "general-machine", "compute-xlarge")
	if len(name) > 63 {
		t.Errorf("HoldName is %d characters, more than a label's 63", len(name))
	}
	if name != HoldName("team-a", long, "general-machine", "compute-xlarge") {
		t.Error("HoldName is not a function of its inputs")
	}
	for _, other := range []string{HoldName("team-b", long, "general-machine", "compute-xlarge"),
		HoldName("team-a", long, "general-machine", "compute-medium"), HoldName("team-a", "train", "general-machine", "compute-xlarge")} {
		if other == name {
			t.Errorf("HoldName %s is the same for other inputs", name)
		}
	}
}
