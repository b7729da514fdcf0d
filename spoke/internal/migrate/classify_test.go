package migrate

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func reservationLabels(group, machineType string) map[string]string {
	return map[string]string{
		imperatorv1alpha1.MachineGroupKey: group,
		imperatorv1alpha1.MachineTypeKey:  machineType,
		imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleReservation),
	}
}

func TestIsOriginalReservation(t *testing.T) {
	cases := map[string]struct {
		obj  client.Object
		want bool
	}{
		"the original's StatefulSet <group>-<type>": {
			obj:  &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "gpu-machines-compute-xmedium", Labels: reservationLabels("gpu-machines", "compute-xmedium")}},
			want: true,
		},
		"the original's Service": {
			obj:  &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gpu-machines-compute-xmedium", Labels: reservationLabels("gpu-machines", "compute-xmedium")}},
			want: true,
		},
		"the agent's StatefulSet <type>-<group>": {
			obj: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "compute-xmedium-gpu-machines", Labels: reservationLabels("gpu-machines", "compute-xmedium")}},
		},
		"a name both would give (group and type alike) is the agent's": {
			obj: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "a-a", Labels: reservationLabels("a", "a")}},
		},
		"a guest's labels": {
			obj: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "gpu-machines-compute-xmedium", Labels: map[string]string{
				imperatorv1alpha1.MachineGroupKey: "gpu-machines", imperatorv1alpha1.MachineTypeKey: "compute-xmedium",
				imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)}}},
		},
		"no labels": {
			obj: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "gpu-machines-compute-xmedium"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := isOriginalReservation(tc.obj); got != tc.want {
				t.Errorf("isOriginalReservation = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsOriginalDeployment(t *testing.T) {
	deployment := func(name string, labels map[string]string, c corev1.Container) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}}
	}
	cases := map[string]struct {
		d    *appsv1.Deployment
		want bool
	}{
		"its image, renamed": {
			d:    deployment("gpu-controller", nil, corev1.Container{Image: "ghcr.io/tenzen-y/imperator/imperator-controller:v0.1.0"}),
			want: true,
		},
		"its binary, mirrored image": {
			d:    deployment("gpu-controller", nil, corev1.Container{Image: "registry.example/imperator:v0.1.0", Command: []string{"/imperator-controller"}}),
			want: true,
		},
		"its name and label": {
			d:    deployment("imperator-controller", map[string]string{"app.kubernetes.io/name": "imperator"}, corev1.Container{Image: "x"}),
			want: true,
		},
		"the agent": {
			d: deployment("imperator-spoke", map[string]string{"app.kubernetes.io/name": "imperator-spoke"}, corev1.Container{Image: "ghcr.io/imperator-federation/spoke:v1"}),
		},
		"its name alone": {
			d: deployment("imperator-controller", nil, corev1.Container{Image: "x"}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := isOriginalDeployment(tc.d); got != tc.want {
				t.Errorf("isOriginalDeployment = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReportPrint(t *testing.T) {
	r := Report{Findings: []Finding{
		{Kind: "MachineNodePool", Name: "g-node-pool", Problem: "p1", Action: "a1\na2"},
		{Kind: "Deployment", Namespace: "imperator-system", Name: "imperator-controller", Problem: "runs", Action: "scale", Blocking: true},
	}}
	var out bytes.Buffer
	if err := r.Print(&out); err != nil {
		t.Fatal(err)
	}
	want := "BLOCKING Deployment imperator-system/imperator-controller: runs\n    scale\n" +
		"TODO MachineNodePool g-node-pool: p1\n    a1\n    a2\n" +
		"2 finding(s), 1 blocking (docs/migration.md)\n"
	if out.String() != want {
		t.Errorf("Print =\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if err := (Report{}).Print(&out); err != nil || !strings.Contains(out.String(), "Nothing of the original Imperator found") {
		t.Errorf("Print of an empty report = %q, %v", out.String(), err)
	}
}
