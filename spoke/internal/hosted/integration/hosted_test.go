package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
	"github.com/imperator-federation/imperator/test/util/benchstat"
	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const xlarge = "compute-xlarge"

// machineOf is a member's Machine of group with one compute-xlarge unit on
// the member's kwok node.
func machineOf(member, group string) *imperatorv1alpha1.Machine {
	return wrappers.MakeMachine(group, group).Type(xlarge, "4", "8Gi", 1).GPU("nvidia.com/gpu", 1, "", "").
		Node(nodeOf(member), xlarge).Obj()
}

// expectServed waits until the member's Machine of group has its reservation
// bound and the member's node carries the pool's labels.
func expectServed(ctx context.Context, member, group string) {
	GinkgoHelper()
	c := members[member].Client
	Eventually(func(g Gomega) {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: group}, m)).To(Succeed())
		g.Expect(m.Status.Conditions).NotTo(BeEmpty(), "the agent reconciled %s in %s", group, member)
		g.Expect(m.Status.AvailableMachines).To(ContainElement(And(
			HaveField("Name", xlarge), HaveField("Usage.Reserved", int32(1)))), "reservation of %s in %s", group, member)
		node := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: nodeOf(member)}, node)).To(Succeed())
		g.Expect(node.Labels).To(HaveKeyWithValue(imperatorv1alpha1.NodePoolKey, string(imperatorv1alpha1.NodePoolReady)))
		g.Expect(node.Labels).To(HaveKeyWithValue("imperator.tenzen-y.io/"+xlarge, group))
	}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// expectAtHub waits until the hub shows the member available, hosted, with
// the Machine of group.
func expectAtHub(member, group string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		c, ok := hub.Cluster(member)
		g.Expect(ok).To(BeTrue(), "the hub knows %s", member)
		g.Expect(c.Liveness).To(BeEquivalentTo("Available"))
		g.Expect(c.AgentMode).To(Equal("hosted"))
		var groups []string
		for _, m := range c.Machines {
			groups = append(groups, m.GetGroup())
		}
		g.Expect(groups).To(ContainElement(group))
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// reconcileLatency creates a Machine of group in member and returns how long
// the member took to show it reconciled: its status observes its generation
// with a Ready condition.
func reconcileLatency(ctx context.Context, member, group string) time.Duration {
	GinkgoHelper()
	c := members[member].Client
	start := time.Now()
	Expect(c.Create(ctx, wrappers.MakeMachine(group, group).Type(xlarge, "4", "8Gi", 1).Obj())).To(Succeed())
	Eventually(func(g Gomega) {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: group}, m)).To(Succeed())
		g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
		g.Expect(meta.FindStatusCondition(m.Status.Conditions, imperatorv1alpha1.ConditionReady)).NotTo(BeNil())
	}).WithContext(ctx).WithTimeout(60 * time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
	return time.Since(start)
}

var _ = Describe("One hosted agent serving member clusters", Ordered, func() {
	BeforeAll(func(ctx context.Context) {
		addMember(ctx, "alpha", nil)
		addMember(ctx, "beta", nil)
	})

	It("reserves capacity and labels nodes in every member, each reporting under its own name", func(ctx context.Context) {
		for _, name := range []string{"alpha", "beta"} {
			Expect(members[name].Client.Create(ctx, machineOf(name, "team-"+name))).To(Succeed())
		}
		for _, name := range []string{"alpha", "beta"} {
			expectServed(ctx, name, "team-"+name)
			expectAtHub(name, "team-"+name)
		}
		Eventually(func(g Gomega) {
			for _, name := range []string{"alpha", "beta"} {
				c, _ := hub.Cluster(name)
				g.Expect(c.InjectionUnavailable).To(BeEmpty(), "the API server of %s reaches the agent's webhooks", name)
			}
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("serves a member's ProvisioningRequests with holds in that member, the CRD installed after the member was served", func(ctx context.Context) {
		c := members["beta"].Client
		Expect(client.IgnoreAlreadyExists(c.Create(ctx, machineOf("beta", "team-beta")))).To(Succeed())
		expectServed(ctx, "beta", "team-beta")
		root, err := repo.Root()
		Expect(err).NotTo(HaveOccurred())
		crd := envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "deploy/spoke/provisioningrequest")}, ErrorIfPathMissing: true}
		_, err = envtest.InstallCRDs(members["beta"].Config, crd)
		Expect(err).NotTo(HaveOccurred())
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-beta", Labels: map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}}
		Expect(c.Create(ctx, ns)).To(Succeed())
		template := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "train"}}
		template.Template.Labels = map[string]string{imperatorv1alpha1.MachineGroupKey: "team-beta", imperatorv1alpha1.MachineTypeKey: xlarge,
			imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)}
		unit := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), "nvidia.com/gpu": resource.MustParse("1")}
		template.Template.Spec.Containers = []corev1.Container{{Name: "train", Image: "trainer", Resources: corev1.ResourceRequirements{Requests: unit, Limits: unit}}}
		Expect(c.Create(ctx, template)).To(Succeed())
		request := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
			"metadata": map[string]any{"namespace": ns.Name, "name": "train"},
			"spec": map[string]any{"provisioningClassName": imperatorv1alpha1.CapacityHoldProvisioningClass,
				"podSets": []any{map[string]any{"podTemplateRef": map[string]any{"name": "train"}, "count": int64(1)}}},
		}}
		Eventually(func() error { return c.Create(ctx, request.DeepCopy()) }).WithTimeout(10 * time.Second).Should(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(c.Delete(ctx, request))).To(Succeed())
			Expect(envtest.UninstallCRDs(members["beta"].Config, crd)).To(Succeed())
		})
		By("the member's Machine controller holding the unit: the request is Provisioned")
		Eventually(func(g Gomega) {
			got := request.DeepCopy()
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(request), got)).To(Succeed())
			conditions, _, err := unstructured.NestedSlice(got.Object, "status", "conditions")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(conditions).To(ContainElement(And(HaveKeyWithValue("type", "Provisioned"), HaveKeyWithValue("status", "True"))),
				"conditions %v", conditions)
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		holds := &imperatorv1alpha1.CapacityHoldList{}
		Expect(c.List(ctx, holds, client.MatchingLabels{"imperator.tenzen-y.io/provisioning-request-namespace": ns.Name})).To(Succeed())
		Expect(holds.Items).To(ConsistOf(HaveField("Spec", And(HaveField("MachineGroup", "team-beta"), HaveField("Count", int32(1)),
			HaveField("Namespaces", Equal([]string{ns.Name}))))))

		By("deleting the request: its hold is released")
		Expect(c.Delete(ctx, request)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(c.List(ctx, holds, client.MatchingLabels{"imperator.tenzen-y.io/provisioning-request-namespace": ns.Name})).To(Succeed())
			g.Expect(holds.Items).To(BeEmpty())
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("injects a member's guests through that member's own webhook configuration", func(ctx context.Context) {
		c := members["alpha"].Client
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-alpha", Labels: map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}}
		Expect(c.Create(ctx, ns)).To(Succeed())
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		Expect(c.Get(ctx, client.ObjectKey{Name: "imperator-pod-injector"}, cfg)).To(Succeed())
		for _, w := range cfg.Webhooks {
			Expect(w.ClientConfig.URL).To(HaveValue(Equal(webhookURL+hosted.PathPrefix+"alpha/mutate-v1-pod")), "webhook %s", w.Name)
			Expect(w.ClientConfig.CABundle).NotTo(BeEmpty())
		}
		guest := guestOf(ns.Name, "guest")
		Expect(c.Create(ctx, guest)).To(Succeed())
		Expect(guest.Annotations).To(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation), "the injector admitted the guest")
		Expect(guest.Spec.Containers[0].Resources.Limits).To(HaveKey(corev1.ResourceName("nvidia.com/gpu")))
	})

	It("answers a member's webhooks only for that member's API server: a made-up review learns nothing, not even whether the member exists", func(ctx context.Context) {
		review := guestReview("team-alpha")
		By("sending a made-up AdmissionReview of a guest without a client certificate, to alpha and to a member that does not exist")
		status, alphaAnswer, err := postReview(ctx, nil, "alpha", review)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusUnauthorized), alphaAnswer)
		status, unknownAnswer, err := postReview(ctx, nil, "no-such-member", review)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusUnauthorized))
		Expect(unknownAnswer).To(Equal(alphaAnswer), "the answer tells whether a member exists")
		Expect(alphaAnswer).NotTo(Or(ContainSubstring("team-alpha"), ContainSubstring(xlarge), ContainSubstring("alpha")))

		By("sending it with beta's client certificate, from beta's client Secret")
		beta := clientCertificateOf(ctx, "beta")
		status, alphaAnswer, err = postReview(ctx, &beta, "alpha", review)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusForbidden), alphaAnswer)
		status, unknownAnswer, err = postReview(ctx, &beta, "no-such-member", review)
		Expect(err).NotTo(HaveOccurred())
		Expect(status).To(Equal(http.StatusForbidden))
		Expect(unknownAnswer).To(Equal(alphaAnswer), "the answer tells whether a member exists")
		Expect(alphaAnswer).NotTo(Or(ContainSubstring("team-alpha"), ContainSubstring(xlarge)))

		By("sending it with a certificate naming alpha from a CA of our own")
		ca, err := pki.NewCA("not-the-agents", time.Hour)
		Expect(err).NotTo(HaveOccurred())
		certPEM, keyPEM, err := ca.IssueClient("alpha", []string{hosted.ClientOrganization}, time.Hour)
		Expect(err).NotTo(HaveOccurred())
		forged, err := tls.X509KeyPair(certPEM, keyPEM)
		Expect(err).NotTo(HaveOccurred())
		status, answer, err := postReview(ctx, &forged, "alpha", review)
		Expect(err).To(HaveOccurred(), "answered %d %s", status, answer)

		By("creating a guest through alpha's API server, which calls the webhook with alpha's certificate")
		guest := guestOf("team-alpha", "guest-after-refusals")
		Expect(members["alpha"].Client.Create(ctx, guest)).To(Succeed())
		Expect(guest.Annotations).To(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation), "the injector admitted the guest")
	})

	It("refuses a second member Secret reaching a cluster it serves, naming both Secrets; the cluster is served and counted once", func(ctx context.Context) {
		By("adding Secret alpha-copy with alpha's kubeconfig and a join token of its own")
		token, err := hubtest.CreateToken(ctx, hubEnv.Client, agentNamespace, time.Hour, "alpha-copy")
		Expect(err).NotTo(HaveOccurred())
		copied := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: membersNamespace, Name: "alpha-copy", Labels: map[string]string{hosted.MemberLabel: "true"}},
			Data:       map[string][]byte{hosted.KubeconfigKey: inlineKubeconfig("alpha"), hosted.JoinTokenKey: []byte(token)},
		}
		Expect(management.Client.Create(ctx, copied)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(management.Client.Delete(ctx, copied))).To(Succeed())
		})
		Eventually(func(g Gomega) {
			events := &corev1.EventList{}
			g.Expect(management.Client.List(ctx, events, client.InNamespace(membersNamespace))).To(Succeed())
			var notes []string
			for _, e := range events.Items {
				if e.InvolvedObject.Name == "alpha-copy" && e.Reason == "InvalidMember" {
					notes = append(notes, e.Message)
				}
			}
			g.Expect(notes).To(ContainElement(And(
				ContainSubstring(membersNamespace+"/alpha-copy"), ContainSubstring(membersNamespace+"/alpha "), ContainSubstring("kube-system"))))
		}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "the refused Secret names both")

		Consistently(func(g Gomega) {
			_, known := hub.Cluster("alpha-copy")
			g.Expect(known).To(BeFalse(), "the hub counts alpha's capacity a second time")
			c, _ := hub.Cluster("alpha")
			g.Expect(c.InjectionUnavailable).To(BeEmpty(), "alpha's webhooks were taken over")
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
			g.Expect(members["alpha"].Client.Get(ctx, client.ObjectKey{Name: "imperator-pod-injector"}, cfg)).To(Succeed())
			for _, w := range cfg.Webhooks {
				g.Expect(w.ClientConfig.URL).To(HaveValue(Equal(webhookURL + hosted.PathPrefix + "alpha/mutate-v1-pod")))
			}
		}).WithTimeout(5 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		By("deleting alpha-copy: alpha is served as before")
		Expect(management.Client.Delete(ctx, copied)).To(Succeed())
		guest := guestOf("team-alpha", "guest-after-copy")
		Eventually(func() error { return members["alpha"].Client.Create(ctx, guest) }).WithTimeout(10 * time.Second).Should(Succeed())
		Expect(guest.Annotations).To(HaveKey(imperatorv1alpha1.AdmittedAtAnnotation), "alpha's webhook configurations are still there")
	})

	It("serves a member added at runtime, and says at the hub while its API server cannot reach the webhooks", func(ctx context.Context) {
		addMember(ctx, "gamma", nil)
		Expect(members["gamma"].Client.Create(ctx, machineOf("gamma", "team-gamma"))).To(Succeed())
		expectServed(ctx, "gamma", "team-gamma")
		expectAtHub("gamma", "team-gamma")

		By("pointing gamma's webhooks at an address its API server cannot reach")
		secret := &corev1.Secret{}
		key := client.ObjectKey{Namespace: membersNamespace, Name: "gamma"}
		setURL := func(url string) {
			GinkgoHelper()
			Expect(management.Client.Get(ctx, key, secret)).To(Succeed())
			patch := client.MergeFrom(secret.DeepCopy())
			if url == "" {
				delete(secret.Annotations, hosted.WebhookURLAnnotation)
			} else {
				metav1.SetMetaDataAnnotation(&secret.ObjectMeta, hosted.WebhookURLAnnotation, url)
			}
			Expect(management.Client.Patch(ctx, secret, patch)).To(Succeed())
		}
		// Nothing listens on port 1.
		setURL("https://127.0.0.1:1")
		By("sending made-up probes for gamma to the agent meanwhile, as fast as it answers")
		forging, stopForging := context.WithCancel(ctx)
		forged := forgeProbes(forging, "gamma")
		Eventually(func(g Gomega) {
			c, _ := hub.Cluster("gamma")
			g.Expect(c.InjectionUnavailable).To(ContainSubstring("https://127.0.0.1:1"))
		}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "made-up probes hide that gamma's API server cannot reach the agent")
		stopForging()
		Expect(<-forged).To(BeNumerically(">", 0), "no made-up probe was sent")
		Eventually(func(g Gomega) {
			events := &corev1.EventList{}
			g.Expect(members["gamma"].Client.List(ctx, events)).To(Succeed())
			g.Expect(events.Items).To(ContainElement(HaveField("Reason", "InjectionUnavailable")), "gamma's users see why in an event")
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		By("giving gamma the agent's address back")
		setURL("")
		Eventually(func(g Gomega) {
			c, _ := hub.Cluster("gamma")
			g.Expect(c.InjectionUnavailable).To(BeEmpty())
			g.Expect(c.Liveness).To(BeEquivalentTo("Available"))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		By("making gamma's Secret unusable (a plain-http webhook URL): its webhooks leave gamma, so its pods and Machines are not refused 503")
		setURL("http://127.0.0.1:1")
		// The agent deletes the injector's configuration, then the
		// validator's.
		Eventually(func(g Gomega) {
			err := members["gamma"].Client.Get(ctx, client.ObjectKey{Name: "imperator-pod-injector"}, &admissionregistrationv1.MutatingWebhookConfiguration{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "gamma's injector configuration is deleted once its Secret is unusable")
			err = members["gamma"].Client.Get(ctx, client.ObjectKey{Name: "imperator-machine-validator"}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "gamma's validator configuration is deleted once its Secret is unusable")
		}).WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		setURL("")
		Eventually(func(g Gomega) {
			c, _ := hub.Cluster("gamma")
			g.Expect(c.InjectionUnavailable).To(BeEmpty())
			g.Expect(c.Liveness).To(BeEquivalentTo("Available"))
			g.Expect(members["gamma"].Client.Get(ctx, client.ObjectKey{Name: "imperator-pod-injector"}, &admissionregistrationv1.MutatingWebhookConfiguration{})).To(Succeed())
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("keeps reconciling one member at its usual pace while another member's API server is down", func(ctx context.Context) {
		const samples = 5
		var up, down []time.Duration
		for i := range samples {
			up = append(up, reconcileLatency(ctx, "alpha", fmt.Sprintf("up-%d", i)))
		}
		Expect(members["gamma"].Cluster.StopAPIServer()).To(Succeed())
		DeferCleanup(func(ctx context.Context) error { return members["gamma"].Cluster.StartAPIServer(ctx) })
		// Let the agent run into gamma's outage first (watches and the
		// reporter's probe fail, requests time out).
		time.Sleep(3 * time.Second)
		for i := range samples {
			down = append(down, reconcileLatency(ctx, "alpha", fmt.Sprintf("down-%d", i)))
		}
		up, down = benchstat.Sorted(up), benchstat.Sorted(down)
		figures := fmt.Sprintf("a new Machine in alpha reconciled (status observes it, Ready set), %d samples each: all members up p50 %s max %s; gamma's API server stopped p50 %s max %s",
			samples, benchstat.Percentile(up, 0.5).Round(time.Millisecond), benchstat.Percentile(up, 1).Round(time.Millisecond),
			benchstat.Percentile(down, 0.5).Round(time.Millisecond), benchstat.Percentile(down, 1).Round(time.Millisecond))
		AddReportEntry("isolation", figures)
		GinkgoWriter.Println(figures)
		// The request timeout is 5 s: a member waiting on gamma would
		// show it.
		Expect(benchstat.Percentile(down, 1)).To(BeNumerically("<", 3*time.Second), figures)
		Eventually(func(g Gomega) {
			c, _ := hub.Cluster("alpha")
			g.Expect(c.Liveness).To(BeEquivalentTo("Available"))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	It("keeps reconciling one member at its usual pace while another member's API server answers slowly", func(ctx context.Context) {
		const (
			samples = 5
			// Every chunk either way waits this long: a request to gamma
			// takes at least twice as long, well within the agent's 5 s
			// request timeout, so gamma is slow, not down.
			latency = time.Second
		)
		By("sending the agent's requests to gamma through a fault proxy")
		server, err := url.Parse(members["gamma"].Config.Host)
		Expect(err).NotTo(HaveOccurred())
		proxy, err := faultproxy.Start(server.Host)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Close)
		key := client.ObjectKey{Namespace: membersNamespace, Name: "gamma"}
		setKubeconfig := func(ctx context.Context, kubeconfig []byte) {
			GinkgoHelper()
			secret := &corev1.Secret{}
			Expect(management.Client.Get(ctx, key, secret)).To(Succeed())
			patch := client.MergeFrom(secret.DeepCopy())
			secret.Data[hosted.KubeconfigKey] = kubeconfig
			Expect(management.Client.Patch(ctx, secret, patch)).To(Succeed())
		}
		direct := inlineKubeconfig("gamma")
		proxy.SetLatency(latency)
		// A changed kubeconfig restarts the member, now through the proxy;
		// the API server's certificate names 127.0.0.1, whatever the port.
		setKubeconfig(ctx, bytes.ReplaceAll(direct, []byte(server.Host), []byte(proxy.Addr())))
		DeferCleanup(func(ctx context.Context) {
			proxy.SetLatency(0)
			setKubeconfig(ctx, direct)
		})

		By("waiting until gamma is served through the proxy: its own reconciles pay the latency")
		// While gamma restarts its webhooks answer 503 (not served yet),
		// and a Machine the old incarnation reconciled is fast: try again.
		gamma := members["gamma"].Client
		var slow time.Duration
		attempt := 0
		Eventually(func(g Gomega) {
			attempt++
			name := fmt.Sprintf("slow-%d", attempt)
			start := time.Now()
			g.Expect(gamma.Create(ctx, wrappers.MakeMachine(name, name).Type(xlarge, "4", "8Gi", 1).Obj())).To(Succeed())
			g.Eventually(func(g Gomega) {
				m := &imperatorv1alpha1.Machine{}
				g.Expect(gamma.Get(ctx, client.ObjectKey{Name: name}, m)).To(Succeed())
				g.Expect(m.Status.ObservedGeneration).To(Equal(m.Generation))
				g.Expect(meta.FindStatusCondition(m.Status.Conditions, imperatorv1alpha1.ConditionReady)).NotTo(BeNil())
			}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
			slow = time.Since(start)
			// One round trip through the proxy is 2 × latency; a reconcile
			// of the old, direct incarnation takes tens of milliseconds.
			g.Expect(slow).To(BeNumerically(">", latency), "gamma's reconcile went through the proxy")
		}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		var others []time.Duration
		for i := range samples {
			others = append(others, reconcileLatency(ctx, "alpha", fmt.Sprintf("beside-slow-%d", i)))
		}
		others = benchstat.Sorted(others)
		figures := fmt.Sprintf("gamma's API server %s slower each way: a new Machine in gamma reconciled in %s; in alpha, %d samples, p50 %s max %s",
			latency, slow.Round(time.Millisecond), samples, benchstat.Percentile(others, 0.5).Round(time.Millisecond), benchstat.Percentile(others, 1).Round(time.Millisecond))
		AddReportEntry("isolation from a slow member", figures)
		GinkgoWriter.Println(figures)
		// alpha does not wait for gamma.
		Expect(benchstat.Percentile(others, 1)).To(BeNumerically("<", latency), figures)
	})

	It("stops serving a member whose Secret is removed; the hub shows it Unknown after the grace period", func(ctx context.Context) {
		Expect(management.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: membersNamespace, Name: "beta"}})).To(Succeed())
		Eventually(func(g Gomega) {
			c, ok := hub.Cluster("beta")
			g.Expect(ok).To(BeTrue())
			g.Expect(c.Liveness).To(BeEquivalentTo("Unknown"))
		}).WithTimeout(gracePeriod + 20*time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		c := members["beta"].Client
		Eventually(func(g Gomega) {
			err := c.Get(ctx, client.ObjectKey{Name: "imperator-pod-injector"}, &admissionregistrationv1.MutatingWebhookConfiguration{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "beta's guests no longer go to an agent that does not serve it")
			err = c.Get(ctx, client.ObjectKey{Name: "imperator-machine-validator"}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "beta's Machines no longer go to an agent that does not serve it")
		}).WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Expect(c.Create(ctx, wrappers.MakeMachine("after-removal", "after-removal").Type(xlarge, "4", "8Gi", 1).Obj())).To(Succeed())
		Consistently(func(g Gomega) {
			m := &imperatorv1alpha1.Machine{}
			g.Expect(c.Get(ctx, client.ObjectKey{Name: "after-removal"}, m)).To(Succeed())
			g.Expect(m.Status.Conditions).To(BeEmpty())
		}).WithTimeout(5*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "nobody reconciles beta's Machines any more")
		// The others are still served.
		_ = reconcileLatency(ctx, "alpha", "after-beta")
		view, _ := hub.Cluster("alpha")
		Expect(view.Liveness).To(BeEquivalentTo("Available"))
	})
})
