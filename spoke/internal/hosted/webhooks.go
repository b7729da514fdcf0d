package hosted

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/install"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	webhookmetrics "github.com/imperator-federation/imperator/spoke/internal/webhook/metrics"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
)

// PathPrefix is where the agent's webhook server serves the members'
// webhooks: a member's API server calls <its webhook URL>/members/<name>/…,
// and the injector and validator answer from that member's cache.
const PathPrefix = "/members/"

// ProbeMachineName names the Machine a member's API server is asked to
// create, dry-run, to find out whether it reaches the agent's validator.
const ProbeMachineName = "imperator-webhook-probe"

// DefaultProbeInterval is how often each member's webhooks are re-registered
// (when the CA bundle changed) and probed.
const DefaultProbeInterval = 30 * time.Second

// Webhooks serves the injector and the validator of every member at
// PathPrefix, registers their configurations in each member with the agent's
// CA bundle, and finds out whether each member's API server reaches them.
// Register it once on the agent's webhook server (every replica serves it),
// with ClientCA's TLSOption; the members are added by Serve while the leader
// serves them.
//
// Only a member's own API server is answered at the member's path: a request
// must come with the client certificate that the agent issued to that member
// (ClientCA), which the leader keeps in the member's client Secret beside the
// member's Secret; any other is refused before its body is read, with the
// same answer whether or not the member exists.
type Webhooks struct {
	// Scheme decodes pods and Machines.
	Scheme *runtime.Scheme
	// AgentNamespace is the agent's namespace in the members (excluded from
	// injection, as in-cluster).
	AgentNamespace string
	// MutatingConfiguration and ValidatingConfiguration name the webhook
	// configurations in each member.
	MutatingConfiguration   string
	ValidatingConfiguration string
	// CABundle returns the CA bundle of the serving certificate.
	CABundle func() []byte
	// Hosts are the names the serving certificate is valid for: a member
	// URL's host must be one of them.
	Hosts []string
	// ClientCA issues the members' client certificates and verifies them.
	ClientCA *ClientCA
	// Management writes the members' client Secrets, uncached.
	Management client.Client
	// ProbeInterval defaults to DefaultProbeInterval.
	ProbeInterval time.Duration
	Log           logr.Logger

	mu      sync.RWMutex
	members map[string]*memberHooks
}

type memberHooks struct {
	injector  http.Handler
	validator http.Handler
	// lastRequest is when the member's API server last called the validator
	// for the probe Machine, dry-run (Unix nanoseconds): only the probe's own
	// request proves that the member's API server reaches the agent; any
	// other request to the member's path may come from anyone.
	lastRequest atomic.Int64
	// unavailable says why the member cannot reach the webhooks; "" when it
	// can.
	unavailable atomic.Pointer[string]
	// clientCert is the client certificate last found or written in the
	// member's client Secret; only serve's loop uses it.
	clientCert *x509.Certificate
}

// ServeHTTP answers a member's admission request with that member's
// injector or validator, when the request carries the member's client
// certificate; a member this replica does not serve (yet) is answered with
// an error that says so, which the API server reports.
func (w *Webhooks) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	rest, _ := strings.CutPrefix(req.URL.Path, PathPrefix)
	name, path, _ := strings.Cut(rest, "/")
	if status, reason := w.ClientCA.authenticate(req, name); status != 0 {
		http.Error(rw, reason, status)
		return
	}
	w.mu.RLock()
	hooks := w.members[name]
	w.mu.RUnlock()
	var handler http.Handler
	if hooks != nil {
		switch "/" + path {
		case podinjector.WebhookPath:
			handler = hooks.injector
		case machinevalidator.WebhookPath:
			handler = hooks.validator
		}
	}
	if handler == nil {
		msg := fmt.Sprintf("member cluster %q is not served by this agent replica (yet), or %q is no webhook of it", name, "/"+path)
		handler = &webhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
			return admission.Errored(http.StatusServiceUnavailable, errors.New(msg))
		})}
	}
	handler.ServeHTTP(rw, req)
}

// newMemberHooks returns a member's injector and validator answering from
// reader; the validator notes the probe's request in lastRequest (only the
// member's own API server gets that far, see ServeHTTP).
func (w *Webhooks) newMemberHooks(reader client.Reader) *memberHooks {
	hooks := &memberHooks{
		injector: &webhook.Admission{Handler: webhookmetrics.Handler(webhookmetrics.PodInjector, podinjector.NewHandler(reader, w.Scheme))},
	}
	validator := admission.WithValidator(w.Scheme,
		webhookmetrics.Validator[*imperatorv1alpha1.Machine](webhookmetrics.MachineValidator, &machinevalidator.Validator{Reader: reader}))
	next := validator.Handler
	validator.Handler = admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		if isProbe(req) {
			hooks.lastRequest.Store(time.Now().UnixNano())
		}
		return next.Handle(ctx, req)
	})
	hooks.validator = validator
	return hooks
}

// isProbe says whether req is the probe's: a dry-run create of the probe
// Machine.
func isProbe(req admission.Request) bool {
	return req.Operation == admissionv1.Create && req.Name == ProbeMachineName &&
		req.DryRun != nil && *req.DryRun &&
		req.Kind.Group == imperatorv1alpha1.GroupVersion.Group && req.Kind.Kind == "Machine"
}

// Unavailable says why the member named name cannot reach the webhooks, ""
// when it can (or is not probed yet).
func (w *Webhooks) Unavailable(name string) string {
	w.mu.RLock()
	hooks := w.members[name]
	w.mu.RUnlock()
	if hooks == nil {
		return ""
	}
	if why := hooks.unavailable.Load(); why != nil {
		return *why
	}
	return ""
}

// serve answers m's admission requests from cl's cache until ctx ends,
// keeps its webhook configurations registered with the current CA bundle,
// and probes whether its API server reaches them.
func (w *Webhooks) serve(ctx context.Context, m *Member, cl cluster.Cluster) {
	log := w.Log.WithValues("member", m.Name)
	hooks := w.newMemberHooks(cl.GetCache())
	w.mu.Lock()
	if w.members == nil {
		w.members = map[string]*memberHooks{}
	}
	w.members[m.Name] = hooks
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.members[m.Name] == hooks {
			delete(w.members, m.Name)
		}
		w.mu.Unlock()
	}()

	interval := w.ProbeInterval
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	recorder := cl.GetEventRecorder("imperator-hosted")
	var registered []byte
	for {
		why, known := w.check(ctx, m, hooks, &registered)
		if ctx.Err() != nil {
			return
		}
		if !known {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			continue
		}
		previous := hooks.unavailable.Swap(&why)
		if previous == nil || *previous != why {
			// The event is about the member's injector configuration, which
			// its users see (kubectl describe).
			config := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.MutatingConfiguration}}
			if why != "" {
				log.Info("Member cluster cannot reach the agent's webhooks; guests cannot be injected there", "reason", why)
				recorder.Eventf(config, nil, corev1.EventTypeWarning, "InjectionUnavailable", "Probe", "the API server cannot reach the Imperator agent's webhooks: %s", why)
			} else if previous != nil {
				log.Info("Member cluster reaches the agent's webhooks again")
				recorder.Eventf(config, nil, corev1.EventTypeNormal, "InjectionAvailable", "Probe", "the API server reaches the Imperator agent's webhooks")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// check keeps m's client Secret current, registers m's webhook configurations
// when the CA bundle changed since registered, then asks m's API server to
// create the probe Machine, dry-run: it returns why the API server does not
// reach the validator (or does so without m's client certificate), "" when
// it does.
// known is false right after a registration: the API server takes a moment
// to load new webhook configurations, so the probe waits for the next round.
func (w *Webhooks) check(ctx context.Context, m *Member, hooks *memberHooks, registered *[]byte) (why string, known bool) {
	if m.WebhookURL == "" {
		return fmt.Sprintf("no webhook URL: annotate the member's Secret %s with %s, or give the agent --webhook-url", m.Secret, WebhookURLAnnotation), true
	}
	if u, err := url.Parse(m.WebhookURL); err == nil && !slices.Contains(w.Hosts, u.Hostname()) {
		return fmt.Sprintf("webhook URL %s: host %q is not among the serving certificate's names %v (--webhook-hosts)", m.WebhookURL, u.Hostname(), w.Hosts), true
	}
	if err := w.ensureClientCertificate(ctx, m, hooks); err != nil {
		return err.Error(), true
	}
	bundle := w.CABundle()
	if *registered == nil || !slices.Equal(*registered, bundle) {
		if err := w.register(ctx, m, bundle); err != nil {
			return err.Error(), true
		}
		*registered = bundle
		return "", false
	}
	sent := time.Now().UnixNano()
	err := m.Client.Create(ctx, probeMachine(), client.DryRunAll)
	if hooks.lastRequest.Load() >= sent {
		return "", true
	}
	if err != nil {
		return fmt.Sprintf("the API server did not reach the webhook at %s: %v", m.WebhookURL, err), true
	}
	return fmt.Sprintf("the API server did not call the webhook at %s", m.WebhookURL), true
}

// ensureClientCertificate makes sure m's client Secret holds a current
// certificate; it reads the Secret only when the certificate it wrote last
// is due for renewal or the CA rolled over.
func (w *Webhooks) ensureClientCertificate(ctx context.Context, m *Member, hooks *memberHooks) error {
	if hooks.clientCert != nil && w.ClientCA.fresh(hooks.clientCert, m.Name) {
		return nil
	}
	cert, err := ensureClientSecret(ctx, w.Management, w.ClientCA, m)
	if err != nil {
		return err
	}
	hooks.clientCert = cert
	return nil
}

// register applies m's webhook configurations, pointing at
// <m.WebhookURL>/members/<m.Name>.
func (w *Webhooks) register(ctx context.Context, m *Member, bundle []byte) error {
	target := install.Target{URL: strings.TrimSuffix(m.WebhookURL, "/") + PathPrefix + m.Name}
	mutating, validating, err := target.Configurations(bundle, w.MutatingConfiguration, w.ValidatingConfiguration, w.AgentNamespace)
	if err != nil {
		return err
	}
	if err := install.Apply(ctx, m.Client, mutating, validating); err != nil {
		return fmt.Errorf("registering the webhooks in the member: %w", err)
	}
	return nil
}

// deregister deletes m's webhook configurations, so that a member the agent
// no longer serves creates its guests and Machines without it.
func (w *Webhooks) deregister(ctx context.Context, m *Member) error {
	var errs []error
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.MutatingConfiguration}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.ValidatingConfiguration}},
	} {
		if err := m.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting webhook configuration %s of member %s: %w", obj.GetName(), m.Name, err))
		}
	}
	return errors.Join(errs...)
}

// probeMachine is a Machine the CRD schema accepts, so that the API server
// goes on to call the validating webhooks; created with dry-run only.
func probeMachine() *imperatorv1alpha1.Machine {
	return &imperatorv1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{
			Name:   ProbeMachineName,
			Labels: map[string]string{imperatorv1alpha1.MachineGroupKey: ProbeMachineName},
		},
		Spec: imperatorv1alpha1.MachineSpec{MachineTypes: []imperatorv1alpha1.MachineType{{
			Name: "probe",
			Spec: imperatorv1alpha1.MachineTypeSpec{CPU: resource.MustParse("1"), Memory: resource.MustParse("1Gi")},
		}}},
	}
}
