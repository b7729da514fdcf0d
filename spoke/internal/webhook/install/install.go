// Package install registers the agent's admission webhooks with its cluster.
// The webhook configurations are built in code by the webhook packages (the
// injector's needs two namespace selectors and exclusions that markers cannot
// express). Manifests renders them, pointing at the webhook Service, for
// deploy/spoke to ship (make generate); an agent running outside its cluster
// (the local fleet) applies them itself at start-up with server-side apply,
// pointing at a URL. Either way they carry the CA bundle of the serving
// certificate: CABundles sets it on the configurations each time the certs
// package's Rotator checks its certificate, and tells the Rotator whether
// every webhook trusts a new CA before it is promoted.
package install

import (
	"context"
	"fmt"
	"net/url"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Apply needs create and patch on webhook configurations, which deploy/spoke
// does not grant: it is for an agent outside its cluster running with its
// operator's credentials (--webhook-url). In a cluster deploy/spoke ships the
// configurations (Manifests) and the agent only sets their CA bundle
// (CABundles).

// FieldOwner is the server-side apply field manager of the configurations.
const FieldOwner = "imperator-spoke-agent"

// Target says where the API server reaches the webhook server.
type Target struct {
	// URL, when set, is the base URL of the webhook server (e.g.
	// https://127.0.0.1:9443); each webhook's path is appended to it.
	URL string
	// ServiceNamespace, ServiceName and ServicePort locate the webhook Service
	// used when URL is empty.
	ServiceNamespace string
	ServiceName      string
	ServicePort      int32
}

// ClientConfig returns the client configuration of a webhook served at path.
func (t Target) ClientConfig(path string, caBundle []byte) (admissionregistrationv1.WebhookClientConfig, error) {
	if t.URL != "" {
		base, err := url.Parse(t.URL)
		if err != nil || base.Scheme != "https" || base.Host == "" {
			return admissionregistrationv1.WebhookClientConfig{}, fmt.Errorf("webhook URL %q: must be an absolute https URL", t.URL)
		}
		return admissionregistrationv1.WebhookClientConfig{
			URL:      ptr.To(base.JoinPath(path).String()),
			CABundle: caBundle,
		}, nil
	}
	if t.ServiceNamespace == "" || t.ServiceName == "" {
		return admissionregistrationv1.WebhookClientConfig{}, fmt.Errorf("webhook service: namespace and name are required when no URL is given")
	}
	return admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{
			Namespace: t.ServiceNamespace,
			Name:      t.ServiceName,
			Path:      ptr.To(path),
			Port:      ptr.To(t.ServicePort),
		},
		CABundle: caBundle,
	}, nil
}

// Apply creates or updates each configuration with server-side apply, taking
// ownership of every field it sets; fields other managers own are kept.
func Apply(ctx context.Context, c client.Client, configs ...client.Object) error {
	for _, cfg := range configs {
		gvk, err := apiutil.GVKForObject(cfg, c.Scheme())
		if err != nil {
			return fmt.Errorf("applying webhook configuration %s: %w", cfg.GetName(), err)
		}
		fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cfg)
		if err != nil {
			return fmt.Errorf("applying webhook configuration %s: %w", cfg.GetName(), err)
		}
		u := &unstructured.Unstructured{Object: fields}
		u.SetGroupVersionKind(gvk)
		// Fields the agent does not own (a typed object always has them).
		unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(u.Object, "status")
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying webhook configuration %s: %w", cfg.GetName(), err)
		}
	}
	return nil
}
