package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/harness"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const (
	namespace   = "imperator-system"
	clusterName = "spoke-a"
)

// rbacKinds are what the RBAC specs apply for real from the rendered
// manifests: the identity of each binary and its rights, nothing that runs.
var rbacKinds = []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"}

var (
	machineGVR         = schema.GroupVersionResource{Group: imperatorv1alpha1.GroupVersion.Group, Version: imperatorv1alpha1.GroupVersion.Version, Resource: "machines"}
	managedClusterGVR  = schema.GroupVersionResource{Group: "cluster.open-cluster-management.io", Version: "v1", Resource: "managedclusters"}
	placementScoreGVR  = schema.GroupVersionResource{Group: "cluster.open-cluster-management.io", Version: "v1alpha1", Resource: "addonplacementscores"}
	clusterInventories = schema.GroupVersionResource{Group: imperatorv1alpha1.GroupVersion.Group, Version: imperatorv1alpha1.GroupVersion.Version, Resource: "clusterinventories"}
)

var _ = Describe("The binaries under exactly the RBAC of deploy/", Ordered, func() {
	var (
		spokeObjs, hubObjs         []*unstructured.Unstructured
		spokeKubeconfig, hubConfig string
		dyn                        dynamic.Interface
		// ports: hub gRPC, hub health, spoke webhook, spoke health.
		hubGRPC, hubHealth, webhookPort, spokeHealth int
		hubCAFile, tokenFile                         string
		// env shares the above with the minimality specs.
		env = &rbacEnv{}
	)

	BeforeAll(func(ctx context.Context) {
		var err error
		spokeObjs, err = render(ctx, filepath.Join(root, "deploy", "spoke"))
		Expect(err).NotTo(HaveOccurred())
		hubObjs, err = render(ctx, filepath.Join(root, "deploy", "hub"))
		Expect(err).NotTo(HaveOccurred())
		// The roles the hub ships for people (access_roles.yaml) are
		// nobody's rights until bound: the specs here are about the hub's.
		hubObjs = slices.DeleteFunc(hubObjs, func(o *unstructured.Unstructured) bool {
			return o.GetKind() == "ClusterRole" && strings.HasPrefix(o.GetName(), "imperator-fleet-")
		})
		_, err = apply(ctx, ofKind(spokeObjs, rbacKinds...))
		Expect(err).NotTo(HaveOccurred())
		_, err = apply(ctx, ofKind(hubObjs, rbacKinds...))
		Expect(err).NotTo(HaveOccurred())

		spokeKubeconfig, err = impersonatingKubeconfig(namespace, "imperator-spoke")
		Expect(err).NotTo(HaveOccurred())
		hubConfig, err = impersonatingKubeconfig(namespace, "imperator-hub")
		Expect(err).NotTo(HaveOccurred())
		dyn, err = dynamic.NewForConfig(cluster.Config)
		Expect(err).NotTo(HaveOccurred())

		ports, err := harness.FreePorts(4)
		Expect(err).NotTo(HaveOccurred())
		hubGRPC, hubHealth, webhookPort, spokeHealth = ports[0], ports[1], ports[2], ports[3]

		// The webhook configurations deploy/spoke ships, installed as the
		// admin would. The agent runs outside the cluster, so the API server
		// reaches it at a URL instead of the imperator-webhook Service.
		webhooks := atURL(ofKind(spokeObjs, "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
			fmt.Sprintf("https://127.0.0.1:%d", webhookPort))
		Expect(webhooks).To(HaveLen(2))
		_, err = apply(ctx, webhooks)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			for _, w := range webhooks {
				_, err := cluster.Kubectl(ctx, "delete", w.GetKind(), w.GetName(), "--ignore-not-found")
				Expect(err).NotTo(HaveOccurred())
			}
		})
		// The reservation PriorityClass deploy/spoke ships: the agent only
		// reads it, and reserves nothing without it.
		priorityClasses := ofKind(spokeObjs, "PriorityClass")
		Expect(priorityClasses).To(HaveLen(1))
		_, err = apply(ctx, priorityClasses)
		Expect(err).NotTo(HaveOccurred())

		dir := GinkgoT().TempDir()
		hubCAFile, tokenFile = filepath.Join(dir, "hub-ca.crt"), filepath.Join(dir, "join-token")
		env.spokeObjs, env.hubObjs, env.hubCAFile = spokeObjs, hubObjs, hubCAFile

		for _, n := range wrappers.SeedNodes() {
			Expect(cluster.AddNode(ctx, n)).To(Succeed())
		}
	}, NodeTimeout(2*time.Minute))

	hubArgs := func() []string {
		return []string{
			"--kubeconfig=" + hubConfig,
			fmt.Sprintf("--listen-address=127.0.0.1:%d", hubGRPC),
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", hubHealth),
			"--metrics-bind-address=0",
		}
	}
	spokeArgs := func(extra ...string) []string {
		return append([]string{
			"--kubeconfig=" + spokeKubeconfig,
			"--namespace=" + namespace,
			"--leader-elect=true",
			fmt.Sprintf("--webhook-port=%d", webhookPort),
			"--webhook-bind-address=127.0.0.1",
			// No --webhook-url: the agent registers nothing, it only sets the
			// CA bundle of the shipped configurations, as in a cluster.
			"--webhook-hosts=127.0.0.1",
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", spokeHealth),
			"--metrics-bind-address=0",
		}, extra...)
	}
	env.spokeArgs, env.hubArgs = spokeArgs, hubArgs
	env.hubAddress = func() string { return fmt.Sprintf("127.0.0.1:%d", hubGRPC) }
	// hubCommand runs a hub admin subcommand as the hub's ServiceAccount.
	hubCommand := func(ctx context.Context, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "hub"), append(args, "--kubeconfig="+hubConfig)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("hub %v: %w: %s", args, err, stderr.String())
		}
		return string(out), nil
	}
	nodePoolLabels := func(ctx context.Context) (map[string]string, error) {
		labels := map[string]string{}
		for _, n := range wrappers.SeedNodes() {
			node, err := cluster.Kubernetes().CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			labels[n.Name] = node.Labels[imperatorv1alpha1.NodePoolKey]
		}
		return labels, nil
	}

	It("runs the hub as its ServiceAccount: it creates its CA, and issues a join token and the CA bundle", func(ctx context.Context) {
		hub := start("hub", "hub", hubArgs()...)
		Eventually(func(ctx context.Context) error { return ready(ctx, fmt.Sprintf("127.0.0.1:%d", hubHealth)) }).
			WithContext(ctx).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), func() string { return hub.Tail(30) })
		_, err := cluster.Kubernetes().CoreV1().Secrets(namespace).Get(ctx, "imperator-hub-ca", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())

		ca, err := hubCommand(ctx, "ca")
		Expect(err).NotTo(HaveOccurred())
		Expect(ca).To(HavePrefix("-----BEGIN CERTIFICATE-----"))
		token, err := hubCommand(ctx, "token", "create", "--cluster", clusterName, "--ttl", "10m")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(token)).NotTo(BeEmpty())
		Expect(os.WriteFile(hubCAFile, []byte(ca), 0o600)).To(Succeed())
		Expect(os.WriteFile(tokenFile, []byte(token), 0o600)).To(Succeed())
		list, err := hubCommand(ctx, "token", "list")
		Expect(err).NotTo(HaveOccurred())
		Expect(list).To(ContainSubstring(clusterName))

		By("joining a spoke agent that runs as its ServiceAccount, and reconciling the sample general-machine")
		spoke := start("spoke", "spoke", spokeArgs(
			fmt.Sprintf("--hub-address=127.0.0.1:%d", hubGRPC),
			"--cluster-name="+clusterName,
			"--hub-ca-file="+hubCAFile,
			"--join-token-file="+tokenFile,
		)...)
		Eventually(func(ctx context.Context) error { return ready(ctx, fmt.Sprintf("127.0.0.1:%d", spokeHealth)) }).
			WithContext(ctx).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), func() string { return spoke.Tail(30) })

		// The Machine goes through the agent's validating webhook.
		_, err = cluster.Kubectl(ctx, "apply", "-f", filepath.Join(root, "deploy", "spoke", "samples", "general-machine.yaml"))
		Expect(err).NotTo(HaveOccurred())

		Eventually(nodePoolLabels).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Equal(map[string]string{
			"michiru": string(imperatorv1alpha1.NodePoolReady),
			"utaha":   string(imperatorv1alpha1.NodePoolMaintenance),
			"eriri":   string(imperatorv1alpha1.NodePoolReady),
		}), func() string { return spoke.Tail(30) })
		Eventually(func(ctx context.Context) (int, error) {
			sets, err := cluster.Kubernetes().AppsV1().StatefulSets(namespace).List(ctx, metav1.ListOptions{
				LabelSelector: imperatorv1alpha1.MachineGroupKey + "=general-machine",
			})
			if err != nil {
				return 0, err
			}
			return len(sets.Items), nil
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(BeNumerically(">", 0), func() string { return spoke.Tail(30) })
		Eventually(func(ctx context.Context) (map[string]any, error) {
			m, err := dyn.Resource(machineGVR).Get(ctx, "general-machine", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			conditions, _, _ := unstructured.NestedSlice(m.Object, "status", "conditions")
			for _, c := range conditions {
				if c.(map[string]any)["type"] == "Ready" {
					return c.(map[string]any), nil
				}
			}
			return nil, nil
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(HaveKeyWithValue("status", "True"), func() string { return spoke.Tail(30) })

		By("seeing the spoke at the hub: registered, credentials stored, inventory persisted")
		Eventually(func(ctx context.Context) error {
			_, err := dyn.Resource(managedClusterGVR).Get(ctx, clusterName, metav1.GetOptions{})
			return err
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), func() string { return hub.Tail(30) + "\n" + spoke.Tail(30) })
		Eventually(func(ctx context.Context) error {
			_, err := cluster.Kubernetes().CoreV1().Secrets(namespace).Get(ctx, "imperator-hub-credentials", metav1.GetOptions{})
			return err
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), func() string { return spoke.Tail(30) })
		Eventually(func(ctx context.Context) (int, error) {
			list, err := dyn.Resource(clusterInventories).List(ctx, metav1.ListOptions{})
			if err != nil {
				return 0, err
			}
			return len(list.Items), nil
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(BeNumerically(">", 0), func() string { return hub.Tail(30) })

		// What other hub replicas follow: the spoke's heartbeat Lease.
		Eventually(func(ctx context.Context) (string, error) {
			lease, err := cluster.Kubernetes().CoordinationV1().Leases(clusterName).Get(ctx, "imperator-spoke", metav1.GetOptions{})
			if err != nil || lease.Spec.HolderIdentity == nil {
				return "", err
			}
			return *lease.Spec.HolderIdentity, nil
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).ShouldNot(BeEmpty(), func() string { return hub.Tail(30) })

		// The single-writer parts of the hub, run by the elected replica:
		// scores in the cluster's namespace.
		Eventually(func(ctx context.Context) ([]any, error) {
			score, err := dyn.Resource(placementScoreGVR).Namespace(clusterName).Get(ctx, "imperator", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			scores, _, err := unstructured.NestedSlice(score.Object, "status", "scores")
			return scores, err
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).ShouldNot(BeEmpty(), func() string { return hub.Tail(30) })

		Expect(strings.ToLower(logOf(spoke))).NotTo(ContainSubstring("forbidden"))
		Expect(strings.ToLower(logOf(hub))).NotTo(ContainSubstring("forbidden"))
	}, NodeTimeout(3*time.Minute))

	It("proves the check: without patch on nodes the agent logs a forbidden error and leaves the nodes unlabelled", func(ctx context.Context) {
		for _, n := range wrappers.SeedNodes() {
			_, err := cluster.Kubectl(ctx, "label", "node", n.Name, imperatorv1alpha1.NodePoolKey+"-")
			Expect(err).NotTo(HaveOccurred())
		}
		role := ofKind(spokeObjs, "ClusterRole")
		Expect(role).To(HaveLen(1))
		_, err := apply(ctx, []*unstructured.Unstructured{withoutVerb(role[0], "nodes", "patch")})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			_, err := apply(ctx, role)
			Expect(err).NotTo(HaveOccurred())
		})

		spoke := start("spoke-without-node-patch", "spoke", spokeArgs()...)
		Eventually(func() string { return logOf(spoke) }).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(And(
			ContainSubstring(`is forbidden: User "system:serviceaccount:imperator-system:imperator-spoke" cannot patch resource "nodes"`),
		), func() string { return spoke.Tail(30) })
		Consistently(nodePoolLabels).WithContext(ctx).WithTimeout(2 * time.Second).WithPolling(250 * time.Millisecond).
			Should(Equal(map[string]string{"michiru": "", "utaha": "", "eriri": ""}))
	}, NodeTimeout(2*time.Minute))

	It("proves the check for the hub: without list on ClusterInventories it stops at start-up with a forbidden error", func(ctx context.Context) {
		role := ofKind(hubObjs, "ClusterRole")
		Expect(role).To(HaveLen(1))
		_, err := apply(ctx, []*unstructured.Unstructured{withoutVerb(role[0], "clusterinventories", "list")})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			_, err := apply(ctx, role)
			Expect(err).NotTo(HaveOccurred())
		})

		hub := start("hub-without-inventory-list", "hub", hubArgs()...)
		Eventually(hub.Exited()).WithTimeout(30 * time.Second).Should(BeClosed())
		Expect(logOf(hub)).To(ContainSubstring(`is forbidden: User "system:serviceaccount:imperator-system:imperator-hub" cannot list resource "clusterinventories"`))
	}, NodeTimeout(time.Minute))

	It("keeps secrets and workloads outside the agent's namespace, every other webhook configuration, and PriorityClass writes out of its reach", func(ctx context.Context) {
		for _, attempt := range [][]string{
			{"get", "secrets", "-n", "default"},
			{"create", "statefulsets.apps", "-n", "default"},
			{"delete", "services", "-n", "default"},
			// A compromised agent cannot register a webhook of its own, nor
			// retarget another one, nor change its own beyond a patch.
			{"create", "mutatingwebhookconfigurations"},
			{"create", "validatingwebhookconfigurations"},
			{"patch", "mutatingwebhookconfigurations/some-other-webhook"},
			{"patch", "validatingwebhookconfigurations/some-other-webhook"},
			{"delete", "mutatingwebhookconfigurations/imperator-pod-injector"},
			{"update", "validatingwebhookconfigurations/imperator-machine-validator"},
			// Nor make a PriorityClass its pods could preempt with: the
			// manifests ship the reservation one, the agent only reads it.
			{"create", "priorityclasses.scheduling.k8s.io"},
			{"patch", "priorityclasses.scheduling.k8s.io/imperator-reservation"},
			{"delete", "priorityclasses.scheduling.k8s.io/imperator-reservation"},
		} {
			review, err := cluster.Kubectl(ctx, append([]string{"auth", "can-i"}, append(attempt, "--as=system:serviceaccount:imperator-system:imperator-spoke")...)...)
			Expect(err).To(HaveOccurred(), "the agent may %v", attempt)
			// kubectl may print a warning first (a cluster-scoped resource
			// with the kubeconfig's namespace): the answer is the last line.
			Expect(strings.TrimSpace(review)).To(HaveSuffix("no"))
		}
		for _, allowed := range []string{"mutatingwebhookconfigurations/imperator-pod-injector", "validatingwebhookconfigurations/imperator-machine-validator"} {
			_, err := cluster.Kubectl(ctx, "auth", "can-i", "patch", allowed, "--as=system:serviceaccount:imperator-system:imperator-spoke")
			Expect(err).NotTo(HaveOccurred(), "the agent may not set the CA bundle of %s", allowed)
		}
		for _, sa := range []string{"imperator-spoke", "imperator-hub"} {
			out, err := cluster.Kubectl(ctx, "auth", "can-i", "--list", "--as=system:serviceaccount:imperator-system:"+sa)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).NotTo(MatchRegexp(`(?m)^\*\.\*|\[\*\]`), "%s has a wildcard rule", sa)
		}
		// can-i --list prints a core-group wildcard as a bare "*" and a
		// group wildcard as "pods.*", which the pattern above does not
		// match: the rules as written must not hold one either.
		for _, role := range ofKind(append(append([]*unstructured.Unstructured{}, spokeObjs...), hubObjs...), "ClusterRole", "Role") {
			rules, _, err := unstructured.NestedSlice(role.Object, "rules")
			Expect(err).NotTo(HaveOccurred())
			for _, r := range rules {
				for _, field := range []string{"apiGroups", "resources", "resourceNames", "verbs", "nonResourceURLs"} {
					values, _, _ := unstructured.NestedStringSlice(r.(map[string]any), field)
					Expect(values).NotTo(ContainElement(ContainSubstring("*")), "%s %s has a wildcard in %s: %v", role.GetKind(), role.GetName(), field, r)
				}
			}
		}
	})

	It("lets the agent read the PodGroups of both APIs and write only its condition on a native PodGroup's status", func(ctx context.Context) {
		canI := func(args ...string) bool {
			GinkgoHelper()
			_, err := cluster.Kubectl(ctx, append(append([]string{"auth", "can-i"}, args...), "-n", "team-a", "--as=system:serviceaccount:imperator-system:imperator-spoke")...)
			return err == nil
		}
		for _, resource := range []string{"podgroups.scheduling.k8s.io", "podgroups.scheduling.x-k8s.io"} {
			for _, verb := range []string{"get", "list", "watch"} {
				Expect(canI(verb, resource)).To(BeTrue(), "the agent may not %s %s", verb, resource)
			}
			// A gang's PodGroup is its users': the agent never changes it.
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				Expect(canI(verb, resource)).To(BeFalse(), "the agent may %s %s", verb, resource)
			}
		}
		Expect(canI("patch", "podgroups.scheduling.k8s.io", "--subresource=status")).To(BeTrue(), "the agent may not patch a native PodGroup's status")
		Expect(canI("update", "podgroups.scheduling.k8s.io", "--subresource=status")).To(BeFalse())
		Expect(canI("patch", "podgroups.scheduling.x-k8s.io", "--subresource=status")).To(BeFalse(), "the coscheduling PodGroup's status is its controller's")
	})

	minimalitySpecs(env)
})
