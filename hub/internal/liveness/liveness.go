// Package liveness turns spoke clusters that stopped heartbeating Unknown:
// it re-evaluates the store's clusters against the grace period on a short
// period, so that a silent cluster goes Unknown at most a fraction of the
// grace period late. The store notifies the persister of every change.
package liveness

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/imperator-federation/imperator/hub/internal/store"
)

// Checker is a controller-runtime Runnable.
type Checker struct {
	store *store.Store
	log   logr.Logger
}

// New returns a Checker of st.
func New(st *store.Store, log logr.Logger) *Checker { return &Checker{store: st, log: log} }

// NeedLeaderElection is false: every replica keeps its own index current.
func (c *Checker) NeedLeaderElection() bool { return false }

// period is how often clusters are evaluated: a tenth of the grace period,
// at least every 100ms.
func (c *Checker) period() time.Duration {
	return max(c.store.GracePeriod()/10, 100*time.Millisecond)
}

// Start evaluates until ctx is done.
func (c *Checker) Start(ctx context.Context) error {
	wait.UntilWithContext(ctx, func(context.Context) {
		for _, name := range c.store.EvaluateLiveness() {
			if cl, ok := c.store.Get(name); ok {
				c.log.Info("Cluster liveness changed", "cluster", name, "state", cl.State, "lastHeartbeat", cl.LastHeartbeat)
			}
		}
	}, c.period())
	return nil
}
