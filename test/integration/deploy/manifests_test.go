package deploy_test

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var _ = Describe("The kustomize bases and overlays", func() {
	// deployCopy is a copy of deploy/ with the files the spoke-example overlay
	// expects the installer to write (hub CA and join token; git-ignored).
	var deployCopy string

	BeforeEach(func() {
		deployCopy = filepath.Join(GinkgoT().TempDir(), "deploy")
		Expect(os.CopyFS(deployCopy, os.DirFS(filepath.Join(root, "deploy")))).To(Succeed())
		example := filepath.Join(deployCopy, "overlays", "spoke-example")
		Expect(os.WriteFile(filepath.Join(example, "hub-ca.crt"), []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o600)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(example, "join-token"), []byte("abcdef.0123456789abcdef\n"), 0o600)).To(Succeed())
	})

	// cert-manager's CRDs are not installed in the test cluster, so its
	// objects (spoke-cert-manager's Issuer and Certificate) are rendered but
	// left out of the dry-run; a spec below checks their fields instead.
	DescribeTable("apply with a server-side dry-run against a real API server (CRDs and namespaces applied first, cert-manager objects left out)",
		func(ctx context.Context, dir string, want map[string]string) {
			objs, err := render(ctx, filepath.Join(deployCopy, dir))
			Expect(err).NotTo(HaveOccurred())

			got := map[string]string{}
			for _, o := range objs {
				got[o.GetKind()+"/"+o.GetName()] = o.GetNamespace()
			}
			for name, ns := range want {
				Expect(got).To(HaveKeyWithValue(name, ns), "kustomize build %s", dir)
			}

			// A dry-run create in a namespace that does not exist fails, and
			// nothing can be checked against a CRD that is not installed.
			_, err = apply(ctx, ofKind(objs, "CustomResourceDefinition", "Namespace"))
			Expect(err).NotTo(HaveOccurred())
			out, err := apply(ctx, notCertManager(except(objs, "CustomResourceDefinition", "Namespace")), "--dry-run=server")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("(server dry run)"))
			// The namespaces warn (and enforce) the restricted Pod Security
			// Standard: a Deployment whose pods would be refused is warned of.
			Expect(out).NotTo(ContainSubstring("would violate PodSecurity"))
		},
		Entry("deploy/spoke", "spoke", map[string]string{
			"CustomResourceDefinition/machines.imperator.tenzen-y.io":         "",
			"CustomResourceDefinition/machinenodepools.imperator.tenzen-y.io": "",
			"Namespace/imperator-system":                                      "",
			"ClusterRole/imperator-spoke":                                     "",
			"Role/imperator-spoke":                                            "imperator-system",
			"Deployment/imperator-spoke":                                      "imperator-system",
			"Service/imperator-webhook":                                       "imperator-system",
			"PodDisruptionBudget/imperator-spoke":                             "imperator-system",
			"PriorityClass/imperator-reservation":                             "",
			"MutatingWebhookConfiguration/imperator-pod-injector":             "",
			"ValidatingWebhookConfiguration/imperator-machine-validator":      "",
		}),
		Entry("deploy/overlays/spoke-example", "overlays/spoke-example", map[string]string{
			"Deployment/imperator-spoke": "imperator-system",
		}),
		Entry("deploy/overlays/spoke-cert-manager", "overlays/spoke-cert-manager", map[string]string{
			"Deployment/imperator-spoke":    "imperator-system",
			"Service/imperator-webhook":     "imperator-system",
			"Issuer/imperator-selfsigned":   "imperator-system",
			"Certificate/imperator-webhook": "imperator-system",
		}),
		Entry("deploy/overlays/spoke-hosted (hosted mode, management cluster)", "overlays/spoke-hosted", map[string]string{
			"Role/imperator-spoke-hosted":        "imperator-system",
			"RoleBinding/imperator-spoke-hosted": "imperator-system",
			"Deployment/imperator-spoke-hosted":  "imperator-system",
			"Service/imperator-webhook":          "imperator-system",
		}),
		Entry("deploy/overlays/spoke-hosted-member (hosted mode, member cluster)", "overlays/spoke-hosted-member", map[string]string{
			"ClusterRole/imperator-spoke":              "",
			"Role/imperator-spoke":                     "imperator-system",
			"ClusterRole/imperator-spoke-hosted-probe": "",
			"Secret/imperator-spoke-token":             "imperator-system",
			"PriorityClass/imperator-reservation":      "",
		}),
		Entry("deploy/hub", "hub", map[string]string{
			"CustomResourceDefinition/clusterinventories.imperator.tenzen-y.io":                "",
			"CustomResourceDefinition/managedclusters.cluster.open-cluster-management.io":      "",
			"CustomResourceDefinition/addonplacementscores.cluster.open-cluster-management.io": "",
			"ClusterRole/imperator-hub":         "",
			"Role/imperator-hub":                "imperator-system",
			"Deployment/imperator-hub":          "imperator-system",
			"Service/imperator-hub":             "imperator-system",
			"PodDisruptionBudget/imperator-hub": "imperator-system",
		}),
		Entry("deploy/overlays/hub-ocm-installed", "overlays/hub-ocm-installed", map[string]string{
			"CustomResourceDefinition/clusterinventories.imperator.tenzen-y.io": "",
			"Deployment/imperator-hub": "imperator-system",
		}),
		Entry("deploy/overlays/hub-example", "overlays/hub-example", map[string]string{
			"NetworkPolicy/imperator-hub": "imperator-system",
			"Deployment/imperator-hub":    "imperator-system",
		}),
	)

	It("leaves the agent itself and its Service-bound webhook configurations out of a hosted member, and gives the hosted agent no cluster-wide rights in the management cluster", func(ctx context.Context) {
		member, err := render(ctx, filepath.Join(deployCopy, "overlays", "spoke-hosted-member"))
		Expect(err).NotTo(HaveOccurred())
		for _, kind := range []string{"Deployment", "PodDisruptionBudget", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			Expect(ofKind(member, kind)).To(BeEmpty(), "a hosted member carries no %s of the agent", kind)
		}
		management, err := render(ctx, filepath.Join(deployCopy, "overlays", "spoke-hosted"))
		Expect(err).NotTo(HaveOccurred())
		for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"} {
			Expect(ofKind(management, kind)).To(BeEmpty(), "the management cluster gets no %s", kind)
		}
	})

	It("runs the agent and the hub in namespaces that enforce the restricted Pod Security Standard, and would warn of a Deployment that breaks it", func(ctx context.Context) {
		for _, dir := range []string{"spoke", "hub"} {
			objs, err := render(ctx, filepath.Join(deployCopy, dir))
			Expect(err).NotTo(HaveOccurred())
			namespaces := ofKind(objs, "Namespace")
			Expect(namespaces).To(HaveLen(1))
			Expect(namespaces[0].GetLabels()).To(And(
				HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"),
				HaveKeyWithValue("pod-security.kubernetes.io/warn", "restricted"),
			), "deploy/%s", dir)
			_, err = apply(ctx, namespaces)
			Expect(err).NotTo(HaveOccurred())

			// The negative control: the Deployment without its container's
			// securityContext.
			deployments := ofKind(objs, "Deployment")
			Expect(deployments).To(HaveLen(1))
			insecure := deployments[0].DeepCopy()
			containers, _, err := unstructured.NestedSlice(insecure.Object, "spec", "template", "spec", "containers")
			Expect(err).NotTo(HaveOccurred())
			delete(containers[0].(map[string]any), "securityContext")
			Expect(unstructured.SetNestedSlice(insecure.Object, containers, "spec", "template", "spec", "containers")).To(Succeed())
			out, err := apply(ctx, []*unstructured.Unstructured{insecure}, "--dry-run=server")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("would violate PodSecurity"), "deploy/%s", dir)
			out, err = apply(ctx, deployments, "--dry-run=server")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).NotTo(ContainSubstring("would violate PodSecurity"), "deploy/%s", dir)
		}
	})

	It("joins the spoke to a hub in the example overlay: the hub address, cluster name and join Secret reach the Deployment", func(ctx context.Context) {
		objs, err := render(ctx, filepath.Join(deployCopy, "overlays", "spoke-example"))
		Expect(err).NotTo(HaveOccurred())
		var configMap, secret, deployment map[string]any
		for _, o := range objs {
			switch {
			case o.GetKind() == "ConfigMap":
				configMap = o.Object
			case o.GetKind() == "Secret":
				secret = o.Object
			case o.GetKind() == "Deployment":
				deployment = o.Object
			}
		}
		Expect(configMap).To(HaveKeyWithValue("data", HaveKeyWithValue("address", "hub.example.com:9443")))
		Expect(secret).To(HaveKeyWithValue("data", And(HaveKey("ca.crt"), HaveKey("token"))))
		secretName := secret["metadata"].(map[string]any)["name"]
		configMapName := configMap["metadata"].(map[string]any)["name"]
		pod := deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		Expect(pod["volumes"]).To(ContainElement(HaveKeyWithValue("secret", HaveKeyWithValue("secretName", secretName))))
		env := pod["containers"].([]any)[0].(map[string]any)["env"]
		Expect(env).To(ContainElement(HaveKeyWithValue("valueFrom",
			HaveKeyWithValue("configMapKeyRef", HaveKeyWithValue("name", configMapName)))))
	})

	It("has cert-manager issue the spoke's webhook certificate in the spoke-cert-manager overlay: the Certificate names the webhook Service, and its Secret is mounted where the agent reads it", func(ctx context.Context) {
		objs, err := render(ctx, filepath.Join(deployCopy, "overlays", "spoke-cert-manager"))
		Expect(err).NotTo(HaveOccurred())
		one := func(kind string) *unstructured.Unstructured {
			GinkgoHelper()
			matches := ofKind(objs, kind)
			Expect(matches).To(HaveLen(1), "objects of kind %s", kind)
			return matches[0]
		}
		issuer, certificate, service, deployment := one("Issuer"), one("Certificate"), one("Service"), one("Deployment")

		for _, o := range []*unstructured.Unstructured{issuer, certificate} {
			Expect(o.GetAPIVersion()).To(Equal("cert-manager.io/v1"))
			Expect(o.GetNamespace()).To(Equal(deployment.GetNamespace()), "%s/%s", o.GetKind(), o.GetName())
		}
		Expect(issuer.Object).To(HaveKeyWithValue("spec", HaveKey("selfSigned")))
		Expect(certificate.Object).To(HaveKeyWithValue("spec", And(
			HaveKeyWithValue("issuerRef", And(HaveKeyWithValue("kind", "Issuer"), HaveKeyWithValue("name", issuer.GetName()))),
			HaveKeyWithValue("dnsNames", ConsistOf(
				service.GetName()+"."+service.GetNamespace()+".svc",
				service.GetName()+"."+service.GetNamespace()+".svc.cluster.local",
			)),
		)))
		secretName, _, err := unstructured.NestedString(certificate.Object, "spec", "secretName")
		Expect(err).NotTo(HaveOccurred())
		Expect(secretName).To(Equal("imperator-webhook-cert-manager"))

		containers, _, err := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
		Expect(err).NotTo(HaveOccurred())
		agent := containers[0].(map[string]any)
		args, _, err := unstructured.NestedStringSlice(agent, "args")
		Expect(err).NotTo(HaveOccurred())
		Expect(args).To(ContainElement("--webhook-cert-manager-certificate=" + certificate.GetName()))
		const certDir = "/tmp/k8s-webhook-server/serving-certs"
		Expect(args).To(ContainElement("--webhook-cert-dir=" + certDir))

		volumes, _, err := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "volumes")
		Expect(err).NotTo(HaveOccurred())
		var volumeName string
		for _, v := range volumes {
			if name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); name == secretName {
				volumeName, _, _ = unstructured.NestedString(v.(map[string]any), "name")
			}
		}
		Expect(volumeName).NotTo(BeEmpty(), "no volume of Secret %s", secretName)
		Expect(agent["volumeMounts"]).To(ContainElement(And(
			HaveKeyWithValue("name", volumeName),
			HaveKeyWithValue("mountPath", certDir),
			HaveKeyWithValue("readOnly", true),
		)))
	})

	It("leaves OCM's CRDs alone in the hub-ocm-installed overlay", func(ctx context.Context) {
		objs, err := render(ctx, filepath.Join(deployCopy, "overlays", "hub-ocm-installed"))
		Expect(err).NotTo(HaveOccurred())
		for _, o := range ofKind(objs, "CustomResourceDefinition") {
			Expect(o.GetName()).NotTo(HaveSuffix(".open-cluster-management.io"))
		}
	})
})

// notCertManager returns the objects of objs outside cert-manager's API
// group, whose CRDs the test cluster does not have.
func notCertManager(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().Group != "cert-manager.io" {
			out = append(out, o)
		}
	}
	return out
}
