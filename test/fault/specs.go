package fault

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/fleet"
)

// Input is what every fault spec needs.
type Input struct {
	Env   *e2e.Env
	Fleet *fleet.Fleet
	Table *Table
}

// PartitionInput configures PartitionSpec.
type PartitionInput struct {
	Input
	Spoke string
	// Mode is the fault: faultproxy.Cut or faultproxy.Blackhole.
	Mode faultproxy.Mode
	// For is how long the partition lasts; longer than the grace period, so
	// that the hub must notice.
	For time.Duration
	// NextAvailable is what the burst Machine's `available` becomes during
	// the partition: a change the hub must learn once it is over.
	NextAvailable int32
}

// PartitionSpec cuts or blackholes the link between one spoke's agent and
// the hub while the spoke's Machines change: the hub shows the spoke Offline
// once the grace period has passed (not before, and no other spoke), and
// once the link heals it shows the change the spoke made meanwhile.
func PartitionSpec(ctx context.Context, in PartitionInput) {
	env := in.Env
	WaitRecovered(ctx, env, time.Now())
	proxy := in.Fleet.Proxy(in.Spoke)
	Expect(proxy).NotTo(BeNil(), "the fleet has a fault proxy for %s", in.Spoke)

	By(fmt.Sprintf("partitioning %s from the hub (%s) for %s", in.Spoke, in.Mode, in.For))
	proxy.SetMode(in.Mode)
	injected := time.Now()
	DeferCleanup(func() { proxy.SetMode(faultproxy.Pass) })
	Expect(SetBurstAvailable(ctx, env.Spoke(in.Spoke).Client, in.NextAvailable)).To(Succeed())

	By("the hub shows the spoke Offline once the grace period has passed since its last heartbeat, and not before")
	detect := WaitState(ctx, env, in.Spoke, queryv1.ClusterState_CLUSTER_STATE_OFFLINE, env.GracePeriod+30*time.Second, injected)
	// The last heartbeat came at most one heartbeat interval before the fault.
	Expect(detect).To(BeNumerically(">=", env.GracePeriod-heartbeatInterval-time.Second),
		"the hub must not mark %s Offline before its grace period (%s) has passed", in.Spoke, env.GracePeriod)
	for name := range env.Spokes {
		if name != in.Spoke {
			Expect(ClusterState(ctx, env, name)).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "%s is not partitioned", name)
		}
	}

	if rest := in.For - time.Since(injected); rest > 0 {
		time.Sleep(rest) // the partition's length is the fault itself, not a wait for a condition
	}
	By("healing the link: the hub shows the spoke's current figures")
	proxy.SetMode(faultproxy.Pass)
	healed := time.Now()
	recovered := WaitRecovered(ctx, env, healed)
	in.Table.Add(Row{
		Fault:   fmt.Sprintf("%s partitioned from the hub (%s, %s)", in.Spoke, in.Mode, in.For),
		Detect:  detect,
		Recover: recovered,
		Note:    fmt.Sprintf("grace period %s; a change made during the partition arrived", env.GracePeriod),
	})
}

// SlowLinkInput configures SlowLinkSpec.
type SlowLinkInput struct {
	Input
	Spoke   string
	Latency time.Duration
	For     time.Duration
	// NextAvailable is the change made while the link is slow.
	NextAvailable int32
}

// SlowLinkSpec delays every packet between one spoke's agent and the hub:
// the spoke stays Available throughout, and a change still arrives.
func SlowLinkSpec(ctx context.Context, in SlowLinkInput) {
	env := in.Env
	WaitRecovered(ctx, env, time.Now())
	proxy := in.Fleet.Proxy(in.Spoke)
	Expect(proxy).NotTo(BeNil(), "the fleet has a fault proxy for %s", in.Spoke)

	var propagated time.Duration
	ExpectAlwaysAvailable(ctx, env, spokeNames(env), func() {
		By(fmt.Sprintf("delaying every packet between %s and the hub by %s", in.Spoke, in.Latency))
		proxy.SetLatency(in.Latency)
		DeferCleanup(func() { proxy.SetLatency(0) })
		start := time.Now()
		Expect(SetBurstAvailable(ctx, env.Spoke(in.Spoke).Client, in.NextAvailable)).To(Succeed())
		propagated = WaitRecovered(ctx, env, start)
		if rest := in.For - time.Since(start); rest > 0 {
			time.Sleep(rest) // keep the link slow for the fault's length, watching for false alarms
		}
		proxy.SetLatency(0)
	})
	in.Table.Add(Row{
		Fault:   fmt.Sprintf("link %s ↔ hub slowed by %s for %s", in.Spoke, in.Latency, in.For),
		Recover: propagated,
		Note:    "never shown as not Available; recover = a change's propagation while slow",
	})
}

// AgentKillInput configures AgentKillSpec.
type AgentKillInput struct {
	Input
	Spoke         string
	NextAvailable int32
}

// AgentKillSpec changes a Machine and kills the spoke's agent with SIGKILL
// right away — before it can be sure to have reported the change (while the
// agent is down its validating webhook refuses Machine writes) — then starts
// it again at once: the other spokes are never shown as anything but
// Available, and the hub learns the change. The killed agent's leader Lease
// is not released, so the new one waits up to the Lease's duration (15 s)
// before it reports: with the fleet's short grace period (15 s) the hub may
// show the spoke Offline meanwhile — a true alarm, which the default grace
// period (40 s) outlasts — and the row says whether it did.
func AgentKillSpec(ctx context.Context, in AgentKillInput) {
	env := in.Env
	WaitRecovered(ctx, env, time.Now())
	var (
		recovered time.Duration
		alarmed   bool
		shown     = "never shown as not Available"
	)
	others := slices.DeleteFunc(spokeNames(env), func(n string) bool { return n == in.Spoke })
	ExpectAlwaysAvailable(ctx, env, others, func() {
		By(fmt.Sprintf("changing a Machine of %s, then killing its agent (SIGKILL) and starting it again", in.Spoke))
		Expect(SetBurstAvailable(ctx, env.Spoke(in.Spoke).Client, in.NextAvailable)).To(Succeed())
		killed := time.Now()
		Expect(in.Fleet.KillAgent(in.Spoke)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(in.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed()) })
		Expect(in.Fleet.StartAgent(ctx, in.Spoke)).To(Succeed())
		Eventually(ctx, func() error {
			if st, err := ClusterState(ctx, env, in.Spoke); err == nil && st != queryv1.ClusterState_CLUSTER_STATE_AVAILABLE && !alarmed {
				alarmed = true
				shown = fmt.Sprintf("shown %s %s after the kill", st, time.Since(killed).Round(100*time.Millisecond))
			}
			return HubMatchesSpokes(ctx, env)
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "the hub's answer equals the spokes' truth again")
		recovered = time.Since(killed)
	})
	in.Table.Add(Row{
		Fault:   fmt.Sprintf("agent of %s SIGKILLed and restarted", in.Spoke),
		Recover: recovered,
		Note:    fmt.Sprintf("other spokes never shown as not Available; %s %s; recover counted from the kill", in.Spoke, shown),
	})
}

// HubKillInput configures HubKillSpec.
type HubKillInput struct {
	Input
	// Burst is how long every spoke keeps changing its burst Machine; the
	// hub is killed in the middle of it.
	Burst time.Duration
}

// HubKillSpec kills the hub with SIGKILL while every spoke sends a burst of
// changes, and starts it again: once the spokes are back, the hub's answer
// equals every spoke's truth — nothing applied before or after the crash
// is lost.
func HubKillSpec(ctx context.Context, in HubKillInput) {
	env := in.Env
	WaitRecovered(ctx, env, time.Now())

	By(fmt.Sprintf("every spoke changes its burst Machine for %s", in.Burst))
	burstCtx, stopBurst := context.WithCancel(ctx)
	defer stopBurst()
	var wg sync.WaitGroup
	changes := make([]int, len(spokeNames(env)))
	for i, name := range spokeNames(env) {
		c := env.Spoke(name).Client
		wg.Go(func() {
			defer GinkgoRecover()
			deadline := time.Now().Add(in.Burst)
			for n := int32(1); time.Now().Before(deadline) && burstCtx.Err() == nil; n++ {
				if err := SetBurstAvailable(burstCtx, c, n%50); err == nil {
					changes[i]++
				}
				time.Sleep(100 * time.Millisecond) // the burst's pace: about ten changes a second per spoke
			}
		})
	}
	time.Sleep(in.Burst / 3) // kill the hub a third into the burst
	By("killing the hub (SIGKILL) in the middle of the burst, then starting it again")
	killed := time.Now()
	Expect(in.Fleet.KillHub()).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(in.Fleet.StartHub(ctx)).To(Succeed()) })
	Expect(in.Fleet.StartHub(ctx)).To(Succeed())
	restarted := time.Now()
	By("every spoke streams to the hub again (the reconnect backoff), while the burst goes on")
	Eventually(ctx, func(g Gomega) {
		resp, err := env.Ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range spokeNames(env) {
			g.Expect(e2e.ClusterNamed(resp, name).GetConnected()).To(BeTrue(), "%s streams to the hub", name)
		}
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
	reconnected := time.Since(restarted)
	wg.Wait()
	burstEnded := time.Now()

	By("once the burst is over, the hub's answer equals every spoke's truth")
	WaitRecovered(ctx, env, burstEnded)
	in.Table.Add(Row{
		Fault:   fmt.Sprintf("hub SIGKILLed during a burst of changes from %d spokes", len(changes)),
		Detect:  restarted.Sub(killed),
		Recover: time.Since(restarted),
		Note: fmt.Sprintf("every spoke streaming again %s after the restart; changes sent per spoke: %v; detect = hub down until ready again; recover counted from its restart, waits for the burst's end",
			reconnected.Round(10*time.Millisecond), changes),
	})
}

// HubAPIOutageInput configures HubAPIOutageSpec.
type HubAPIOutageInput struct {
	Input
	// For is how long the hub cluster's API server stays stopped (etcd
	// keeps running).
	For time.Duration
	// Spoke changes its burst Machine to NextAvailable during the outage.
	Spoke         string
	NextAvailable int32
}

// HubAPIOutageSpec stops the hub cluster's kube-apiserver: the hub process
// never exits, every query is answered and every spoke stays Available
// throughout, a change a spoke makes meanwhile reaches the hub's answers, and
// once the API server is back the hub's inventories in it catch up.
func HubAPIOutageSpec(ctx context.Context, in HubAPIOutageInput) {
	env := in.Env
	WaitRecovered(ctx, env, time.Now())

	var propagated time.Duration
	ExpectAlwaysAvailable(ctx, env, spokeNames(env), func() {
		By(fmt.Sprintf("stopping the hub cluster's API server for %s", in.For))
		Expect(in.Fleet.Hub.StopAPIServer()).To(Succeed())
		stopped := time.Now()
		DeferCleanup(func(ctx context.Context) { Expect(in.Fleet.Hub.StartAPIServer(ctx)).To(Succeed()) })

		By("a spoke's change still reaches the hub's answers")
		Expect(SetBurstAvailable(ctx, env.Spoke(in.Spoke).Client, in.NextAvailable)).To(Succeed())
		propagated = WaitRecovered(ctx, env, time.Now())

		By("the hub keeps running and answering until the outage ends")
		Consistently(func(g Gomega) {
			g.Expect(in.Fleet.HubRunning()).To(BeTrue(), "the hub process exited during the outage")
			_, err := env.Ctl.Clusters(ctx)
			g.Expect(err).NotTo(HaveOccurred(), "a query during the outage")
		}).WithTimeout(max(in.For-time.Since(stopped), 0)).WithPolling(time.Second).Should(Succeed())
	})

	By("starting the API server again: the hub's inventories catch up with what it answers")
	Expect(in.Fleet.Hub.StartAPIServer(ctx)).To(Succeed())
	restarted := time.Now()
	Eventually(ctx, func(g Gomega) {
		clusters, err := env.Ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range spokeNames(env) {
			inv := &imperatorv1alpha1.ClusterInventory{}
			g.Expect(env.Hub.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: name}, inv)).To(Succeed())
			g.Expect(inv.Status.Generation).To(Equal(e2e.ClusterNamed(clusters, name).GetGeneration()),
				"the persisted generation of %s", name)
		}
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
	caughtUp := time.Since(restarted)
	Expect(in.Fleet.HubRunning()).To(BeTrue())
	in.Table.Add(Row{
		Fault:   fmt.Sprintf("hub cluster's API server stopped for %s", in.For),
		Recover: caughtUp,
		Note:    fmt.Sprintf("hub never exited, every spoke Available throughout; a change arrived in %s during the outage; recover = persistence caught up", propagated.Round(10*time.Millisecond)),
	})
}

// CertificateRenewalInput configures CertificateRenewalSpec.
type CertificateRenewalInput struct {
	Input
	// Renewals is how many times every spoke's certificate must renew.
	Renewals int
	// For bounds the watch.
	For time.Duration
}

// CertificateRenewalSpec watches a fleet whose certificates live minutes:
// every spoke's client certificate renews Renewals times (the hub's record
// of its current certificate changes), the hub's serving certificate is
// re-issued, and every agent's webhook CA rolls over — while every spoke
// stays Available and every Machine write (each goes through the agent's
// validating webhook, failurePolicy Fail) is admitted.
func CertificateRenewalSpec(ctx context.Context, in CertificateRenewalInput) {
	env := in.Env
	spokes := spokeNames(env)
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(in.Fleet.HubCAFile())
	Expect(err).NotTo(HaveOccurred())
	Expect(pool.AppendCertsFromPEM(caPEM)).To(BeTrue(), "the hub CA file holds a certificate")

	spokeSerials := map[string]map[string]bool{}
	webhookCAs := map[string]map[string]bool{}
	servingSerials := map[string]bool{}
	for _, name := range spokes {
		spokeSerials[name], webhookCAs[name] = map[string]bool{}, map[string]bool{}
	}
	observe := func() {
		for _, name := range spokes {
			mc := &clusterv1.ManagedCluster{}
			if err := env.Hub.Client.Get(ctx, client.ObjectKey{Name: name}, mc); err == nil {
				var rec struct {
					Current string `json:"current"`
				}
				if json.Unmarshal([]byte(mc.Annotations[certificatesAnnotation]), &rec) == nil && rec.Current != "" {
					spokeSerials[name][rec.Current] = true
				}
			}
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := env.Spoke(name).Client.Get(ctx, client.ObjectKey{Name: validatorConfiguration}, vwc); err == nil && len(vwc.Webhooks) > 0 {
				webhookCAs[name][string(vwc.Webhooks[0].ClientConfig.CABundle)] = true
			}
		}
		conn, err := tls.Dial("tcp", in.Fleet.HubAddress(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})
		if err == nil {
			servingSerials[conn.ConnectionState().PeerCertificates[0].SerialNumber.String()] = true
			_ = conn.Close()
		}
	}
	done := func() bool {
		for _, name := range spokes {
			if len(spokeSerials[name]) < in.Renewals+1 || len(webhookCAs[name]) < 2 {
				return false
			}
		}
		return len(servingSerials) >= 2
	}

	start := time.Now()
	writes := 0
	ExpectAlwaysAvailable(ctx, env, spokes, func() {
		By(fmt.Sprintf("watching for %d renewals of every spoke certificate, a new hub serving certificate and a webhook CA rollover", in.Renewals))
		for available := int32(10); !done() && time.Since(start) < in.For; available++ {
			observe()
			for _, name := range spokes {
				Expect(SetBurstAvailable(ctx, env.Spoke(name).Client, available%50)).To(Succeed(),
					"a Machine write to %s was refused while certificates rolled over", name)
				writes++
			}
			time.Sleep(2 * time.Second) // the pace of observations and Machine writes
		}
	})
	for _, name := range spokes {
		Expect(len(spokeSerials[name])).To(BeNumerically(">=", in.Renewals+1), "certificates of %s the hub recorded as current", name)
		Expect(len(webhookCAs[name])).To(BeNumerically(">=", 2), "CA bundles of %s's validating webhook", name)
	}
	Expect(len(servingSerials)).To(BeNumerically(">=", 2), "serving certificates the hub presented")
	WaitRecovered(ctx, env, time.Now())
	in.Table.Add(Row{
		Fault:   "certificates live minutes (spoke 2m, hub serving 3m, webhook CA 6m / leaf 4m)",
		Recover: time.Since(start),
		Note: fmt.Sprintf("spoke certificates seen %v, serving %d, webhook CA bundles %v; %d Machine writes all admitted; never shown as not Available",
			countsOf(spokeSerials), len(servingSerials), countsOf(webhookCAs), writes),
	})
}

func countsOf(sets map[string]map[string]bool) map[string]int {
	out := map[string]int{}
	for k, v := range sets {
		out[k] = len(v)
	}
	return out
}
