package machinevalidator_test

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// webhookConfigurationName names the registration built by
// machinevalidator.ValidatingWebhookConfiguration.
const webhookConfigurationName = "imperator-machine-validator"

// environment is a real API server whose Machine admission calls the
// validator, registered as the agent registers it and served by a manager as
// the agent serves it.
func environment() framework.Options {
	return framework.Options{
		CRDs: framework.SpokeCRDs,
		Validating: func(baseURL string) []*admissionregistrationv1.ValidatingWebhookConfiguration {
			url := baseURL + machinevalidator.WebhookPath
			return []*admissionregistrationv1.ValidatingWebhookConfiguration{
				machinevalidator.ValidatingWebhookConfiguration(webhookConfigurationName,
					admissionregistrationv1.WebhookClientConfig{URL: &url}),
			}
		},
		Manager: &framework.ManagerOptions{Setup: machinevalidator.SetupWebhookWithManager},
	}
}
