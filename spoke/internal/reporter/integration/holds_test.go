package integration

import (
	"context"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// setFree writes status.availableMachines of general-machine so that
// compute-medium has free units, as the Machine controller would.
func setFree(ctx context.Context, s *spoke, free int32) {
	GinkgoHelper()
	var m imperatorv1alpha1.Machine
	Expect(s.Client.Get(ctx, client.ObjectKey{Name: machineName}, &m)).To(Succeed())
	patch := client.MergeFrom(m.DeepCopy())
	m.Status.AvailableMachines = []imperatorv1alpha1.AvailableMachine{{
		Name: "compute-medium", Usage: imperatorv1alpha1.Usage{Maximum: 4, Reserved: free},
	}}
	Expect(s.Client.Status().Patch(ctx, &m, patch)).To(Succeed())
}

// machineLag is how long decide lets pass between a hold's Provisioned
// status and the Machine's usage that counts its units: the Machine
// controller writes them in that order, a moment apart.
const machineLag = 300 * time.Millisecond

// decide plays the spoke's Machine controller for the CapacityHold name:
// once it exists, its status says Provisioned (or Failed with reason); a
// moment later the Machine's usage counts the held units.
func decide(ctx context.Context, s *spoke, name, failReason string) {
	defer GinkgoRecover()
	var hold imperatorv1alpha1.CapacityHold
	Eventually(func() error { return s.Client.Get(ctx, client.ObjectKey{Name: name}, &hold) }, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	patch := client.MergeFrom(hold.DeepCopy())
	cond := metav1.Condition{Type: imperatorv1alpha1.HoldConditionProvisioned, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonUnitsHeld, Message: "all units held"}
	hold.Status.Held = hold.Spec.Count
	if failReason != "" {
		cond = metav1.Condition{Type: imperatorv1alpha1.HoldConditionFailed, Status: metav1.ConditionTrue, Reason: failReason, Message: "4 free, 5 wanted"}
		hold.Status.Held = 0
	}
	meta.SetStatusCondition(&hold.Status.Conditions, cond)
	meta.SetStatusCondition(&hold.Status.Conditions, metav1.Condition{Type: imperatorv1alpha1.HoldConditionAccepted, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.HoldReasonAccepted, Message: "the machine group offers the type"})
	Expect(s.Client.Status().Patch(ctx, &hold, patch)).To(Succeed())
	if failReason != "" {
		return
	}
	time.Sleep(machineLag)
	setHeld(ctx, s, hold.Spec.MachineType, hold.Spec.Count)
}

// setHeld writes the usage.held of machineType on the Machine, as the
// Machine controller does when holds come and go.
func setHeld(ctx context.Context, s *spoke, machineType string, held int32) {
	GinkgoHelper()
	var m imperatorv1alpha1.Machine
	Expect(s.Client.Get(ctx, client.ObjectKey{Name: machineName}, &m)).To(Succeed())
	patch := client.MergeFrom(m.DeepCopy())
	for i := range m.Status.AvailableMachines {
		if m.Status.AvailableMachines[i].Name == machineType {
			m.Status.AvailableMachines[i].Usage.Held = held
		}
	}
	Expect(s.Client.Status().Patch(ctx, &m, patch)).To(Succeed())
}

var _ = Describe("Fleet holds through the reporters", Ordered, func() {
	var holder queryv1.QueryClient

	BeforeAll(func(ctx context.Context) {
		cert, err := hubtest.ClientCertificate(ctx, hubServer.Client, agentNamespace, "trainer", "holder")
		Expect(err).NotTo(HaveOccurred())
		caPEM, err := os.ReadFile(spokes["alpha"].caFile)
		Expect(err).NotTo(HaveOccurred())
		cfg, err := identity.ClientTLS(caPEM, &cert, "127.0.0.1")
		Expect(err).NotTo(HaveOccurred())
		conn, err := grpc.NewClient(hubAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		holder = queryv1.NewQueryClient(conn)

		setFree(ctx, spokes["alpha"], 4)
		setFree(ctx, spokes["beta"], 1)
		DeferCleanup(func(ctx context.Context) {
			for _, s := range spokes {
				var m imperatorv1alpha1.Machine
				Expect(s.Client.Get(ctx, client.ObjectKey{Name: machineName}, &m)).To(Succeed())
				patch := client.MergeFrom(m.DeepCopy())
				m.Status.AvailableMachines = nil
				Expect(s.Client.Status().Patch(ctx, &m, patch)).To(Succeed())
			}
		})
		Eventually(func(g Gomega) {
			resp, err := holder.FindCapacity(ctx, &queryv1.FindCapacityRequest{
				Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-medium"}},
				Count:  5, Mode: queryv1.CapacityMode_CAPACITY_MODE_SPREAD,
			})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(resp.GetSatisfiable()).To(BeTrue())
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	})

	hold := func(name string, count int32) *queryv1.CreateHoldRequest {
		return &queryv1.CreateHoldRequest{
			Name:   name,
			Target: &queryv1.CreateHoldRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-medium"}},
			Count:  count, Mode: queryv1.CapacityMode_CAPACITY_MODE_SPREAD, Ttl: durationpb.New(10 * time.Minute),
			Namespaces: []string{"team-a"},
		}
	}

	It("creates a CapacityHold on each chosen spoke and answers Held once they are Provisioned", func(ctx context.Context) {
		go decide(ctx, spokes["alpha"], "train-5", "")
		go decide(ctx, spokes["beta"], "train-5", "")
		fh, err := holder.CreateHold(ctx, hold("train-5", 5))
		Expect(err).NotTo(HaveOccurred())
		Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD), fh.GetMessage())
		got := map[string]int32{}
		for _, cl := range fh.GetClusters() {
			got[cl.GetCluster()] = cl.GetHeld()
			Expect(cl.GetResult()).To(Equal(federationv1.HoldResult_HOLD_RESULT_HELD))
		}
		Expect(got).To(Equal(map[string]int32{"alpha": 4, "beta": 1}))

		By("the hub's usage counts the units held as soon as the hold is Held, not a report later")
		usage, err := holder.GetUsage(ctx, &queryv1.GetUsageRequest{})
		Expect(err).NotTo(HaveOccurred())
		heldAt := map[string]int32{}
		for _, cu := range usage.GetClusters() {
			for _, t := range cu.GetTypes() {
				if t.GetType() == "compute-medium" {
					heldAt[cu.GetCluster()] += t.GetHeld()
				}
			}
		}
		Expect(heldAt).To(Equal(map[string]int32{"alpha": 4, "beta": 1}))

		var onAlpha imperatorv1alpha1.CapacityHold
		Expect(spokes["alpha"].Client.Get(ctx, client.ObjectKey{Name: "train-5"}, &onAlpha)).To(Succeed())
		Expect(onAlpha.Spec.MachineGroup).To(Equal("general-machine"))
		Expect(onAlpha.Spec.MachineType).To(Equal("compute-medium"))
		Expect(onAlpha.Spec.Count).To(BeEquivalentTo(4))
		Expect(onAlpha.Spec.FleetHold).To(Equal(agentNamespace + "/train-5"))
		Expect(onAlpha.Spec.Namespaces).To(Equal([]string{"team-a"}), "only the fleet hold's namespaces may claim it on the spoke")
		Expect(onAlpha.Spec.ValidUntil.Time).To(BeTemporally("~", time.Now().Add(10*time.Minute), time.Minute))

		released, err := holder.ReleaseHold(ctx, &queryv1.ReleaseHoldRequest{Name: "train-5"})
		Expect(err).NotTo(HaveOccurred())
		Expect(released.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_RELEASED))
		for _, name := range []string{"alpha", "beta"} {
			err := spokes[name].Client.Get(ctx, client.ObjectKey{Name: "train-5"}, &imperatorv1alpha1.CapacityHold{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the release deleted the CapacityHold on %s: %v", name, err)
			setHeld(ctx, spokes[name], "compute-medium", 0)
		}
		Eventually(func(g Gomega) {
			usage, err := holder.GetUsage(ctx, &queryv1.GetUsageRequest{})
			g.Expect(err).NotTo(HaveOccurred())
			for _, cu := range usage.GetClusters() {
				for _, t := range cu.GetTypes() {
					g.Expect(t.GetHeld()).To(BeZero(), "%s/%s at the hub", cu.GetCluster(), t.GetType())
				}
			}
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed(), "the released units are free again at the hub")
	})

	It("fails with the spoke's reason when its CapacityHold fails, and leaves no CapacityHold behind", func(ctx context.Context) {
		go decide(ctx, spokes["alpha"], "train-4", imperatorv1alpha1.HoldReasonNotEnoughFreeUnits)
		fh, err := holder.CreateHold(ctx, &queryv1.CreateHoldRequest{
			Name:   "train-4",
			Target: &queryv1.CreateHoldRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-medium"}},
			Count:  4, Mode: queryv1.CapacityMode_CAPACITY_MODE_SAME_CLUSTER, Ttl: durationpb.New(10 * time.Minute),
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_FAILED))
		Expect(fh.GetClusters()).To(HaveLen(1))
		Expect(fh.GetClusters()[0].GetReason()).To(Equal(imperatorv1alpha1.HoldReasonNotEnoughFreeUnits))
		Expect(fh.GetMessage()).To(ContainSubstring("4 free, 5 wanted"))
		Eventually(func() bool {
			err := spokes["alpha"].Client.Get(ctx, client.ObjectKey{Name: "train-4"}, &imperatorv1alpha1.CapacityHold{})
			return apierrors.IsNotFound(err)
		}, 5*time.Second, 50*time.Millisecond).Should(BeTrue(), "a failed CapacityHold is deleted")
	})
})
