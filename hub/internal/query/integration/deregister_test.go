package integration

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// buildImperatorctl builds imperatorctl into the credentials directory once
// for the suite, whichever spec needs it first.
func buildImperatorctl() {
	GinkgoHelper()
	if imperatorctl != "" {
		return
	}
	binDir, err := repo.Binaries(context.Background(), credsDir, "imperatorctl")
	Expect(err).NotTo(HaveOccurred())
	imperatorctl = filepath.Join(binDir, "imperatorctl")
}

// An admin removes a cluster from the fleet with imperatorctl cluster
// deregister (issue 38): refused while a fleet hold places units there,
// done with --release-holds, and then the cluster is gone from
// imperatorctl clusters and its spoke cannot report again.
var _ = Describe("Deregistering a cluster", Ordered, func() {
	const name = "leaving"
	var spoke *holdingSpoke

	BeforeAll(func(ctx context.Context) {
		buildImperatorctl()
		sim, err := joinSpoke(ctx, name)
		Expect(err).NotTo(HaveOccurred())
		spoke = &holdingSpoke{simSpoke: sim, free: 2, held: map[string]int32{}}
		sim.onHold = spoke.answer
		machine := gpuMachine("team-e", 2, 0)
		machine.Types[0].Name = "dereg-xlarge"
		Expect(sim.start(machine)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(spoke.stop()).To(Succeed())
			Expect(client.IgnoreNotFound(hubClient.Delete(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
			Eventually(func() bool { _, ok := hub.Cluster(name); return ok }, 30*time.Second, 100*time.Millisecond).Should(BeFalse(), "the suite's hub forgot the cluster")
		})
		Eventually(func(g Gomega) {
			r := ctl(adminConf, "clusters", name, "-o", "name")
			g.Expect(r.code).To(Equal(0), r.stderr)
			g.Expect(r.stdout).To(Equal("cluster/" + name + "\n"))
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	}, NodeTimeout(2*time.Minute))

	It("is refused to viewers, and for a cluster the hub does not know", func() {
		By("a viewer asking")
		r := ctl(viewerConf, "cluster", "deregister", name, "--yes")
		Expect(r.code).To(Equal(4), r.stderr)
		Expect(r.stderr).To(ContainSubstring("admin"))

		By("naming a cluster that is not registered")
		r = ctl(adminConf, "cluster", "deregister", "no-such-cluster", "--yes")
		Expect(r.code).To(Equal(1), r.stderr)
		Expect(r.stderr).To(ContainSubstring(`cluster "no-such-cluster" is not registered at the hub`))
	})

	It("is refused while a fleet hold places units there, and releases it with --release-holds", func(ctx context.Context) {
		By("booking both units of the cluster")
		cert, err := tls.LoadX509KeyPair(filepath.Join(credsDir, "admin.crt"), filepath.Join(credsDir, "admin.key"))
		Expect(err).NotTo(HaveOccurred())
		admin := queryClient(hub.Address(), cert)
		fh, err := admin.CreateHold(ctx, &queryv1.CreateHoldRequest{
			Name:   "dereg-train",
			Target: &queryv1.CreateHoldRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "dereg-xlarge"}},
			Count:  2, Mode: queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER, Ttl: durationpb.New(15 * time.Minute),
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			// Other specs list every fleet hold of the hub's namespace.
			Expect(client.IgnoreNotFound(hubClient.Delete(ctx, &imperatorv1alpha1.FleetHold{ObjectMeta: metav1.ObjectMeta{Namespace: hubNamespace, Name: "dereg-train"}}))).To(Succeed())
		})
		Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD), fh.GetMessage())
		Expect(spoke.heldNow()).To(Equal(int32(2)))

		By("deregistering without --release-holds: refused, naming the hold")
		r := ctl(adminConf, "cluster", "deregister", name, "--yes")
		Expect(r.code).To(Equal(1), r.stderr)
		Expect(r.stderr).To(ContainSubstring(`fleet holds still place units on cluster "leaving": dereg-train`))
		Expect(r.stderr).To(ContainSubstring("--release-holds"))
		Expect(ctl(adminConf, "clusters", name, "-o", "name").stdout).To(Equal("cluster/"+name+"\n"), "still registered")

		By("deregistering with --release-holds")
		r = ctl(adminConf, "cluster", "deregister", name, "--yes", "--release-holds", "--timeout", "1m")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(Equal("fleethold/dereg-train released\ncluster/" + name + " deregistered\n"))
		Eventually(spoke.heldNow, 30*time.Second, 100*time.Millisecond).Should(BeZero(), "the spoke was told to release its part")
	}, NodeTimeout(2*time.Minute))

	It("leaves the cluster gone from imperatorctl clusters, its ManagedCluster deleted, and its spoke refused", func(ctx context.Context) {
		By("listing the clusters right after")
		r := ctl(adminConf, "clusters", "-o", "name")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).NotTo(ContainSubstring("cluster/" + name + "\n"))
		r = ctl(adminConf, "clusters", name)
		Expect(r.code).NotTo(Equal(0))
		Expect(r.stderr).To(ContainSubstring(name))

		By("the ManagedCluster is gone from the hub cluster")
		Eventually(func() bool {
			return apierrors.IsNotFound(hubClient.Get(ctx, client.ObjectKey{Name: name}, &clusterv1.ManagedCluster{}))
		}, 30*time.Second, 100*time.Millisecond).Should(BeTrue())

		By("the spoke reporting again with its certificate")
		Expect(spoke.stop()).To(Succeed())
		conn, err := dial(hub.Address(), &spoke.cert)
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = conn.Close() }()
		Eventually(func(g Gomega) {
			callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			stream, err := federationv1.NewFederationClient(conn).Report(callCtx)
			if err == nil {
				_ = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: name, AgentVersion: "v0.1.0", Epoch: uint64(time.Now().UnixNano())}}})
				_, err = stream.Recv()
			}
			g.Expect(status.Code(err)).To(BeElementOf(codes.PermissionDenied, codes.Unauthenticated), "%v", err)
		}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
		Consistently(func() string { return ctl(adminConf, "clusters", "-o", "name").stdout }, 2*time.Second, 500*time.Millisecond).
			ShouldNot(ContainSubstring("cluster/"+name+"\n"), "a refused spoke does not come back")
	}, NodeTimeout(2*time.Minute))
})
