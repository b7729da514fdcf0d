package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/persist"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// inputMachine is a valid Machine of group with one type offering available units.
func inputMachine(name, group string, available int32) *federationv1.Machine {
	return &federationv1.Machine{Name: name, Group: group, Types: []*federationv1.MachineType{{
		Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: available,
		Usage: &federationv1.Usage{Maximum: available, Reserved: available},
	}}}
}

// openStream opens a Report stream of cluster in epoch and sends msgs; it
// returns the stream and the hub's first answer (or the error that ended it).
func openStream(ctx context.Context, cluster string, cert *tls.Certificate, epoch uint64, msgs ...*federationv1.SpokeMessage) (federationv1.Federation_ReportClient, *federationv1.HubMessage, error) {
	GinkgoHelper()
	ctx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	stream, err := federationv1.NewFederationClient(dialFrom(newSource(), cert)).Report(ctx)
	Expect(err).NotTo(HaveOccurred())
	hello := &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: cluster, AgentVersion: "input", Epoch: epoch}}}
	for _, m := range append([]*federationv1.SpokeMessage{hello}, msgs...) {
		if err := stream.Send(m); err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, err
		}
	}
	msg, err := stream.Recv()
	return stream, msg, err
}

func snapshotOf(gen uint64, machines ...*federationv1.Machine) *federationv1.SpokeMessage {
	return &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: gen, Machines: machines}}}
}

func usageOf(ctx context.Context, viewer *tls.Certificate, cluster string) *queryv1.GetUsageResponse {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := queryv1.NewQueryClient(dialFrom(newSource(), viewer)).GetUsage(ctx, &queryv1.GetUsageRequest{Cluster: cluster})
	Expect(err).NotTo(HaveOccurred())
	return resp
}

var _ = Describe("What spokes send", func() {
	It("refuses an inventory breaking the limits with InvalidArgument naming the field, and keeps the last good one, stale", func(ctx context.Context) {
		const cluster = "input-refused"
		cert := joinedSpoke(ctx, cluster)
		viewer, _ := viewerCertificate("input-viewer")
		epoch := uint64(time.Now().UnixNano())
		_, first, err := openStream(ctx, cluster, cert, epoch, snapshotOf(1, inputMachine("gpu", "input-refused", 3)))
		Expect(err).NotTo(HaveOccurred())
		Expect(first.GetAck().GetGeneration()).To(Equal(uint64(1)))

		many := make([]*federationv1.Machine, 10_001)
		for i := range many {
			many[i] = inputMachine(fmt.Sprintf("m%05d", i), "input-refused", 1)
		}
		duplicateTypes := inputMachine("gpu", "input-refused", 4)
		duplicateTypes.Types = append(duplicateTypes.Types, duplicateTypes.Types[0])
		negative := inputMachine("gpu", "input-refused", 4)
		negative.Types[0].Usage.Used = -1
		for i, bad := range []struct {
			machines  []*federationv1.Machine
			wantField string
		}{
			{many, "snapshot.machines"},
			{[]*federationv1.Machine{duplicateTypes}, "snapshot.machines[0].types[1].name"},
			{[]*federationv1.Machine{negative}, "snapshot.machines[0].types[0].usage.used"},
		} {
			By("sending a Snapshot breaking the limit at " + bad.wantField)
			_, answer, err := openStream(ctx, cluster, cert, epoch, snapshotOf(uint64(2+i), bad.machines...))
			Expect(answer).To(BeNil(), "the hub answered instead of refusing")
			Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "%v", err)
			var field string
			for _, d := range status.Convert(err).Details() {
				if info, ok := d.(*errdetails.ErrorInfo); ok {
					field = info.GetMetadata()["field"]
				}
			}
			Expect(field).To(Equal(bad.wantField))

			usage := usageOf(ctx, viewer, cluster)
			Expect(usage.GetClusters()).To(HaveLen(1))
			Expect(usage.GetClusters()[0].GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_STALE))
			Expect(usage.GetClusters()[0].GetTypes()).To(HaveLen(1))
			Expect(usage.GetClusters()[0].GetTypes()[0].GetMaximum()).To(Equal(int32(3)), "the last good inventory is kept")
		}

		By("telling the other replicas, through the ClusterInventory, that the persisted figures are not current")
		Eventually(func(g Gomega) {
			inv := &imperatorv1alpha1.ClusterInventory{}
			g.Expect(hubClient.Get(ctx, client.ObjectKey{Namespace: cluster, Name: persist.InventoryName(cluster)}, inv)).To(Succeed())
			g.Expect(inv.Status.Generation).To(Equal(uint64(1)))
			cond := meta.FindStatusCondition(inv.Status.Conditions, persist.ConditionInventoryCurrent)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(persist.ReasonInventoryRefused))
		}).WithTimeout(20 * time.Second).Should(Succeed())

		By("taking in the next good Snapshot")
		_, answer, err := openStream(ctx, cluster, cert, epoch, snapshotOf(10, inputMachine("gpu", "input-refused", 5)))
		Expect(err).NotTo(HaveOccurred())
		Expect(answer.GetAck().GetGeneration()).To(Equal(uint64(10)))
		usage := usageOf(ctx, viewer, cluster)
		Expect(usage.GetClusters()[0].GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE))
		Expect(usage.GetClusters()[0].GetTypes()[0].GetMaximum()).To(Equal(int32(5)))
	}, SpecTimeout(time.Minute))

	It("saturates the fleet totals when one cluster reports MaxInt32", func(ctx context.Context) {
		viewer, _ := viewerCertificate("input-viewer")
		const group = "input-saturation"
		huge := inputMachine("gpu", group, math.MaxInt32)
		for cluster, machine := range map[string]*federationv1.Machine{"input-huge": huge, "input-small": inputMachine("gpu", group, 4)} {
			_, answer, err := openStream(ctx, cluster, joinedSpoke(ctx, cluster), uint64(time.Now().UnixNano()), snapshotOf(1, machine))
			Expect(err).NotTo(HaveOccurred())
			Expect(answer.GetAck()).NotTo(BeNil())
		}
		usage := usageOf(ctx, viewer, "")
		var fleet *queryv1.TypeUsage
		for _, t := range usage.GetFleet() {
			if t.GetGroup() == group {
				fleet = t
			}
		}
		Expect(fleet).NotTo(BeNil())
		Expect(fleet.GetMaximum()).To(Equal(int32(math.MaxInt32)))
		Expect(fleet.GetReserved()).To(Equal(int32(math.MaxInt32)))
		Expect(fleet.GetFree()).To(Equal(int32(math.MaxInt32)))
	}, SpecTimeout(time.Minute))
})
