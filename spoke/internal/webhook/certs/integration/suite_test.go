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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/util/framework"
)

func TestWebhookCertificates(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Webhook certificates")
}

var k8s client.Client

var _ = BeforeSuite(func(ctx context.Context) {
	k8s = framework.StartSuite(ctx, framework.Options{}).Client
}, NodeTimeout(2*time.Minute))
