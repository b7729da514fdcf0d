package fault

import (
	"context"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/fleet"
)

const (
	// skewNamespace holds the guests that claim the skewed holds, on
	// every spoke.
	skewNamespace = "clock-skew"
	// skewTTL is the validity of the hold left to expire: the hub's
	// shortest.
	skewTTL = time.Minute
	// expiryBound is how far from the fleet hold's validUntil (the hub's
	// clock, the system clock here) each spoke's part may end. The spoke
	// counts valid_for from the request's arrival and stores whole
	// seconds, so its end lies within about a second of the hub's; a
	// spoke that took the hub's instant as its own would end a whole skew
	// off, and the hub's reconciliation of an orphan takes at least its
	// confirmation delay (10 s) to stand in for it.
	expiryBound = 5 * time.Second
)

// ClockSkewHoldInput configures ClockSkewHoldSpec.
type ClockSkewHoldInput struct {
	HoldsInput
	// Spoke's agent runs its clock Skew off the system clock (the agent's
	// --clock-offset); the hub's and the other spoke's stay on it.
	Spoke string
	Skew  time.Duration
}

// ClockSkewHoldSpec restarts one spoke's agent with its clock Skew off the
// hub's and books a SPREAD fleet hold over it and a spoke on the system
// clock: the hold is Held on both, a guest on each spoke claims a unit,
// the release frees everything, nothing is held that no fleet hold owns;
// then a second hold left alone ends on both spokes at the fleet hold's
// validUntil, on the hub's clock.
//
// On the absolute-deadline protocol (the spoke waited until the hub's
// deadline and took the hub's valid_until as its CapacityHold's validUntil,
// before HoldRequest carried answer_within and valid_for) each skew fails
// here: a spoke 60 s ahead found every deadline past and refused every hold
// (the first hold is not Held); a spoke 60 s behind held its part 60 s past
// the fleet hold's end (until the hub's reconciliation released it as an
// orphan, 10 s or more after the end), beyond expiryBound. A spoke whose
// controllers read the system clock while its reporter read the skewed one
// would end its part a whole skew early or late, too.
func ClockSkewHoldSpec(ctx context.Context, in ClockSkewHoldInput) {
	env, ctls := in.Env, []*e2e.Imperatorctl{in.Env.Ctl, in.Second}
	other := spokeA
	if in.Spoke == spokeA {
		other = spokeB
	}
	waitFits(ctx, ctls, 5)

	By(fmt.Sprintf("restarting %s's agent with its clock %s (--clock-offset=%s)", in.Spoke, skewWords(in.Skew), in.Skew))
	Expect(in.Fleet.StopAgent(in.Spoke)).To(Succeed())
	in.Fleet.SetAgentClockOffset(in.Spoke, in.Skew)
	DeferCleanup(func(ctx context.Context) {
		By(fmt.Sprintf("restarting %s's agent on the system clock", in.Spoke))
		Expect(in.Fleet.StopAgent(in.Spoke)).To(Succeed())
		in.Fleet.SetAgentClockOffset(in.Spoke, 0)
		Expect(in.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
		WaitReporting(ctx, in.Fleet, in.Spoke)
		WaitRecovered(ctx, env, time.Now())
	})
	Expect(in.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	WaitReporting(ctx, in.Fleet, in.Spoke)
	WaitRecovered(ctx, env, time.Now())
	waitFits(ctx, ctls, 5)
	for _, name := range []string{spokeA, spokeB} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: skewNamespace, Labels: map[string]string{
			imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}}}
		Expect(client.IgnoreAlreadyExists(env.Spoke(name).Client.Create(ctx, ns))).To(Succeed())
	}

	name := "skew-" + skewName(in.Skew)
	By(fmt.Sprintf("a SPREAD hold of 5 on the first replica: 1 on %s, 4 on %s", spokeA, spokeB))
	fh, res, err := createHoldFor(ctx, in.Env.Ctl, name, 5, true, 15*time.Minute)
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD), "%s: %s", fh.GetMessage(), fh.GetClusters())
	Expect(partsOf(fh)).To(Equal(map[string]int32{spokeA: 1, spokeB: 4}))

	By("a guest on each spoke claims a unit of its part")
	var guests []*corev1.Pod
	for _, part := range fh.GetClusters() {
		spoke := env.Spoke(part.GetCluster())
		guest := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-guest", Namespace: skewNamespace, Labels: map[string]string{
				imperatorv1alpha1.MachineGroupKey: part.GetGroup(), imperatorv1alpha1.MachineTypeKey: holdType,
				imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest), imperatorv1alpha1.HoldKey: name,
			}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "train", Image: "registry.k8s.io/pause:3.10"}}},
		}
		Expect(spoke.Client.Create(ctx, guest)).To(Succeed())
		guests = append(guests, guest)
		DeferCleanup(func(ctx context.Context) {
			_ = client.IgnoreNotFound(spoke.Client.Delete(ctx, guest, client.GracePeriodSeconds(0)))
		})
		Eventually(ctx, func(g Gomega) {
			g.Expect(spoke.Client.Get(ctx, client.ObjectKeyFromObject(guest), guest)).To(Succeed())
			g.Expect(guest.Spec.NodeName).NotTo(BeEmpty(), "the hold's guest on %s is placed", part.GetCluster())
			hold := &imperatorv1alpha1.CapacityHold{}
			g.Expect(spoke.Client.Get(ctx, client.ObjectKey{Name: name}, hold)).To(Succeed())
			g.Expect(hold.Status.Claimed).To(BeEquivalentTo(1), "claimed on %s", part.GetCluster())
			g.Expect(hold.Status.Held).To(Equal(part.GetHeld() - 1))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
	}

	By("releasing it on the second replica: every CapacityHold goes, and once the guests leave all 5 units are free again")
	released := &queryv1.FleetHold{}
	res, err = in.Second.JSON(ctx, released, []string{"hold", "release", name})
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	releasedAt := time.Now()
	Expect(released.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_RELEASED))
	for _, cluster := range []string{spokeA, spokeB} {
		Eventually(ctx, func() bool {
			err := env.Spoke(cluster).Client.Get(ctx, client.ObjectKey{Name: name}, &imperatorv1alpha1.CapacityHold{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(orphanBound).WithPolling(poll).Should(BeTrue(), "%s's CapacityHold %s is released", cluster, name)
	}
	recovered := WaitNoOrphans(ctx, env, releasedAt)
	for i, guest := range guests {
		Expect(client.IgnoreNotFound(env.Spoke(fh.GetClusters()[i].GetCluster()).Client.Delete(ctx, guest, client.GracePeriodSeconds(0)))).To(Succeed())
	}
	waitFits(ctx, ctls, 5)
	in.Table.Add(Row{Fault: fmt.Sprintf("%s's clock %s: fleet hold with %s released", in.Spoke, skewWords(in.Skew), other), Recover: recovered,
		Note: "time to recover: from the release until no spoke holds a unit no fleet hold owns"})

	By(fmt.Sprintf("a SPREAD hold of 5 for %s on the second replica, left to expire", skewTTL))
	expiring := name + "-expiry"
	fh, res, err = createHoldFor(ctx, in.Second, expiring, 5, true, skewTTL)
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD), "%s: %s", fh.GetMessage(), fh.GetClusters())
	Expect(partsOf(fh)).To(Equal(map[string]int32{spokeA: 1, spokeB: 4}))
	stored := &imperatorv1alpha1.FleetHold{}
	Expect(env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: expiring}, stored)).To(Succeed())
	validUntil := stored.Spec.ValidUntil.Time

	By(fmt.Sprintf("each spoke's part ends within %s of the fleet hold's validUntil, on the hub's clock", expiryBound))
	ends := map[string]time.Time{}
	Eventually(ctx, func() (map[string]time.Time, error) {
		for _, cluster := range []string{spokeA, spokeB} {
			if _, done := ends[cluster]; done {
				continue
			}
			hold := &imperatorv1alpha1.CapacityHold{}
			err := env.Spoke(cluster).Client.Get(ctx, client.ObjectKey{Name: expiring}, hold)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, err
			case meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionBookingExpired),
				meta.IsStatusConditionTrue(hold.Status.Conditions, imperatorv1alpha1.HoldConditionFailed),
				!hold.DeletionTimestamp.IsZero():
			default:
				continue
			}
			ends[cluster] = time.Now()
		}
		return ends, nil
	}).WithTimeout(time.Until(validUntil)+orphanBound).WithPolling(100*time.Millisecond).Should(HaveLen(2), "both parts end")
	var latest time.Duration
	for cluster, end := range ends {
		off := end.Sub(validUntil)
		Expect(off).To(BeNumerically(">", -expiryBound), "%s's part ended %s before the fleet hold's validUntil", cluster, -off)
		Expect(off).To(BeNumerically("<", expiryBound), "%s's part ended %s after the fleet hold's validUntil", cluster, off)
		latest = max(latest, off)
	}
	in.Table.Add(Row{Fault: fmt.Sprintf("%s's clock %s: fleet hold with %s expired", in.Spoke, skewWords(in.Skew), other), Recover: WaitNoOrphans(ctx, env, validUntil),
		Note: fmt.Sprintf("time to recover: from the fleet hold's validUntil until nothing is orphaned; the last part ended %s after it (%s: %s, %s: %s)",
			latest.Round(10*time.Millisecond), spokeA, ends[spokeA].Sub(validUntil).Round(10*time.Millisecond), spokeB, ends[spokeB].Sub(validUntil).Round(10*time.Millisecond))})
	waitFits(ctx, ctls, 5)
}

// skewName is skew in a hold name: ahead-60s, behind-60s.
func skewName(skew time.Duration) string {
	if skew < 0 {
		return "behind-" + strconv.Itoa(int(-skew/time.Second)) + "s"
	}
	return "ahead-" + strconv.Itoa(int(skew/time.Second)) + "s"
}

// skewWords is skew in a sentence: 1m0s ahead, 1m0s behind.
func skewWords(skew time.Duration) string {
	if skew < 0 {
		return (-skew).String() + " behind"
	}
	return skew.String() + " ahead"
}
