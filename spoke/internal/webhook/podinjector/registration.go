package podinjector

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Names of the webhooks of the injector's MutatingWebhookConfiguration.
const (
	// WebhookName intercepts guest pods in namespaces labelled
	// imperator.tenzen-y.io/inject-resource=enabled.
	WebhookName = "pod-injector.imperator.tenzen-y.io"
	// LegacyWebhookName intercepts guest pods in namespaces labelled only with
	// the original Imperator's imperator.tenzen.io/inject-resource=enabled (docs/contract.md).
	LegacyWebhookName = "legacy-pod-injector.imperator.tenzen-y.io"

	// TimeoutSeconds bounds an admission call: a Machine lookup in the cache
	// and a pure mutation take microseconds.
	TimeoutSeconds = 5
)

// MutatingWebhookConfiguration returns the registration of the injector: guest
// pods (pod-role=guest) created in injection-enabled namespaces, except
// kube-system and agentNamespace, are sent to clientConfig; nothing else in
// the cluster is intercepted. A guest pod is never admitted un-injected
// (failurePolicy Fail).
//
// A namespace selector cannot OR two labels, so the configuration has two
// webhooks: one for the canonical namespace label and one for the legacy
// label, the latter skipping namespaces that also carry the canonical one so
// that no pod is sent twice. When clientConfig names a Service without a
// path, WebhookPath is used.
func MutatingWebhookConfiguration(name, agentNamespace string, clientConfig admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.MutatingWebhookConfiguration {
	excluded := []string{metav1.NamespaceSystem}
	if agentNamespace != "" && agentNamespace != metav1.NamespaceSystem {
		excluded = append(excluded, agentNamespace)
	}
	notExcluded := metav1.LabelSelectorRequirement{
		Key:      corev1.LabelMetadataName,
		Operator: metav1.LabelSelectorOpNotIn,
		Values:   excluded,
	}
	enabled := func(key string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{
			Key:      key,
			Operator: metav1.LabelSelectorOpIn,
			Values:   []string{imperatorv1alpha1.InjectResourceEnabled},
		}
	}

	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "MutatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			mutatingWebhook(WebhookName, clientConfig, &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					enabled(imperatorv1alpha1.InjectResourceKey),
					*notExcluded.DeepCopy(),
				},
			}),
			mutatingWebhook(LegacyWebhookName, clientConfig, &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{
					enabled(imperatorv1alpha1.LegacyInjectResourceKey),
					{
						// NotIn also matches namespaces without the key.
						Key:      imperatorv1alpha1.InjectResourceKey,
						Operator: metav1.LabelSelectorOpNotIn,
						Values:   []string{imperatorv1alpha1.InjectResourceEnabled},
					},
					*notExcluded.DeepCopy(),
				},
			}),
		},
	}
}

func mutatingWebhook(name string, clientConfig admissionregistrationv1.WebhookClientConfig, namespaceSelector *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
	cc := *clientConfig.DeepCopy()
	if cc.Service != nil && cc.Service.Path == nil {
		cc.Service.Path = ptr.To(WebhookPath)
	}
	return admissionregistrationv1.MutatingWebhook{
		Name:         name,
		ClientConfig: cc,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{""},
				APIVersions: []string{"v1"},
				Resources:   []string{"pods"},
				Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		NamespaceSelector: namespaceSelector,
		ObjectSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{imperatorv1alpha1.PodRoleKey: string(imperatorv1alpha1.PodRoleGuest)},
		},
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](TimeoutSeconds),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
	}
}
