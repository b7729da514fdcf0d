package fault

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/fleet"
)

const (
	// holdType is held on spoke-a (1 unit, general-machine) and spoke-b (4,
	// hopper-machine): a SPREAD hold of 5 takes both.
	holdType = "compute-xlarge"
	// orphanBound is how soon after a fault ends nothing may be held on a
	// spoke that no fleet hold owns.
	orphanBound = 60 * time.Second
	// bookingAnnotation is the spoke's record of the booking a CapacityHold
	// was made for (reporter.BookingAnnotation).
	bookingAnnotation = "imperator.tenzen-y.io/fleet-hold-booking"
)

// HoldsInput is a fleet of two hub replicas: spoke-a reports to the fleet's
// hub, spoke-b to the second replica, each through its fault proxy.
type HoldsInput struct {
	Input
	// Second runs imperatorctl against the second replica.
	Second *e2e.Imperatorctl
}

// Orphans names every live CapacityHold the hub asked for that no Pending
// or Held fleet hold owns (one whose booking is that FleetHold's UID and
// which has a part on that spoke), as spoke/name.
func Orphans(ctx context.Context, env *e2e.Env) ([]string, error) {
	var list imperatorv1alpha1.FleetHoldList
	if err := env.Hub.Client.List(ctx, &list, client.InNamespace(fleet.Namespace)); err != nil {
		return nil, err
	}
	owned := map[string]bool{}
	for _, fh := range list.Items {
		if fh.Status.Phase != imperatorv1alpha1.FleetHoldPending && fh.Status.Phase != imperatorv1alpha1.FleetHoldHeld {
			continue
		}
		for _, part := range fh.Status.Clusters {
			if part.Result == "" || part.Result == "Held" {
				owned[part.Cluster+"/"+string(fh.UID)] = true
			}
		}
	}
	var out []string
	for _, name := range spokeNames(env) {
		var holds imperatorv1alpha1.CapacityHoldList
		if err := env.Spokes[name].Client.List(ctx, &holds); err != nil {
			return nil, err
		}
		for _, h := range holds.Items {
			ended := meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionFailed) ||
				meta.IsStatusConditionTrue(h.Status.Conditions, imperatorv1alpha1.HoldConditionBookingExpired)
			if h.Spec.FleetHold == "" || ended || !h.DeletionTimestamp.IsZero() || owned[name+"/"+h.Annotations[bookingAnnotation]] {
				continue
			}
			out = append(out, name+"/"+h.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// WaitNoOrphans waits until no spoke holds anything no fleet hold owns and
// returns how long after since that was; it fails past orphanBound.
func WaitNoOrphans(ctx context.Context, env *e2e.Env, since time.Time) time.Duration {
	GinkgoHelper()
	Eventually(ctx, func() ([]string, error) { return Orphans(ctx, env) }).
		WithTimeout(orphanBound-time.Since(since)).WithPolling(poll).Should(BeEmpty(),
		"nothing is held on a spoke that no fleet hold owns, %s after the fault", orphanBound)
	return time.Since(since)
}

// createHold runs imperatorctl hold create on ctl for 15 minutes and
// returns the hold as it answered (nil and the output when it failed).
func createHold(ctx context.Context, ctl *e2e.Imperatorctl, name string, count int, spread bool) (*queryv1.FleetHold, e2e.Result, error) {
	return createHoldFor(ctx, ctl, name, count, spread, 15*time.Minute)
}

// createHoldFor is createHold for ttl.
func createHoldFor(ctx context.Context, ctl *e2e.Imperatorctl, name string, count int, spread bool, ttl time.Duration) (*queryv1.FleetHold, e2e.Result, error) {
	args := []string{"hold", "create", name, holdType, "--count", strconv.Itoa(count), "--ttl", ttl.String()}
	if !spread {
		args = append(args, "--same-cluster")
	}
	fh := &queryv1.FleetHold{}
	res, err := ctl.JSON(ctx, fh, args, 0, 1)
	return fh, res, err
}

// waitFits waits until every replica's figures show count units of the
// hold type free across the fleet: after a release the replica that did
// not deliver a part learns of the freed units with the spoke's next
// persisted inventory.
func waitFits(ctx context.Context, ctls []*e2e.Imperatorctl, count int) {
	GinkgoHelper()
	for _, ctl := range ctls {
		Eventually(ctx, func() (int, error) {
			_, code, err := ctl.Capacity(ctx, holdType, "--count", strconv.Itoa(count))
			return code, err
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(BeZero(), "%d %s fit", count, holdType)
	}
}

func partsOf(fh *queryv1.FleetHold) map[string]int32 {
	out := map[string]int32{}
	for _, cl := range fh.GetClusters() {
		out[cl.GetCluster()] = cl.GetHeld()
	}
	return out
}

// HoldAcrossReplicasSpec: a SPREAD hold whose spokes report to different
// replicas is Held from one and released from the other, leaving nothing.
func HoldAcrossReplicasSpec(ctx context.Context, in HoldsInput) {
	waitFits(ctx, []*e2e.Imperatorctl{in.Env.Ctl, in.Second}, 5)
	By("creating a SPREAD hold of 5 on the first replica: spoke-b's part goes through the second")
	fh, res, err := createHold(ctx, in.Env.Ctl, "across", 5, true)
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(fh.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_HELD), fh.GetMessage())
	Expect(partsOf(fh)).To(Equal(map[string]int32{spokeA: 1, spokeB: 4}))

	By("releasing it on the second replica")
	released := &queryv1.FleetHold{}
	res, err = in.Second.JSON(ctx, released, []string{"hold", "release", "across"})
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	ended := time.Now()
	Expect(released.GetPhase()).To(Equal(queryv1.FleetHoldPhase_FLEET_HOLD_PHASE_RELEASED))
	in.Table.Add(Row{Fault: "fleet hold across spokes on two replicas, released on the other", Recover: WaitNoOrphans(ctx, in.Env, ended),
		Note: "time to recover: from the release until no spoke holds a unit no fleet hold owns"})
}

// CoordinatorKillSpec SIGKILLs the replica coordinating a hold right after
// it wrote the hold: the other replica fails it once it is past its
// deadlines and releases the part its spoke held.
func CoordinatorKillSpec(ctx context.Context, in HoldsInput) {
	waitFits(ctx, []*e2e.Imperatorctl{in.Env.Ctl, in.Second}, 5)
	By("creating a SPREAD hold on the first replica and SIGKILLing it as soon as the hold is written")
	go func() {
		defer GinkgoRecover()
		_, _, _ = createHold(ctx, in.Env.Ctl, "orphaned", 5, true)
	}()
	Eventually(ctx, func() error {
		return in.Env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: "orphaned"}, &imperatorv1alpha1.FleetHold{})
	}).WithTimeout(30 * time.Second).WithPolling(10 * time.Millisecond).Should(Succeed())
	Expect(in.Fleet.KillHub()).To(Succeed())
	killed := time.Now()
	Expect(in.Fleet.StartHub(ctx)).To(Succeed())

	By("the second replica fails the hold and releases every part")
	Eventually(ctx, func() (imperatorv1alpha1.FleetHoldPhase, error) {
		fh := &imperatorv1alpha1.FleetHold{}
		err := in.Env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: "orphaned"}, fh)
		return fh.Status.Phase, err
	}).WithTimeout(2 * time.Minute).WithPolling(poll).Should(Or(Equal(imperatorv1alpha1.FleetHoldFailed), Equal(imperatorv1alpha1.FleetHoldHeld)))
	_, _ = in.Second.Run(ctx, "hold", "release", "orphaned")
	decided := time.Now()
	in.Table.Add(Row{Fault: "replica coordinating a fleet hold SIGKILLed", Detect: decided.Sub(killed), Recover: WaitNoOrphans(ctx, in.Env, decided),
		Note: "time to detect: until the hold was decided without its coordinator; to recover: then until nothing is orphaned"})
	WaitRecovered(ctx, in.Env, time.Now())
}

// PartitionAfterHeldSpec cuts spoke-b's link right after its part was
// Held and releases the hold meanwhile: the release reaches spoke-b once
// the link heals.
func PartitionAfterHeldSpec(ctx context.Context, in HoldsInput) {
	proxy := in.Fleet.Proxy(spokeB)
	Expect(proxy).NotTo(BeNil())
	waitFits(ctx, []*e2e.Imperatorctl{in.Env.Ctl, in.Second}, 5)
	By("holding 2 on spoke-b, then cutting its link at once")
	fh, res, err := createHold(ctx, in.Env.Ctl, "cut-off", 2, false)
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(partsOf(fh)).To(Equal(map[string]int32{spokeB: 2}), fh.GetMessage())
	proxy.SetMode(faultproxy.Cut)
	DeferCleanup(func() { proxy.SetMode(faultproxy.Pass) })

	By("releasing it while spoke-b is cut off: its part is not confirmed")
	res, err = in.Env.Ctl.Run(ctx, "hold", "release", "cut-off")
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	time.Sleep(15 * time.Second) // the partition's length is the fault itself

	By("healing the link: spoke-b's CapacityHold goes")
	proxy.SetMode(faultproxy.Pass)
	healed := time.Now()
	in.Table.Add(Row{Fault: "spoke-b partitioned right after answering Held, released meanwhile", Recover: WaitNoOrphans(ctx, in.Env, healed),
		Note: "time to recover: from the heal until spoke-b's part is released"})
	WaitRecovered(ctx, in.Env, time.Now())
}

// ReleaseWhileOfflineSpec releases a hold while its spoke's agent is
// stopped: the part is released when the agent is back.
func ReleaseWhileOfflineSpec(ctx context.Context, in HoldsInput) {
	waitFits(ctx, []*e2e.Imperatorctl{in.Env.Ctl, in.Second}, 5)
	By("holding 2 on spoke-b and stopping its agent")
	fh, res, err := createHold(ctx, in.Env.Ctl, "offline", 2, false)
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(partsOf(fh)).To(Equal(map[string]int32{spokeB: 2}), fh.GetMessage())
	Expect(in.Fleet.StopAgent(spokeB)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { _ = in.Fleet.StartAgent(ctx, spokeB) })

	By("releasing it on the second replica while spoke-b is offline")
	res, err = in.Second.Run(ctx, "hold", "release", "offline")
	Expect(err).NotTo(HaveOccurred(), "%s", res)
	Expect(Orphans(ctx, in.Env)).To(ContainElement(spokeB+"/offline"), "spoke-b keeps its part while offline")

	By("starting spoke-b's agent again: its part is released")
	Expect(in.Fleet.StartAgent(ctx, spokeB)).To(Succeed())
	back := time.Now()
	in.Table.Add(Row{Fault: "fleet hold released while spoke-b is offline", Recover: WaitNoOrphans(ctx, in.Env, back),
		Note: "time to recover: from the agent's restart until its part is released"})
	WaitRecovered(ctx, in.Env, time.Now())
}

// ConcurrentCreateReleaseSpec creates a hold on one replica while the
// other releases it: it ends Released in the API, with nothing held.
func ConcurrentCreateReleaseSpec(ctx context.Context, in HoldsInput) {
	waitFits(ctx, []*e2e.Imperatorctl{in.Env.Ctl, in.Second}, 5)
	By("creating a SPREAD hold on the first replica while the second releases it as soon as it exists")
	created := make(chan *queryv1.FleetHold, 1)
	go func() {
		defer GinkgoRecover()
		fh, _, _ := createHold(ctx, in.Env.Ctl, "raced", 5, true)
		created <- fh
	}()
	Eventually(ctx, func() int {
		res, err := in.Second.Run(ctx, "hold", "release", "raced")
		if err != nil {
			return -1
		}
		return res.ExitCode
	}).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(BeZero())
	released := time.Now()
	<-created
	fh := &imperatorv1alpha1.FleetHold{}
	Expect(in.Env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: "raced"}, fh)).To(Succeed())
	Expect(fh.Status.Phase).To(Equal(imperatorv1alpha1.FleetHoldReleased), "one phase, the release's")
	in.Table.Add(Row{Fault: "fleet hold created on one replica, released on the other at once", Recover: WaitNoOrphans(ctx, in.Env, released),
		Note: fmt.Sprintf("ended %s", fh.Status.Phase)})
}

// Fleet holds on two hub replicas, on a fleet of their own.
var _ = Describe("Fleet holds on two hub replicas", Ordered, ContinueOnFailure, func() {
	var holds HoldsInput
	BeforeAll(func(ctx SpecContext) {
		in = startFleet(ctx, fleet.Options{HubReplicas: 2})
		replicas := in.Fleet.Replicas()
		Expect(replicas).To(HaveLen(1))
		holds = HoldsInput{Input: in, Second: &e2e.Imperatorctl{Bin: in.Env.Ctl.Bin, Config: replicas[0].ImperatorctlConfig()}}
	}, NodeTimeout(8*time.Minute))
	AfterEach(func(ctx SpecContext) {
		for _, name := range []string{"across", "orphaned", "cut-off", "offline", "raced",
			"skew-ahead-60s", "skew-ahead-60s-expiry", "skew-behind-60s", "skew-behind-60s-expiry"} {
			_, _ = holds.Env.Ctl.Run(ctx, "hold", "release", name)
		}
	})

	It("a SPREAD hold across spokes on two replicas: Held from one, released from the other, nothing left", func(ctx SpecContext) {
		HoldAcrossReplicasSpec(ctx, holds)
	}, SpecTimeout(3*time.Minute))

	It("the replica coordinating a hold is SIGKILLed: the other fails it and releases every part", func(ctx SpecContext) {
		CoordinatorKillSpec(ctx, holds)
	}, SpecTimeout(5*time.Minute))

	It("spoke-b is partitioned right after answering Held and released meanwhile: released when the link heals", func(ctx SpecContext) {
		PartitionAfterHeldSpec(ctx, holds)
	}, SpecTimeout(3*time.Minute))

	It("a hold is released while spoke-b is offline: released when its agent is back", func(ctx SpecContext) {
		ReleaseWhileOfflineSpec(ctx, holds)
	}, SpecTimeout(3*time.Minute))

	It("a hold created on one replica and released on the other at once ends Released, nothing held", func(ctx SpecContext) {
		ConcurrentCreateReleaseSpec(ctx, holds)
	}, SpecTimeout(3*time.Minute))

	It("spoke-b's clock 60 s ahead: a SPREAD hold is Held on both spokes, claimed, released with nothing left, and a hold left alone ends on both at its validUntil", func(ctx SpecContext) {
		ClockSkewHoldSpec(ctx, ClockSkewHoldInput{HoldsInput: holds, Spoke: spokeB, Skew: 60 * time.Second})
	}, SpecTimeout(6*time.Minute))

	It("spoke-b's clock 60 s behind: a SPREAD hold is Held on both spokes, claimed, released with nothing left, and a hold left alone ends on both at its validUntil", func(ctx SpecContext) {
		ClockSkewHoldSpec(ctx, ClockSkewHoldInput{HoldsInput: holds, Spoke: spokeB, Skew: -60 * time.Second})
	}, SpecTimeout(6*time.Minute))
})
