// Package webhookenv runs admission webhooks as the agent serves them, behind
// a real API server, through test/util/framework: envtest with the spoke CRDs,
// the webhook configurations a suite gives pointing at a URL on 127.0.0.1, and
// a manager serving the webhooks there. It keeps the podinjector suite's
// entry point; new suites call framework.Start with Mutating/Validating.
package webhookenv

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/test/util/framework"
)

// Options say which webhooks the environment serves (framework.Options).
type Options struct {
	Mutating   func(baseURL string) []*admissionregistrationv1.MutatingWebhookConfiguration
	Validating func(baseURL string) []*admissionregistrationv1.ValidatingWebhookConfiguration
	// Setup registers the webhook handlers on the manager before it starts.
	Setup func(mgr ctrl.Manager) error
}

// Environment is a running API server and the manager serving the webhooks.
type Environment struct {
	*framework.Environment
	// Cache is the manager's cache, the one the webhooks read from.
	Cache client.Reader
}

// Start starts the API server with the spoke CRDs and the webhooks of opts,
// and returns once they are served and the manager's cache has synced.
func Start(opts Options) (*Environment, error) {
	env, err := framework.Start(context.Background(), framework.Options{
		CRDs:       framework.SpokeCRDs,
		Mutating:   opts.Mutating,
		Validating: opts.Validating,
		Manager:    &framework.ManagerOptions{Setup: opts.Setup},
	})
	if err != nil {
		return nil, err
	}
	return &Environment{Environment: env, Cache: env.Manager.Cache}, nil
}
