package nodepool_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/nodepool"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// A whole control plane (controller-manager with its garbage collector and
// node lifecycle controller, kwok nodes) for what envtest cannot show: that
// deleting a Machine takes its MachineNodePool and, through the pool's
// finalizer, everything the agent put on the nodes with it.
var _ = Describe("Node-pool controller in a cluster with a controller-manager", Ordered, func() {
	var c client.Client

	BeforeAll(func(ctx context.Context) {
		env := framework.StartSuite(ctx, environment("nodepool", true))
		c = env.Client
		cluster := env.Cluster

		for _, name := range []string{"gc-a", "gc-b"} {
			Expect(cluster.AddNode(ctx, wrappers.MakeNode(name).Label(foreignLabel, "ml").Obj())).To(Succeed())
		}
	}, NodeTimeout(3*time.Minute))

	It("garbage-collects the pool of a deleted Machine and cleans its nodes", func(ctx context.Context) {
		before := map[string]foreign{}
		for _, name := range []string{"gc-a", "gc-b"} {
			node := &corev1.Node{}
			Expect(c.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
			before[name] = foreignOf(node)
		}
		machine := wrappers.MakeMachine("gc", "gc-group").Type(medium, "6", "48Gi", 1).
			Node("gc-a", medium).Tainted().Node("gc-b", medium).Maintenance().Obj()
		Expect(c.Create(ctx, machine)).To(Succeed())
		expectNodeIn(ctx, c, "gc-a", configured("gc-group", medium, imperatorv1alpha1.NodePoolReady, true), before["gc-a"])
		expectNodeIn(ctx, c, "gc-b", configured("gc-group", medium, imperatorv1alpha1.NodePoolMaintenance, false), before["gc-b"])

		Expect(c.Delete(ctx, machine)).To(Succeed())
		Eventually(func() bool {
			err := c.Get(ctx, client.ObjectKey{Name: "gc-node-pool"}, &imperatorv1alpha1.MachineNodePool{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(BeTrue(), "the garbage collector deletes the MachineNodePool")
		expectNodeIn(ctx, c, "gc-a", nodepool.OwnedState{}, before["gc-a"])
		expectNodeIn(ctx, c, "gc-b", nodepool.OwnedState{}, before["gc-b"])
	})
})
