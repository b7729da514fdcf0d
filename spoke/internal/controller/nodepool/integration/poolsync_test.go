package nodepool_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// nodePoolConflict returns the NodePoolConflict condition of a Machine, nil
// when it has none.
func nodePoolConflict(ctx context.Context, g Gomega, name string) *metav1.Condition {
	var machine imperatorv1alpha1.Machine
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &machine)).To(Succeed())
	return meta.FindStatusCondition(machine.Status.Conditions, imperatorv1alpha1.ConditionNodePoolConflict)
}

var _ = Describe("MachineNodePool sync", func() {
	It("says on the Machine that a foreign pool holds its pool name, and gives it its pool within seconds once that pool is deleted", func(ctx SpecContext) {
		const name = "blocked"
		machine := wrappers.MakeMachine(name, name).Type(xlarge, "40", "128Gi", 1).Obj()
		// Someone else's pool under the Machine's pool name: same spec, no owner.
		foreignPool := nodepool.DesiredNodePool(machine)
		Expect(k8s.Create(ctx, foreignPool)).To(Succeed())
		createMachine(ctx, machine)

		Eventually(func(g Gomega) {
			cond := nodePoolConflict(ctx, g, name)
			g.Expect(cond).NotTo(BeNil(), "NodePoolConflict condition")
			g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(cond.Reason).To(Equal(imperatorv1alpha1.ReasonNodePoolNotControlled))
			g.Expect(cond.Message).To(ContainSubstring(foreignPool.Name))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		// The foreign pool is left alone.
		Consistently(func(g Gomega) {
			var pool imperatorv1alpha1.MachineNodePool
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreignPool), &pool)).To(Succeed())
			g.Expect(metav1.GetControllerOf(&pool)).To(BeNil())
		}).WithTimeout(time.Second).WithPolling(interval).Should(Succeed())

		Expect(k8s.Delete(ctx, foreignPool)).To(Succeed())
		// Nothing else changes: the pool's deletion alone must bring the
		// Machine its pool, well before any resync.
		Eventually(func(g Gomega) {
			var pool imperatorv1alpha1.MachineNodePool
			err := k8s.Get(ctx, client.ObjectKeyFromObject(foreignPool), &pool)
			g.Expect(apierrors.IsNotFound(err)).To(BeFalse(), "the Machine's pool is created again")
			g.Expect(err).NotTo(HaveOccurred())
			owner := metav1.GetControllerOf(&pool)
			g.Expect(owner).NotTo(BeNil(), "the pool has a controller")
			g.Expect(owner.Kind).To(Equal("Machine"))
			g.Expect(owner.Name).To(Equal(name))
			cond := nodePoolConflict(ctx, g, name)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(imperatorv1alpha1.ReasonNodePoolControlled))
		}).WithTimeout(5 * time.Second).WithPolling(interval).Should(Succeed())
	})
})
