package migrate_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/spoke/internal/migrate"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

const (
	ns            = framework.AgentNamespace
	machineName   = "machine-with-gpus"
	group         = "gpu-machines"
	machineType   = "compute-xmedium"
	originalSts   = "gpu-machines-compute-xmedium"
	originalPool  = "gpu-machines-node-pool"
	agentSts      = "compute-xmedium-gpu-machines"
	agentPoolName = "machine-with-gpus-node-pool"
)

// TestMigrationFromTheOriginal walks a cluster the original Imperator ran in
// (the fixtures of testdata, under the original's CRDs) through the
// migration: the preflight finds each of the original's objects and blocks
// while it runs; the agent's CRDs take over the stored objects; once the
// original is stopped and gpu.num fixed with the command the preflight
// printed, the agent starts; adoption hands the units over one at a time
// and removes the original's StatefulSet, Service and pool only after the
// agent's reservation holds them; the original's running guest is never
// touched. envtest has no controller-manager or scheduler: the test plays
// the StatefulSet controller (deleting a scaled-away pod) and the scheduler
// (binding the agent's reservation pods).
func TestMigrationFromTheOriginal(t *testing.T) {
	ctrllog.SetLogger(logr.Discard()) // the node-pool controllers' logs
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := framework.Start(ctx, framework.Options{
		CRDs:       []string{"spoke/internal/migrate/testdata/original-crds"},
		Namespaces: []string{ns},
	})
	if err != nil {
		t.Fatalf("starting the API server: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	c := env.Client

	// What the original leaves: its Machine first (its UID goes into the
	// owner references), a guest of the original running, then the rest.
	fixtures := readFixtures(t)
	create(ctx, t, c, fixtures["Machine"]...)
	machine := getMachine(ctx, t, c)
	guest := originalGuest(ctx, t, c)
	for _, kind := range []string{"Node", "MachineNodePool", "StatefulSet", "Service", "Deployment"} {
		for _, obj := range fixtures[kind] {
			setOwnerUID(obj, machine.GetUID())
		}
		create(ctx, t, c, fixtures[kind]...)
	}
	for ordinal := range 2 {
		createReservationPod(ctx, t, c, originalSts, ordinal, "gpu-node-0")
	}

	// The agent's CRDs replace the original's, objects kept. (Before the
	// original's webhooks are created here only for the probe of the new
	// schema: their service does not exist in envtest.)
	installAgentCRDs(ctx, t, env)
	create(ctx, t, c, fixtures["MutatingWebhookConfiguration"]...)
	create(ctx, t, c, fixtures["ValidatingWebhookConfiguration"]...)

	report, err := migrate.Preflight(ctx, c, ns)
	if err != nil {
		t.Fatalf("Preflight: %v", err)
	}
	type found struct {
		Object   string
		Blocking bool
	}
	var got []found
	for _, f := range report.Findings {
		got = append(got, found{f.Kind + " " + f.Namespace + "/" + f.Name, f.Blocking})
	}
	want := []found{
		{"Deployment imperator-system/imperator-controller", true},
		{"MutatingWebhookConfiguration /imperator-mutating-webhook-configuration", true},
		{"ValidatingWebhookConfiguration /imperator-validating-webhook-configuration", true},
		{"Machine /machine-with-gpus", true},
		{"MachineNodePool /gpu-machines-node-pool", false},
		{"StatefulSet imperator-system/gpu-machines-compute-xmedium", false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Preflight findings (-want +got):\n%s", diff)
	}
	var printed bytes.Buffer
	if err := report.Print(&printed); err != nil {
		t.Fatalf("Print: %v", err)
	}
	for _, line := range []string{
		"BLOCKING Deployment imperator-system/imperator-controller: the original's controller runs (1 replica(s))",
		"kubectl -n imperator-system scale deployment imperator-controller --replicas=0",
		"kubectl delete mutatingwebhookconfiguration imperator-mutating-webhook-configuration",
		`machine type "compute-xmedium" stores gpu.num as the string "1"`,
		"kubectl annotate machine -l imperator.tenzen-y.io/machine-group=gpu-machines imperator.tenzen-y.io/adopt-original=true",
		"6 finding(s), 4 blocking",
	} {
		if !strings.Contains(printed.String(), line) {
			t.Errorf("the report lacks %q:\n%s", line, printed.String())
		}
	}
	kubeconfig := writeKubeconfig(t, env)
	var stdout, stderr bytes.Buffer
	if code := migrate.Command(ctx, []string{"preflight", "--kubeconfig", kubeconfig}, &stdout, &stderr); code != 1 {
		t.Errorf("spoke migrate preflight with the original running: exit %d, want 1; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "BLOCKING Deployment imperator-system/imperator-controller") {
		t.Errorf("spoke migrate preflight printed:\n%s", stdout.String())
	}
	err = migrate.Startup(ctx, c, ns, logr.Discard())
	if err == nil || !strings.Contains(err.Error(), "Deployment imperator-system/imperator-controller") ||
		!strings.Contains(err.Error(), "MutatingWebhookConfiguration imperator-mutating-webhook-configuration") {
		t.Fatalf("Startup with the original running: %v, want a refusal naming its Deployment and webhooks", err)
	}
	// The agent's typed client cannot read the Machine yet.
	if err := c.Get(ctx, types.NamespacedName{Name: machineName}, &imperatorv1alpha1.Machine{}); err == nil {
		t.Fatalf("reading the Machine with gpu.num \"1\" in the agent's type: no error, the preflight's blocking finding is wrong")
	}

	// The user stops the original and runs the patch the report printed.
	scaleDeployment(ctx, t, c, 0)
	for _, obj := range append(fixtures["MutatingWebhookConfiguration"], fixtures["ValidatingWebhookConfiguration"]...) {
		if err := c.Delete(ctx, obj); err != nil {
			t.Fatalf("deleting %s: %v", obj.GetName(), err)
		}
	}
	patch := findingAction(t, report, "Machine")
	if _, err := kubectl(env, shellWords(t, patch)[1:]...); err != nil {
		t.Fatalf("running the preflight's patch %s: %v", patch, err)
	}
	typed := &imperatorv1alpha1.Machine{}
	if err := c.Get(ctx, types.NamespacedName{Name: machineName}, typed); err != nil {
		t.Fatalf("reading the patched Machine in the agent's type: %v", err)
	}
	if num := typed.Spec.MachineTypes[0].Spec.GPU.Num; num != 1 {
		t.Fatalf("gpu.num after the patch = %d, want 1", num)
	}

	stdout.Reset()
	stderr.Reset()
	if code := migrate.Command(ctx, []string{"preflight", "--kubeconfig", kubeconfig}, &stdout, &stderr); code != 0 {
		t.Errorf("spoke migrate preflight with the original stopped: exit %d, want 0; stdout:\n%s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if err := migrate.Startup(ctx, c, ns, logr.Discard()); err != nil {
		t.Fatalf("Startup with the original stopped: %v", err)
	}
	for _, obj := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}} {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: originalSts}, obj); err != nil {
			t.Fatalf("getting the original's %T: %v", obj, err)
		}
		if ref := metav1.GetControllerOf(obj); ref != nil {
			t.Errorf("the original's %T is still controlled by %s after Startup: the agent's Machine controller would delete it", obj, ref.Name)
		}
		if len(obj.GetOwnerReferences()) != 1 || obj.GetOwnerReferences()[0].UID != machine.GetUID() {
			t.Errorf("the original's %T owner references = %v, want the Machine kept as owner", obj, obj.GetOwnerReferences())
		}
	}

	// Startup made the agent's pool of the Machine and left the original's
	// listing no node: otherwise, older and alone until the agent's pool
	// exists, the original's (read with no group under the agent's CRD)
	// would take the node and label it for no group, and keep it.
	getPool(ctx, t, c, agentPoolName)
	retired := getPool(ctx, t, c, originalPool)
	if nodes, _, _ := unstructured.NestedSlice(retired.Object, "spec", "nodePool"); len(nodes) != 0 {
		t.Fatalf("the original's pool still lists %d node(s) after Startup", len(nodes))
	}
	if g, _, _ := unstructured.NestedString(retired.Object, "spec", "machineGroup"); g != group {
		t.Errorf("the original's pool's spec.machineGroup after Startup = %q, want %q", g, group)
	}
	// The agent's node-pool controllers start (as after Startup in the
	// agent): its pool configures the node.
	mgr, err := env.StartManager(ctx, framework.ManagerOptions{SetupMulticluster: nodepool.SetupWithManager})
	if err != nil {
		t.Fatalf("starting the node-pool controllers: %v", err)
	}
	t.Cleanup(func() {
		if err := mgr.Stop(); err != nil {
			t.Errorf("stopping the node-pool controllers: %v", err)
		}
	})
	waitFor(ctx, t, "the agent's pool to configure gpu-node-0 for gpu-machines", func() (bool, error) {
		return nodeConfigured(ctx, c)
	})

	// Adoption, asked on the Machine.
	adopter := &migrate.Adopter{Client: c, Namespace: ns}
	annotate(ctx, t, c, migrate.AdoptAnnotation, "true")
	pass(ctx, t, adopter)
	if fin := getPool(ctx, t, c, originalPool).GetFinalizers(); slices.Contains(fin, migrate.OriginalNodePoolFinalizer) {
		t.Errorf("the original's pool keeps its finalizer %v after a pass", fin)
	}
	expectOriginal(ctx, t, c, 2, 2, "waiting for the agent's reservation "+agentSts)

	// The agent's reservation of the type: two pods, Pending while the
	// original's hold the node; and the agent's pool.
	agentStatefulSet(ctx, t, c, machine)
	for ordinal := range 2 {
		createReservationPod(ctx, t, c, agentSts, ordinal, "")
	}

	pass(ctx, t, adopter)
	expectOriginal(ctx, t, c, 1, 2, "one unit released")
	pass(ctx, t, adopter) // its pod 1 still there: no second step
	expectOriginal(ctx, t, c, 1, 2, "a reservation pod of the original leaving")
	deletePod(ctx, t, c, originalSts+"-1") // the StatefulSet controller
	pass(ctx, t, adopter)                  // the agent did not take the unit yet
	expectOriginal(ctx, t, c, 1, 1, "waiting for it to take the unit released")
	pass(ctx, t, adopter)
	expectOriginal(ctx, t, c, 1, 1, "waiting for it to take the unit released")

	bind(ctx, t, c, agentSts+"-0", "gpu-node-0") // the scheduler
	pass(ctx, t, adopter)
	expectOriginal(ctx, t, c, 0, 1, "one unit released")
	pass(ctx, t, adopter)
	expectOriginal(ctx, t, c, 0, 1, "leaving")
	deletePod(ctx, t, c, originalSts+"-0")
	bind(ctx, t, c, agentSts+"-1", "gpu-node-0")
	pass(ctx, t, adopter)
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: originalSts}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the original's StatefulSet after its last pod left: %v, want deleted", err)
	}
	getPool(ctx, t, c, originalPool) // still there this pass
	pass(ctx, t, adopter)
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: originalSts}, &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("the original's Service at the end: %v, want deleted", err)
	}
	waitFor(ctx, t, "the original's pool to be gone", func() (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Name: originalPool}, &imperatorv1alpha1.MachineNodePool{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	getPool(ctx, t, c, agentPoolName)
	if ok, err := nodeConfigured(ctx, c); !ok || err != nil {
		t.Errorf("gpu-node-0 after the original's pool went: configured %v (%v), want still configured for gpu-machines", ok, err)
	}
	if got := getMachine(ctx, t, c).GetAnnotations()[migrate.AdoptionAnnotation]; got != migrate.AdoptionDone {
		t.Errorf("adoption progress at the end = %q, want %q", got, migrate.AdoptionDone)
	}
	// Nothing running was evicted: the guest and the agent's reservations.
	after := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(guest), after); err != nil || after.UID != guest.UID || after.DeletionTimestamp != nil {
		t.Errorf("the original's running guest after the migration: %v (uid %s, deleting %v), want untouched", err, after.UID, after.DeletionTimestamp)
	}
	for ordinal := range 2 {
		pod := &corev1.Pod{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("%s-%d", agentSts, ordinal)}, pod); err != nil || pod.DeletionTimestamp != nil {
			t.Errorf("the agent's reservation pod %d after the migration: %v", ordinal, err)
		}
	}
}

// TestCommandLine: usage errors answer 2 and say what is expected.
func TestCommandLine(t *testing.T) {
	for name, args := range map[string][]string{
		"no subcommand":      nil,
		"unknown subcommand": {"adopt"},
		"extra argument":     {"preflight", "now"},
		"empty namespace":    {"preflight", "--namespace="},
		"unknown flag":       {"preflight", "--kube-config=x"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := migrate.Command(context.Background(), args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if stderr.Len() == 0 {
				t.Errorf("nothing said on stderr")
			}
		})
	}
}

func readFixtures(t *testing.T) map[string][]client.Object {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "original.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]client.Object{}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decoding testdata/original.yaml: %v", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		out[obj.GetKind()] = append(out[obj.GetKind()], obj)
	}
	return out
}

func setOwnerUID(obj client.Object, uid types.UID) {
	refs := obj.GetOwnerReferences()
	for i := range refs {
		if refs[i].UID == "MACHINE_UID" {
			refs[i].UID = uid
		}
	}
	obj.SetOwnerReferences(refs)
}

func create(ctx context.Context, t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
}

func getMachine(ctx context.Context, t *testing.T, c client.Client) *unstructured.Unstructured {
	t.Helper()
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(imperatorv1alpha1.GroupVersion.WithKind("Machine"))
	if err := c.Get(ctx, types.NamespacedName{Name: machineName}, m); err != nil {
		t.Fatalf("getting the Machine: %v", err)
	}
	return m
}

func getPool(ctx context.Context, t *testing.T, c client.Client, name string) *unstructured.Unstructured {
	t.Helper()
	p := &unstructured.Unstructured{}
	p.SetGroupVersionKind(imperatorv1alpha1.GroupVersion.WithKind("MachineNodePool"))
	if err := c.Get(ctx, types.NamespacedName{Name: name}, p); err != nil {
		t.Fatalf("getting MachineNodePool %s: %v", name, err)
	}
	return p
}

// originalGuest is a guest the original injected, running on the pool node
// in a namespace with the original's label.
func originalGuest(ctx context.Context, t *testing.T, c client.Client) *corev1.Pod {
	t.Helper()
	create(ctx, t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a",
		Labels: map[string]string{imperatorv1alpha1.LegacyInjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}})
	guest := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "training-0", Labels: map[string]string{
			imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: machineType,
			imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest),
		}},
		Spec: corev1.PodSpec{NodeName: "gpu-node-0", Containers: []corev1.Container{{Name: "train", Image: "trainer"}}},
	}
	create(ctx, t, c, guest)
	guest.Status.Phase = corev1.PodRunning
	if err := c.Status().Update(ctx, guest); err != nil {
		t.Fatalf("marking the guest running: %v", err)
	}
	return guest
}

// createReservationPod creates ordinal of the StatefulSet sts's pods, as the
// StatefulSet controller does, bound to node when it is not empty.
func createReservationPod(ctx context.Context, t *testing.T, c client.Client, sts string, ordinal int, node string) {
	t.Helper()
	owner := &appsv1.StatefulSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: sts}, owner); err != nil {
		t.Fatalf("getting StatefulSet %s: %v", sts, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", sts, ordinal), Labels: owner.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec: *owner.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	create(ctx, t, c, pod)
}

func agentStatefulSet(ctx context.Context, t *testing.T, c client.Client, machine *unstructured.Unstructured) *appsv1.StatefulSet {
	t.Helper()
	labels := map[string]string{imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: machineType,
		imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleReservation)}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: agentSts, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(machine, imperatorv1alpha1.GroupVersion.WithKind("Machine"))}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "reserve", Image: "registry.k8s.io/pause:3.10"}}}}},
	}
	create(ctx, t, c, sts)
	return sts
}

// nodeConfigured is whether gpu-node-0 carries the agent's configuration
// for compute-xmedium of gpu-machines (the machine-type label only the agent
// writes) and the agent's pool reports it as its own (not Conflict; envtest's
// node keeps its not-ready taint, so NotReady).
func nodeConfigured(ctx context.Context, c client.Client) (bool, error) {
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: "gpu-node-0"}, node); err != nil {
		return false, err
	}
	if node.Labels[imperatorv1alpha1.MachineTypeKey] != machineType || node.Labels[imperatorv1alpha1.MachineTypeKeyFor(machineType)] != group ||
		node.Annotations[imperatorv1alpha1.MachineGroupKey] != group {
		return false, nil
	}
	pool := &imperatorv1alpha1.MachineNodePool{}
	if err := c.Get(ctx, types.NamespacedName{Name: agentPoolName}, pool); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return len(pool.Status.NodePool) == 1 && pool.Status.NodePool[0].Condition != "" &&
		pool.Status.NodePool[0].Condition != imperatorv1alpha1.NodeConditionConflict, nil
}

// installAgentCRDs replaces the original's CRDs by the agent's, as
// `kubectl apply` or Helm does, and waits until the API server validates
// Machines by the agent's schema (a gpu.num string refused).
func installAgentCRDs(ctx context.Context, t *testing.T, env *framework.Environment) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crdClient, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	c := env.Client
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	read := &envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "deploy/spoke/crd")}}
	if err := envtest.ReadCRDFiles(read); err != nil {
		t.Fatalf("reading the agent's CRDs: %v", err)
	}
	crds := read.CRDs
	for _, crd := range crds {
		current := &apiextensionsv1.CustomResourceDefinition{}
		err := crdClient.Get(ctx, types.NamespacedName{Name: crd.Name}, current)
		switch {
		case apierrors.IsNotFound(err):
			create(ctx, t, crdClient, crd)
		case err != nil:
			t.Fatalf("getting CRD %s: %v", crd.Name, err)
		default:
			crd.ResourceVersion = current.ResourceVersion
			if err := crdClient.Update(ctx, crd); err != nil {
				t.Fatalf("replacing CRD %s by the agent's: %v", crd.Name, err)
			}
		}
	}
	if err := envtest.WaitForCRDs(env.Config, crds, envtest.CRDInstallOptions{MaxTime: 30 * time.Second, PollInterval: 100 * time.Millisecond}); err != nil {
		t.Fatalf("waiting for the agent's CRDs: %v", err)
	}
	probe := readFixtures(t)["Machine"][0].(*unstructured.Unstructured)
	probe.SetName("schema-probe")
	waitFor(ctx, t, "the agent's Machine schema to refuse a gpu.num string", func() (bool, error) {
		err := c.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return apierrors.IsInvalid(err), nil
	})
}

// waitFor polls done every 100ms for 30s.
func waitFor(ctx context.Context, t *testing.T, what string, done func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ok, err := done()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func writeKubeconfig(t *testing.T, env *framework.Environment) string {
	t.Helper()
	user, err := env.Envtest.AddUser(envtest.User{Name: "migrator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("adding a user: %v", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("writing its kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubectl runs the control plane's kubectl against env's API server.
func kubectl(env *framework.Environment, args ...string) (string, error) {
	user, err := env.Envtest.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding a kubectl user: %w", err)
	}
	k, err := user.Kubectl()
	if err != nil {
		return "", fmt.Errorf("configuring kubectl: %w", err)
	}
	k.Path = filepath.Join(harness.BinDir(), "kubectl")
	stdout, stderr, err := k.Run(args...)
	if err != nil {
		errOut, _ := io.ReadAll(stderr)
		return "", fmt.Errorf("kubectl %v: %w: %s", args, err, errOut)
	}
	out, err := io.ReadAll(stdout)
	return string(out), err
}

func findingAction(t *testing.T, report migrate.Report, kind string) string {
	t.Helper()
	for _, f := range report.Findings {
		if f.Kind == kind {
			return f.Action
		}
	}
	t.Fatalf("no %s finding", kind)
	return ""
}

// shellWords splits a command line of plain words and single-quoted ones.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	for len(line) > 0 {
		line = strings.TrimLeft(line, " ")
		switch {
		case line == "":
		case line[0] == '\'':
			end := strings.IndexByte(line[1:], '\'')
			if end < 0 {
				t.Fatalf("unterminated quote in %q", line)
			}
			words = append(words, line[1:end+1])
			line = line[end+2:]
		default:
			end := strings.IndexByte(line, ' ')
			if end < 0 {
				end = len(line)
			}
			words = append(words, line[:end])
			line = line[end:]
		}
	}
	return words
}

func scaleDeployment(ctx context.Context, t *testing.T, c client.Client, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "imperator-controller"}, d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = ptr.To(replicas)
	if err := c.Update(ctx, d); err != nil {
		t.Fatalf("scaling the original's Deployment: %v", err)
	}
}

func annotate(ctx context.Context, t *testing.T, c client.Client, key, value string) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if err := c.Patch(ctx, getMachine(ctx, t, c), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("annotating the Machine: %v", err)
	}
}

func pass(ctx context.Context, t *testing.T, a *migrate.Adopter) {
	t.Helper()
	if err := a.Pass(ctx); err != nil {
		t.Fatalf("adoption pass: %v", err)
	}
}

// expectOriginal checks the original's StatefulSet's replicas and pods and
// the progress the Machine shows.
func expectOriginal(ctx context.Context, t *testing.T, c client.Client, replicas, pods int, progress string) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: originalSts}, sts); err != nil {
		t.Fatalf("getting the original's StatefulSet: %v", err)
	}
	if got := ptr.Deref(sts.Spec.Replicas, -1); got != int32(replicas) {
		t.Errorf("the original's StatefulSet replicas = %d, want %d", got, replicas)
	}
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pod := range list.Items {
		if strings.HasPrefix(pod.Name, originalSts+"-") {
			n++
		}
	}
	if n != pods {
		t.Errorf("the original's reservation pods = %d, want %d", n, pods)
	}
	if got := getMachine(ctx, t, c).GetAnnotations()[migrate.AdoptionAnnotation]; !strings.Contains(got, progress) {
		t.Errorf("adoption progress = %q, want it to say %q", got, progress)
	}
}

func deletePod(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
}

// bind binds a pod to node as the scheduler does.
func bind(ctx context.Context, t *testing.T, c client.Client, name, node string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := c.SubResource("binding").Create(ctx, pod, binding); err != nil {
		t.Fatalf("binding pod %s: %v", name, err)
	}
}
