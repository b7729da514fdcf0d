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

// join calls Join without a client certificate, as an agent does: the
// hub's answer ResourceExhausted (its limit per source address, 1 a second
// in bursts of 5, which every spec of the suite shares from 127.0.0.1) is
// retried a second later for up to 15 s; every other answer is returned.
func join(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
	GinkgoHelper()
	hub := dialHub(nil)
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := hub.Join(ctx, req)
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return resp, err
		case <-time.After(time.Second):
		}
	}
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
	resp, err := join(ctx, &federationv1.JoinRequest{ClusterName: cluster, Token: token, Csr: csr})
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
	g.Expect(string(c.Liveness)).To(Equal("Available"))
	m, ok := c.Machine(machineName)
	g.Expect(ok).To(BeTrue(), "machine %s at the hub", machineName)
	g.Expect(m.GetTypes()).To(HaveLen(3))
	g.Expect(managedClusterAvailable(ctx, s.name)).To(Equal(metav1.ConditionTrue))
	cert, err := pki.ParseCertificate(storedCertificate(ctx, g, s))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.URIs).To(ConsistOf(identity.RegistrationURI(s.name, registration)))
}

// everySpokeReports waits until every spoke is connected to the hub and
// Available. The Federation specs are independent: each starts from there,
// so that one failure does not take the specs after it along, and a spec
// that changes the hub or a spoke puts it back with DeferCleanup.
func everySpokeReports() {
	Eventually(func(g Gomega) {
		for name := range spokes {
			c := clusterAtHub(g, name)
			g.Expect(c.Connected).To(BeTrue(), "%s connected", name)
			g.Expect(string(c.Liveness)).To(Equal("Available"), "%s available", name)
		}
	}).WithTimeout(30*time.Second).Should(Succeed(), "every spoke reports to the hub before the spec")
}
