package podinjector_test

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
	"github.com/imperator-federation/imperator/test/util/framework"
)

const (
	// agentNamespace is where the agent would run; the webhook skips it.
	agentNamespace = "imperator-system"
	// webhookConfigurationName names the registration built by
	// podinjector.MutatingWebhookConfiguration.
	webhookConfigurationName = "imperator-pod-injector"
)

// startEnvironment starts a real API server whose pod admission calls the
// injector, registered as the agent registers it and served by a manager as
// the agent serves it.
func startEnvironment() (*framework.Environment, error) {
	return framework.Start(context.Background(), framework.Options{
		CRDs: framework.SpokeCRDs,
		Mutating: func(baseURL string) []*admissionregistrationv1.MutatingWebhookConfiguration {
			url := baseURL + podinjector.WebhookPath
			return []*admissionregistrationv1.MutatingWebhookConfiguration{
				podinjector.MutatingWebhookConfiguration(webhookConfigurationName, agentNamespace,
					admissionregistrationv1.WebhookClientConfig{URL: &url}),
			}
		},
		Manager: &framework.ManagerOptions{
			Setup: func(mgr ctrl.Manager) error { return podinjector.SetupWebhookWithManager(mgr, clock.RealClock{}) },
		},
	})
}
