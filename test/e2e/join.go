package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// JoinInput configures JoinSpec.
type JoinInput struct {
	Env *Env
	// Spokes must be listed Available; the fleet joined them with tokens.
	Spokes []string
	// NewTokenCluster is the cluster name a fresh token is bound to.
	NewTokenCluster string
	// WantModes is the MODE each spoke must show in `imperatorctl clusters
	// -o wide` (in-cluster, or hosted for a spoke served by a hosted agent).
	WantModes map[string]string
}

// JoinSpec is journey 1: the spokes joined with their one-time tokens and
// `imperatorctl clusters` lists them Available, `-o wide` with the MODE of
// their agents (a hosted member is told apart only there); the hub cluster registers
// them as OCM ManagedClusters; a platform engineer creates a fresh join
// token and sees it (without its secret) in `token list`.
func JoinSpec(ctx context.Context, in JoinInput) {
	ctl := in.Env.Ctl

	By("imperatorctl clusters lists every spoke Available and connected")
	Eventually(ctx, func(g Gomega) {
		resp, err := ctl.Clusters(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, name := range in.Spokes {
			c := ClusterNamed(resp, name)
			g.Expect(c).NotTo(BeNil(), "cluster %s in imperatorctl clusters", name)
			g.Expect(c.GetState()).To(Equal(queryv1.ClusterState_CLUSTER_STATE_AVAILABLE), "state of %s", name)
			g.Expect(c.GetConnected()).To(BeTrue(), "%s connected", name)
			g.Expect(c.GetAgentVersion()).NotTo(BeEmpty(), "agent version of %s", name)
		}
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	if len(in.WantModes) > 0 {
		By(fmt.Sprintf("imperatorctl clusters -o wide shows how each agent runs: %v", in.WantModes))
		Eventually(ctx, func(g Gomega) {
			modes, res, err := ctl.TableColumn(ctx, "MODE", "clusters", "-o", "wide")
			g.Expect(err).NotTo(HaveOccurred())
			for name, want := range in.WantModes {
				g.Expect(modes).To(HaveKeyWithValue(name, want), "MODE of %s in:\n%s", name, res.Stdout)
			}
		}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())
	}

	By("the hub cluster has an accepted, available ManagedCluster per spoke")
	Eventually(ctx, func(g Gomega) {
		for _, name := range in.Spokes {
			expectManagedCluster(g, ctx, in.Env.Hub.Client, name, metav1.ConditionTrue)
		}
	}).WithTimeout(joinTimeout).WithPolling(poll).Should(Succeed())

	By("every spoke used a join token bound to its name")
	tokens, err := ctl.Tokens(ctx)
	Expect(err).NotTo(HaveOccurred())
	for _, name := range in.Spokes {
		Expect(tokens.GetTokens()).To(ContainElement(HaveField("GetUsedBy()", name)), "a token used by %s", name)
	}

	By("a platform engineer creates a fresh join token")
	created := &queryv1.CreateTokenResponse{}
	description := "e2e journey 1"
	_, err = ctl.JSON(ctx, created, []string{"token", "create", "--ttl", "1h", "--cluster", in.NewTokenCluster, "--description", description})
	Expect(err).NotTo(HaveOccurred())
	id, secret, found := strings.Cut(created.GetToken(), ".")
	Expect(found && id != "" && secret != "").To(BeTrue(), "token %q is <id>.<secret>", created.GetToken())
	Expect(created.GetInfo().GetId()).To(Equal(id))
	DeferCleanup(func(ctx context.Context) {
		res, err := ctl.Run(ctx, "token", "revoke", id)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(BeZero(), "%s", res)
	})

	By("token list shows it, unused and without its secret")
	res, err := ctl.Run(ctx, "token", "list", "-o", "json")
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(BeZero(), "%s", res)
	Expect(res.Stdout).NotTo(ContainSubstring(secret), "token list must not show secrets")
	tokens, err = ctl.Tokens(ctx)
	Expect(err).NotTo(HaveOccurred())
	idx := slices.IndexFunc(tokens.GetTokens(), func(t *queryv1.Token) bool { return t.GetId() == id })
	Expect(idx).NotTo(Equal(-1), "token %s in token list:\n%s", id, res.Stdout)
	listed := tokens.GetTokens()[idx]
	Expect(listed.GetClusterName()).To(Equal(in.NewTokenCluster))
	Expect(listed.GetDescription()).To(Equal(description))
	Expect(listed.GetUsedBy()).To(BeEmpty())
	Expect(listed.GetExpiration().AsTime()).To(BeTemporally("~", time.Now().Add(time.Hour), 5*time.Minute))
}
