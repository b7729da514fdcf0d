// Package apiready holds a binary's start until the API server it works
// against answers.
//
// A controller-runtime manager asks the API server which resources it serves
// while it is being built (the cache decides whether each object it watches
// is namespaced), and the hub reads its CA Secret before that. An API server
// that is restarting, frozen or still coming up then ends the process with
// "failed to get server groups", and the kubelet restarts it with a growing
// back-off: minutes of no agent (no guest let through, no report to the hub)
// for an outage of seconds, found by the soak with an agent restarted while
// its API server was stopped. Wait retries instead, with back-off, for a
// bounded time, so that a start during an outage resumes as soon as the API
// server does and only an API server that stays away ends the process.
package apiready

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// DefaultTimeout is how long a binary waits for its API server at start
// before it gives up and exits (the kubelet then restarts it).
const DefaultTimeout = 2 * time.Minute

// attemptTimeout bounds one discovery request: a frozen API server accepts
// the connection and never answers.
const attemptTimeout = 5 * time.Second

// backoff spaces the attempts: quick at first (an API server restarting
// answers within seconds), then every 5 s.
var backoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 5 * time.Second}

// Wait returns once the API server of cfg answers a discovery request (the
// one a manager makes first), or an error naming the server and the last
// failure when it has not within timeout, or when ctx ends. Every failure
// is logged, so that a start held back by the API server says so.
func Wait(ctx context.Context, cfg *rest.Config, timeout time.Duration, log logr.Logger) error {
	probe := rest.CopyConfig(cfg)
	probe.Timeout = attemptTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		return fmt.Errorf("the API server %s: %w", cfg.Host, err)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	started := time.Now()
	err = wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		if _, last = dc.ServerGroups(); last != nil {
			log.Info("Waiting for the API server", "host", cfg.Host, "waited", time.Since(started).Round(time.Millisecond).String(), "error", last.Error())
			return false, nil
		}
		return true, nil
	})
	if err == nil {
		if last != nil || time.Since(started) > time.Second {
			log.Info("The API server answers", "host", cfg.Host, "waited", time.Since(started).Round(time.Millisecond).String())
		}
		return nil
	}
	if parent.Err() != nil {
		// Stopped (a signal) while waiting: not the API server's fault.
		return fmt.Errorf("stopped while waiting for the API server %s: %w", cfg.Host, parent.Err())
	}
	if last == nil {
		last = err
	}
	return fmt.Errorf("the API server %s did not answer within %s: %w", cfg.Host, timeout, last)
}
