// Package deploy_test verifies the install manifests of deploy/ against a real
// API server: every kustomize base and overlay renders and passes a
// server-side dry-run apply, and the real spoke and hub binaries work with
// exactly the RBAC the manifests grant (their ServiceAccounts impersonated) —
// and fail with a forbidden error when a rule is taken away. The Helm charts
// of deploy/charts pass helm lint, render for every documented value set,
// pass the same dry-run, and render the same objects as the matching
// kustomize base or overlay (and so the RBAC the binaries were run under).
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/repo"
)

func TestDeploy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Install manifests")
}

var (
	// root is the repository root, kustomize and helm the pinned tools and
	// binDir holds the spoke and hub binaries under test.
	root, kustomize, helm, binDir string
	// cluster is the harness cluster every spec installs into.
	cluster *harness.Cluster
	// procs are the binaries the specs started, for the failure report.
	procsMu sync.Mutex
	procs   []*harness.Process
)

var _ = BeforeSuite(func(ctx context.Context) {
	var err error
	root, err = repo.Root()
	Expect(err).NotTo(HaveOccurred())
	kustomize, err = repo.Tool("kustomize")
	Expect(err).NotTo(HaveOccurred())

	// Build helm (on a machine whose tool cache lacks it) and the binaries
	// while the cluster starts; $IMPERATOR_BIN_DIR skips the binaries' build
	// when it already holds both.
	helmBuilt := make(chan error, 1)
	go func() {
		var err error
		helm, err = repo.Tool("helm")
		helmBuilt <- err
	}()
	built := make(chan error, 1)
	buildDir := GinkgoT().TempDir()
	go func() {
		var err error
		binDir, err = repo.Binaries(ctx, buildDir, "spoke", "hub")
		built <- err
	}()
	cluster, err = harness.Start(ctx, harness.Options{
		Name: "deploy",
		// As some distributions do: owner references that block deletion
		// need update on the owner's finalizers, which the minimality specs
		// prove the agent's RBAC grants.
		// The alpha Workload API serves native PodGroups, which the agent
		// then watches (the RBAC specs prove its rules for them).
		APIServerFlags: []string{"--enable-admission-plugins=OwnerReferencesPermissionEnforcement", harness.WorkloadAPIRuntimeConfig},
		FeatureGates:   harness.WorkloadAPIFeatureGates,
	})
	DeferCleanup(func() {
		if cluster != nil {
			Expect(cluster.Stop()).To(Succeed())
		}
	})
	buildErr, helmErr := <-built, <-helmBuilt
	Expect(err).NotTo(HaveOccurred())
	installCoschedulingCRD(ctx)
	installProvisioningRequestCRD(ctx)
	Expect(buildErr).NotTo(HaveOccurred())
	Expect(helmErr).NotTo(HaveOccurred())
	// On a machine whose tool cache is empty, the kustomize and helm builds
	// take a few minutes of the budget (helm alone 125 s with a cold Go build
	// cache on 2 cores, while other suites build too).
}, NodeTimeout(12*time.Minute))

var _ = ReportAfterEach(func(report SpecReport) {
	if !report.Failed() {
		return
	}
	if cluster != nil {
		AddReportEntry("cluster logs", cluster.Logs(40))
	}
	procsMu.Lock()
	defer procsMu.Unlock()
	for _, p := range procs {
		AddReportEntry("log of "+p.Name(), p.Tail(60))
	}
})

// render runs `kustomize build dir` and decodes the objects.
func render(ctx context.Context, dir string) ([]*unstructured.Unstructured, error) {
	cmd := exec.CommandContext(ctx, kustomize, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, stderr.String())
	}
	return decodeObjects(out, "kustomize build "+dir)
}

// decodeObjects decodes the multi-document YAML out that what produced.
func decodeObjects(out []byte, what string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding the output of %s: %w", what, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// apply applies objs with kubectl as the cluster admin; extra are further
// kubectl flags such as --dry-run=server.
func apply(ctx context.Context, objs []*unstructured.Unstructured, extra ...string) (string, error) {
	if len(objs) == 0 {
		return "", nil
	}
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		items = append(items, o.Object)
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return "", fmt.Errorf("encoding objects: %w", err)
	}
	// Not GinkgoT().TempDir(): apply also runs in DeferCleanup callbacks.
	f, err := os.CreateTemp("", "imperator-deploy-*.json")
	if err != nil {
		return "", fmt.Errorf("creating temporary file: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, err = f.Write(data)
	if err = errors.Join(err, f.Close()); err != nil {
		return "", fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return cluster.Kubectl(ctx, append([]string{"apply", "--server-side", "--force-conflicts", "--field-manager=deploy-test", "-f", f.Name()}, extra...)...)
}

// ofKind returns the objects of objs whose kind is one of kinds.
func ofKind(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// except returns the objects of objs whose kind is none of kinds.
func except(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if !slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// impersonatingKubeconfig writes a copy of the admin kubeconfig whose user
// impersonates the ServiceAccount namespace/name; the API server then
// authorizes every request with exactly that account's RBAC.
func impersonatingKubeconfig(namespace, name string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(cluster.KubeconfigPath)
	if err != nil {
		return "", fmt.Errorf("loading %s: %w", cluster.KubeconfigPath, err)
	}
	for _, user := range cfg.AuthInfos {
		user.Impersonate = "system:serviceaccount:" + namespace + ":" + name
	}
	path := filepath.Join(GinkgoT().TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// start starts a binary of binDir; it is stopped when the current node ends.
func start(name, bin string, args ...string) *harness.Process {
	GinkgoHelper()
	p, err := harness.StartProcess(name, filepath.Join(binDir, bin), args, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	DeferCleanup(func() {
		Expect(p.Stop()).To(Succeed())
		procsMu.Lock()
		defer procsMu.Unlock()
		for i, q := range procs {
			if q == p {
				procs = append(procs[:i], procs[i+1:]...)
				break
			}
		}
	})
	return p
}

// logOf returns the output of p so far with JSON string escaping of quotes
// undone, so that API errors can be matched as the API server wrote them.
func logOf(p *harness.Process) string {
	data, err := os.ReadFile(p.LogPath())
	if err != nil {
		return ""
	}
	return strings.ReplaceAll(string(data), `\"`, `"`)
}

// ready reports whether the /readyz endpoint at addr answers 200.
func ready(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz answered %s", resp.Status)
	}
	return nil
}

// withoutVerb returns a copy of the ClusterRole or Role role with verb removed
// from the rules that grant it on resource. A rule that also covers other
// resources (controller-gen merges rules with the same verbs) is split: the
// other resources keep every verb.
func withoutVerb(role *unstructured.Unstructured, resource, verb string) *unstructured.Unstructured {
	GinkgoHelper()
	role = role.DeepCopy()
	rules, _, err := unstructured.NestedSlice(role.Object, "rules")
	Expect(err).NotTo(HaveOccurred())
	removed := false
	var out []any
	for _, r := range rules {
		rule := r.(map[string]any)
		resources, _, _ := unstructured.NestedStringSlice(rule, "resources")
		if !slices.Contains(resources, resource) {
			out = append(out, rule)
			continue
		}
		if len(resources) > 1 {
			others := runtime.DeepCopyJSON(rule)
			var rest []any
			for _, res := range resources {
				if res != resource {
					rest = append(rest, res)
				}
			}
			others["resources"] = rest
			out = append(out, others)
			rule = runtime.DeepCopyJSON(rule)
			rule["resources"] = []any{resource}
		}
		verbs, _, _ := unstructured.NestedStringSlice(rule, "verbs")
		var kept []any
		for _, v := range verbs {
			if v == verb {
				removed = true
				continue
			}
			kept = append(kept, v)
		}
		rule["verbs"] = kept
		out = append(out, rule)
	}
	Expect(removed).To(BeTrue(), "%s %s grants no %s on %s", role.GetKind(), role.GetName(), verb, resource)
	Expect(unstructured.SetNestedSlice(role.Object, out, "rules")).To(Succeed())
	return role
}

// atURL returns copies of the webhook configurations objs whose webhooks call
// base plus their Service path instead of the Service: what the API server of
// the test cluster, which has no Service network, can reach.
func atURL(objs []*unstructured.Unstructured, base string) []*unstructured.Unstructured {
	GinkgoHelper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		o = o.DeepCopy()
		webhooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
		Expect(err).NotTo(HaveOccurred())
		for _, w := range webhooks {
			cc := w.(map[string]any)["clientConfig"].(map[string]any)
			path, _, _ := unstructured.NestedString(cc, "service", "path")
			Expect(path).NotTo(BeEmpty(), "webhook %v has no Service path", w.(map[string]any)["name"])
			delete(cc, "service")
			cc["url"] = base + path
		}
		Expect(unstructured.SetNestedSlice(o.Object, webhooks, "webhooks")).To(Succeed())
		out = append(out, o)
	}
	return out
}

// installCoschedulingCRD installs a minimal CustomResourceDefinition of the
// scheduler-plugins coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1,
// any spec), as a cluster running that scheduler has: an agent started
// after it watches those PodGroups too.
func installCoschedulingCRD(ctx context.Context) {
	GinkgoHelper()
	manifest := filepath.Join(GinkgoT().TempDir(), "podgroups-crd.yaml")
	Expect(os.WriteFile(manifest, []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podgroups.scheduling.x-k8s.io
spec:
  group: scheduling.x-k8s.io
  scope: Namespaced
  names: {kind: PodGroup, listKind: PodGroupList, plural: podgroups, singular: podgroup}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`), 0o600)).To(Succeed())
	_, err := cluster.Kubectl(ctx, "apply", "-f", manifest)
	Expect(err).NotTo(HaveOccurred())
	_, err = cluster.Kubectl(ctx, "wait", "--for=condition=Established", "crd/podgroups.scheduling.x-k8s.io", "--timeout=60s")
	Expect(err).NotTo(HaveOccurred())
}

// installProvisioningRequestCRD installs the ProvisioningRequest CRD the
// spoke chart ships (deploy/spoke/provisioningrequest), as a cluster with
// Cluster Autoscaler or Kueue has: an agent started after it serves the
// class capacity-hold.imperator.tenzen-y.io.
func installProvisioningRequestCRD(ctx context.Context) {
	GinkgoHelper()
	root, err := repo.Root()
	Expect(err).NotTo(HaveOccurred())
	_, err = cluster.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(root, "deploy", "spoke", "provisioningrequest", "autoscaling.x-k8s.io_provisioningrequests.yaml"))
	Expect(err).NotTo(HaveOccurred())
	_, err = cluster.Kubectl(ctx, "wait", "--for=condition=Established", "crd/provisioningrequests.autoscaling.x-k8s.io", "--timeout=60s")
	Expect(err).NotTo(HaveOccurred())
}
