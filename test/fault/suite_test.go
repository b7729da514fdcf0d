package fault

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/imperator-federation/imperator/test/e2e"
	"github.com/imperator-federation/imperator/test/util/faultproxy"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// binDirEnv is the directory of hub, spoke and imperatorctl (`make fault`
// sets it); default <repo>/bin.
const binDirEnv = "E2E_BIN_DIR"

const (
	spokeA = "spoke-a"
	spokeB = "spoke-b"
	// faultSpokes is how many spokes the fleet of the fault specs has.
	faultSpokes = 10
)

var (
	in    Input
	table = &Table{}
	// failed is set once a spec failed: the fleet's directory is kept then.
	failed bool
)

func TestFaults(t *testing.T) {
	// The harness's CRD installation logs through controller-runtime.
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	RegisterFailHandler(Fail)
	RunSpecs(t, "Imperator Federation faults")
}

// startFleet starts a fleet with a fault proxy between every agent and the
// hub (and the extra flags of opts), applies the sample Machines and a burst
// Machine on every spoke, and stops it when the container ends.
func startFleet(ctx context.Context, opts fleet.Options) Input {
	root, err := repo.Root()
	Expect(err).NotTo(HaveOccurred())
	binDir := os.Getenv(binDirEnv)
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	Expect(e2e.CheckBinaries(binDir)).To(Succeed())

	By("starting a fleet with a fault proxy between every agent and the hub")
	dir, err := os.MkdirTemp("", "imperator-fault-")
	Expect(err).NotTo(HaveOccurred())
	opts.Dir, opts.BinDir, opts.FaultProxies = dir, binDir, true
	f, err := fleet.Start(ctx, opts)
	Expect(err).NotTo(HaveOccurred(), "the fleet's logs are in %s", dir)
	DeferCleanup(func() {
		By("stopping the fleet")
		Expect(f.Stop()).To(Succeed())
		if failed {
			GinkgoWriter.Printf("the fleet's data and logs are kept in %s\n", dir)
			return
		}
		Expect(os.RemoveAll(dir)).To(Succeed())
	})
	env, err := e2e.NewEnvFromFleet(f, binDir, root)
	Expect(err).NotTo(HaveOccurred())

	By("the sample Machines on spoke-a and spoke-b, and a burst Machine on every spoke")
	for spoke, sample := range map[string]string{spokeA: "general-machine.yaml", spokeB: "hopper-machine.yaml"} {
		m, err := e2e.ReadMachine(env.Sample(sample))
		Expect(err).NotTo(HaveOccurred())
		Expect(e2e.ApplyMachine(ctx, env.Spoke(spoke).Client, m)).To(Succeed())
	}
	for _, spoke := range f.SpokeNames() {
		Expect(e2e.ApplyMachine(ctx, env.Spoke(spoke).Client, BurstMachine(1))).To(Succeed())
	}
	WaitRecovered(ctx, env, time.Now())
	return Input{Env: env, Fleet: f, Table: table}
}

var _ = AfterEach(func() {
	if CurrentSpecReport().Failed() && in.Env != nil {
		failed = true
		GinkgoWriter.Printf("\n===== fleet logs (last 100 lines of every process) =====\n%s\n", in.Env.Logs(100))
	}
})

var _ = AfterSuite(func() {
	report := table.String()
	AddReportEntry("fault table", report)
	_, _ = fmt.Fprintf(os.Stdout, "\nFault table (time to detect, time to recover):\n%s\n", report)
})

var _ = Describe("Faults", Ordered, ContinueOnFailure, func() {
	// Ten spokes, each a control plane of its own (see docs/faults.md,
	// faults, for what that costs): the hub crash below meets a burst of
	// Deltas from ten streams; the other faults hit spoke-a or spoke-b while
	// the rest must show no alarm.
	BeforeAll(func(ctx SpecContext) { in = startFleet(ctx, fleet.Options{SpokeCount: faultSpokes}) }, NodeTimeout(8*time.Minute))

	It("a cut link between spoke-a and the hub: Offline after the grace period, current again once healed", func(ctx SpecContext) {
		PartitionSpec(ctx, PartitionInput{Input: in, Spoke: spokeA, Mode: faultproxy.Cut, For: in.Env.GracePeriod + 10*time.Second, NextAvailable: 2})
	}, SpecTimeout(3*time.Minute))

	It("a blackholed link (no FIN) between spoke-b and the hub: Offline after the grace period, current again once healed", func(ctx SpecContext) {
		PartitionSpec(ctx, PartitionInput{Input: in, Spoke: spokeB, Mode: faultproxy.Blackhole, For: in.Env.GracePeriod + 10*time.Second, NextAvailable: 3})
	}, SpecTimeout(3*time.Minute))

	It("a slow link (500 ms each way) to spoke-a: never a false alarm, and changes still arrive", func(ctx SpecContext) {
		SlowLinkSpec(ctx, SlowLinkInput{Input: in, Spoke: spokeA, Latency: 500 * time.Millisecond, For: 20 * time.Second, NextAvailable: 4})
	}, SpecTimeout(3*time.Minute))

	It("spoke-b's agent is SIGKILLed and restarted: the other spokes see no alarm, the change made just before arrives", func(ctx SpecContext) {
		AgentKillSpec(ctx, AgentKillInput{Input: in, Spoke: spokeB, NextAvailable: 5})
	}, SpecTimeout(3*time.Minute))

	It("the hub cluster's API server stops for 60 s: the hub keeps serving, nothing is lost, persistence catches up", func(ctx SpecContext) {
		HubAPIOutageSpec(ctx, HubAPIOutageInput{Input: in, For: 60 * time.Second, Spoke: spokeA, NextAvailable: 6})
	}, SpecTimeout(4*time.Minute))

	It("spoke-b's cluster API server stops for 60 s: the hub shows spoke-b stale, never offline, then current with a change made right after", func(ctx SpecContext) {
		SpokeAPIOutageSpec(ctx, SpokeAPIOutageInput{Input: in, Spoke: spokeB, For: 60 * time.Second, NextAvailable: 7})
	}, SpecTimeout(4*time.Minute))

	It("the hub is SIGKILLed during a burst of changes from ten spokes: nothing is lost", func(ctx SpecContext) {
		HubKillSpec(ctx, HubKillInput{Input: in, Burst: 15 * time.Second})
	}, SpecTimeout(4*time.Minute))
})

// The certificate specs run on a fleet of their own whose certificates live
// minutes: a partition of the fault specs above longer than a spoke
// certificate's last third would (rightly) cost the spoke its identity.
var _ = Describe("Short-lived certificates", Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		in = startFleet(ctx, fleet.Options{
			// As short as each may be (spoke certificates 1m, the hub's
			// serving certificate 90s), so that the spec ends in about two
			// minutes: three spoke renewals (every 40 s) and the webhook
			// CA's rollover (with a third of its 3m left).
			HubArgs:   []string{"--client-cert-validity=1m", "--serving-cert-validity=90s"},
			AgentArgs: []string{"--webhook-ca-validity=3m", "--webhook-cert-validity=2m"},
		})
	}, NodeTimeout(8*time.Minute))

	It("spoke certificates renew three times, the hub's serving certificate and the webhook CA roll over: no Unknown, no refused admission", func(ctx SpecContext) {
		CertificateRenewalSpec(ctx, CertificateRenewalInput{Input: in, Renewals: 3, For: 5 * time.Minute})
	}, SpecTimeout(8*time.Minute))
})
