package podinjector

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

const agentNamespace = "imperator-system"

func serviceClientConfig() admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: agentNamespace, Name: "imperator-webhook"},
	}
}

func TestMutatingWebhookConfiguration(t *testing.T) {
	cfg := MutatingWebhookConfiguration("imperator-pod-injector", agentNamespace, serviceClientConfig())

	if cfg.Name != "imperator-pod-injector" {
		t.Errorf("name = %q", cfg.Name)
	}
	wantNotExcluded := metav1.LabelSelectorRequirement{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", agentNamespace},
	}
	wantNamespaceSelectors := map[string]*metav1.LabelSelector{
		WebhookName: {MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "imperator.tenzen-y.io/inject-resource", Operator: metav1.LabelSelectorOpIn, Values: []string{"enabled"}},
			wantNotExcluded,
		}},
		LegacyWebhookName: {MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "imperator.tenzen.io/inject-resource", Operator: metav1.LabelSelectorOpIn, Values: []string{"enabled"}},
			{Key: "imperator.tenzen-y.io/inject-resource", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"enabled"}},
			wantNotExcluded,
		}},
	}
	if len(cfg.Webhooks) != len(wantNamespaceSelectors) {
		t.Fatalf("%d webhooks, want %d", len(cfg.Webhooks), len(wantNamespaceSelectors))
	}
	for _, wh := range cfg.Webhooks {
		want := admissionregistrationv1.MutatingWebhook{
			Name: wh.Name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: agentNamespace, Name: "imperator-webhook", Path: ptr.To("/mutate-v1-pod"),
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			NamespaceSelector:       wantNamespaceSelectors[wh.Name],
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"imperator.tenzen-y.io/pod-role": "guest"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](5),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}
		if diff := cmp.Diff(want, wh); diff != "" {
			t.Errorf("webhook %s mismatch (-want +got):\n%s", wh.Name, diff)
		}
	}
}

// TestMutatingWebhookConfigurationSelects evaluates the selectors the way the
// API server does: which webhooks a pod in a namespace is sent to.
func TestMutatingWebhookConfigurationSelects(t *testing.T) {
	cfg := MutatingWebhookConfiguration("imperator-pod-injector", agentNamespace, serviceClientConfig())
	canonical := map[string]string{imperatorv1alpha1.InjectResourceKey: "enabled"}
	legacy := map[string]string{imperatorv1alpha1.LegacyInjectResourceKey: "enabled"}
	both := map[string]string{imperatorv1alpha1.InjectResourceKey: "enabled", imperatorv1alpha1.LegacyInjectResourceKey: "enabled"}
	guestLabels := map[string]string{
		imperatorv1alpha1.PodRoleKey: "guest", imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: "compute-xlarge",
	}

	cases := map[string]struct {
		namespace   string
		nsLabels    map[string]string
		podLabels   map[string]string
		wantHandled []string
	}{
		"guest in an enabled namespace":              {"team-a", canonical, guestLabels, []string{WebhookName}},
		"guest in a legacy-enabled namespace":        {"team-b", legacy, guestLabels, []string{LegacyWebhookName}},
		"guest in a namespace with both labels once": {"team-c", both, guestLabels, []string{WebhookName}},
		"guest in a namespace without the label":     {"team-d", nil, guestLabels, nil},
		"guest in a namespace labelled disabled": {
			"team-e", map[string]string{imperatorv1alpha1.InjectResourceKey: "disabled"}, guestLabels, nil,
		},
		"guest in kube-system even when labelled":     {"kube-system", both, guestLabels, nil},
		"guest in the agent namespace when labelled":  {agentNamespace, both, guestLabels, nil},
		"reservation pod in an enabled namespace":     {"team-a", canonical, map[string]string{imperatorv1alpha1.PodRoleKey: "reservation"}, nil},
		"unlabelled pod in an enabled namespace":      {"team-a", canonical, nil, nil},
		"guest without group/type is still sent here": {"team-a", canonical, map[string]string{imperatorv1alpha1.PodRoleKey: "guest"}, []string{WebhookName}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			nsLabels := labels.Set{corev1.LabelMetadataName: tc.namespace}
			for k, v := range tc.nsLabels {
				nsLabels[k] = v
			}
			var handled []string
			for _, wh := range cfg.Webhooks {
				nsSelector, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
				if err != nil {
					t.Fatalf("webhook %s namespaceSelector: %v", wh.Name, err)
				}
				objSelector, err := metav1.LabelSelectorAsSelector(wh.ObjectSelector)
				if err != nil {
					t.Fatalf("webhook %s objectSelector: %v", wh.Name, err)
				}
				if nsSelector.Matches(nsLabels) && objSelector.Matches(labels.Set(tc.podLabels)) {
					handled = append(handled, wh.Name)
				}
			}
			if diff := cmp.Diff(tc.wantHandled, handled); diff != "" {
				t.Errorf("webhooks called (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMutatingWebhookConfigurationKeepsURLClientConfig(t *testing.T) {
	url := "https://127.0.0.1:9443/mutate-v1-pod"
	cfg := MutatingWebhookConfiguration("injector", "", admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("ca")})
	for _, wh := range cfg.Webhooks {
		want := admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("ca")}
		if diff := cmp.Diff(want, wh.ClientConfig); diff != "" {
			t.Errorf("webhook %s clientConfig (-want +got):\n%s", wh.Name, diff)
		}
		for _, req := range wh.NamespaceSelector.MatchExpressions {
			if req.Key == corev1.LabelMetadataName && !cmp.Equal(req.Values, []string{"kube-system"}) {
				t.Errorf("webhook %s excludes %v, want only kube-system without an agent namespace", wh.Name, req.Values)
			}
		}
	}
}
