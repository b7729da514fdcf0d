package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// AccessInput configures AccessSpec.
type AccessInput struct {
	Env *Env
	// Namespace of the hub cluster holding the viewer's ServiceAccount.
	Namespace string
	// Spokes must show in the viewer's imperatorctl clusters.
	Spokes []string
}

// AccessSpec is journey 14: a person reaches the hub with the identity they
// have on the hub cluster. A ServiceAccount bound to the shipped ClusterRole
// imperator-fleet-viewer lists the clusters through imperatorctl
// --kubeconfig (its token, no hub certificate) and is refused creating a
// hold, with the refusal naming the verb and the resource RBAC lacks.
func AccessSpec(ctx context.Context, in AccessInput) {
	hub := in.Env.Hub
	kube, err := kubernetes.NewForConfig(hub.Config)
	Expect(err).NotTo(HaveOccurred())

	By("the shipped ClusterRoles are in the hub cluster, as kustomize and the chart install them")
	data, err := os.ReadFile(filepath.Join(in.Env.RepoRoot, "deploy", "hub", "rbac", "access_roles.yaml"))
	Expect(err).NotTo(HaveOccurred())
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var role rbacv1.ClusterRole
		Expect(yaml.UnmarshalStrict([]byte(doc), &role)).To(Succeed())
		if role.Name == "" {
			continue
		}
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred(), "ClusterRole %s", role.Name)
		}
	}

	By("a ServiceAccount bound to imperator-fleet-viewer gets a token")
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	const viewer = "fleet-viewer"
	if _, err := kube.CoreV1().ServiceAccounts(in.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: viewer}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: in.Namespace + "-" + viewer},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "imperator-fleet-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: viewer, Namespace: in.Namespace}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	expiry := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(in.Namespace).CreateToken(ctx, viewer, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(GinkgoT().TempDir(), "viewer.kubeconfig")
	Expect(os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster: {server: %q, insecure-skip-tls-verify: true}
contexts:
- name: viewer
  context: {cluster: hub, user: viewer}
current-context: viewer
users:
- name: viewer
  user: {token: %q}
`, hub.Config.Host, tr.Status.Token)), 0o600)).To(Succeed())

	By("imperatorctl --kubeconfig lists the clusters as the viewer")
	ctl := in.Env.Ctl
	Eventually(ctx, func(g Gomega) {
		res, err := ctl.Run(ctx, "clusters", "-o", "name", "--kubeconfig", kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.ExitCode).To(Equal(0), "%s", res)
		for _, name := range in.Spokes {
			g.Expect(res.Stdout).To(ContainSubstring("cluster/"+name+"\n"), "%s", res)
		}
	}).WithTimeout(hubPropagation).WithPolling(poll).Should(Succeed())

	By("the viewer is refused creating a hold, and told which verb on which resource it lacks")
	res, err := ctl.Run(ctx, "hold", "create", "viewer-hold", "compute-xlarge", "--count", "1", "--ttl", "5m", "--kubeconfig", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(4), "a refusal of the credentials: %s", res)
	Expect(res.Stderr).To(ContainSubstring("may not create holds.fleet.imperator.tenzen-y.io"), "%s", res)
	Expect(res.Stderr).To(ContainSubstring("system:serviceaccount:"+in.Namespace+":"+viewer), "%s", res)
}
