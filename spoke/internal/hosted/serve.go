package hosted

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/spoke/internal/config"
	"github.com/imperator-federation/imperator/spoke/internal/reporter"
)

// Agent is a member's own work beyond the controllers: its reporter to the
// hub (its own join token, certificate and Report stream, as an in-cluster
// agent has) and its webhooks. Its Serve is Options.Serve.
type Agent struct {
	// AgentNamespace is the agent's namespace in each member: the hub
	// credentials Secret lives there, as in-cluster.
	AgentNamespace string
	// Management reads the members' Secrets (their join tokens) from the
	// management cluster, uncached.
	Management client.Client
	// Hub is the hub configuration; an empty Address reports nowhere.
	// ClusterName is each member's.
	Hub          config.Hub
	AgentVersion string
	// Webhooks serves the members' webhooks; nil serves none.
	Webhooks *Webhooks
	Log      logr.Logger
}

// Serve runs m's reporter and webhooks until ctx ends.
func (a *Agent) Serve(ctx context.Context, m *Member, cl cluster.Cluster) {
	log := a.Log.WithValues("member", m.Name)
	var workers sync.WaitGroup
	defer workers.Wait()
	var unavailable func() string
	if a.Webhooks != nil {
		workers.Go(func() { a.Webhooks.serve(ctx, m, cl) })
		unavailable = func() string { return a.Webhooks.Unavailable(m.Name) }
	}
	if a.Hub.Address == "" {
		<-ctx.Done()
		return
	}
	hub := a.Hub
	hub.ClusterName = m.Name
	r, err := reporter.New(reporter.Options{
		Cache:                cl.GetCache(),
		Client:               m.Client,
		Namespace:            a.AgentNamespace,
		Hub:                  hub,
		Token:                func() (string, error) { return a.joinToken(m) },
		AgentVersion:         a.AgentVersion,
		AgentMode:            federationv1.AgentMode_AGENT_MODE_HOSTED,
		InjectionUnavailable: unavailable,
		APIServerStaleAfter:  a.Hub.APIServerStaleAfter,
		Log:                  log.WithName("reporter"),
	})
	if err != nil {
		log.Error(err, "Creating the member's hub reporter failed; the member does not report")
		<-ctx.Done()
		return
	}
	if err := r.Start(ctx); err != nil {
		log.Error(err, "Member's hub reporter stopped")
	}
}

// Removed deletes the webhook configurations of a member whose Secret is
// gone: its API server must not keep calling an agent that no longer answers
// for it. The member's hub credentials stay in the member, so that it can be
// served again, by this agent or an in-cluster one, without a new token.
func (a *Agent) Removed(ctx context.Context, m *Member) {
	if a.Webhooks == nil {
		return
	}
	if err := a.Webhooks.deregister(ctx, m); err != nil {
		a.Log.Error(err, "Removing a member's webhook configurations failed; remove them by hand", "member", m.Name)
	}
}

// tokenReadTimeout bounds reading a member's join token.
const tokenReadTimeout = 10 * time.Second

// joinToken reads m's bootstrap token afresh from its Secret, so that an
// operator gives a member a new token by writing it there.
func (a *Agent) joinToken(m *Member) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tokenReadTimeout)
	defer cancel()
	secret := &corev1.Secret{}
	if err := a.Management.Get(ctx, m.Secret, secret); err != nil {
		return "", fmt.Errorf("reading the join token of member %s from Secret %s: %w", m.Name, m.Secret, err)
	}
	return strings.TrimSpace(string(secret.Data[JoinTokenKey])), nil
}
