// Package integration runs the spoke agent, assembled by app.Run as the
// binary runs it, against a real API server (envtest).
package integration

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/app"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// An agent outside its cluster (--webhook-url, as in the local fleet) must
// register its injector and validator with the URL and its own CA bundle,
// and then answer the API server: a Machine without its machine group is
// refused by the agent's validator. When its context ends, Run returns
// without error.
func TestAgentOutsideItsClusterRegistersAndServesItsWebhooks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := framework.Start(ctx, framework.Options{CRDs: framework.SpokeCRDs, Namespaces: []string{framework.AgentNamespace}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})

	port := freePort(t)
	cfg := config.Default()
	cfg.Namespace = framework.AgentNamespace
	cfg.MetricsAddr, cfg.HealthAddr = "0", "0"
	cfg.LeaderElection = false
	cfg.Webhook.BindAddress = "127.0.0.1"
	cfg.Webhook.Port = port
	cfg.Webhook.URL = fmt.Sprintf("https://127.0.0.1:%d", port)
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, env.Config, app.Options{Version: "v0.0.0-test"}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() = %v after its context ended, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run() did not return within 30s of its context ending")
		}
	})

	var mutating admissionregistrationv1.MutatingWebhookConfiguration
	var validating admissionregistrationv1.ValidatingWebhookConfiguration
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("Run() returned early: %v", err)
		default:
		}
		return env.Client.Get(ctx, client.ObjectKey{Name: cfg.Webhook.MutatingConfiguration}, &mutating) == nil &&
			env.Client.Get(ctx, client.ObjectKey{Name: cfg.Webhook.ValidatingConfiguration}, &validating) == nil, nil
	})
	if err != nil {
		t.Fatalf("the agent's webhook configurations: %v", err)
	}
	hooks := map[string][]admissionregistrationv1.WebhookClientConfig{}
	for _, h := range mutating.Webhooks {
		hooks[podinjector.WebhookPath] = append(hooks[podinjector.WebhookPath], h.ClientConfig)
	}
	for _, h := range validating.Webhooks {
		hooks[machinevalidator.WebhookPath] = append(hooks[machinevalidator.WebhookPath], h.ClientConfig)
	}
	for _, path := range []string{podinjector.WebhookPath, machinevalidator.WebhookPath} {
		hooks := hooks[path]
		if len(hooks) == 0 {
			t.Errorf("no webhook registered for %s", path)
		}
		for _, cc := range hooks {
			if cc.URL == nil || *cc.URL != cfg.Webhook.URL+path || len(cc.CABundle) == 0 {
				t.Errorf("webhook for %s points at %v with a CA bundle of %d bytes, want %s and the agent's CA", path, cc.URL, len(cc.CABundle), cfg.Webhook.URL+path)
			}
		}
	}

	ungrouped := wrappers.MakeMachine("ungrouped", "team-a").Label(imperatorv1alpha1.MachineGroupKey, "").
		Type("compute-xlarge", "40", "128Gi", 1).Obj()
	var refusal error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		refusal = env.Client.Create(ctx, ungrouped.DeepCopy(), client.DryRunAll)
		// Until the webhook server answers, the API server reports the call
		// failing; then the validator's refusal.
		return refusal != nil && strings.Contains(refusal.Error(), "denied the request"), nil
	})
	if err != nil {
		t.Fatalf("a Machine without its machine group was not refused by the agent's validator: last answer %v", refusal)
	}
	if !strings.Contains(refusal.Error(), imperatorv1alpha1.MachineGroupKey) {
		t.Errorf("the refusal %q does not name the machine-group label", refusal)
	}
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}
