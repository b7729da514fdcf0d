package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// bundle is the CA bundle of the Secret's data: the active, next and
// previous CAs, in a fixed order (by their bytes) so that replicas that read
// the same CAs write the same bundle.
func bundle(data map[string][]byte) []byte {
	var cas [][]byte
	for _, k := range []string{CACertKey, NextCACertKey, PreviousCACertKey} {
		if pem := bytes.TrimSpace(data[k]); len(pem) > 0 {
			// A copy: appending to pem would write into the Secret's data.
			cas = append(cas, append(slices.Clone(pem), '\n'))
		}
	}
	slices.SortFunc(cas, bytes.Compare)
	return bytes.Join(cas, nil)
}

// bundlesCarry reports whether every webhook of the configured (existing)
// webhook configurations trusts caPEM.
func (m *Rotator) bundlesCarry(ctx context.Context, caPEM []byte) (bool, error) {
	want := bytes.TrimSpace(caPEM)
	carried := true
	check := func(cc admissionregistrationv1.WebhookClientConfig) {
		carried = carried && bytes.Contains(cc.CABundle, want)
	}
	for _, name := range m.opts.MutatingWebhooks {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if found, err := m.get(ctx, name, cfg); err != nil || !found {
			if err != nil {
				return false, err
			}
			continue
		}
		for _, w := range cfg.Webhooks {
			check(w.ClientConfig)
		}
	}
	for _, name := range m.opts.ValidatingWebhooks {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if found, err := m.get(ctx, name, cfg); err != nil || !found {
			if err != nil {
				return false, err
			}
			continue
		}
		for _, w := range cfg.Webhooks {
			check(w.ClientConfig)
		}
	}
	return carried, nil
}

func (m *Rotator) get(ctx context.Context, name string, obj client.Object) (bool, error) {
	if err := m.client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading webhook configuration %s: %w", name, err)
	}
	return true, nil
}

// injectCABundle sets caBundle on every webhook of the configured
// configurations that does not carry it yet.
func (m *Rotator) injectCABundle(ctx context.Context, caBundle []byte) error {
	var errs []error
	for _, name := range m.opts.MutatingWebhooks {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		errs = append(errs, m.patchWebhooks(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				changed = setBundle(&cfg.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return changed
		}))
	}
	for _, name := range m.opts.ValidatingWebhooks {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errs = append(errs, m.patchWebhooks(ctx, name, cfg, func() bool {
			changed := false
			for i := range cfg.Webhooks {
				changed = setBundle(&cfg.Webhooks[i].ClientConfig, caBundle) || changed
			}
			return changed
		}))
	}
	return errors.Join(errs...)
}

// patchWebhooks reads the configuration name into obj, applies mutate and
// patches what changed, with an optimistic lock: the patch carries the whole
// webhooks list, so a concurrent change (another replica's injection, an
// installer's apply) makes it read and mutate again instead of overwriting.
func (m *Rotator) patchWebhooks(ctx context.Context, name string, obj client.Object, mutate func() bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		found, err := m.get(ctx, name, obj)
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
		if err := m.client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
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
