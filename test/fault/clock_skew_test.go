package fault

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/fleet"
)

const (
	// leaderLease is the hub's leader election Lease (config.LeaderElectionID).
	leaderLease = "imperator-hub-leader"
	// spokeLease is the heartbeat Lease the replica serving a spoke renews
	// in the spoke's namespace (persist.LeaseName).
	spokeLease = "imperator-spoke"
	// skewWatch is how long the skewed replica leads and serves a spoke
	// while the suite watches for false alarms and stolen streams: two
	// grace periods of the fleet.
	skewWatch = 2 * fleet.DefaultGracePeriod
)

// ClockSkewInput configures ClockSkewSpec.
type ClockSkewInput struct {
	Input
	// Skew is how far the second replica's clock is off.
	Skew time.Duration
	// Spoke moves to the skewed replica; the others stay on the first.
	Spoke string
	// NextAvailable is the change every spoke makes while the skewed
	// replica leads.
	NextAvailable int32
}

// ClockSkewSpec runs a second hub replica whose clock is Skew off
// (--clock-offset), moves one spoke's stream to it and hands it the lead:
// neither replica ever shows a live cluster Offline, no ManagedCluster is
// marked Unknown, no replica takes a stream the other serves (each spoke's
// heartbeat Lease keeps its holder, no replica ends a live stream as a
// leftover), and both replicas' answers equal every spoke's truth.
func ClockSkewSpec(ctx context.Context, in ClockSkewInput) {
	env := in.Env
	WaitRecovered(ctx, env, time.Now())

	By(fmt.Sprintf("starting a second hub replica whose clock runs %s off", in.Skew))
	started := time.Now()
	replica, err := in.Fleet.StartReplica(ctx, "hub-skew"+in.Skew.String(), "--clock-offset="+in.Skew.String())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(replica.Stop()).To(Succeed()) })
	skewed := *env
	skewed.Ctl = &e2e.Imperatorctl{Bin: env.Ctl.Bin, Config: replica.ImperatorctlConfig()}
	converged := WaitRecovered(ctx, &skewed, started)
	id := replicaID(replica.LogPath())
	Expect(id).NotTo(BeEmpty(), "the replica logs its name on start (%s)", replica.LogPath())

	By(fmt.Sprintf("moving %s's agent to the skewed replica", in.Spoke))
	before := spokeLeaseOf(ctx, env, in.Spoke)
	Expect(in.Fleet.StopAgent(in.Spoke)).To(Succeed())
	in.Fleet.DialHub(in.Spoke, replica.Address())
	DeferCleanup(func(ctx context.Context) {
		By(fmt.Sprintf("moving %s's agent back to the first replica", in.Spoke))
		Expect(in.Fleet.StopAgent(in.Spoke)).To(Succeed())
		in.Fleet.DialHub(in.Spoke, "")
		Expect(in.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	})
	moved := time.Now()
	Expect(in.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
	Eventually(ctx, func() string { return ptr.Deref(spokeLeaseOf(ctx, env, in.Spoke).Spec.HolderIdentity, "") }).
		WithTimeout(settle).WithPolling(poll).Should(Equal(id), "the skewed replica holds %s's heartbeat Lease", in.Spoke)
	WaitRecovered(ctx, env, moved)
	takeover := WaitRecovered(ctx, &skewed, moved)
	after := spokeLeaseOf(ctx, env, in.Spoke)
	Expect(ptr.Deref(after.Spec.LeaseTransitions, 0)).To(Equal(ptr.Deref(before.Spec.LeaseTransitions, 0)+1),
		"%s's Lease changed hands once, from the first replica to the skewed one", in.Spoke)

	holders := map[string]*coordinationv1.Lease{}
	for _, name := range spokeNames(env) {
		holders[name] = spokeLeaseOf(ctx, env, name)
	}
	var handover, propagated time.Duration
	spokes := spokeNames(env)
	expectNoUnknownCondition(ctx, env, spokes, func() {
		ExpectAlwaysAvailable(ctx, env, spokes, func() {
			ExpectAlwaysAvailable(ctx, &skewed, spokes, func() {
				By("handing the lead to the skewed replica")
				start := time.Now()
				// Naming it in the leader Lease: it renews that at once,
				// and the first replica steps down at its renew deadline,
				// without a spoke noticing.
				Eventually(ctx, func() error {
					lease := &coordinationv1.Lease{}
					if err := env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: fleet.Namespace, Name: leaderLease}, lease); err != nil {
						return err
					}
					lease.Spec.HolderIdentity = ptr.To(id)
					return env.Hub.Client.Update(ctx, lease)
				}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "naming the skewed replica in the leader Lease")
				Eventually(func() bool { return logged(replica.LogPath(), "Elected leader") }).
					WithTimeout(time.Minute).WithPolling(poll).Should(BeTrue(), "the skewed replica leads")
				handover = time.Since(start)

				By(fmt.Sprintf("every spoke changes its burst Machine while the skewed replica leads, watched for %s", skewWatch))
				start = time.Now()
				for _, name := range spokes {
					Expect(SetBurstAvailable(ctx, env.Spoke(name).Client, in.NextAvailable)).To(Succeed())
				}
				WaitRecovered(ctx, env, start)
				propagated = WaitRecovered(ctx, &skewed, start)
				if rest := skewWatch - time.Since(start); rest > 0 {
					time.Sleep(rest) // the skew is the fault: keep both replicas running side by side, watching
				}
			})
		})
	})

	By("no replica took a stream the other serves, nor ended a live one")
	for _, name := range spokes {
		now := spokeLeaseOf(ctx, env, name)
		Expect(ptr.Deref(now.Spec.HolderIdentity, "")).To(Equal(ptr.Deref(holders[name].Spec.HolderIdentity, "")), "the holder of %s's Lease", name)
		Expect(ptr.Deref(now.Spec.LeaseTransitions, 0)).To(Equal(ptr.Deref(holders[name].Spec.LeaseTransitions, 0)), "%s's Lease changed hands", name)
	}
	for _, log := range []string{replica.LogPath(), in.Fleet.HubLogPath()} {
		Expect(logged(log, "ending its stream here")).To(BeFalse(), "%s ended a live stream as a leftover", log)
	}
	WaitRecovered(ctx, env, time.Now())
	WaitRecovered(ctx, &skewed, time.Now())
	in.Table.Add(Row{
		Fault:   fmt.Sprintf("a hub replica's clock runs %s off; it leads and serves %s", in.Skew, in.Spoke),
		Recover: propagated,
		Note: fmt.Sprintf("no Offline, no Unknown condition, no stream taken over %s; the skewed replica agreed %s after its start, served %s %s after its agent moved, led %s after the hand-over; recover = a change of every spoke in both replicas' answers",
			skewWatch, converged.Round(10*time.Millisecond), in.Spoke, takeover.Round(10*time.Millisecond), handover.Round(10*time.Millisecond)),
	})
}

// spokeLeaseOf returns the heartbeat Lease of spoke's cluster.
func spokeLeaseOf(ctx context.Context, env *e2e.Env, spoke string) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{}
	Expect(env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: spoke, Name: spokeLease}, lease)).To(Succeed())
	return lease
}

// replicaID is the name a hub replica logged on start ("Starting hub").
func replicaID(logPath string) string {
	var id string
	scanLog(logPath, func(line string) bool {
		var entry struct {
			Msg     string `json:"msg"`
			Replica string `json:"replica"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "Starting hub" {
			id = entry.Replica
			return false
		}
		return true
	})
	return id
}

// logged reports whether a line of the log contains s.
func logged(logPath, s string) bool {
	found := false
	scanLog(logPath, func(line string) bool {
		found = strings.Contains(line, s)
		return !found
	})
	return found
}

// scanLog calls fn with every line of the log until it returns false.
func scanLog(logPath string, fn func(line string) bool) {
	f, err := os.Open(logPath)
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && fn(sc.Text()) {
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
}

// expectNoUnknownCondition fails when the Available condition of a
// ManagedCluster of clusters is anything but True while fn runs (polling
// every poll): the leader marked a live cluster Unknown.
func expectNoUnknownCondition(ctx context.Context, env *e2e.Env, clusters []string, fn func()) {
	stop := make(chan struct{})
	alarms := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(poll)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			for _, name := range clusters {
				mc := &clusterv1.ManagedCluster{}
				if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
					continue
				}
				if c := meta.FindStatusCondition(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable); c == nil || c.Status != metav1.ConditionTrue {
					select {
					case alarms <- fmt.Sprintf("ManagedCluster %s Available=%v at %s", name, c, time.Now().Format(time.StampMilli)):
					default:
					}
				}
			}
		}
	})
	func() {
		defer wg.Wait()
		defer close(stop)
		fn()
	}()
	select {
	case alarm := <-alarms:
		Expect(alarm).To(BeEmpty(), "false alarm: a live cluster was marked Unknown")
	default:
	}
}

// A fleet of its own: the skewed replica leads and serves a spoke for a
// while, which the other fault specs do not expect.
var _ = Describe("Clock skew between hub replicas", Ordered, func() {
	BeforeAll(func(ctx SpecContext) { in = startFleet(ctx, fleet.Options{}) }, NodeTimeout(8*time.Minute))

	It("a replica whose clock runs 10 s ahead leads and serves spoke-b: no Offline, no Unknown, no stream taken, nothing lost", func(ctx SpecContext) {
		ClockSkewSpec(ctx, ClockSkewInput{Input: in, Skew: 10 * time.Second, Spoke: spokeB, NextAvailable: 7})
	}, SpecTimeout(5*time.Minute))

	It("a replica whose clock runs 10 s behind leads and serves spoke-b: no Offline, no Unknown, no stream taken, nothing lost", func(ctx SpecContext) {
		ClockSkewSpec(ctx, ClockSkewInput{Input: in, Skew: -10 * time.Second, Spoke: spokeB, NextAvailable: 8})
	}, SpecTimeout(5*time.Minute))
})
