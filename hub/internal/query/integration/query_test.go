package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/encoding/protojson"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/scores"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// result of one imperatorctl run.
type result struct {
	stdout, stderr string
	code           int
}

var imperatorctl string

// ctl runs the imperatorctl binary with conf as its configuration file.
func ctl(conf string, args ...string) result {
	GinkgoHelper()
	cmd := exec.Command(imperatorctl, append(args, "--config", conf)...)
	cmd.Env = []string{"HOME=" + credsDir}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else {
		Expect(err).NotTo(HaveOccurred())
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

var (
	agePattern   = regexp.MustCompile(`\b\d+(\.\d+)?[smhdy](\d+[smh])?\b`)
	timePattern  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	spacePattern = regexp.MustCompile(` {2,}`)
	dynamicJSON  = regexp.MustCompile(`"(lastHeartbeat|observedAt|heartbeatAge|generation|expiration)": "[^"]*"`)
)

// normalize replaces what changes from run to run (ages, times, column
// widths that depend on them) so that output compares to a golden file.
func normalize(s string) string {
	s = dynamicJSON.ReplaceAllString(s, `"$1": "<dynamic>"`)
	s = timePattern.ReplaceAllString(s, "<time>")
	s = agePattern.ReplaceAllString(s, "<age>")
	if strings.HasPrefix(s, "{") {
		return s // JSON: indentation is stable
	}
	return spacePattern.ReplaceAllString(s, "  ")
}

func expectGolden(name, got string) {
	GinkgoHelper()
	path := filepath.Join("testdata", name+".golden")
	got = normalize(got)
	if *update {
		Expect(os.WriteFile(path, []byte(got), 0o644)).To(Succeed())
	}
	want, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred(), "golden file %s (run with -update to create it)", path)
	Expect(got).To(Equal(string(want)), "output differs from %s", path)
}

func parse[T any, PT interface {
	*T
	protoMessage
}](s string) PT {
	GinkgoHelper()
	msg := PT(new(T))
	Expect(protojson.Unmarshal([]byte(s), msg)).To(Succeed())
	return msg
}

func placementScore(ctx context.Context, cluster string) (*clusterv1alpha1.AddOnPlacementScore, error) {
	var obj clusterv1alpha1.AddOnPlacementScore
	err := hubClient.Get(ctx, client.ObjectKey{Namespace: cluster, Name: scores.DefaultResourceName}, &obj)
	return &obj, err
}

func scoreOf(obj *clusterv1alpha1.AddOnPlacementScore, name string) int32 {
	for _, s := range obj.Status.Scores {
		if s.Name == name {
			return s.Value
		}
	}
	return 1000 // not published
}

var _ = Describe("Query API", Ordered, func() {
	var alpha, beta *simSpoke

	BeforeAll(func(ctx context.Context) {
		buildImperatorctl()
		var err error

		// alpha: 4 units, 3 used (1 free); beta: 4 units, none used.
		alpha, err = joinSpoke(ctx, "alpha")
		Expect(err).NotTo(HaveOccurred())
		alpha.mode = federationv1.AgentMode_AGENT_MODE_IN_CLUSTER
		Expect(alpha.start(gpuMachine("team-a", 4, 3))).To(Succeed())
		DeferCleanup(alpha.stop)
		beta, err = joinSpoke(ctx, "beta")
		Expect(err).NotTo(HaveOccurred())
		beta.mode = federationv1.AgentMode_AGENT_MODE_HOSTED
		Expect(beta.start(gpuMachine("team-b", 4, 0))).To(Succeed())
		DeferCleanup(beta.stop)
		Eventually(func(g Gomega) {
			for _, name := range []string{"alpha", "beta"} {
				c, ok := hub.Cluster(name)
				g.Expect(ok).To(BeTrue())
				g.Expect(c.Generation).To(BeNumerically(">=", 1))
				g.Expect(c.Stale()).To(BeFalse())
			}
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	}, NodeTimeout(3*time.Minute))

	It("lists clusters, machine types and usage as the spokes reported them", func() {
		res := ctl(viewerConf, "clusters")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("clusters-table", res.stdout)
		res = ctl(viewerConf, "clusters", "-o", "json")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("clusters-json", res.stdout)
		res = ctl(viewerConf, "clusters", "-o", "wide")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("clusters-wide", res.stdout)

		res = ctl(viewerConf, "machines", "--gpu-product", "nvidia-geforce-rtx-3090", "-o", "wide")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("machines-wide", res.stdout)

		res = ctl(viewerConf, "usage", "-o", "json")
		Expect(res.code).To(Equal(0), res.stderr)
		usage := parse[queryv1.GetUsageResponse](res.stdout)
		Expect(usage.GetClusters()).To(HaveLen(2))
		Expect(usage.GetClusters()[0].GetTypes()[0]).To(SatisfyAll(
			HaveField("Maximum", BeEquivalentTo(4)), HaveField("Used", BeEquivalentTo(3)), HaveField("Free", BeEquivalentTo(1))))
		Expect(usage.GetClusters()[1].GetTypes()[0]).To(SatisfyAll(
			HaveField("Maximum", BeEquivalentTo(4)), HaveField("Used", BeEquivalentTo(0)), HaveField("Free", BeEquivalentTo(4))))
		res = ctl(viewerConf, "usage")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("usage-table", res.stdout)
	})

	It("finds capacity in the right cluster and says why the other was excluded", func() {
		res := ctl(viewerConf, "capacity", "compute-xlarge", "--count", "2", "--same-cluster", "-o", "json")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("capacity-same-cluster-json", res.stdout)
		answer := parse[queryv1.FindCapacityResponse](res.stdout)
		Expect(answer.GetSatisfiable()).To(BeTrue())
		Expect(answer.GetCandidates()[0].GetCluster()).To(Equal("beta"))
		Expect(answer.GetExcluded()).To(ConsistOf(SatisfyAll(
			HaveField("Cluster", "alpha"), HaveField("Reason", queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH))))

		res = ctl(viewerConf, "capacity", "compute-xlarge", "--count", "2", "--same-cluster")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("capacity-same-cluster-table", res.stdout)

		By("spreading a GPU shape over both clusters")
		res = ctl(viewerConf, "capacity", "--gpu", "2", "--gpu-product", "NVIDIA-GeForce-RTX-3090", "--count", "5")
		Expect(res.code).To(Equal(0), res.stderr)
		expectGolden("capacity-spread-table", res.stdout)

		By("exiting 1 when nothing fits")
		res = ctl(viewerConf, "capacity", "team-b/compute-xlarge", "--count", "5", "--same-cluster")
		Expect(res.code).To(Equal(1))
		Expect(res.stderr).To(ContainSubstring("5 x team-b/compute-xlarge do not fit in one cluster"))
		Expect(res.stderr).To(ContainSubstring("cluster alpha: no machine type \"compute-xlarge\" in group \"team-b\""))
		Expect(res.stderr).To(ContainSubstring("cluster beta: 4 free, 5 wanted in one cluster"))
	})

	It("publishes AddOnPlacementScores that change when guests start", func(ctx context.Context) {
		Eventually(func(g Gomega) {
			for cluster, free := range map[string]int32{"alpha": 1, "beta": 4} {
				obj, err := placementScore(ctx, cluster)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(scoreOf(obj, "compute-xlarge")).To(Equal(scores.Value(free)))
				g.Expect(obj.Status.ValidUntil).NotTo(BeNil())
				g.Expect(obj.Status.ValidUntil.Time).To(BeTemporally(">", time.Now()))
			}
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

		By("starting 3 guests on beta")
		Expect(beta.update(gpuMachine("team-b", 4, 3))).To(Succeed())
		Eventually(func(g Gomega) {
			obj, err := placementScore(ctx, "beta")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(scoreOf(obj, "compute-xlarge")).To(Equal(scores.Value(1)))
			g.Expect(scoreOf(obj, "team-b.compute-xlarge")).To(Equal(scores.Value(1)))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		res := ctl(viewerConf, "capacity", "compute-xlarge", "--count", "2", "--same-cluster")
		Expect(res.code).To(Equal(1), res.stdout)
	}, SpecTimeout(time.Minute))

	It("keeps token administration to admins and exits with documented codes", func() {
		res := ctl(viewerConf, "token", "list")
		Expect(res.code).To(Equal(4))
		Expect(res.stderr).To(ContainSubstring("refused the request"))

		res = ctl(adminConf, "token", "create", "--cluster", "gamma", "--ttl", "1h")
		Expect(res.code).To(Equal(0), res.stderr)
		Expect(res.stdout).To(MatchRegexp(`^[a-z0-9]{6}\.[a-z0-9]{16}\n$`))
		res = ctl(adminConf, "token", "list", "-o", "json")
		Expect(res.code).To(Equal(0), res.stderr)
		Expect(parse[queryv1.ListTokensResponse](res.stdout).GetTokens()).To(ContainElement(HaveField("ClusterName", "gamma")))
		res = ctl(adminConf, "token", "revoke", "zzzzzz")
		Expect(res.code).To(Equal(1))
		Expect(res.stderr).To(ContainSubstring(`no bootstrap token with ID "zzzzzz"`))

		res = ctl(viewerConf, "clusters", "--hub", "127.0.0.1:1", "--timeout", "3s")
		Expect(res.code).To(Equal(3))
		Expect(res.stderr).To(ContainSubstring("hub unreachable at 127.0.0.1:1"))
		res = ctl(viewerConf, "capacity", "--count", "2")
		Expect(res.code).To(Equal(2))
		res = ctl(viewerConf, "capacity", "--gpu", "1", "--cpu", "lots")
		Expect(res.code).To(Equal(2))
		Expect(res.stderr).To(ContainSubstring(`--cpu "lots"`))
	})

	It("drops a spoke that goes offline out of capacity answers and placement", func(ctx context.Context) {
		Expect(alpha.stop()).To(Succeed())
		Eventually(func(g Gomega) {
			res := ctl(viewerConf, "capacity", "compute-xlarge", "--count", "2", "-o", "json")
			answer := parse[queryv1.FindCapacityResponse](res.stdout)
			g.Expect(answer.GetExcluded()).To(ContainElement(SatisfyAll(
				HaveField("Cluster", "alpha"), HaveField("Reason", queryv1.ExclusionReason_EXCLUSION_REASON_OFFLINE))))
		}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
		res := ctl(viewerConf, "capacity", "compute-xlarge", "--count", "2")
		Expect(res.code).To(Equal(1))
		Expect(res.stderr).To(MatchRegexp(`cluster alpha is offline since \d+s`))
		Eventually(func(g Gomega) {
			obj, err := placementScore(ctx, "alpha")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(obj.Status.ValidUntil).NotTo(BeNil())
			g.Expect(obj.Status.ValidUntil.Time).NotTo(BeTemporally(">", time.Now()))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	}, SpecTimeout(2*time.Minute))
})
