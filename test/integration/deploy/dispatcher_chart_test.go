package deploy_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The MultiKueue dispatcher's kustomize base and chart: one base, no
// overlay; the chart's defaults are the base, ci/all-values.yaml every
// other value.
var _ = Describe("The MultiKueue dispatcher's install", func() {
	const chart = "imperator-dispatcher"
	allValues := func() []string { return []string{"-f", filepath.Join(chartDir(chart), "ci", "all-values.yaml")} }

	It("has its chart read deploy/dispatcher/role.yaml as it is (make generate copies it)", func() {
		want, err := os.ReadFile(filepath.Join(root, "deploy", "dispatcher", "role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		entries, err := os.ReadDir(filepath.Join(chartDir(chart), "files", "rbac"))
		Expect(err).NotTo(HaveOccurred())
		Expect(entries).To(HaveLen(1), "deploy/charts/%s/files/rbac holds other files than role.yaml: run make generate", chart)
		got, err := os.ReadFile(filepath.Join(chartDir(chart), "files", "rbac", "role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(got)).To(Equal(string(want)), "deploy/charts/%s/files/rbac/role.yaml differs from deploy/dispatcher/role.yaml: run make generate", chart)
	})

	DescribeTable("pass helm lint --strict",
		func(ctx context.Context, values func() []string) {
			_, err := helmRun(ctx, append([]string{"lint", "--strict", chartDir(chart)}, values()...)...)
			Expect(err).NotTo(HaveOccurred())
		},
		Entry("default values", func() []string { return nil }),
		Entry("ci/all-values.yaml", allValues),
	)

	DescribeTable("pass a server-side dry-run against a real API server",
		func(ctx context.Context, objs func(context.Context) ([]*unstructured.Unstructured, error)) {
			got, err := objs(ctx)
			Expect(err).NotTo(HaveOccurred())
			for _, o := range got {
				Expect(o.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/part-of", "imperator"), "%s %s", o.GetKind(), o.GetName())
			}
			_, err = apply(ctx, ofKind(got, "Namespace"))
			Expect(err).NotTo(HaveOccurred())
			out, err := apply(ctx, except(got, "Namespace"), "--dry-run=server")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("(server dry run)"))
			Expect(out).NotTo(ContainSubstring("would violate PodSecurity"))
		},
		Entry("deploy/dispatcher", func(ctx context.Context) ([]*unstructured.Unstructured, error) {
			return render(ctx, filepath.Join(root, "deploy", "dispatcher"))
		}),
		Entry("the chart with its default values", func(ctx context.Context) ([]*unstructured.Unstructured, error) {
			return helmTemplate(ctx, chart)
		}),
		Entry("the chart with ci/all-values.yaml", func(ctx context.Context) ([]*unstructured.Unstructured, error) {
			return helmTemplate(ctx, chart, allValues()...)
		}),
	)

	It("renders with its default values the same objects as deploy/dispatcher", func(ctx context.Context) {
		want, err := render(ctx, filepath.Join(root, "deploy", "dispatcher"))
		Expect(err).NotTo(HaveOccurred())
		got, err := helmTemplate(ctx, chart)
		Expect(err).NotTo(HaveOccurred())
		wantObjs, gotObjs := comparable(want), comparable(got)
		Expect(slices.Sorted(maps.Keys(gotObjs))).To(Equal(slices.Sorted(maps.Keys(wantObjs))))
		for key, w := range wantObjs {
			Expect(cmp.Diff(w, gotObjs[key])).To(BeEmpty(), "%s: deploy/dispatcher (-) and the chart (+) differ", key)
		}
	})

	It("puts every value of ci/all-values.yaml where it belongs", func(ctx context.Context) {
		objs, err := helmTemplate(ctx, chart, allValues()...)
		Expect(err).NotTo(HaveOccurred())
		byKey := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			byKey[o.GetKind()+"/"+o.GetName()] = o
			Expect(o.GetLabels()).To(HaveKeyWithValue("example.com/cost-center", "gpu-platform"), "%s %s", o.GetKind(), o.GetName())
		}
		Expect(byKey).To(HaveKey("PodDisruptionBudget/imperator-dispatcher"), "two replicas get a PodDisruptionBudget")
		Expect(byKey).To(HaveKey("ServiceAccount/imperator-dispatcher-runner"))
		for _, binding := range []string{"ClusterRoleBinding/imperator-dispatcher", "RoleBinding/imperator-dispatcher"} {
			subjects, _, _ := unstructured.NestedSlice(byKey[binding].Object, "subjects")
			Expect(subjects).To(ConsistOf(HaveKeyWithValue("name", "imperator-dispatcher-runner")), binding)
		}
		d := byKey["Deployment/imperator-dispatcher"]
		Expect(d).NotTo(BeNil())
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		Expect(containers).To(HaveLen(1))
		c := containers[0].(map[string]any)
		Expect(c["image"]).To(Equal("registry.example.com/imperator/dispatcher:v0.1.0"))
		Expect(c["args"]).To(ContainElements("--hub-address=hub.example.com:9443", "--hub-server-name=hub.example.com",
			"--max-clusters=3", "--zap-log-level=debug", "--placement-grace=20s"))
		volumes, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
		Expect(volumes).To(ContainElement(HaveKeyWithValue("secret", HaveKeyWithValue("secretName", "dispatcher-hub-identity"))))
		Expect(volumes).To(ContainElement(HaveKeyWithValue("name", "proxy-ca")))
		replicas, _, _ := unstructured.NestedFieldNoCopy(d.Object, "spec", "replicas")
		Expect(replicas).To(BeEquivalentTo(2))
	})

	DescribeTable("refuses a bad value naming it",
		func(ctx context.Context, set []string, want string) {
			var args []string
			for _, s := range set {
				args = append(args, "--set", s)
			}
			_, err := helmTemplate(ctx, chart, args...)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("a hub address without a port", []string{"hub.address=hub.example.com"}, "at '/hub/address'"),
		Entry("no hub identity Secret", []string{"hub.existingSecret="}, "at '/hub/existingSecret'"),
		Entry("more clusters than Kueue's list holds", []string{"maxClusters=21"}, "at '/maxClusters'"),
		Entry("no cluster at all", []string{"maxClusters=0"}, "at '/maxClusters'"),
		Entry("a misspelt key", []string{"hub.adress=h:9443"}, "additional properties 'adress' not allowed"),
		Entry("a renamed object", []string{"nameOverride=dispatch"}, "the chart's object names cannot be changed"),
		Entry("an env variable the chart sets itself", []string{"env.POD_NAMESPACE=x"}, "env/extraEnv: POD_NAMESPACE is set by the chart itself"),
	)
})
