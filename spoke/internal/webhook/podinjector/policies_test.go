package podinjector

import (
	"strings"
	"testing"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/fleet"
)

// The injector's registration and the admission policies must agree on
// which namespaces the injector serves: a guest the policies take for one
// that the injector never saw (or the reverse) would count wrongly or be
// refused. The two policies that need it carry the same expression, and it
// names the registration's labels and excluded namespaces.
func TestPoliciesAgreeWithTheInjectorOnItsNamespaces(t *testing.T) {
	policies, err := fleet.AdmissionPolicies()
	if err != nil {
		t.Fatal(err)
	}
	expressions := map[string]string{}
	for _, p := range policies {
		for _, v := range p.Policy.Spec.Variables {
			if v.Name == "injected" {
				expressions[p.File] = strings.Join(strings.Fields(v.Expression), " ")
			}
		}
	}
	for _, file := range []string{"pool-guests-only.yaml", "guest-one-unit.yaml"} {
		if _, ok := expressions[file]; !ok {
			t.Fatalf("%s has no variable injected", file)
		}
	}
	if a, b := expressions["pool-guests-only.yaml"], expressions["guest-one-unit.yaml"]; a != b {
		t.Fatalf("the policies disagree on the injector's namespaces:\n  pool-guests-only.yaml: %s\n  guest-one-unit.yaml:   %s", a, b)
	}
	registration := MutatingWebhookConfiguration("imperator-pod-injector", agentNamespace, serviceClientConfig())
	for _, webhook := range registration.Webhooks {
		for _, req := range webhook.NamespaceSelector.MatchExpressions {
			for _, value := range req.Values {
				if !strings.Contains(expressions["guest-one-unit.yaml"], "'"+value+"'") {
					t.Errorf("webhook %s selects namespaces by %s %s %v; the policies' expression does not name %q",
						webhook.Name, req.Key, req.Operator, req.Values, value)
				}
			}
			if !strings.Contains(expressions["guest-one-unit.yaml"], req.Key) && req.Key != "kubernetes.io/metadata.name" {
				t.Errorf("webhook %s selects namespaces by %s; the policies' expression does not", webhook.Name, req.Key)
			}
		}
	}
	for _, key := range []string{imperatorv1alpha1.InjectResourceKey, imperatorv1alpha1.LegacyInjectResourceKey} {
		if !strings.Contains(expressions["guest-one-unit.yaml"], key) {
			t.Errorf("the policies' expression does not name %s", key)
		}
	}
}
