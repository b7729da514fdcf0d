// Package certs_test runs the webhook certificate manager of two agent
// replicas behind a real API server (envtest): both serve a webhook with the
// certificate their manager keeps, share the certificate Secret, and the API
// server calls both on every admission while the CA rolls over.
package certs_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/imperator-federation/imperator/test/util/harness"
)

func TestWebhookCertificates(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook certificates")
}

var k8s client.Client

var _ = BeforeSuite(func(ctx context.Context) {
	env := &envtest.Environment{BinaryAssetsDirectory: harness.BinDir()}
	cfg, err := env.Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(env.Stop()).To(Succeed()) })
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(2*time.Minute))
