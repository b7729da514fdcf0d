package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The webhook configurations are shipped by deploy/spoke; the agent only sets
// their CA bundle, and only on the two named ones.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=imperator-pod-injector,verbs=get;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,resourceNames=imperator-machine-validator,verbs=get;patch

// CABundles puts the CA bundle of the webhook serving certificate into the
// webhooks of the named configurations, reading and patching each by name
// (no cluster-wide list or watch). Missing configurations are skipped: the
// certs package's Rotator calls Inject again at its next check.
type CABundles struct {
	// Client should read the configurations directly, not from a cache
	// that would list them all.
	Client client.Client
	// Mutating and Validating name the webhook configurations.
	Mutating   []string
	Validating []string
}

// Carry reports whether every webhook of the (existing) configurations
// trusts caPEM.
func (b *CABundles) Carry(ctx context.Context, caPEM []byte) (bool, error) {
	want := bytes.TrimSpace(caPEM)
	carried := true
	for _, cfg := range b.configurations() {
		found, err := b.get(ctx, cfg.name, cfg.obj)
		if err != nil {
			return false, err
		}
		if !found {
			continue
		}
		for _, cc := range cfg.clientConfigs() {
			carried = carried && bytes.Contains(cc.CABundle, want)
		}
	}
	return carried, nil
}

// Inject sets caBundle on every webhook of the configurations that does not
// carry it yet.
func (b *CABundles) Inject(ctx context.Context, caBundle []byte) error {
	var errs []error
	for _, cfg := range b.configurations() {
		errs = append(errs, b.patchWebhooks(ctx, cfg.name, cfg.obj, func() bool {
			changed := false
			for _, cc := range cfg.clientConfigs() {
				changed = setBundle(cc, caBundle) || changed
			}
			return changed
		}))
	}
	return errors.Join(errs...)
}

// configuration is one named webhook configuration: an object of its kind
// to read it into, and the client configurations of the webhooks read.
type configuration struct {
	name          string
	obj           client.Object
	clientConfigs func() []*admissionregistrationv1.WebhookClientConfig
}

// configurations are the mutating ones, then the validating ones.
func (b *CABundles) configurations() []configuration {
	out := make([]configuration, 0, len(b.Mutating)+len(b.Validating))
	for _, name := range b.Mutating {
		obj := &admissionregistrationv1.MutatingWebhookConfiguration{}
		out = append(out, configuration{name: name, obj: obj, clientConfigs: func() []*admissionregistrationv1.WebhookClientConfig {
			return clientConfigsOf(obj.Webhooks, func(w *admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.WebhookClientConfig {
				return &w.ClientConfig
			})
		}})
	}
	for _, name := range b.Validating {
		obj := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		out = append(out, configuration{name: name, obj: obj, clientConfigs: func() []*admissionregistrationv1.WebhookClientConfig {
			return clientConfigsOf(obj.Webhooks, func(w *admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.WebhookClientConfig {
				return &w.ClientConfig
			})
		}})
	}
	return out
}

// clientConfigsOf points at the client configuration of each of webhooks.
func clientConfigsOf[W any](webhooks []W, clientConfig func(*W) *admissionregistrationv1.WebhookClientConfig) []*admissionregistrationv1.WebhookClientConfig {
	out := make([]*admissionregistrationv1.WebhookClientConfig, 0, len(webhooks))
	for i := range webhooks {
		out = append(out, clientConfig(&webhooks[i]))
	}
	return out
}

func (b *CABundles) get(ctx context.Context, name string, obj client.Object) (bool, error) {
	if err := b.Client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading webhook configuration %s: %w", name, err)
	}
	return true, nil
}

// patchWebhooks reads the configuration name into obj, applies mutate and
// patches what changed, with an optimistic lock: the patch carries the whole
// webhooks list, so a concurrent change (another replica's injection, an
// installer's apply) makes it read and mutate again instead of overwriting.
func (b *CABundles) patchWebhooks(ctx context.Context, name string, obj client.Object, mutate func() bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		found, err := b.get(ctx, name, obj)
		if err != nil {
			return err
		}
		if !found {
			ctrl.LoggerFrom(ctx).Info("Webhook configuration not found, CA bundle not injected; install deploy/spoke", "name", name)
			return nil
		}
		base := obj.DeepCopyObject().(client.Object)
		if !mutate() {
			return nil
		}
		if err := b.Client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return fmt.Errorf("injecting CA bundle into webhook configuration %s: %w", name, err)
		}
		return nil
	})
}

func setBundle(cc *admissionregistrationv1.WebhookClientConfig, caBundle []byte) bool {
	if bytes.Equal(cc.CABundle, caBundle) {
		return false
	}
	cc.CABundle = caBundle
	return true
}
