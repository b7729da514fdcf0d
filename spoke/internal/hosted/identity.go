package hosted

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// One cluster, one member. Two member Secrets whose kubeconfigs reach the
// same cluster (another address, another user, a proxy: the URL tells
// nothing) would run every controller twice on it under two names, each
// with its own expectations of the guests it let through, register the
// cluster's webhook configurations for one name and then the other, keep
// two hub identities in the one credentials Secret, and count the cluster's
// capacity twice at the hub. So a member is served only once it holds its
// cluster's identity, the UID of the cluster's kube-system namespace (the
// usual cluster ID: it lives as long as the cluster's etcd, and every
// member user may read it); the Secret of a cluster served already is
// refused with an InvalidMember event naming both Secrets, and is tried
// again when the cluster is given up.

// identityRetry bounds the back-off between attempts to read a member's
// identity while its API server does not answer.
var identityRetry = wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}

// identify reads the UID of m's kube-system namespace, trying again until ctx
// ends (then it returns "").
func identify(ctx context.Context, c client.Client, log logr.Logger) types.UID {
	backoff := identityRetry
	for {
		ns := &corev1.Namespace{}
		err := c.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns)
		if err == nil {
			return ns.UID
		}
		log.V(1).Info("Reading the member's cluster identity failed; retrying", "err", err.Error())
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(backoff.Step()):
		}
	}
}

// identifyAndClaim reads m's cluster identity and claims it for the Secret
// name. It reports false when ctx ended first, or when another member Secret
// serves the cluster: then m is dropped and its Secret refused.
func (p *Provider) identifyAndClaim(ctx context.Context, name multicluster.ClusterName, m *member, log logr.Logger) bool {
	uid := identify(ctx, m.Client, log)
	if uid == "" {
		return false
	}
	p.mu.Lock()
	holder, taken := p.identities[uid]
	if taken && holder != name {
		if p.members[name] == m {
			delete(p.members, name)
		}
		p.refused[name] = true
		p.mu.Unlock()
		m.cancel()
		p.refuse(m, holder, uid, log)
		return false
	}
	p.identities[uid] = name
	delete(p.refused, name)
	prev, hadPrev := p.touched[name]
	p.touched[name] = touchedCluster{member: m.Member, cluster: uid}
	p.mu.Unlock()
	// The Secret reaches another cluster than the one it served: that one
	// must not keep calling the agent's webhooks (failure policy Fail) for
	// a member no longer served. Undone before its identity is given up, so
	// that no other Secret serves it yet.
	if hadPrev && prev.cluster != uid && p.opts.Removed != nil {
		log.Info("Member Secret reaches another cluster; removing what the agent set up in the one it served", "clusterID", prev.cluster)
		p.opts.Removed(ctx, prev.member)
	}
	p.mu.Lock()
	released := p.releaseLocked(name, uid)
	p.mu.Unlock()
	if released {
		p.retryRefused()
	}
	return true
}

// refuse reports that m's Secret is not served because the member Secret
// holder serves its cluster already.
func (p *Provider) refuse(m *member, holder multicluster.ClusterName, uid types.UID, log logr.Logger) {
	other := types.NamespacedName{Namespace: m.Secret.Namespace, Name: string(holder)}
	msg := fmt.Sprintf("member cluster %s not served: Secret %s reaches the cluster that Secret %s serves already (namespace kube-system UID %s); delete one of the two Secrets",
		m.Name, m.Secret, other, uid)
	log.Info("Member Secret reaches a cluster served already; not served", "servedBy", other, "clusterID", uid)
	if p.recorder != nil {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Secret.Namespace, Name: m.Secret.Name}}
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, "InvalidMember", "Serve", "%s", msg)
	}
}

// release gives up the identities the Secret name holds, but keep, and
// reconciles the refused Secrets again if it gave one up.
func (p *Provider) release(name multicluster.ClusterName, keep types.UID) {
	p.mu.Lock()
	released := p.releaseLocked(name, keep)
	delete(p.refused, name)
	p.mu.Unlock()
	if released {
		p.retryRefused()
	}
}

// releaseLocked gives up the identities the Secret name holds, but keep;
// p.mu is held.
func (p *Provider) releaseLocked(name multicluster.ClusterName, keep types.UID) bool {
	released := false
	for uid, holder := range p.identities {
		if holder == name && uid != keep {
			delete(p.identities, uid)
			released = true
		}
	}
	return released
}

// retryRefused reconciles every refused Secret again: the cluster it reaches
// may be free now.
func (p *Provider) retryRefused() {
	p.mu.RLock()
	ctx := p.ctx
	var secrets []multicluster.ClusterName
	for name := range p.refused {
		secrets = append(secrets, name)
	}
	p.mu.RUnlock()
	if ctx == nil || len(secrets) == 0 {
		return
	}
	go func() {
		for _, name := range secrets {
			obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p.opts.Namespace, Name: string(name)}}
			select {
			case p.retry <- event.GenericEvent{Object: obj}:
			case <-ctx.Done():
				return
			}
		}
	}()
}
