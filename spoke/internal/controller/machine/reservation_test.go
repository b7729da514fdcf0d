package machine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/machinetype"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func seedMachine() *imperatorv1alpha1.Machine {
	m := wrappers.GeneralMachine().Obj()
	m.UID = types.UID("machine-uid")
	return m
}

func typedStatefulSet(t *testing.T, m *imperatorv1alpha1.Machine, typeName string, replicas int32) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	opts := Options{Namespace: agentNS, Image: DefaultImage, PriorityClassName: DefaultPriorityClassName}
	if err := roundTrip(reservationStatefulSet(m, group, agentNS, m.MachineType(typeName), replicas, opts), sts); err != nil {
		t.Fatal(err)
	}
	return sts
}

func TestReservationStatefulSetIsSeed000s(t *testing.T) {
	sts := typedStatefulSet(t, seedMachine(), "compute-xlarge", 1)
	labels := map[string]string{
		"imperator.tenzen-y.io/machine-group": "general-machine",
		"imperator.tenzen-y.io/machine-type":  "compute-xlarge",
		"imperator.tenzen-y.io/pod-role":      "reservation",
	}
	if sts.Name != "compute-xlarge-general-machine" || sts.Namespace != agentNS || sts.Spec.ServiceName != sts.Name {
		t.Errorf("name %s/%s serviceName %s, want %s/compute-xlarge-general-machine and the same serviceName", sts.Namespace, sts.Name, sts.Spec.ServiceName, agentNS)
	}
	for what, got := range map[string]map[string]string{
		"labels": sts.Labels, "selector": sts.Spec.Selector.MatchLabels, "pod labels": sts.Spec.Template.Labels,
	} {
		if diff := cmp.Diff(labels, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}
	if owner := sts.OwnerReferences; len(owner) != 1 || owner[0].Kind != "Machine" || owner[0].UID != "machine-uid" || !ptr.Deref(owner[0].Controller, false) {
		t.Errorf("owner references %+v, want the Machine as controller", owner)
	}
	if got := ptr.Deref(sts.Spec.Replicas, -1); got != 1 {
		t.Errorf("replicas %d, want 1", got)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %s, want Parallel", sts.Spec.PodManagementPolicy)
	}
	pod := sts.Spec.Template.Spec
	wantTolerations := []corev1.Toleration{
		{Key: "imperator.tenzen-y.io/compute-xlarge", Operator: corev1.TolerationOpEqual, Value: "general-machine", Effect: corev1.TaintEffectNoSchedule},
		{Key: "imperator.tenzen-y.io/node-pool", Operator: corev1.TolerationOpEqual, Value: "ready", Effect: corev1.TaintEffectNoSchedule},
	}
	if diff := cmp.Diff(wantTolerations, pod.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	wantAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "imperator.tenzen-y.io/compute-xlarge", Operator: corev1.NodeSelectorOpIn, Values: []string{"general-machine"}},
				{Key: "imperator.tenzen-y.io/node-pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"ready"}},
				{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-GeForce-RTX-3090"}},
			},
		}}},
	}}
	if diff := cmp.Diff(wantAffinity, pod.Affinity); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
	wantResources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("40"), corev1.ResourceMemory: resource.MustParse("128Gi"), "nvidia.com/gpu": resource.MustParse("2"),
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	for what, got := range map[string]corev1.ResourceList{"requests": c.Resources.Requests, "limits": c.Resources.Limits} {
		if len(got) != len(wantResources) {
			t.Errorf("%s %v, want %v", what, got, wantResources)
		}
		for name, want := range wantResources {
			if q, ok := got[name]; !ok || q.Cmp(want) != 0 {
				t.Errorf("%s[%s] = %v, want %v", what, name, got[name], want)
			}
		}
	}
	if c.Image != DefaultImage || pod.PriorityClassName != DefaultPriorityClassName || ptr.Deref(pod.TerminationGracePeriodSeconds, -1) != 0 {
		t.Errorf("image %s, priority class %s, grace period %v; want %s, %s, 0", c.Image, pod.PriorityClassName,
			pod.TerminationGracePeriodSeconds, DefaultImage, DefaultPriorityClassName)
	}
}

func TestGPUSelectors(t *testing.T) {
	cases := map[string]struct {
		machineType string
		want        map[string]string
	}{
		"machine":   {machineType: "compute-medium", want: map[string]string{"nvidia.com/gpu.machine": "DGX-1"}},
		"family":    {machineType: "compute-large", want: map[string]string{"nvidia.com/gpu.family": "ampere"}},
		"product":   {machineType: "compute-xlarge", want: map[string]string{"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3090"}},
		"cpu only":  {machineType: "cpu-only", want: map[string]string{}},
		"every one": {machineType: "all", want: map[string]string{"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.product": "H100", "nvidia.com/gpu.machine": "DGX-H100"}},
	}
	m := wrappers.GeneralMachine().
		Type("cpu-only", "1", "1Gi", 1).
		Type("all", "1", "1Gi", 1).GPU("nvidia.com/gpu", 8, "H100", "hopper").GPUMachine("DGX-H100").Obj()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := map[string]string{}
			for _, r := range machinetype.Placement(group, m.MachineType(tc.machineType))[2:] {
				got[r.Key] = r.Values[0]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GPU selectors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatefulSetInSync(t *testing.T) {
	m := seedMachine()
	opts := Options{Namespace: agentNS, Image: DefaultImage, PriorityClassName: DefaultPriorityClassName}
	desired := reservationStatefulSet(m, group, agentNS, m.MachineType("compute-xlarge"), 1, opts)
	cases := map[string]struct {
		mutate func(*appsv1.StatefulSet)
		want   bool
	}{
		"as applied":                      {mutate: func(*appsv1.StatefulSet) {}, want: true},
		"with the API server's defaults":  {mutate: defaulted, want: true},
		"with labels of someone else too": {mutate: func(s *appsv1.StatefulSet) { s.Labels["team"] = "x" }, want: true},
		"scaled":                          {mutate: func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](3) }},
		"scaled to zero":                  {mutate: func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr.To[int32](0) }},
		"other image":                     {mutate: func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "busybox" }},
		"label removed":                   {mutate: func(s *appsv1.StatefulSet) { delete(s.Labels, imperatorv1alpha1.PodRoleKey) }},
		"other owner":                     {mutate: func(s *appsv1.StatefulSet) { s.OwnerReferences[0].UID = "other" }},
		"toleration removed": {mutate: func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Tolerations = s.Spec.Template.Spec.Tolerations[:1]
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			existing := typedStatefulSet(t, m, "compute-xlarge", 1)
			tc.mutate(existing)
			got, err := statefulSetInSync(existing, desired)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("statefulSetInSync() = %v, want %v", got, tc.want)
			}
		})
	}
}

// defaulted fills a few of the fields the API server defaults.
func defaulted(s *appsv1.StatefulSet) {
	s.UID, s.ResourceVersion, s.Generation = "uid", "42", 3
	s.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	pod := &s.Spec.Template.Spec
	pod.RestartPolicy, pod.DNSPolicy, pod.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, corev1.DefaultSchedulerName
	c := &pod.Containers[0]
	c.TerminationMessagePath, c.ImagePullPolicy = "/dev/termination-log", corev1.PullIfNotPresent
}

// A Service the API server has as applied is left alone, so that a steady
// reconcile sends no apply; one that lost a label, its selector or its owner
// is applied again.
func TestServiceInSync(t *testing.T) {
	m := seedMachine()
	desired := reservationService(m, group, agentNS, "compute-xlarge")
	cases := map[string]struct {
		mutate func(*corev1.Service)
		want   bool
	}{
		"as applied": {mutate: func(*corev1.Service) {}, want: true},
		"with the API server's defaults": {mutate: func(s *corev1.Service) {
			s.UID, s.ResourceVersion = "uid", "42"
			s.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
			s.Spec.SessionAffinity = corev1.ServiceAffinityNone
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}, want: true},
		"with labels of someone else too": {mutate: func(s *corev1.Service) { s.Labels["team"] = "x" }, want: true},
		"label removed":                   {mutate: func(s *corev1.Service) { delete(s.Labels, imperatorv1alpha1.PodRoleKey) }},
		"selector changed": {mutate: func(s *corev1.Service) {
			s.Spec.Selector[imperatorv1alpha1.MachineTypeKey] = "compute-medium"
		}},
		"other owner": {mutate: func(s *corev1.Service) { s.OwnerReferences[0].UID = "other" }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			existing := &corev1.Service{}
			if err := roundTrip(reservationService(m, group, agentNS, "compute-xlarge"), existing); err != nil {
				t.Fatal(err)
			}
			tc.mutate(existing)
			got, err := serviceInSync(existing, desired)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("serviceInSync() = %v, want %v", got, tc.want)
			}
		})
	}
}

// A Machine deleted and created again under its name takes over what the
// earlier one left before the garbage collector removes it; anything else
// controlled by another is a conflict.
func TestOwnedByEarlier(t *testing.T) {
	machine := seedMachine()
	controlledBy := func(apiVersion, kind, name string, uid types.UID) *appsv1.StatefulSet {
		sts := &appsv1.StatefulSet{}
		sts.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
		return sts
	}
	gv := imperatorv1alpha1.GroupVersion.String()
	cases := map[string]struct {
		obj  *appsv1.StatefulSet
		want bool
	}{
		"an earlier Machine of this name": {obj: controlledBy(gv, "Machine", machine.Name, "earlier-uid"), want: true},
		"an earlier Machine of another API version of the group": {
			obj: controlledBy(imperatorv1alpha1.GroupVersion.Group+"/v1", "Machine", machine.Name, "earlier-uid"), want: true,
		},
		"this Machine":                    {obj: controlledBy(gv, "Machine", machine.Name, machine.UID)},
		"another Machine of the group":    {obj: controlledBy(gv, "Machine", "general-machine-too", "other-uid")},
		"a Machine kind of another group": {obj: controlledBy("example.com/v1", "Machine", machine.Name, "earlier-uid")},
		"something else of the same name": {obj: controlledBy("apps/v1", "Deployment", machine.Name, "earlier-uid")},
		"no controller, only an owner": {obj: func() *appsv1.StatefulSet {
			s := controlledBy(gv, "Machine", machine.Name, "earlier-uid")
			s.OwnerReferences[0].Controller = nil
			return s
		}()},
		"nobody's": {obj: &appsv1.StatefulSet{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := ownedByEarlier(tc.obj, machine); got != tc.want {
				t.Errorf("ownedByEarlier() = %v, want %v", got, tc.want)
			}
		})
	}
}
