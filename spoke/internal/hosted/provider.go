package hosted

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
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

// The member Secret's contract, documented in docs/hosted.md.
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
