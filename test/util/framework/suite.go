package framework

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// StartSuite starts the environment of opts from a ginkgo node (BeforeSuite,
// BeforeAll) and registers its Stop with DeferCleanup, so that it stops
// also when the node or a later spec fails. A start that fails fails the node.
func StartSuite(ctx context.Context, opts Options) *Environment {
	ginkgo.GinkgoHelper()
	env, err := Start(ctx, opts)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "starting the test environment")
	ginkgo.DeferCleanup(func() { gomega.Expect(env.Stop()).To(gomega.Succeed(), "stopping the test environment") })
	return env
}

// SetLogger sends controller-runtime's log to the ginkgo writer (shown for
// failed specs), at verbosity v (0: info; 1: the controllers' decisions).
func SetLogger(v int) {
	ctrl.SetLogger(zap.New(zap.WriteTo(ginkgo.GinkgoWriter), zap.UseDevMode(true), zap.Level(zapcore.Level(-v))))
}
