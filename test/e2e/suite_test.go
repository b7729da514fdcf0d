package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/fleet"
	"github.com/imperator-federation/imperator/test/util/repo"
)

// The suite's environment variables (`make e2e` sets the first).
const (
	// binDirEnv is the directory of hub, spoke and imperatorctl; default
	// <repo>/bin.
	binDirEnv = "E2E_BIN_DIR"
	// fleetEnv, when set, is the fleet.json of a running fleet fresh from
	// `make up` to run against instead of starting one. Journeys 6 and 7
	// stop and start processes and are skipped then.
	fleetEnv = "E2E_FLEET"
	// hostedEnv, when set and not "0" (`make e2e HOSTED=1`), starts the
	// fleet with spoke-b served by a hosted agent in the hub cluster
	// (spoke --clusters-from=kubeconfig-secrets) instead of one inside it;
	// every journey runs unchanged against it.
	hostedEnv = "E2E_HOSTED"
	// hubReplicasEnv, when a number above 1 (`make e2e HUB_REPLICAS=2`,
	// as CI runs it), starts that many hub replicas, the spokes spread
	// over them (spoke-b on the second): every journey runs unchanged.
	hubReplicasEnv = "E2E_HUB_REPLICAS"
)

// fleetStartTimeout bounds the start of the clusters, the hub and the agents.
const fleetStartTimeout = 6 * time.Minute

var env *Env

// fleetVariant names what the started fleet changes from the plain one
// (hub replicas, a hosted agent), "" for the plain fleet.
var fleetVariant string

func TestE2E(t *testing.T) {
	// The clients log the API server's warnings through controller-runtime
	// (the tenant journey's refused pods bring some).
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	RegisterFailHandler(Fail)
	RunSpecs(t, "Imperator Federation e2e")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	root, err := repo.Root()
	Expect(err).NotTo(HaveOccurred())
	binDir := os.Getenv(binDirEnv)
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	if err := CheckBinaries(binDir); err != nil {
		Fail(err.Error())
	}

	if path := os.Getenv(fleetEnv); path != "" {
		By("attaching to the fleet of " + path)
		env, err = NewEnvFromDescription(path, binDir, root)
		Expect(err).NotTo(HaveOccurred())
		return
	}

	opts := fleet.Options{BinDir: binDir}
	if v := os.Getenv(hostedEnv); v != "" && v != "0" {
		opts.Hosted = []string{"spoke-b"}
		fleetVariant = "a hosted agent"
		By("starting a fleet: a hub cluster, spoke-a and spoke-b, the hub, spoke-a's agent and a hosted agent in the hub cluster serving spoke-b")
	} else {
		By("starting a fleet: a hub cluster, spoke-a and spoke-b, the hub and an agent per spoke")
	}
	if n, err := strconv.Atoi(os.Getenv(hubReplicasEnv)); err == nil && n > 1 {
		opts.HubReplicas = n
		fleetVariant = fmt.Sprintf("%d hub replicas", n)
		By(fmt.Sprintf("with %d hub replicas, the spokes spread over them", n))
	}
	dir, err := os.MkdirTemp("", "imperator-e2e-")
	Expect(err).NotTo(HaveOccurred())
	opts.Dir = dir
	started := time.Now()
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
	AddReportEntry("fleet start", time.Since(started).Round(time.Millisecond).String())
	env, err = NewEnvFromFleet(f, binDir, root)
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(fleetStartTimeout))

// failed is set once a spec failed: the fleet's directory is kept then.
var failed bool

var _ = AfterEach(func() {
	if !CurrentSpecReport().Failed() {
		return
	}
	failed = true
	GinkgoWriter.Printf("\n===== fleet logs (last 100 lines of every process) =====\n%s\n", env.Logs(100))
})

var _ = Describe("Imperator Federation", Ordered, ContinueOnFailure, func() {
	const (
		spokeA = "spoke-a"
		spokeB = "spoke-b"
	)
	spokes := []string{spokeA, spokeB}
	// generalReserved are the reservations of the sample general-machine on
	// spoke-a: compute-large is served by no node of the pool.
	generalReserved := map[string]int32{"compute-medium": 4, "compute-xlarge": 1, "compute-large": 0}

	It("1: both spokes joined and are Available, each with its agent's MODE; a fresh join token shows in token list", func(ctx SpecContext) {
		JoinSpec(ctx, JoinInput{Env: env, Spokes: spokes, NewTokenCluster: "spoke-c", WantModes: env.Modes})
	}, SpecTimeout(2*time.Minute))

	It("2: the sample general-machine on spoke-a labels its nodes, runs reservations, and the hub shows them", func(ctx SpecContext) {
		MachineSpec(ctx, MachineInput{
			Env: env, Spoke: spokeA, MachineFile: env.Sample("general-machine.yaml"),
			WantReserved: generalReserved,
			WantPool: map[string]PoolNode{
				"michiru": {imperatorv1alpha1.NodePoolReady, imperatorv1alpha1.NodeConditionReady},
				"utaha":   {imperatorv1alpha1.NodePoolMaintenance, imperatorv1alpha1.NodeConditionMaintenance},
				"eriri":   {imperatorv1alpha1.NodePoolReady, imperatorv1alpha1.NodeConditionReady},
			},
		})
	}, SpecTimeout(4*time.Minute))

	It("3: a guest Deployment is injected, runs on michiru, the reservation gives way and the hub follows; scaled beyond available, the extra guests wait in line at the slot gate, QUEUED at the hub with no unit FREE", func(ctx SpecContext) {
		useSampleMachine(ctx, env, spokeA, env.Sample("general-machine.yaml"), generalReserved)
		GuestSpec(ctx, GuestInput{
			Env: env, Spoke: spokeA, GuestFile: env.Sample("guest-deployment.yaml"),
			MachineName: "general-machine", WantNodes: []string{"michiru"},
		})
		QueueSpec(ctx, QueueInput{
			Env: env, Spoke: spokeA, GuestFile: env.Sample("guest-deployment.yaml"),
			MachineName: "general-machine", Beyond: 2,
		})
	}, SpecTimeout(6*time.Minute))

	It("4: mode changes and node health move labels, conditions and the hub's answers", func(ctx SpecContext) {
		useSampleMachine(ctx, env, spokeA, env.Sample("general-machine.yaml"), generalReserved)
		NodePoolSpec(ctx, NodePoolInput{
			Env: env, Spoke: spokeA, MachineName: "general-machine",
			MaintenanceNode: "utaha", UnhealthyNode: "eriri",
		})
	}, SpecTimeout(5*time.Minute))

	It("5: capacity compute-xlarge --count 2 --same-cluster picks spoke-b once its H100 Machine is in", func(ctx SpecContext) {
		useSampleMachine(ctx, env, spokeA, env.Sample("general-machine.yaml"), generalReserved)
		MachineSpec(ctx, MachineInput{
			Env: env, Spoke: spokeB, MachineFile: env.Sample("hopper-machine.yaml"),
			WantReserved: map[string]int32{"compute-xlarge": 4, "compute-h100x8": 1},
			// kasumi joins by the sample's nodeSelector, megumi by name.
			WantPool: map[string]PoolNode{
				"kasumi": {imperatorv1alpha1.NodePoolReady, imperatorv1alpha1.NodeConditionReady},
				"megumi": {imperatorv1alpha1.NodePoolReady, imperatorv1alpha1.NodeConditionReady},
			},
		})
		CapacitySpec(ctx, CapacityInput{
			Env: env, Type: "compute-xlarge", Count: 2, WantCluster: spokeB, TooMany: 100,
			// spoke-a's general-machine has one compute-xlarge: not two in one cluster.
			WantExcluded: map[string]queryv1.ExclusionReason{spokeA: queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH},
		})
	}, SpecTimeout(4*time.Minute))

	It("6: spoke-b's agent stops: offline within the grace period, excluded, and current again after restart", func(ctx SpecContext) {
		useSampleMachine(ctx, env, spokeB, env.Sample("hopper-machine.yaml"), nil)
		OfflineSpec(ctx, OfflineInput{
			Env: env, Spoke: spokeB, MachineName: "hopper-machine",
			Type: "compute-xlarge", Count: 2, Node: "kasumi",
		})
	}, SpecTimeout(5*time.Minute))

	It("7: the hub restarts: spokes reconnect by themselves and nothing is lost", func(ctx SpecContext) {
		useSampleMachine(ctx, env, spokeB, env.Sample("hopper-machine.yaml"), nil)
		HubRestartSpec(ctx, HubRestartInput{
			Env: env, Spokes: spokes, Type: "compute-xlarge", Count: 2, WantCluster: spokeB,
		})
	}, SpecTimeout(5*time.Minute))

	It("8: a fleet hold books 2 compute-xlarge on spoke-b, its guest claims one, release gives the rest back", func(ctx SpecContext) {
		useSampleMachine(ctx, env, spokeB, env.Sample("hopper-machine.yaml"), nil)
		HoldSpec(ctx, HoldInput{
			Env: env, Name: "journey-8", Type: "compute-xlarge", Count: 2, WantCluster: spokeB, Namespace: "team-hold",
		})
	}, SpecTimeout(4*time.Minute))

	It("9: a tenant who may only create pods cannot take a team's units on spoke-b: strays count nowhere, more than a unit and preemption are refused, a hold cannot be squatted", func(ctx SpecContext) {
		TenantSpec(ctx, TenantInput{
			Env: env, Spoke: spokeB, Group: "tenant-machine", Type: "tenant-xlarge", Node: "tenant-node", Units: 4,
			GPU: "nvidia.com/gpu", Hold: "squat",
		})
	}, SpecTimeout(4*time.Minute))

	It("10: a 2-pod gang on spoke-b waits whole while one unit is free and runs whole once two more free", func(ctx SpecContext) {
		GangSpec(ctx, GangInput{
			Env: env, Spoke: spokeB, Group: "gang-machine", Type: "gang-xlarge", Node: "gang-node", Units: 4,
			Namespace: "team-gang",
		})
	}, SpecTimeout(3*time.Minute))

	// The timeout covers building Kueue when the tool cache lacks it
	// (minutes, once per hack/tools/kueue go.sum; CI builds it first).
	It("11: Kueue admits a 2-pod Job on spoke-b once a ProvisioningRequest of capacity-hold.imperator.tenzen-y.io holds 2 compute-xlarge, and shows why a Job of 5 is not admitted", func(ctx SpecContext) {
		KueueSpec(ctx, KueueInput{
			Env: env, Spoke: spokeB, Group: "kueue-machine", Type: "compute-xlarge", Node: "kueue-node", Units: 4, TooMany: 5,
			Namespace: "team-kueue",
		})
	}, SpecTimeout(15*time.Minute))

	It("12: MultiKueue with the dispatcher imperator.tenzen-y.io/dispatcher sends a Job that fits only on spoke-b there and nowhere else, the next to spoke-a once spoke-b is full, and holds one with the reason while both are full", func(ctx SpecContext) {
		if fleetVariant != "" {
			// Three Kueue managers and the dispatcher cost a minute a run;
			// the dispatcher asks one hub address and reads no spoke
			// through the hub's agents, so the variants add nothing to it.
			Skip("journey 12 runs on the plain fleet only, not with " + fleetVariant)
		}
		MultiKueueSpec(ctx, MultiKueueInput{Env: env, Small: spokeA, Big: spokeB, Namespace: "team-multikueue"})
	}, SpecTimeout(15*time.Minute))

	It("13: on the policy path the API server injects: with spoke-a's agent stopped, guests are admitted, injected and gated, and the restarted agent lets them through in arrival order", func(ctx SpecContext) {
		InjectionPolicySpec(ctx, InjectionPolicyInput{
			Env: env, Spoke: spokeA, Namespace: "team-policy", Node: "policy-node", Machine: "policy-machine", Available: 2, Guests: 4,
		})
	}, SpecTimeout(3*time.Minute))

	It("14: a ServiceAccount bound to imperator-fleet-viewer lists the clusters through imperatorctl --kubeconfig and is refused creating a hold, told the verb and resource", func(ctx SpecContext) {
		AccessSpec(ctx, AccessInput{Env: env, Namespace: "fleet-people", Spokes: spokes})
	}, SpecTimeout(time.Minute))
})
