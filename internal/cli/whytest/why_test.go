// Package whytest runs imperatorctl why against a harness spoke cluster: a
// guest held at the slot gate with the annotations the agent writes, its
// Machine and the CapacityHold it claims, read through a kubeconfig as a
// user would.
package whytest

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/cli"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/test/util/framework"
)

const team = "ml-research"

func TestWhyExplainsAGatedGuest(t *testing.T) {
	ctx := context.Background()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	env, err := framework.Start(ctx, framework.Options{Name: "why", Harness: true, Scheme: scheme, CRDs: framework.SpokeCRDs, Namespaces: []string{team}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	c := env.Client

	machine := &imperatorv1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
		Spec: imperatorv1alpha1.MachineSpec{
			NodePool: []imperatorv1alpha1.NodePool{{Name: "node-1", MachineType: []imperatorv1alpha1.MachineTypeRef{{Name: "compute-xlarge"}}}},
			MachineTypes: []imperatorv1alpha1.MachineType{{
				Name: "compute-xlarge", Available: 1,
				Spec: imperatorv1alpha1.MachineTypeSpec{CPU: resource.MustParse("8"), Memory: resource.MustParse("16Gi")},
			}},
		},
	}
	if err := c.Create(ctx, machine); err != nil {
		t.Fatal(err)
	}
	machine.Status.AvailableMachines = []imperatorv1alpha1.AvailableMachine{{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 1, Reserved: 0, Used: 1, Waiting: 2, Queued: 2}}}
	if err := c.Status().Update(ctx, machine); err != nil {
		t.Fatal(err)
	}
	hold := &imperatorv1alpha1.CapacityHold{
		ObjectMeta: metav1.ObjectMeta{Name: "train-1"},
		Spec: imperatorv1alpha1.CapacityHoldSpec{MachineGroup: "team-a", MachineType: "compute-xlarge", Count: 2,
			ValidUntil: metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))},
	}
	if err := c.Create(ctx, hold); err != nil {
		t.Fatal(err)
	}
	const admitted = "2026-11-27T10:00:00.123456789Z"
	const note = "waiting for compute-xlarge: 2nd in line, 1 of 1 in use"
	guest := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer-0", Namespace: team,
			Labels: map[string]string{
				imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest), imperatorv1alpha1.MachineGroupKey: "team-a",
				imperatorv1alpha1.MachineTypeKey: "compute-xlarge", imperatorv1alpha1.GangKey: "trainers", imperatorv1alpha1.HoldKey: "train-1",
			},
			Annotations: map[string]string{
				imperatorv1alpha1.AdmittedAtAnnotation: admitted, imperatorv1alpha1.QueueAnnotation: note,
				imperatorv1alpha1.GangSizeAnnotation: "2", imperatorv1alpha1.HoldUIDAnnotation: string(hold.UID),
			},
		},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}},
			Containers:      []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if err := c.Create(ctx, guest); err != nil {
		t.Fatal(err)
	}
	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: team},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	kubeconfig := env.Cluster.KubeconfigPath

	cases := map[string]struct {
		args         []string
		wantCode     int
		wantStdout   []string
		wantStderr   string
		wantNoStdout []string
	}{
		"a gated guest": {args: []string{"why", "trainer-0", "-n", team}, wantStdout: []string{
			"Pod ml-research/trainer-0", "Machine type: team-a/compute-xlarge", "Admitted:     " + admitted,
			"waits at the slot gate " + imperatorv1alpha1.SlotSchedulingGate, "In line:      " + note,
			"gang trainers", "once 2 members fit", "claims hold train-1 (Pending)", "0 held, 0 claimed of 2",
			"1 of 1 in use on this cluster", "queued 2",
		}},
		"not a guest":           {args: []string{"why", "web", "-n", team}, wantStdout: []string{"is not a guest of Imperator"}, wantNoStdout: []string{"Gate:"}},
		"no such pod":           {args: []string{"why", "nope", "-n", team}, wantCode: cli.ExitFailure, wantStderr: "pod ml-research/nope not found"},
		"a context not in file": {args: []string{"why", "trainer-0", "-n", team, "--spoke-context", "elsewhere"}, wantCode: cli.ExitUsage, wantStderr: "spoke kubeconfig"},
		"json is not offered":   {args: []string{"why", "trainer-0", "-o", "json"}, wantCode: cli.ExitUsage, wantStderr: "is not offered"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			args := append(append([]string{}, tc.args...), "--spoke-kubeconfig", kubeconfig)
			code := cli.Run(ctx, args, cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }})
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.wantCode, stderr.String())
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, absent := range tc.wantNoStdout {
				if strings.Contains(stdout.String(), absent) {
					t.Errorf("output has %q:\n%s", absent, stdout.String())
				}
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tc.wantStderr)
			}
		})
	}

	// The hold gone, the guest waits in the ordinary line.
	if err := c.Delete(ctx, hold); err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	if code := cli.Run(ctx, []string{"why", "trainer-0", "-n", team, "--spoke-kubeconfig", kubeconfig}, cli.Env{Stdout: &stdout, Stderr: io.Discard, Getenv: func(string) string { return "" }}); code != cli.ExitOK {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stdout.String(), "which no longer exists") {
		t.Errorf("after the hold was deleted:\n%s", stdout.String())
	}
}
