package capacityhold_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// group is the machine group of wrappers.GeneralMachine, which offers
// compute-xlarge: holds of it are left for its (absent) Machine controller
// to decide.
const group = "general-machine"

// createHold creates a hold of one compute-xlarge until validUntil and
// deletes it after the spec if it is still there.
func createHold(ctx context.Context, name string, validUntil time.Time) *imperatorv1alpha1.CapacityHold {
	GinkgoHelper()
	hold := wrappers.MakeCapacityHold(name, group, "compute-xlarge", 1).ValidUntil(validUntil).Obj()
	Expect(k8s.Create(ctx, hold)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, hold))).To(Succeed())
	})
	return hold
}

// decide writes conditions True on a hold, as the Machine controller does.
func decide(ctx context.Context, hold *imperatorv1alpha1.CapacityHold, conditionTypes ...string) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(hold), hold)).To(Succeed())
	patch := client.MergeFromWithOptions(hold.DeepCopy(), client.MergeFromWithOptimisticLock{})
	for _, t := range conditionTypes {
		meta.SetStatusCondition(&hold.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Test",
			Message: "written by the spec", ObservedGeneration: hold.Generation})
	}
	Expect(k8s.Status().Patch(ctx, hold, patch)).To(Succeed())
}

// reconciles is how many reconciles the capacityhold controller ran.
func reconciles() float64 {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var total float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "capacityhold" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// exists tells whether the hold (this very one, by UID) is still there.
func exists(ctx context.Context, hold *imperatorv1alpha1.CapacityHold) func(Gomega) bool {
	return func(g Gomega) bool {
		got := &imperatorv1alpha1.CapacityHold{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(hold), got)
		if apierrors.IsNotFound(err) {
			return false
		}
		g.Expect(err).NotTo(HaveOccurred())
		return got.UID == hold.UID
	}
}

var _ = Describe("Deleting holds whose booking ended", func() {
	BeforeEach(func(ctx context.Context) {
		machine := wrappers.GeneralMachine().Obj()
		Expect(k8s.Create(ctx, machine)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, machine))).To(Succeed()) })
	})

	It("keeps a hold the Machine controller failed for the retention, then deletes it", func(ctx context.Context) {
		hold := createHold(ctx, "too-big", time.Now().Add(10*time.Minute))
		decide(ctx, hold, imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionFailed)
		failedAt := meta.FindStatusCondition(hold.Status.Conditions, imperatorv1alpha1.HoldConditionFailed).LastTransitionTime.Time

		By("keeping it while the retention lasts, so that kubectl still says why it failed")
		Consistently(exists(ctx, hold)).WithTimeout(time.Until(failedAt.Add(retention)) - time.Second).Should(BeTrue())
		By("deleting it once the retention has passed")
		Eventually(exists(ctx, hold)).WithTimeout(retention).Should(BeFalse())
	})

	It("deletes an expired hold retention after validUntil, with no change to the hold in between", func(ctx context.Context) {
		validUntil := time.Now().Add(2 * time.Second).Truncate(time.Second)
		hold := createHold(ctx, "ended", validUntil)
		decide(ctx, hold, imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned)
		live := createHold(ctx, "live", time.Now().Add(10*time.Minute))
		decide(ctx, live, imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned)

		Consistently(exists(ctx, hold)).WithTimeout(time.Until(validUntil.Add(retention)) - time.Second).Should(BeTrue())
		Eventually(exists(ctx, hold)).WithTimeout(retention).Should(BeFalse())
		By("keeping the hold whose booking lasts, without looking at it again and again")
		before := reconciles()
		Expect(before).To(BeNumerically(">", 0), "the capacityhold controller's reconcile count")
		Consistently(exists(ctx, live)).WithTimeout(3 * time.Second).Should(BeTrue())
		Expect(reconciles() - before).To(BeNumerically("<=", 1))
	})

	It("deletes a hold of a machine type no Machine offers, once it failed and the retention has passed", func(ctx context.Context) {
		hold := wrappers.MakeCapacityHold("nowhere", group, "compute-huge", 1).Obj()
		Expect(k8s.Create(ctx, hold)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, hold))).To(Succeed()) })
		Eventually(func(g Gomega) bool {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(hold), hold)).To(Succeed())
			return meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionFailed)
		}).WithTimeout(20 * time.Second).Should(BeTrue())
		Eventually(exists(ctx, hold)).WithTimeout(retention + 2*time.Second).Should(BeFalse())
	})

	It("deletes a hold whose validUntil was moved earlier retention after the new validUntil", func(ctx context.Context) {
		hold := createHold(ctx, "shortened", time.Now().Add(10*time.Minute))
		decide(ctx, hold, imperatorv1alpha1.HoldConditionAccepted, imperatorv1alpha1.HoldConditionProvisioned)
		Consistently(exists(ctx, hold)).WithTimeout(retention).Should(BeTrue())

		validUntil := time.Now().Add(time.Second).Truncate(time.Second)
		patch := client.MergeFrom(hold.DeepCopy())
		hold.Spec.ValidUntil = metav1.NewTime(validUntil)
		Expect(k8s.Patch(ctx, hold, patch)).To(Succeed())
		Eventually(exists(ctx, hold)).WithTimeout(time.Until(validUntil.Add(retention)) + 2*time.Second).Should(BeFalse())
	})
})
