package machinevalidator

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

const (
	// WebhookName is the name of the validator's webhook in its
	// ValidatingWebhookConfiguration.
	WebhookName = "machine-validator.imperator.tenzen-y.io"
	// TimeoutSeconds bounds an admission call: a few indexed lookups in the
	// manager's cache.
	TimeoutSeconds = 5
)

// ValidatingWebhookConfiguration returns the registration of the validator:
// Machine creations and updates are sent to clientConfig, and a Machine is
// never admitted unchecked (failurePolicy Fail). Deletions are not
// intercepted. When clientConfig names a Service without a path, WebhookPath
// is used.
func ValidatingWebhookConfiguration(name string, clientConfig admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.ValidatingWebhookConfiguration {
	cc := *clientConfig.DeepCopy()
	if cc.Service != nil && cc.Service.Path == nil {
		cc.Service.Path = ptr.To(WebhookPath)
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         WebhookName,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{imperatorv1alpha1.GroupVersion.Group},
					APIVersions: []string{imperatorv1alpha1.GroupVersion.Version},
					Resources:   []string{"machines"},
					Scope:       ptr.To(admissionregistrationv1.ClusterScope),
				},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}
