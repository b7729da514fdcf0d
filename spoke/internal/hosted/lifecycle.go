package hosted

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

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
