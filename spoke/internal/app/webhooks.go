package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/imperator-federation/imperator/spoke/internal/admissionpolicy"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/hosted"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/certs"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/install"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
)

// The webhooks every replica serves: their serving certificate (the agent's
// own, rotated by package certs, or cert-manager's), the server, and the
// configurations that point the API server at it.

// certificateWait bounds how long the agent waits for its webhook
// certificate at start: the API server may still be coming up.
const certificateWait = 2 * time.Minute

// newCertRotator returns the manager of the webhook serving certificate the
// agent issues and rotates itself, or nil with
// --webhook-cert-manager-certificate, where cert-manager issues it. In hosted
// mode the webhook configurations live in the members, which package hosted
// keeps current: the management cluster has none to patch.
func newCertRotator(cfg config.Config, c client.Client) (*certs.Rotator, error) {
	if cfg.Webhook.CertManagerCertificate != "" {
		return nil, nil
	}
	var bundles certs.Bundles
	if !cfg.IsHosted() {
		bundles = &install.CABundles{
			Client:     c,
			Mutating:   []string{cfg.Webhook.MutatingConfiguration},
			Validating: []string{cfg.Webhook.ValidatingConfiguration},
		}
	}
	return certs.New(c, certs.Options{
		Namespace:    cfg.Namespace,
		SecretName:   cfg.Webhook.CertSecret,
		Hosts:        cfg.Webhook.Hosts,
		Bundles:      bundles,
		CAValidity:   cfg.Webhook.CAValidity,
		CertValidity: cfg.Webhook.CertValidity,
	})
}

// webhookServerOptions say where the webhook server listens and where its
// certificate comes from: with cert-manager (certRotator nil) it reads
// tls.crt and tls.key from the mounted Secret and reloads them on renewal
// (controller-runtime's certwatcher); otherwise it serves certRotator's from
// memory. Either way no TLS below 1.2. In hosted mode (memberWebhooks) it
// asks callers for the client certificates of the members' API servers.
func webhookServerOptions(cfg config.Config, certRotator *certs.Rotator, memberWebhooks *hosted.Webhooks) webhook.Options {
	opts := webhook.Options{Host: cfg.Webhook.BindAddress, Port: cfg.Webhook.Port}
	if certRotator == nil {
		opts.CertDir = cfg.Webhook.CertDir
	} else {
		opts.TLSOpts = append(opts.TLSOpts, certRotator.TLSOption)
	}
	opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 })
	if memberWebhooks != nil {
		opts.TLSOpts = append(opts.TLSOpts, memberWebhooks.ClientCA.TLSOption)
	}
	return opts
}

// prepareCertificate makes sure certRotator's certificate — and in hosted
// mode the members' client CA — exists before the webhook server starts,
// retrying for a while, as the API server may still be coming up; keeps them
// rotated on local, and returns the serving CA bundle; nil without
// certRotator (cert-manager mode).
func prepareCertificate(ctx context.Context, local manager.Manager, certRotator *certs.Rotator, memberWebhooks *hosted.Webhooks, log logr.Logger) ([]byte, error) {
	if certRotator == nil {
		return nil, nil
	}
	type ensurer interface {
		manager.Runnable
		Ensure(context.Context) error
	}
	ensurers := []ensurer{certRotator}
	if memberWebhooks != nil {
		ensurers = append(ensurers, memberWebhooks.ClientCA)
	}
	for _, e := range ensurers {
		err := wait.PollUntilContextTimeout(ctx, time.Second, certificateWait, true, func(ctx context.Context) (bool, error) {
			if err := e.Ensure(ctx); err != nil {
				log.Info("Webhook certificate not ready yet", "err", err.Error())
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return nil, fmt.Errorf("preparing webhook certificate: %w", err)
		}
		if err := local.Add(e); err != nil {
			return nil, fmt.Errorf("setting up the webhook certificate rotator: %w", err)
		}
	}
	return certRotator.CABundle(), nil
}

// newMemberWebhooks returns, in hosted mode, the members' webhooks: every
// member's webhook configurations point at this agent's server, and package
// hosted registers them in the members. They answer only the members' API
// servers, with the client certificates of a CA of their own, kept in
// <--webhook-cert-secret>-member-client-ca. Nil for the in-cluster agent.
func newMemberWebhooks(cfg config.Config, scheme *runtime.Scheme, certRotator *certs.Rotator, management client.Client) (*hosted.Webhooks, error) {
	if !cfg.IsHosted() {
		return nil, nil
	}
	clientCA, err := hosted.NewClientCA(management, hosted.ClientCAOptions{
		Namespace:  cfg.Namespace,
		SecretName: cfg.Webhook.CertSecret + memberClientCASuffix,
	})
	if err != nil {
		return nil, err
	}
	return &hosted.Webhooks{
		Scheme:                  scheme,
		AgentNamespace:          cfg.Namespace,
		MutatingConfiguration:   cfg.Webhook.MutatingConfiguration,
		ValidatingConfiguration: cfg.Webhook.ValidatingConfiguration,
		CABundle:                certRotator.CABundle,
		Hosts:                   cfg.Webhook.Hosts,
		ClientCA:                clientCA,
		Management:              management,
		ProbeInterval:           cfg.Hosted.WebhookProbeInterval,
		Log:                     ctrl.Log.WithName("member-webhooks"),
	}, nil
}

// memberClientCASuffix names the Secret of the members' client CA after the
// webhook certificate's.
const memberClientCASuffix = "-member-client-ca"

// registerWebhooks applies the injector's and the validator's webhook
// configurations when the agent runs outside its cluster (--webhook-url, as
// in the local fleet): only then is the address the API server must call
// known at run time, and the agent runs with its operator's credentials, not
// the ServiceAccount of deploy/spoke. In a cluster, deploy/spoke ships both
// configurations pointing at the imperator-webhook Service, and the agent
// only sets their CA bundle (install.CABundles, at each check of package
// certs' Rotator), which is all its RBAC allows.
//
// With --webhook-cert-manager-certificate caBundle is nil and never sent:
// instead the configurations carry the cert-manager.io/inject-ca-from
// annotation and cert-manager's cainjector writes the bundle (in a cluster the
// spoke-cert-manager overlay adds that annotation). Server-side apply keeps
// that bundle across our re-applies because it removes only the fields our
// field manager owns and no longer sends; the cainjector's write changes the
// value and so moves the field's ownership to the cainjector. The one removal
// happens when an agent that ran in the default mode (whose applies owned
// caBundle) first applies in cert-manager mode: its old bundle is dropped —
// it is the agent's own CA, which cannot verify a certificate cert-manager
// issued anyway — until the cainjector injects the right one.
//
// When --injection resolves to the policy path, the injector's
// configuration is deleted instead of applied: the API server injects.
func registerWebhooks(ctx context.Context, c client.Client, restConfig *rest.Config, cfg config.Config, caBundle []byte) error {
	if cfg.Webhook.URL == "" {
		return nil
	}
	target := install.Target{URL: cfg.Webhook.URL}
	mutating, validating, err := target.Configurations(caBundle, cfg.Webhook.MutatingConfiguration, cfg.Webhook.ValidatingConfiguration, cfg.Namespace)
	if err != nil {
		return err
	}
	if cfg.Webhook.CertManagerCertificate != "" {
		from := cfg.Namespace + "/" + cfg.Webhook.CertManagerCertificate
		metav1.SetMetaDataAnnotation(&mutating.ObjectMeta, injectCAFromAnnotation, from)
		metav1.SetMetaDataAnnotation(&validating.ObjectMeta, injectCAFromAnnotation, from)
	}
	byPolicy, err := admissionpolicy.UsePolicyAt(restConfig, cfg.Injection)
	if err != nil {
		return err
	}
	if byPolicy {
		return errors.Join(admissionpolicy.WithoutInjectorWebhook(ctx, c, mutating.Name), install.Apply(ctx, c, validating))
	}
	return install.Apply(ctx, c, mutating, validating)
}

// injectCAFromAnnotation asks cert-manager's cainjector to write the CA of
// the Certificate it names (namespace/name) into every webhook's caBundle.
const injectCAFromAnnotation = "cert-manager.io/inject-ca-from"

// serveWebhooks registers the webhooks on local's server: in hosted mode
// every member's under hosted.PathPrefix (memberWebhooks), else the
// injector and the validator of the local cluster.
func serveWebhooks(local manager.Manager, memberWebhooks *hosted.Webhooks, cfg config.Config) error {
	if memberWebhooks != nil {
		local.GetWebhookServer().Register(hosted.PathPrefix, memberWebhooks)
		return nil
	}
	return errors.Join(
		podinjector.SetupWebhookWithManager(local, cfg.Clock()),
		machinevalidator.SetupWebhookWithManager(local))
}
