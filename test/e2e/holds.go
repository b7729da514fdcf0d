package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// HoldInput configures HoldSpec.
type HoldInput struct {
	Env *Env
	// Name of the fleet hold; Type and Count what it holds, in one cluster.
	Name  string
	Type  string
	Count int32
	// WantCluster is the only cluster with Count free units of Type.
	WantCluster string
	// Namespace is created, injection enabled, for the hold's guest.
	Namespace string
}

// HoldSpec is journey 8: `imperatorctl hold create NAME TYPE --count N
// --same-cluster --ttl 15m` books the units on the cluster that has room
// (its CapacityHold is Provisioned) and prints the labels guests carry; the
// hub's usage shows them held, not free; a guest carrying the hold's label
// claims one; `imperatorctl hold release` gives the rest back.
func HoldSpec(ctx context.Context, in HoldInput) {
	ctl := in.Env.Ctl
	spoke := in.Env.Spoke(in.WantCluster)
	args := []string{"hold", "create", in.Name, in.Type, "--count", strconv.Itoa(int(in.Count)), "--same-cluster", "--ttl", "15m"}

	By("imperatorctl " + strings.Join(args, " "))
	fh := &queryv1.FleetHold{}
	res, err := ctl.JSON(ctx, fh, args)
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD), fh.GetMessage())
	Expect(fh.GetClusters()).To(HaveLen(1))
	part := fh.GetClusters()[0]
	Expect(part.GetCluster()).To(Equal(in.WantCluster))
	Expect(part.GetHeld()).To(Equal(in.Count))
	DeferCleanup(func(ctx context.Context) { _, _ = ctl.Run(ctx, "hold", "release", in.Name) })

	By("the spoke's CapacityHold is Provisioned and the hub counts the units held, not free")
	held := func(g Gomega) *queryv1.TypeUsage {
		usage, err := ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, cu := range usage.GetClusters() {
			if cu.GetCluster() != in.WantCluster {
				continue
			}
			for _, t := range cu.GetTypes() {
				if t.GetGroup() == part.GetGroup() && t.GetType() == in.Type {
					return t
				}
			}
		}
		g.Expect(false).To(BeTrue(), "no usage of %s/%s on %s", part.GetGroup(), in.Type, in.WantCluster)
		return nil
	}
	// At once, not eventually: the spoke answers Held only after the usage
	// that shows the units held has gone to the hub on the same stream.
	before := held(Default)
	Expect(before.GetHeld()).To(Equal(in.Count), "the hub's usage right after the hold was Held")
	Expect(before.GetFree()).To(BeNumerically("<=", before.GetReserved()-in.Count), "held units are not free")
	hold := &imperatorv1alpha1.CapacityHold{}
	Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.Name}, hold)).To(Succeed())
	Expect(meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionProvisioned)).To(BeTrue())

	By("the table output names the cluster and the labels guests carry")
	table, err := ctl.Run(ctx, "hold", "get", in.Name)
	Expect(err).NotTo(HaveOccurred())
	Expect(table.ExitCode).To(BeZero(), "%s", table)
	for _, want := range []string{in.WantCluster, imperatorv1alpha1.HoldKey + ": " + in.Name, imperatorv1alpha1.MachineTypeKey + ": " + in.Type, imperatorv1alpha1.MachineGroupKey + ": " + part.GetGroup()} {
		Expect(table.Stdout).To(ContainSubstring(want))
	}

	By("a guest carrying the hold's label claims a held unit")
	ns := wrappers.MakeNamespace(in.Namespace).InjectionEnabled().Obj()
	Expect(client.IgnoreAlreadyExists(spoke.Client.Create(ctx, ns))).To(Succeed())
	guest := wrappers.MakePod(in.Namespace, in.Name+"-guest").Guest(part.GetGroup(), in.Type).Label(imperatorv1alpha1.HoldKey, in.Name).
		ContainerName("train").Obj()
	Expect(spoke.Client.Create(ctx, guest)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		_ = client.IgnoreNotFound(spoke.Client.Delete(ctx, guest, client.GracePeriodSeconds(0)))
	})
	Eventually(ctx, func(g Gomega) {
		g.Expect(spoke.Client.Get(ctx, client.ObjectKeyFromObject(guest), guest)).To(Succeed())
		g.Expect(guest.Spec.NodeName).NotTo(BeEmpty(), "the hold's guest is placed")
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.Name}, hold)).To(Succeed())
		g.Expect(hold.Status.Claimed).To(BeEquivalentTo(1))
		g.Expect(hold.Status.Held).To(Equal(in.Count - 1))
		g.Expect(held(g).GetHeld()).To(Equal(in.Count - 1))
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	By("imperatorctl hold release " + in.Name)
	released := &queryv1.FleetHold{}
	res, err = ctl.JSON(ctx, released, []string{"hold", "release", in.Name})
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(released.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_RELEASED))
	Eventually(ctx, func(g Gomega) {
		err := spoke.Client.Get(ctx, client.ObjectKey{Name: in.Name}, &imperatorv1alpha1.CapacityHold{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), fmt.Sprint(err))
		g.Expect(held(g).GetHeld()).To(BeZero())
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	Expect(spoke.Client.Get(ctx, client.ObjectKeyFromObject(guest), guest)).To(Succeed())
	Expect(guest.DeletionTimestamp).To(BeNil(), "a claimed unit stays with its guest")
}
