package e2e

import (
	"context"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// TenantInput configures TenantSpec.
type TenantInput struct {
	Env *Env
	// Spoke is where the journey adds a Machine of its own named Group, with
	// Units units (at least 4) of Type on a node of its own named Node; GPU
	// is the resource name of the type's GPU.
	Spoke, Group, Type, Node, GPU string
	Units                         int32
	// Hold is the name of the fleet hold the tenant tries to squat.
	Hold string
}

// TenantSpec is journey 9: a tenant who may only create pods (the built-in
// edit role in two namespaces, one opted in, one not) tries every way of
// taking a team's units, and the hub's free figure does not move until a
// real guest runs: stray pods labelled as guests outside the opted-in
// namespace count nowhere (and the Machine names them), a guest with a
// sidecar asking for 4 GPUs and a guest that could preempt are refused with
// the field named, and guests labelled with a hold's name before the hold
// exists do not make the hold hold nothing.
func TenantSpec(ctx context.Context, in TenantInput) {
	spoke := in.Env.Spoke(in.Spoke)
	addOwnXlarge(ctx, in.Env, in.Spoke, in.Node, in.Group, in.Type, in.Units)
	ctl := in.Env.Ctl
	const tenantUser = "tenant-alice"
	offNamespace, onNamespace := "tenant-off", "tenant-on"

	By("a tenant with the edit role in " + offNamespace + " (never opted in) and " + onNamespace + " (opted in)")
	for name, ns := range map[string]*corev1.Namespace{
		offNamespace: wrappers.MakeNamespace(offNamespace).Obj(),
		onNamespace:  wrappers.MakeNamespace(onNamespace).InjectionEnabled().Obj(),
	} {
		Expect(client.IgnoreAlreadyExists(spoke.Client.Create(ctx, ns))).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(spoke.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(name), client.GracePeriodSeconds(0)))).To(Succeed())
			Expect(client.IgnoreNotFound(spoke.Client.Delete(ctx, ns))).To(Succeed())
		})
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: tenantUser, Namespace: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenantUser}},
		}
		Expect(client.IgnoreAlreadyExists(spoke.Client.Create(ctx, binding))).To(Succeed())
	}
	cfg := rest.CopyConfig(spoke.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tenantUser, Groups: []string{"system:authenticated"}}
	tenant, err := client.New(cfg, client.Options{Scheme: spoke.Client.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	// RoleBindings take effect at once, but let a slow authorizer cache catch up.
	Eventually(ctx, func() error {
		return tenant.List(ctx, &corev1.PodList{}, client.InNamespace(onNamespace))
	}).WithTimeout(30 * time.Second).WithPolling(poll).Should(Succeed())

	usage := func(g Gomega) *queryv1.TypeUsage {
		resp, err := ctl.Usage(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		u := UsageOf(resp, in.Spoke, in.Group, in.Type)
		g.Expect(u).NotTo(BeNil(), "no usage of %s/%s on %s", in.Group, in.Type, in.Spoke)
		return u
	}
	// Guests of earlier journeys are gone once every unit is free again.
	var before *queryv1.TypeUsage
	Eventually(ctx, func(g Gomega) {
		before = usage(g)
		g.Expect(before.GetFree()).To(Equal(before.GetMaximum()), "the journey starts with every %s unit of %s free", in.Type, in.Spoke)
		g.Expect(before.GetFree()).To(BeNumerically(">=", 4))
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	free := before.GetFree()

	guest := func(namespace, name string) *corev1.Pod {
		return wrappers.MakePod(namespace, name).Guest(in.Group, in.Type).ContainerName("train").TerminationGracePeriod(0).Obj()
	}

	By("4 pods labelled as " + in.Type + " guests in " + offNamespace + ", selecting no node: admitted, Pending, counted nowhere")
	for i := range 4 {
		stray := guest(offNamespace, "stray-"+strconv.Itoa(i))
		stray.Spec.NodeSelector = map[string]string{"example.com/nowhere": "true"}
		Expect(tenant.Create(ctx, stray)).To(Succeed())
	}
	Eventually(ctx, func(g Gomega) {
		m := &imperatorv1alpha1.Machine{}
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.Group}, m)).To(Succeed())
		stray := meta.FindStatusCondition(m.Status.Conditions, imperatorv1alpha1.ConditionStrayGuests)
		g.Expect(stray).NotTo(BeNil())
		g.Expect(stray.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(stray.Message).To(ContainSubstring(offNamespace))
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	Consistently(ctx, func(g Gomega) int32 { return usage(g).GetFree() }).
		WithTimeout(5*time.Second).WithPolling(poll).Should(Equal(free), "stray pods take no free unit on the hub")

	By("a guest whose sidecar asks for 4 " + in.GPU + ": refused, naming the container")
	greedy := guest(onNamespace, "greedy")
	four := resource.MustParse("4")
	greedy.Spec.Containers = append(greedy.Spec.Containers, corev1.Container{Name: "sidecar", Image: "registry.k8s.io/pause:3.10",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(in.GPU): four}}})
	err = tenant.Create(ctx, greedy)
	Expect(err).To(HaveOccurred())
	Expect(err.Error()).To(ContainSubstring(`spec.containers[1] ("sidecar").resources.requests[` + in.GPU + `]`))

	By("a guest of a PriorityClass of value 1,000,000 that may preempt: refused, naming spec.priority")
	urgent := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "tenant-urgent"}, Value: 1_000_000}
	Expect(client.IgnoreAlreadyExists(spoke.Client.Create(ctx, urgent))).To(Succeed())
	DeferCleanup(func(ctx context.Context) { _ = spoke.Client.Delete(ctx, urgent) })
	// The API server's Priority admission reads classes from an informer:
	// until it sees the new class it refuses the pod for naming none.
	Eventually(ctx, func() string {
		preempting := guest(onNamespace, "preempting")
		preempting.Spec.PriorityClassName = urgent.Name
		if err := tenant.Create(ctx, preempting, client.DryRunAll); err != nil {
			return err.Error()
		}
		return "admitted"
	}).WithTimeout(30 * time.Second).WithPolling(poll).Should(ContainSubstring("spec.priority: a guest of priority 1000000"))

	By("2 guests labelled " + imperatorv1alpha1.HoldKey + ": " + in.Hold + " before the hold exists: they run in the ordinary line")
	for i := range 2 {
		squatter := guest(onNamespace, "squatter-"+strconv.Itoa(i))
		squatter.Labels[imperatorv1alpha1.HoldKey] = in.Hold
		Expect(tenant.Create(ctx, squatter)).To(Succeed())
		Expect(squatter.Annotations).NotTo(HaveKey(imperatorv1alpha1.HoldUIDAnnotation))
	}
	Eventually(ctx, func(g Gomega) int32 { return usage(g).GetUsed() }).
		WithTimeout(joinTimeout).WithPolling(poll).Should(Equal(before.GetUsed() + 2))

	By("imperatorctl hold create " + in.Hold + ": the hold holds 2 units of its own, and the hub's free drops by 4 in all")
	args := []string{"hold", "create", in.Hold, in.Type, "--count", "2", "--same-cluster", "--ttl", "15m"}
	fh := &queryv1.FleetHold{}
	res, err := ctl.JSON(ctx, fh, args)
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	DeferCleanup(func(ctx context.Context) { _, _ = ctl.Run(ctx, "hold", "release", in.Hold) })
	Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD), fh.GetMessage())
	Eventually(ctx, func(g Gomega) {
		hold := &imperatorv1alpha1.CapacityHold{}
		g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: in.Hold}, hold)).To(Succeed())
		g.Expect(hold.Status.Held).To(BeEquivalentTo(2))
		g.Expect(hold.Status.Claimed).To(BeZero())
		u := usage(g)
		g.Expect(u.GetHeld()).To(BeEquivalentTo(2))
		g.Expect(u.GetFree()).To(Equal(max(0, free-4)))
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
}
