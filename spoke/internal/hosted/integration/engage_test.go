package integration

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/imperator-federation/imperator/spoke/internal/hosted"
)

// scriptedEngage is a multicluster-aware runnable whose Engage fails on the
// calls refuse picks (1 is the first), as a controller's would when it
// cannot start its watches.
type scriptedEngage struct {
	refuse func(call int32) bool
	calls  atomic.Int32
}

func (r *scriptedEngage) Start(ctx context.Context) error { <-ctx.Done(); return nil }

func (r *scriptedEngage) Engage(context.Context, multicluster.ClusterName, cluster.Cluster) error {
	if r.refuse(r.calls.Add(1)) {
		return errors.New("engage refused by the test")
	}
	return nil
}

// startProvider starts a provider of its own reading member Secrets of
// namespace ns (created here), with aware engaged beside it and opts'
// Removed; it stops with the spec.
func startProvider(ctx context.Context, ns string, aware *scriptedEngage, removed func(context.Context, *hosted.Member)) *hosted.Provider {
	GinkgoHelper()
	Expect(management.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	p, err := hosted.New(hosted.Options{
		Namespace: ns, Scheme: clientgoscheme.Scheme, RequestTimeout: 5 * time.Second, Log: GinkgoLogr, Removed: removed,
	})
	Expect(err).NotTo(HaveOccurred())
	mgr, err := mcmanager.New(management.Config, p, manager.Options{
		Scheme:  clientgoscheme.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   hosted.CacheOptions(ns),
		// The specs of this file set up the provider's controller in one
		// process: its name is registered once per process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(p.SetupWithManager(mgr)).To(Succeed())
	Expect(mgr.Add(aware)).To(Succeed())
	mgrCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	DeferCleanup(func() {
		stop()
		Eventually(done).WithTimeout(30 * time.Second).Should(Receive())
	})
	return p
}

// A provider of its own, in a namespace the agent does not read, serving
// member alpha.
var _ = Describe("A member whose controllers could not be engaged", func() {
	It("is not served half-way: it is dropped and started again, then served", func(ctx context.Context) {
		const ns = "engage-retry"
		aware := &scriptedEngage{refuse: func(call int32) bool { return call == 1 }}
		p := startProvider(ctx, ns, aware, nil)

		Expect(management.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alpha", Labels: map[string]string{hosted.MemberLabel: "true"}},
			Data:       map[string][]byte{hosted.KubeconfigKey: inlineKubeconfig("alpha")},
		})).To(Succeed())
		Eventually(aware.calls.Load).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(BeNumerically(">=", 1))
		Eventually(func() error {
			_, err := p.Get(ctx, "alpha")
			return err
		}).WithTimeout(4*time.Second).WithPolling(50*time.Millisecond).Should(MatchError(multicluster.ErrClusterNotFound),
			"a member whose controllers are not engaged is not handed to them")
		Eventually(aware.calls.Load).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(BeNumerically(">=", 2),
			"the member is started again after a failed Engage")
		Eventually(func() error {
			_, err := p.Get(ctx, "alpha")
			return err
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		Eventually(func(g Gomega) {
			events := &corev1.EventList{}
			g.Expect(management.Client.List(ctx, events)).To(Succeed())
			var reasons []string
			for _, e := range events.Items {
				if e.InvolvedObject.Name == "alpha" && e.InvolvedObject.Namespace == ns {
					reasons = append(reasons, e.Reason)
				}
			}
			g.Expect(reasons).To(ContainElement("InvalidMember"))
		}).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})
})

var _ = Describe("A member dropped after a failed engagement", func() {
	It("still has what it set up in its cluster undone when its Secret goes, so that no webhook configuration is left calling an agent that no longer serves it", func(ctx context.Context) {
		const ns = "engage-retire"
		removed := make(chan string, 4)
		aware := &scriptedEngage{refuse: func(call int32) bool { return call > 1 }}
		p := startProvider(ctx, ns, aware, func(_ context.Context, m *hosted.Member) { removed <- m.Name })

		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alpha", Labels: map[string]string{hosted.MemberLabel: "true"}},
			Data:       map[string][]byte{hosted.KubeconfigKey: inlineKubeconfig("alpha")},
		}
		Expect(management.Client.Create(ctx, secret)).To(Succeed())
		Eventually(func() error {
			_, err := p.Get(ctx, "alpha")
			return err
		}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "the member is served")

		By("changing the Secret: the restarted member's engagement fails, and it is dropped")
		patch := client.MergeFrom(secret.DeepCopy())
		metav1.SetMetaDataAnnotation(&secret.ObjectMeta, hosted.WebhookURLAnnotation, "https://127.0.0.1:2")
		Expect(management.Client.Patch(ctx, secret, patch)).To(Succeed())
		Eventually(aware.calls.Load).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(BeNumerically(">=", 2))
		Eventually(func() error {
			_, err := p.Get(ctx, "alpha")
			return err
		}).WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(MatchError(multicluster.ErrClusterNotFound))

		By("deleting the Secret")
		Expect(management.Client.Delete(ctx, secret)).To(Succeed())
		Eventually(removed).WithTimeout(30*time.Second).Should(Receive(Equal("alpha")),
			"the cluster the dropped member claimed keeps its webhook configurations")
	})
})
