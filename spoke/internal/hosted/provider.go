package hosted

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// The member Secret's contract, documented in the README (Hosted mode).
const (
	// MemberLabel marks a Secret of the kubeconfig namespace as a member
	// cluster's ("true").
	MemberLabel = "imperator.tenzen-y.io/member-cluster"
	// KubeconfigKey holds the member's kubeconfig (required). It needs the
	// rights of the in-cluster agent's role in the member.
	KubeconfigKey = "kubeconfig"
	// JoinTokenKey holds the member's one-time hub bootstrap token, read
	// afresh whenever the member has to join. The member's hub client
	// certificate is kept in the member itself (its credentials Secret in the
	// agent namespace), as an in-cluster agent keeps it.
	JoinTokenKey = "join-token"
	// ClusterNameAnnotation is the member's name at the hub; default: the
	// Secret's name.
	ClusterNameAnnotation = "imperator.tenzen-y.io/cluster-name"
	// WebhookURLAnnotation is the https base URL at which the member's API
	// server reaches the agent's webhook server; default: --webhook-url.
	WebhookURLAnnotation = "imperator.tenzen-y.io/webhook-url"
)

// Member is one member cluster as its Secret describes it.
type Member struct {
	// Name is the member's name at the hub.
	Name string
	// Secret is the member's kubeconfig Secret in the management cluster;
	// its name is the member's cluster name in multicluster-runtime.
	Secret types.NamespacedName
	// SecretUID is the UID of that Secret (the owner of the member's client
	// Secret).
	SecretUID types.UID
	// WebhookURL is the base URL the member's API server calls; empty when
	// neither the Secret nor the agent names one.
	WebhookURL string
	// Config reaches the member's API server.
	Config *rest.Config
	// Client is an uncached client of the member (Secrets of the agent
	// namespace, webhook configurations, probes).
	Client client.Client
}

// Options configure a Provider.
type Options struct {
	// Namespace holds the members' kubeconfig Secrets.
	Namespace string
	// Scheme of every member's clients and cache.
	Scheme *runtime.Scheme
	// Cache returns a member's cache options (the Machine controller's
	// CacheOptions, in the agent namespace): new ones for every member, as
	// the cache defaults them in place and members start concurrently.
	Cache func() cache.Options
	// RequestTimeout bounds every request to a member's API server.
	RequestTimeout time.Duration
	// DefaultWebhookURL is a member's webhook URL when its Secret names none.
	DefaultWebhookURL string
	// Serve runs a member's own work (reporter, webhook registration) once
	// its cache has synced and the controllers serve it; ctx ends when the
	// member is removed or changed. Nil: nothing beyond the controllers.
	Serve func(ctx context.Context, m *Member, cl cluster.Cluster)
	// Removed undoes in a member what Serve set up there, once the member's
	// Secret is deleted or unlabelled (not when the member restarts or the
	// agent stops). Nil: nothing.
	Removed func(ctx context.Context, m *Member)
	Log     logr.Logger
}

// Provider discovers member clusters from kubeconfig Secrets and engages
// them with a multi-cluster manager. It is one leader term's: set it up on
// the term's manager (SetupWithManager); it stops every member when the
// manager stops.
//
// It does not use multicluster-runtime's providers/kubeconfig (v0.24.1):
// that provider waits for a new member's cache to sync inside its one Secret
// reconcile, without a deadline, so a member whose API server is down when
// its Secret appears (or when the agent starts) holds up adding and removing
// every other member; and it restarts a member only when the kubeconfig bytes
// change, not the other settings the member's Secret carries.
type Provider struct {
	opts Options
	log  logr.Logger

	mu       sync.RWMutex
	ctx      context.Context // the manager's, set when it starts
	members  map[multicluster.ClusterName]*member
	indexers []index
	// identities says which member Secret serves each cluster (by its
	// identity, see identify); refused are the Secrets of clusters served
	// already, reconciled again when a cluster is given up.
	identities map[types.UID]multicluster.ClusterName
	refused    map[multicluster.ClusterName]bool
	// touched is, per Secret, the last member that claimed its cluster and
	// so may have registered webhooks there. It outlives the member: one
	// whose engagement failed (dropped, retried later) or whose restart
	// never got as far as claiming still left its configurations in the
	// cluster, and retiring the Secret must remove them.
	touched map[multicluster.ClusterName]touchedCluster

	mgr      mcmanager.Manager
	reader   client.Reader // the term manager's cache (Secrets of Namespace)
	recorder events.EventRecorder
	// retry reconciles a member's Secret again (after a failed Engage).
	retry chan event.GenericEvent
}

type index struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// touchedCluster is the member that last claimed a Secret's cluster, and
// that cluster's identity (kube-system's UID).
type touchedCluster struct {
	member  *Member
	cluster types.UID
}

type member struct {
	*Member
	cluster cluster.Cluster
	hash    string
	cancel  context.CancelFunc
	// engaged is closed once the controllers serve the member.
	engaged chan struct{}
	// done is closed once the member's goroutines have returned.
	done chan struct{}
}

var _ multicluster.Provider = (*Provider)(nil)

// New returns a Provider; SetupWithManager starts it with a manager.
func New(opts Options) (*Provider, error) {
	if opts.Namespace == "" || opts.Scheme == nil {
		return nil, errors.New("creating the member cluster provider: Namespace and Scheme are required")
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 15 * time.Second
	}
	return &Provider{
		opts: opts, log: opts.Log, members: map[multicluster.ClusterName]*member{}, retry: make(chan event.GenericEvent),
		identities: map[types.UID]multicluster.ClusterName{}, refused: map[multicluster.ClusterName]bool{},
		touched: map[multicluster.ClusterName]touchedCluster{},
	}, nil
}

// SetupWithManager watches the kubeconfig Secrets with mgr's local manager
// and engages every member with mgr.
func (p *Provider) SetupWithManager(mgr mcmanager.Manager) error {
	p.mgr = mgr
	local := mgr.GetLocalManager()
	p.reader = local.GetCache()
	p.recorder = local.GetEventRecorder("imperator-hosted")
	err := local.Add(manager.RunnableFunc(func(ctx context.Context) error {
		p.mu.Lock()
		p.ctx = ctx
		p.mu.Unlock()
		<-ctx.Done()
		p.stopAll()
		return nil
	}))
	if err != nil {
		return fmt.Errorf("setting up the member cluster provider: %w", err)
	}
	err = ctrl.NewControllerManagedBy(local).
		Named("member-clusters").
		For(&corev1.Secret{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			return obj.GetNamespace() == p.opts.Namespace
		}))).
		WatchesRawSource(source.Channel(p.retry, &handler.EnqueueRequestForObject{})).
		Complete(p)
	if err != nil {
		return fmt.Errorf("setting up the member cluster provider: %w", err)
	}
	return nil
}

// CacheOptions restricts the management cluster's cache to the Secrets of
// namespace, the only objects hosted mode reads there.
func CacheOptions(namespace string) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{namespace: {}}},
	}}
}

// Get returns a member whose controllers are engaged.
func (p *Provider) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.mu.RLock()
	m, ok := p.members[name]
	p.mu.RUnlock()
	if !ok {
		return nil, multicluster.ErrClusterNotFound
	}
	select {
	case <-m.engaged:
		return m.cluster, nil
	default:
		return nil, multicluster.ErrClusterNotFound
	}
}

// IndexField registers an index with every member, present and future.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.indexers = append(p.indexers, index{obj: obj, field: field, extract: extract})
	for name, m := range p.members {
		if err := m.cluster.GetFieldIndexer().IndexField(ctx, obj, field, extract); err != nil {
			return fmt.Errorf("indexing %s on member %s: %w", field, name, err)
		}
	}
	return nil
}

// Members returns the names (at the hub) of the members being served.
func (p *Provider) Members() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	names := make([]string, 0, len(p.members))
	for _, m := range p.members {
		names = append(names, m.Name)
	}
	return names
}

// Reconcile starts, restarts or stops the member of one Secret.
func (p *Provider) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p.mu.RLock()
	started := p.ctx != nil
	p.mu.RUnlock()
	if !started {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	log := p.log.WithValues("secret", req.NamespacedName)
	name := multicluster.ClusterName(req.Name)
	secret := &corev1.Secret{}
	if err := p.reader.Get(ctx, req.NamespacedName, secret); err != nil {
		if apierrors.IsNotFound(err) {
			p.retire(ctx, name, log)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading member Secret: %w", err)
	}
	if secret.DeletionTimestamp != nil || secret.Labels[MemberLabel] != "true" {
		p.retire(ctx, name, log)
		return reconcile.Result{}, nil
	}
	spec, hash, err := p.parse(secret)
	if err != nil {
		// Retire, as for a deleted Secret: a member no longer served must
		// not keep webhook configurations (failure policy Fail) pointing at
		// an agent that answers 503 for it.
		p.retire(ctx, name, log)
		log.Error(err, "Member Secret is not usable; the member is not served")
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, "InvalidMember", "Serve", "member cluster not served: %s", err.Error())
		return reconcile.Result{}, nil
	}
	p.mu.RLock()
	current, ok := p.members[name]
	p.mu.RUnlock()
	if ok && current.hash == hash {
		return reconcile.Result{}, nil
	}
	if ok {
		log.Info("Member Secret changed; restarting the member")
		p.remove(name, log)
	}
	if err := p.add(name, spec, hash, log); err != nil {
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, "InvalidMember", "Serve", "member cluster not served: %s", err.Error())
		return reconcile.Result{}, err
	}
	p.recorder.Eventf(secret, nil, corev1.EventTypeNormal, "MemberStarted", "Serve", "serving member cluster %s", spec.Name)
	return reconcile.Result{}, nil
}

// parse reads a member Secret; every error names the key or annotation.
func (p *Provider) parse(secret *corev1.Secret) (*Member, string, error) {
	var errs []error
	name := secret.Name
	if v, ok := secret.Annotations[ClusterNameAnnotation]; ok {
		name = v
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("cluster name %q (annotation %s, default the Secret's name): %v", name, ClusterNameAnnotation, msgs))
	}
	webhookURL := p.opts.DefaultWebhookURL
	if v, ok := secret.Annotations[WebhookURLAnnotation]; ok {
		webhookURL = v
	}
	if webhookURL != "" {
		if u, err := url.Parse(webhookURL); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("annotation %s %q: must be an absolute https URL", WebhookURLAnnotation, webhookURL))
		}
	}
	data := secret.Data[KubeconfigKey]
	var cfg *rest.Config
	if len(data) == 0 {
		errs = append(errs, fmt.Errorf("data[%s]: required, the member's kubeconfig", KubeconfigKey))
	} else {
		var err error
		if err = checkKubeconfig(data); err != nil {
			errs = append(errs, fmt.Errorf("data[%s] of Secret %s/%s: %w", KubeconfigKey, secret.Namespace, secret.Name, err))
		} else if cfg, err = clientcmd.RESTConfigFromKubeConfig(data); err != nil {
			errs = append(errs, fmt.Errorf("data[%s]: %w", KubeconfigKey, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, "", err
	}
	cfg.Timeout = p.opts.RequestTimeout
	sum := sha256.New()
	for _, part := range []string{name, webhookURL, string(secret.UID), string(data)} {
		sum.Write([]byte(part))
		sum.Write([]byte{0})
	}
	return &Member{
		Name:       name,
		Secret:     types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name},
		SecretUID:  secret.UID,
		WebhookURL: webhookURL,
		Config:     cfg,
	}, hex.EncodeToString(sum.Sum(nil)), nil
}

// checkKubeconfig refuses a member kubeconfig that would make the agent run
// a program or read a file of its own pod: whoever may write Secrets in the
// kubeconfig namespace could otherwise have the agent run a binary (exec,
// auth-provider) or send its ServiceAccount token or certificates (a
// tokenFile or certificate path) to a server of theirs. Inline credentials
// (token, client-certificate-data, client-key-data,
// certificate-authority-data) are what a member kubeconfig carries.
func checkKubeconfig(data []byte) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return err
	}
	var errs []error
	refuse := func(field string, set bool) {
		if set {
			errs = append(errs, fmt.Errorf("%s: not allowed in a member kubeconfig (the agent would run a program or read a file of its own); use inline data", field))
		}
	}
	for name, user := range cfg.AuthInfos {
		if user == nil {
			continue
		}
		at := fmt.Sprintf("users[%s].user.", name)
		refuse(at+"exec", user.Exec != nil)
		refuse(at+"auth-provider", user.AuthProvider != nil)
		refuse(at+"tokenFile", user.TokenFile != "")
		refuse(at+"client-certificate", user.ClientCertificate != "")
		refuse(at+"client-key", user.ClientKey != "")
	}
	for name, c := range cfg.Clusters {
		if c == nil {
			continue
		}
		refuse(fmt.Sprintf("clusters[%s].cluster.certificate-authority", name), c.CertificateAuthority != "")
	}
	return errors.Join(errs...)
}

// add starts a member: its cluster runs at once, and the controllers are
// engaged — and Serve called — from a goroutine of the member's own once its
// cache has synced, so that a member whose API server does not answer holds
// up nobody.
func (p *Provider) add(name multicluster.ClusterName, spec *Member, hash string, log logr.Logger) error {
	for _, other := range p.snapshot() {
		if other.Name == spec.Name {
			return fmt.Errorf("cluster name %q is already served for Secret %s", spec.Name, other.Secret.Name)
		}
	}
	cl, err := p.newCluster(spec)
	if err != nil {
		return fmt.Errorf("creating member cluster %s: %w", spec.Name, err)
	}
	spec.Client, err = client.New(spec.Config, client.Options{Scheme: p.opts.Scheme, Mapper: cl.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("creating client of member cluster %s: %w", spec.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, idx := range p.indexers {
		if err := cl.GetFieldIndexer().IndexField(p.ctx, idx.obj, idx.field, idx.extract); err != nil {
			return fmt.Errorf("indexing %s on member %s: %w", idx.field, spec.Name, err)
		}
	}
	ctx, cancel := context.WithCancel(p.ctx)
	m := &member{Member: spec, cluster: cl, hash: hash, cancel: cancel, engaged: make(chan struct{}), done: make(chan struct{})}
	p.members[name] = m
	log = log.WithValues("member", spec.Name)
	log.Info("Starting member cluster", "host", spec.Config.Host)

	var workers sync.WaitGroup
	workers.Go(func() {
		if err := cl.Start(ctx); err != nil {
			log.Error(err, "Member cluster stopped")
		}
	})
	workers.Go(func() {
		if !p.identifyAndClaim(ctx, name, m, log) {
			return // removed before it was reached, or refused
		}
		if !cl.GetCache().WaitForCacheSync(ctx) {
			return // removed before it was reached
		}
		// Get must find the member before the controllers are engaged: their
		// first reconciles run while Engage is still starting watches, and a
		// request whose cluster is not found is dropped (multicluster-runtime
		// ignores ErrClusterNotFound), never retried.
		close(m.engaged)
		if err := p.mgr.Engage(ctx, name, cl); err != nil {
			p.engageFailed(name, m, err, log)
			return
		}
		log.Info("Serving member cluster")
		if p.opts.Serve != nil {
			p.opts.Serve(ctx, spec, cl)
		}
	})
	go func() {
		workers.Wait()
		close(m.done)
	}()
	return nil
}

// newCluster creates the member's cluster. Its cache watches without a
// timeout: client-go makes rest.Config.Timeout the http.Client's, which would
// cut every watch (and any LIST longer than it) after RequestTimeout. The
// cluster's client, whose writes go to the API server, keeps the bound.
func (p *Provider) newCluster(spec *Member) (cluster.Cluster, error) {
	watchConfig := rest.CopyConfig(spec.Config)
	watchConfig.Timeout = 0
	timeout := p.opts.RequestTimeout
	return cluster.New(watchConfig, func(o *cluster.Options) {
		o.Scheme = p.opts.Scheme
		if p.opts.Cache != nil {
			o.Cache = p.opts.Cache()
		}
		o.NewClient = func(config *rest.Config, opts client.Options) (client.Client, error) {
			config = rest.CopyConfig(config)
			config.Timeout = timeout
			if opts.HTTPClient != nil {
				// The cluster's shared http.Client (same transport), with
				// the request bound.
				bounded := *opts.HTTPClient
				bounded.Timeout = timeout
				opts.HTTPClient = &bounded
			}
			return client.New(config, opts)
		}
	})
}

// engageRetryDelay is how long after a failed Engage the member's Secret is
// reconciled again.
const engageRetryDelay = 5 * time.Second

// engageFailed drops a member whose controllers could not be engaged (Get
// no longer returns it, its cache stops with its context) and reconciles its
// Secret again after engageRetryDelay, so that the member is started afresh
// rather than left found but never reconciled.
func (p *Provider) engageFailed(name multicluster.ClusterName, m *member, err error, log logr.Logger) {
	log.Error(err, "Engaging the controllers with the member failed; retrying", "after", engageRetryDelay)
	p.mu.Lock()
	if p.members[name] == m {
		delete(p.members, name)
	}
	providerCtx := p.ctx
	p.mu.Unlock()
	m.cancel()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Secret.Namespace, Name: m.Secret.Name}}
	if p.recorder != nil {
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, "InvalidMember", "Serve", "member cluster %s not served, retrying: engaging the controllers failed: %s", m.Name, err.Error())
	}
	go func() {
		select {
		case <-providerCtx.Done():
		case <-time.After(engageRetryDelay):
			select {
			case p.retry <- event.GenericEvent{Object: secret}:
			case <-providerCtx.Done():
			}
		}
	}()
}

func (p *Provider) snapshot() []*member {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		out = append(out, m)
	}
	return out
}

// remove stops a member; its controllers' engagement, reporter and cache end
// with its context, and it returns once they have.
func (p *Provider) remove(name multicluster.ClusterName, log logr.Logger) {
	p.mu.Lock()
	m, ok := p.members[name]
	delete(p.members, name)
	p.mu.Unlock()
	if !ok {
		return
	}
	log.Info("Stopping member cluster", "member", m.Name)
	m.cancel()
	<-m.done
}

// retire stops a member whose Secret is gone and undoes what Serve set up in
// its cluster (Options.Removed): a member no longer served must not keep
// calling the agent's webhooks. It does so also when no member runs for the
// Secret any more (its engagement failed, or its restart did not reach the
// cluster) but an earlier one claimed the cluster.
func (p *Provider) retire(ctx context.Context, name multicluster.ClusterName, log logr.Logger) {
	p.remove(name, log)
	p.mu.Lock()
	touched, ok := p.touched[name]
	delete(p.touched, name)
	p.mu.Unlock()
	p.release(name, "")
	// A Secret of a cluster served already never touched it: the webhook
	// configurations there are the serving member's.
	if !ok || p.opts.Removed == nil {
		return
	}
	p.opts.Removed(ctx, touched.member)
	log.Info("Member cluster is no longer served", "member", touched.member.Name)
}

func (p *Provider) stopAll() {
	p.mu.Lock()
	members := p.members
	p.members = map[multicluster.ClusterName]*member{}
	p.mu.Unlock()
	for _, m := range members {
		m.cancel()
	}
	for _, m := range members {
		<-m.done
	}
}
