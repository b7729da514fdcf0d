package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const machineName = "general-machine"

// usedAtHub reads the used units of a machine type of cluster's
// general-machine in the hub's index, for Eventually and Consistently. It
// fails while the hub does not know the cluster, its general-machine or the
// type, so that a cluster missing at the hub never reads as a figure; a type
// whose spoke reported no usage yet reads 0.
func usedAtHub(cluster, machineType string) func(g Gomega) int32 {
	return func(g Gomega) int32 {
		c, ok := hub.Cluster(cluster)
		g.Expect(ok).To(BeTrue(), "cluster %s in the hub's index", cluster)
		m, ok := c.Machine(machineName)
		g.Expect(ok).To(BeTrue(), "machine %s of cluster %s in the hub's index", machineName, cluster)
		for _, t := range m.GetTypes() {
			if t.GetName() == machineType {
				return t.GetUsage().GetUsed()
			}
		}
		g.Expect(m.GetTypes()).To(ContainElement(HaveField("GetName()", machineType)), "machine type %s of cluster %s", machineType, cluster)
		return 0
	}
}

// setUsed writes status.availableMachines of general-machine on a spoke, as
// the spoke's Machine controller would.
func setUsed(ctx context.Context, s *spoke, machineType string, used int32) {
	GinkgoHelper()
	var m imperatorv1alpha1.Machine
	Expect(s.Client.Get(ctx, client.ObjectKey{Name: machineName}, &m)).To(Succeed())
	patch := client.MergeFrom(m.DeepCopy())
	m.Status.AvailableMachines = []imperatorv1alpha1.AvailableMachine{{
		Name: machineType, Usage: imperatorv1alpha1.Usage{Maximum: 1, Reserved: max(0, 1-used), Used: used},
	}}
	Expect(s.Client.Status().Patch(ctx, &m, patch)).To(Succeed())
}

func managedClusterAvailable(ctx context.Context, name string) metav1.ConditionStatus {
	var mc clusterv1.ManagedCluster
	if err := hubServer.Client.Get(ctx, client.ObjectKey{Name: name}, &mc); err != nil {
		return ""
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable); c != nil {
		return c.Status
	}
	return ""
}

func hubCA() []byte {
	GinkgoHelper()
	var secret corev1.Secret
	Expect(hubServer.Client.Get(context.Background(), client.ObjectKey{Namespace: agentNamespace, Name: "imperator-hub-ca"}, &secret)).To(Succeed())
	return secret.Data[corev1.TLSCertKey]
}

// dialHub connects to the hub over TLS with cert (nil: no client
// certificate), until the spec ends.
func dialHub(cert *tls.Certificate) federationv1.FederationClient {
	GinkgoHelper()
	conn := connectToHub(cert)
	DeferCleanup(conn.Close)
	return federationv1.NewFederationClient(conn)
}

// connectToHub is a connection to the hub over TLS with cert (nil: no
// client certificate), for the caller to close: the hub caps the
// connections open with one certificate.
func connectToHub(cert *tls.Certificate) *grpc.ClientConn {
	GinkgoHelper()
	cfg, err := identity.ClientTLS(hubCA(), cert, "127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	Expect(err).NotTo(HaveOccurred())
	return conn
}

// spokeCertificate is the client certificate a spoke stored after joining.
func spokeCertificate(ctx context.Context, s *spoke) *tls.Certificate {
	GinkgoHelper()
	var secret corev1.Secret
	Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: credentialsSecret}, &secret)).To(Succeed())
	cert, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	Expect(err).NotTo(HaveOccurred())
	return &cert
}

func joinRequest(cluster, token string) *federationv1.JoinRequest {
	GinkgoHelper()
	csr, _, err := pki.NewCSR(cluster)
	Expect(err).NotTo(HaveOccurred())
	return &federationv1.JoinRequest{ClusterName: cluster, Token: token, Csr: csr}
}

// connected reports whether cluster has an open stream at the hub.
func connected(cluster string) bool {
	c, ok := hub.Cluster(cluster)
	return ok && c.Connected
}

// clusterAtHub returns the hub's view of cluster, failing g when it has none.
func clusterAtHub(g Gomega, cluster string) *hubtest.ClusterView {
	c, ok := hub.Cluster(cluster)
	g.Expect(ok).To(BeTrue(), "cluster %s in the hub index", cluster)
	return c
}

// registrationOf returns the UID of cluster's ManagedCluster, once it
// exists: the registration its certificates are bound to.
func registrationOf(ctx context.Context, cluster string) string {
	GinkgoHelper()
	var mc clusterv1.ManagedCluster
	Eventually(func() error { return hubServer.Client.Get(ctx, client.ObjectKey{Name: cluster}, &mc) }).
		WithTimeout(30 * time.Second).Should(Succeed())
	return string(mc.UID)
}

// joinForCertificate joins cluster with token and returns the issued
// certificate with its key.
func joinForCertificate(ctx context.Context, cluster, token string) *tls.Certificate {
	GinkgoHelper()
	csr, keyPEM, err := pki.NewCSR(cluster)
	Expect(err).NotTo(HaveOccurred())
	resp, err := dialHub(nil).Join(ctx, &federationv1.JoinRequest{ClusterName: cluster, Token: token, Csr: csr})
	Expect(err).NotTo(HaveOccurred())
	cert, err := tls.X509KeyPair(resp.GetCertificate(), keyPEM)
	Expect(err).NotTo(HaveOccurred())
	return &cert
}

// reportWith opens a Report stream for cluster with cert and sends a Hello
// and a Snapshot: nil when the hub acknowledges it, else why not. It closes
// its connection, so that it may be called in a polling loop.
func reportWith(ctx context.Context, cert *tls.Certificate, cluster string) error {
	GinkgoHelper()
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn := connectToHub(cert)
	defer func() { _ = conn.Close() }()
	stream, err := federationv1.NewFederationClient(conn).Report(callCtx)
	if err != nil {
		return err
	}
	for _, msg := range []*federationv1.SpokeMessage{
		{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: cluster, Epoch: uint64(time.Now().UnixNano())}}},
		{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: 1}}},
	} {
		if err := stream.Send(msg); err != nil {
			break // the hub ended the stream: Recv says why
		}
	}
	reply, err := stream.Recv()
	if err != nil {
		return err
	}
	if reply.GetAck() == nil {
		return fmt.Errorf("hub answered the snapshot with %v, want an Ack", reply)
	}
	return nil
}

// deregister deletes cluster's ManagedCluster and waits until it is gone.
func deregister(ctx context.Context, cluster string) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(hubServer.Client.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}))).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(hubServer.Client.Get(ctx, client.ObjectKey{Name: cluster}, &clusterv1.ManagedCluster{}))
	}).WithTimeout(10 * time.Second).Should(BeTrue())
}

// refusedFor matches the error with which the hub refuses a certificate of
// an earlier registration of cluster.
func refusedFor(cluster string) OmegaMatcher {
	return SatisfyAll(
		WithTransform(status.Code, Equal(codes.PermissionDenied)),
		WithTransform(func(err error) string { return status.Convert(err).Message() },
			Equal(fmt.Sprintf("certificate was issued for an earlier registration of cluster %q; join again with a new token", cluster))),
	)
}

// storedCertificate returns the certificate in a spoke's credentials Secret
// (PEM), failing g when the Secret is missing.
func storedCertificate(ctx context.Context, g Gomega, s *spoke) []byte {
	var secret corev1.Secret
	g.Expect(s.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: credentialsSecret}, &secret)).To(Succeed())
	return secret.Data[corev1.TLSCertKey]
}

// tokenUsedBy returns the cluster that used a bootstrap token, "" while it
// is unused.
func tokenUsedBy(ctx context.Context, g Gomega, token string) string {
	var secret corev1.Secret
	g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "imperator-bootstrap-token-" + token[:6]}, &secret)).To(Succeed())
	return string(secret.Data["used-by"])
}

// setHubAcceptsClient sets spec.hubAcceptsClient of cluster's ManagedCluster.
func setHubAcceptsClient(ctx context.Context, cluster string, accept bool) {
	GinkgoHelper()
	var mc clusterv1.ManagedCluster
	Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: cluster}, &mc)).To(Succeed())
	patch := client.MergeFrom(mc.DeepCopy())
	mc.Spec.HubAcceptsClient = accept
	Expect(hubServer.Client.Patch(ctx, &mc, patch)).To(Succeed())
}

// reportsAgainUnder checks that cluster reports to the hub with a
// certificate of its registration registration: connected, Available with
// its Machine, at the hub and in its ManagedCluster.
func reportsAgainUnder(ctx context.Context, g Gomega, s *spoke, registration string) {
	c := clusterAtHub(g, s.name)
	g.Expect(c.Connected).To(BeTrue())
	g.Expect(string(c.State)).To(Equal("Available"))
	m, ok := c.Machine(machineName)
	g.Expect(ok).To(BeTrue(), "machine %s at the hub", machineName)
	g.Expect(m.GetTypes()).To(HaveLen(3))
	g.Expect(managedClusterAvailable(ctx, s.name)).To(Equal(metav1.ConditionTrue))
	cert, err := pki.ParseCertificate(storedCertificate(ctx, g, s))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.URIs).To(ConsistOf(identity.RegistrationURI(s.name, registration)))
}

// Specs of Federation are independent: each starts once every spoke reports
// to the hub, so that one failure does not take the specs after it along;
// a spec that changes the hub or a spoke puts it back with DeferCleanup.
var _ = Describe("Federation", func() {
	BeforeEach(func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			for name := range spokes {
				c := clusterAtHub(g, name)
				g.Expect(c.Connected).To(BeTrue(), "%s connected", name)
				g.Expect(string(c.State)).To(Equal("Available"), "%s available", name)
			}
		}).WithTimeout(30*time.Second).Should(Succeed(), "every spoke reports to the hub before the spec")
	})

	It("registers joined spokes: ManagedCluster, ClusterInventory and the hub's index", func(ctx SpecContext) {
		for name := range spokes {
			Eventually(func(g Gomega) {
				c, ok := hub.Cluster(name)
				g.Expect(ok).To(BeTrue(), "cluster %s in the hub index", name)
				g.Expect(c.Connected).To(BeTrue())
				g.Expect(c.Stale()).To(BeFalse())
				m, ok := c.Machine(machineName)
				g.Expect(ok).To(BeTrue())
				g.Expect(m.GetGroup()).To(Equal(machineName))
				g.Expect(m.GetTypes()).To(HaveLen(3))
			}).WithTimeout(30 * time.Second).Should(Succeed())

			Eventually(func(g Gomega) {
				var mc clusterv1.ManagedCluster
				g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: name}, &mc)).To(Succeed())
				g.Expect(mc.Spec.HubAcceptsClient).To(BeTrue())
				g.Expect(managedClusterAvailable(ctx, name)).To(Equal(metav1.ConditionTrue))

				var inv imperatorv1alpha1.ClusterInventory
				g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: name}, &inv)).To(Succeed())
				g.Expect(inv.Spec.ClusterName).To(Equal(name))
				g.Expect(inv.Status.ObservedAt).NotTo(BeNil())
				g.Expect(inv.Status.Machines).To(ConsistOf(HaveField("Name", machineName)))
			}).WithTimeout(10 * time.Second).Should(Succeed())
		}
	})

	It("does not write to the hub cluster while nothing changes", func(ctx SpecContext) {
		resourceVersions := func(g Gomega) []string {
			var inv imperatorv1alpha1.ClusterInventory
			g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: "alpha", Name: "alpha"}, &inv)).To(Succeed())
			var mc clusterv1.ManagedCluster
			g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: "alpha"}, &mc)).To(Succeed())
			return []string{inv.ResourceVersion, mc.ResourceVersion}
		}
		// An earlier spec's change may still be on its way (the hub coalesces
		// writes per persist interval): start once nothing was written for
		// two intervals.
		var before []string
		Eventually(func(g Gomega) {
			first := resourceVersions(g)
			time.Sleep(2 * persistInterval)
			g.Expect(resourceVersions(g)).To(Equal(first))
			before = first
		}).WithTimeout(10 * persistInterval).Should(Succeed())
		// A dead reporter writes nothing either: the hub must keep hearing
		// alpha's heartbeats (every 300ms) all along the window.
		windowStart := time.Now()
		Consistently(func(g Gomega) []string {
			c := clusterAtHub(g, "alpha")
			g.Expect(c.Connected).To(BeTrue(), "alpha's reporter is connected")
			g.Expect(c.LastHeartbeat).To(BeTemporally(">", time.Now().Add(-2*time.Second)), "alpha's reporter heartbeats")
			return resourceVersions(g)
		}).WithTimeout(5 * persistInterval).Should(Equal(before))
		Expect(clusterAtHub(Default, "alpha").LastHeartbeat).To(BeTemporally(">", windowStart),
			"alpha's reporter heartbeated during the window: the quiet came from no change, not from a silent reporter")
	})

	It("shows a Machine status change on a spoke at the hub within 2 seconds", func(ctx SpecContext) {
		betaUsed := usedAtHub("beta", "compute-xlarge")(Default)
		setUsed(ctx, spokes["alpha"], "compute-xlarge", 1)
		Eventually(usedAtHub("alpha", "compute-xlarge")).
			WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(int32(1)))
		// The other cluster is still at the hub, its figures untouched.
		Consistently(usedAtHub("beta", "compute-xlarge")).
			WithTimeout(500 * time.Millisecond).Should(Equal(betaUsed))
	})

	It("shows a spoke's new Machine and its node-pool health at the hub, and drops the Machine once it is deleted", func(ctx SpecContext) {
		s := spokes["alpha"]
		const name, group = "extra-machine", "extra"
		machine := wrappers.MakeMachine(name, group).Type("compute-medium", "6", "48Gi", 1).Node("extra-node", "compute-medium").Obj()
		pool := &imperatorv1alpha1.MachineNodePool{
			ObjectMeta: metav1.ObjectMeta{Name: imperatorv1alpha1.NodePoolName(name)},
			Spec:       imperatorv1alpha1.MachineNodePoolSpec{MachineGroup: group},
		}
		Expect(s.Client.Create(ctx, machine)).To(Succeed())
		Expect(s.Client.Create(ctx, pool)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(s.Client.Delete(ctx, pool))).To(Succeed())
			Expect(client.IgnoreNotFound(s.Client.Delete(ctx, machine))).To(Succeed())
		})
		nodesAtHub := func(g Gomega) *federationv1.NodeCounts {
			m, ok := clusterAtHub(g, "alpha").Machine(name)
			g.Expect(ok).To(BeTrue(), "Machine %s at the hub", name)
			g.Expect(m.GetTypes()).To(HaveLen(1))
			return m.GetTypes()[0].GetNodes()
		}
		Eventually(nodesAtHub).WithTimeout(10 * time.Second).Should(HaveField("NotReady", int32(0)))

		By("the node-pool controller finding the pool's node not ready")
		patch := client.MergeFrom(pool.DeepCopy())
		pool.Status.NodePool = []imperatorv1alpha1.NodePoolStatus{
			{Name: "extra-node", MachineType: "compute-medium", Condition: imperatorv1alpha1.NodeConditionNotReady},
		}
		Expect(s.Client.Status().Patch(ctx, pool, patch)).To(Succeed())
		Eventually(nodesAtHub).WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).
			Should(HaveField("NotReady", int32(1)))

		By("deleting the Machine on the spoke")
		Expect(s.Client.Delete(ctx, machine)).To(Succeed())
		Eventually(func(g Gomega) bool {
			_, ok := clusterAtHub(g, "alpha").Machine(name)
			return ok
		}).WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(BeFalse())
		_, ok := clusterAtHub(Default, "alpha").Machine(machineName)
		Expect(ok).To(BeTrue(), "the spoke's other Machine stays at the hub")
	})

	It("refuses a spoke that presents another cluster's certificate", func(ctx SpecContext) {
		fed := dialHub(spokeCertificate(ctx, spokes["alpha"]))
		stream, err := fed.Report(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: "beta", Epoch: 1}}})).To(Succeed())
		_, err = stream.Recv()
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring(`identifies cluster "alpha"`))
		Expect(connected("beta")).To(BeTrue(), "beta's own stream must survive")
	})

	It("refuses Report without a client certificate", func(ctx SpecContext) {
		stream, err := dialHub(nil).Report(ctx)
		Expect(err).NotTo(HaveOccurred())
		_, err = stream.Recv()
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "error: %v", err)
	})

	It("refuses a plain-text client", func(ctx SpecContext) {
		conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = federationv1.NewFederationClient(conn).Join(callCtx, joinRequest("gamma", "abcdef.0123456789abcdef"))
		Expect(err).To(HaveOccurred())
		Expect(status.Code(err)).To(Equal(codes.Unavailable), "error: %v", err)
	})

	It("refuses a reused token", func(ctx SpecContext) {
		_, err := dialHub(nil).Join(ctx, joinRequest("gamma", spokes["alpha"].token))
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring("already used"))
	})

	It("lets only a token bound to its name re-join a registered cluster", func(ctx SpecContext) {
		unbound, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		_, err = dialHub(nil).Join(ctx, joinRequest("alpha", unbound))
		Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring("already registered"))

		alpha := spokes["alpha"]
		before := storedCertificate(ctx, Default, alpha)
		bound, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "alpha")
		Expect(err).NotTo(HaveOccurred())
		resp, err := dialHub(nil).Join(ctx, joinRequest("alpha", bound))
		Expect(err).NotTo(HaveOccurred())
		cert, err := pki.ParseCertificate(resp.GetCertificate())
		Expect(err).NotTo(HaveOccurred())
		Expect(cert.Subject.CommonName).To(Equal("alpha"))

		// The re-join retired the certificates issued before it, the agent's
		// among them: given a new token bound to its name, the agent joins
		// again by itself.
		again, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "alpha")
		Expect(err).NotTo(HaveOccurred())
		Expect(alpha.writeToken(again)).To(Succeed())
		registration := registrationOf(ctx, "alpha")
		Eventually(func(g Gomega) {
			g.Expect(storedCertificate(ctx, g, alpha)).NotTo(Equal(before))
			reportsAgainUnder(ctx, g, alpha, registration)
		}).WithTimeout(15 * time.Second).Should(Succeed())
		Expect(tokenUsedBy(ctx, Default, again)).To(Equal("alpha"))
	})

	It("refuses an expired token", func(ctx SpecContext) {
		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		var secret corev1.Secret
		Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: "imperator-bootstrap-token-" + token[:6]}, &secret)).To(Succeed())
		patch := client.MergeFrom(secret.DeepCopy())
		secret.Data["expiration"] = []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
		Expect(hubServer.Client.Patch(ctx, &secret, patch)).To(Succeed())

		_, err = dialHub(nil).Join(ctx, joinRequest("gamma", token))
		Expect(status.Code(err)).To(Equal(codes.Unauthenticated), "error: %v", err)
		Expect(err.Error()).To(ContainSubstring("expired"))
	})

	It("refuses reports while the ManagedCluster does not accept the client", func(ctx SpecContext) {
		setAccepts := func(accept bool) {
			var mc clusterv1.ManagedCluster
			Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: "beta"}, &mc)).To(Succeed())
			patch := client.MergeFrom(mc.DeepCopy())
			mc.Spec.HubAcceptsClient = accept
			Expect(hubServer.Client.Patch(ctx, &mc, patch)).To(Succeed())
		}
		setAccepts(false)
		Eventually(func() bool { return connected("beta") }).
			WithTimeout(10 * time.Second).Should(BeFalse())
		Consistently(func() bool { return connected("beta") }).
			WithTimeout(time.Second).Should(BeFalse())
		setAccepts(true)
		Eventually(func() bool { return connected("beta") }).
			WithTimeout(10 * time.Second).Should(BeTrue())
	})

	It("turns a silent spoke Unknown after the grace period and back when it returns", func(ctx SpecContext) {
		beta := spokes["beta"]
		Expect(beta.stopReporter()).To(Succeed())
		Eventually(func(g Gomega) {
			c := clusterAtHub(g, "beta")
			g.Expect(string(c.State)).To(Equal("Unknown"))
			g.Expect(c.Stale()).To(BeTrue())
			m, ok := c.Machine(machineName)
			g.Expect(ok).To(BeTrue(), "figures are kept")
			g.Expect(m.GetTypes()).To(HaveLen(3))
			g.Expect(managedClusterAvailable(ctx, "beta")).To(Equal(metav1.ConditionUnknown))
		}).WithTimeout(gracePeriod + 5*time.Second).Should(Succeed())

		// Restarted without a token: it reuses the certificate it stored.
		beta.token = ""
		Expect(beta.startReporter(hubAddr)).To(Succeed())
		Eventually(func(g Gomega) {
			c := clusterAtHub(g, "beta")
			g.Expect(string(c.State)).To(Equal("Available"))
			g.Expect(c.Connected).To(BeTrue())
			g.Expect(managedClusterAvailable(ctx, "beta")).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(10 * time.Second).Should(Succeed())
	})

	It("renews at start a stored certificate past two thirds of its life, without a token", func(ctx SpecContext) {
		beta := spokes["beta"]
		Expect(beta.stopReporter()).To(Succeed())
		// A certificate the hub issued to beta with 12 seconds of life: its
		// life counted from its NotBefore (the Secret does not say when the
		// agent obtained it), two thirds of it are long gone.
		restartHub(hubtest.Options{ClientCertValidity: 12 * time.Second})
		csr, keyPEM, err := pki.NewCSR("beta")
		Expect(err).NotTo(HaveOccurred())
		resp, err := dialHub(spokeCertificate(ctx, beta)).Renew(ctx, &federationv1.RenewRequest{Csr: csr})
		Expect(err).NotTo(HaveOccurred())
		restartHub(hubtest.Options{})
		var secret corev1.Secret
		Expect(beta.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: credentialsSecret}, &secret)).To(Succeed())
		secret.Data[corev1.TLSCertKey] = resp.GetCertificate()
		secret.Data[corev1.TLSPrivateKeyKey] = keyPEM
		Expect(beta.Client.Update(ctx, &secret)).To(Succeed())

		beta.token = ""
		Expect(beta.startReporter(hubAddr)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(beta.Client.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: credentialsSecret}, &secret)).To(Succeed())
			cert, err := pki.ParseCertificate(secret.Data[corev1.TLSCertKey])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cert.Subject.CommonName).To(Equal("beta"))
			g.Expect(cert.NotAfter).To(BeTemporally(">", time.Now().Add(300*24*time.Hour)))
			g.Expect(connected("beta")).To(BeTrue())
		}).WithTimeout(15 * time.Second).Should(Succeed())
	})

	It("serves persisted figures at once as stale after a hub restart, and is current after reconnect", func(ctx SpecContext) {
		bothCurrent := func(g Gomega) {
			for name := range spokes {
				c := clusterAtHub(g, name)
				g.Expect(c.Connected).To(BeTrue(), "%s reconnected", name)
				g.Expect(c.Stale()).To(BeFalse(), "%s current", name)
			}
		}
		// A hub whose coalesced writes are never due while the spec runs:
		// only its flush on shutdown can persist the figure below.
		Expect(hub.Stop()).To(Succeed())
		var err error
		hub, err = hubtest.Start(hubServer.Config, hubtest.Options{Address: hubAddr, Namespace: agentNamespace, GracePeriod: gracePeriod, PersistInterval: time.Hour})
		Expect(err).NotTo(HaveOccurred())
		Eventually(bothCurrent).WithTimeout(15 * time.Second).Should(Succeed())
		// A figure no earlier spec used, so that only this hub can have written it.
		setUsed(ctx, spokes["alpha"], "compute-xlarge", 3)
		Eventually(usedAtHub("alpha", "compute-xlarge")).
			WithTimeout(2 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(int32(3)))

		Expect(hub.Stop()).To(Succeed())
		hub, err = hubtest.Start(hubServer.Config, hubtest.Options{Address: hubAddr, Namespace: agentNamespace, GracePeriod: gracePeriod, PersistInterval: persistInterval})
		Expect(err).NotTo(HaveOccurred())

		// Figures are served before any spoke reconnected, marked stale.
		c, ok := hub.Cluster("alpha")
		Expect(ok).To(BeTrue())
		Expect(c.Restored).To(BeTrue())
		Expect(c.Stale()).To(BeTrue())
		Expect(usedAtHub("alpha", "compute-xlarge")(Default)).To(Equal(int32(3)))

		Eventually(bothCurrent).WithTimeout(15 * time.Second).Should(Succeed())

		setUsed(ctx, spokes["alpha"], "compute-xlarge", 2)
		Eventually(usedAtHub("alpha", "compute-xlarge")).
			WithTimeout(2 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(int32(2)))
	})

	// beta's deregistration and its return are one story, in one spec: it
	// ends with beta reporting again, as the specs after it expect.
	It("forgets a deregistered cluster and ends its stream, and the spoke joins again by itself with a token bound to its name once someone else created its ManagedCluster again", func(ctx SpecContext) {
		var inv imperatorv1alpha1.ClusterInventory
		Expect(hubServer.Client.Get(ctx, client.ObjectKey{Namespace: "beta", Name: "beta"}, &inv)).To(Succeed())
		Expect(inv.OwnerReferences).To(ConsistOf(And(HaveField("Kind", "ManagedCluster"), HaveField("Name", "beta"))),
			"the garbage collector deletes the inventory with its ManagedCluster")

		Expect(hubServer.Client.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "beta"}})).To(Succeed())
		Eventually(func() bool { _, ok := hub.Cluster("beta"); return ok }).WithTimeout(10 * time.Second).Should(BeFalse())
		// The spoke keeps trying and is refused.
		Consistently(func() bool { _, ok := hub.Cluster("beta"); return ok }).WithTimeout(2 * time.Second).Should(BeFalse())
		Expect(connected("alpha")).To(BeTrue())

		By("someone creates beta's ManagedCluster again; beta joins with a token bound to its name")
		// The token file holds none or a used one: beta cannot join by itself.
		beta := spokes["beta"]
		before := storedCertificate(ctx, Default, beta)
		Expect(hubServer.Client.Create(ctx, &clusterv1.ManagedCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "beta"},
			Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true},
		})).To(Succeed())
		current := registrationOf(ctx, "beta")
		Consistently(func(g Gomega) {
			g.Expect(connected("beta")).To(BeFalse())
			g.Expect(storedCertificate(ctx, g, beta)).To(Equal(before))
		}).WithTimeout(2 * time.Second).Should(Succeed())

		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "beta")
		Expect(err).NotTo(HaveOccurred())
		Expect(beta.writeToken(token)).To(Succeed())
		Eventually(func(g Gomega) { reportsAgainUnder(ctx, g, beta, current) }).
			WithTimeout(15 * time.Second).Should(Succeed())
		Expect(registrationOf(ctx, "beta")).To(Equal(current), "the join adopted the ManagedCluster")
	})

	It("refuses the certificates of an earlier registration once the cluster is deregistered and joined again", func(ctx SpecContext) {
		const cluster = "delta"
		DeferCleanup(deregister, cluster)
		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		earlier := joinForCertificate(ctx, cluster, token)
		Expect(reportWith(ctx, earlier, cluster)).To(Succeed())

		deregister(ctx, cluster)
		token, err = hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		current := joinForCertificate(ctx, cluster, token)

		// The hub's cache may lag behind the API for a moment; then the old
		// certificate is refused for good.
		Eventually(func() error { return reportWith(ctx, earlier, cluster) }).
			WithTimeout(10 * time.Second).Should(refusedFor(cluster))
		Consistently(func() error { return reportWith(ctx, earlier, cluster) }).
			WithTimeout(time.Second).Should(refusedFor(cluster))
		csr, _, err := pki.NewCSR(cluster)
		Expect(err).NotTo(HaveOccurred())
		_, err = dialHub(earlier).Renew(ctx, &federationv1.RenewRequest{Csr: csr})
		Expect(err).To(refusedFor(cluster), "the old certificate cannot be renewed into a current one")

		Expect(reportWith(ctx, current, cluster)).To(Succeed())
	})

	It("refuses a certificate once its cluster's ManagedCluster is deleted and created again by someone else", func(ctx SpecContext) {
		const cluster = "epsilon"
		DeferCleanup(deregister, cluster)
		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		cert := joinForCertificate(ctx, cluster, token)
		Expect(reportWith(ctx, cert, cluster)).To(Succeed())

		deregister(ctx, cluster)
		Expect(hubServer.Client.Create(ctx, &clusterv1.ManagedCluster{
			ObjectMeta: metav1.ObjectMeta{Name: cluster},
			Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true},
		})).To(Succeed())
		Eventually(func() error { return reportWith(ctx, cert, cluster) }).
			WithTimeout(10 * time.Second).Should(refusedFor(cluster))

		// A token bound to the name adopts the new ManagedCluster: its
		// certificate works, the earlier one still does not.
		token, err = hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, cluster)
		Expect(err).NotTo(HaveOccurred())
		adopted := joinForCertificate(ctx, cluster, token)
		Expect(reportWith(ctx, adopted, cluster)).To(Succeed())
		Expect(reportWith(ctx, cert, cluster)).To(refusedFor(cluster))
	})

	It("keeps its certificate while the hub does not accept the cluster, and does not spend a token", func(ctx SpecContext) {
		alpha := spokes["alpha"]
		before := storedCertificate(ctx, Default, alpha)
		// A token the agent could join with: a wrong re-join would use it and
		// replace the certificate.
		bound, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "alpha")
		Expect(err).NotTo(HaveOccurred())
		Expect(alpha.writeToken(bound)).To(Succeed())
		DeferCleanup(alpha.writeToken, alpha.token)

		setHubAcceptsClient(ctx, "alpha", false)
		DeferCleanup(setHubAcceptsClient, "alpha", true)
		Eventually(func() bool { return connected("alpha") }).WithTimeout(10 * time.Second).Should(BeFalse())
		// The agent retries every second at most: several refusals.
		Consistently(func(g Gomega) {
			g.Expect(connected("alpha")).To(BeFalse())
			g.Expect(storedCertificate(ctx, g, alpha)).To(Equal(before))
			g.Expect(tokenUsedBy(ctx, g, bound)).To(BeEmpty())
		}).WithTimeout(3 * time.Second).Should(Succeed())

		setHubAcceptsClient(ctx, "alpha", true)
		Eventually(func() bool { return connected("alpha") }).WithTimeout(10 * time.Second).Should(BeTrue())
		Expect(storedCertificate(ctx, Default, alpha)).To(Equal(before))
		Expect(tokenUsedBy(ctx, Default, bound)).To(BeEmpty())
	})

	It("joins again by itself once its cluster is deregistered and a new token is written to its token file", func(ctx SpecContext) {
		alpha := spokes["alpha"]
		earlier := registrationOf(ctx, "alpha")
		before := storedCertificate(ctx, Default, alpha)
		// The token file still holds the token alpha joined with, used.
		deregister(ctx, "alpha")
		Eventually(func() bool { _, ok := hub.Cluster("alpha"); return ok }).WithTimeout(10 * time.Second).Should(BeFalse())
		// The used token cannot register it again, and the agent deletes
		// nothing: it waits with its credentials as they are.
		Consistently(func(g Gomega) {
			g.Expect(connected("alpha")).To(BeFalse())
			g.Expect(apierrors.IsNotFound(hubServer.Client.Get(ctx, client.ObjectKey{Name: "alpha"}, &clusterv1.ManagedCluster{}))).To(BeTrue(), "no new registration")
			g.Expect(storedCertificate(ctx, g, alpha)).To(Equal(before))
		}).WithTimeout(3 * time.Second).Should(Succeed())

		token, err := hubtest.CreateToken(ctx, hubServer.Client, agentNamespace, time.Hour, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(alpha.writeToken(token)).To(Succeed())
		var current string
		Eventually(func(g Gomega) {
			var mc clusterv1.ManagedCluster
			g.Expect(hubServer.Client.Get(ctx, client.ObjectKey{Name: "alpha"}, &mc)).To(Succeed())
			current = string(mc.UID)
		}).WithTimeout(15 * time.Second).Should(Succeed())
		Expect(current).NotTo(Equal(earlier))
		Eventually(func(g Gomega) { reportsAgainUnder(ctx, g, alpha, current) }).
			WithTimeout(15 * time.Second).Should(Succeed())
		Expect(tokenUsedBy(ctx, Default, token)).To(Equal("alpha"))
	})

})
