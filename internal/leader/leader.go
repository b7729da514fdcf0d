package leader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Defaults of the Lease timing, client-go's and controller-runtime's: a
// leader that cannot renew for RenewDeadline steps down; another replica
// takes over after LeaseDuration.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Campaign is a manager.Runnable that holds the leader Lease whenever it can
// and runs the leader's runnables while it does.
type Campaign struct {
	// Config reaches the API server of the cluster that holds the Lease.
	Config *rest.Config
	// ManagerOptions are the term manager's options before the campaign
	// sets its own (leader election, no metrics or probe endpoints, reusable
	// controller names): a Scheme and Cache options when the term's
	// runnables read through the term manager's client and cache. Zero: the
	// default scheme, and runnables that read what Setup hands them.
	ManagerOptions manager.Options
	// Namespace and Name locate the Lease; Identity names this replica in it.
	Namespace, Name, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod: the defaults above when zero.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Setup adds a term's runnables to mgr, a new manager for every term
	// (runnables cannot be started twice). It runs before the campaign of
	// each term.
	Setup func(mgr manager.Manager) error
	Log   logr.Logger

	leading atomic.Bool
	terms   atomic.Int64
}

// NeedLeaderElection is false: the campaign is what elects.
func (c *Campaign) NeedLeaderElection() bool { return false }

// Leading reports whether this replica holds the lead now.
func (c *Campaign) Leading() bool { return c.leading.Load() }

// Terms is how many times this replica has been elected.
func (c *Campaign) Terms() int64 { return c.terms.Load() }

// Start campaigns, term after term, until ctx is done. Losing the Lease
// stops the term's runnables and starts a new campaign. A term that cannot
// be set up — its manager or runnables need the API server (a cache with
// per-object options asks it which kinds are namespaced), and it is
// unreachable — is tried again with backoff: the process never ends for it.
func (c *Campaign) Start(ctx context.Context) error {
	backoff := wait.Backoff{Duration: c.retryPeriod(), Factor: 2, Jitter: 0.2, Steps: 6, Cap: time.Minute}
	setupBackoff := c.setupBackoff()
	for ctx.Err() == nil {
		term := &term{campaign: c}
		mgr, err := c.newTerm(term)
		if err != nil {
			wait := setupBackoff.Step()
			c.Log.Error(err, "Cannot set up a leader term; trying again", "retryIn", wait)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			continue
		}
		setupBackoff = c.setupBackoff()
		err = mgr.Start(ctx)
		c.leading.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if term.elected.Load() {
			backoff = wait.Backoff{Duration: c.retryPeriod(), Factor: 2, Jitter: 0.2, Steps: 6, Cap: time.Minute}
		}
		c.Log.Info("Leader term ended; campaigning again", "reason", errString(err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff.Step()):
		}
	}
	return nil
}

// setupBackoff paces the attempts to set up a term: capped at four retry
// periods, so that a term begins within seconds of the API server's return.
func (c *Campaign) setupBackoff() wait.Backoff {
	return wait.Backoff{Duration: c.retryPeriod(), Factor: 2, Jitter: 0.2, Steps: 3, Cap: 4 * c.retryPeriod()}
}

// newTerm is the manager of a term with the term's runnables and term.
func (c *Campaign) newTerm(term *term) (manager.Manager, error) {
	mgr, err := c.newTermManager()
	if err != nil {
		return nil, err
	}
	if err := c.Setup(mgr); err != nil {
		return nil, fmt.Errorf("setting up the leader's runnables: %w", err)
	}
	if err := mgr.Add(term); err != nil {
		return nil, fmt.Errorf("setting up the leader's term: %w", err)
	}
	return mgr, nil
}

// newTermManager is a manager that only campaigns and runs the term's
// runnables: no metrics or probe endpoints (the main manager serves those),
// controller names reusable from one term to the next.
func (c *Campaign) newTermManager() (manager.Manager, error) {
	lock, err := c.lock()
	if err != nil {
		return nil, err
	}
	opts := c.ManagerOptions
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.HealthProbeBindAddress = "0"
	opts.WebhookServer = nil
	opts.LeaderElection = true
	opts.LeaderElectionID = c.Name
	opts.LeaderElectionNamespace = c.Namespace
	opts.LeaderElectionReleaseOnCancel = true
	opts.LeaseDuration = ptr.To(c.durationOr(c.LeaseDuration, DefaultLeaseDuration))
	opts.RenewDeadline = ptr.To(c.durationOr(c.RenewDeadline, DefaultRenewDeadline))
	opts.RetryPeriod = ptr.To(c.retryPeriod())
	opts.Controller.SkipNameValidation = ptr.To(true)
	opts.Logger = c.Log
	// The Lease records this replica's name, so that operators see which
	// replica leads.
	opts.LeaderElectionResourceLockInterface = lock
	mgr, err := ctrl.NewManager(c.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("creating the leader's manager: %w", err)
	}
	return mgr, nil
}

// lock is the Lease lock with this replica's identity. Its requests time out
// within half the renew deadline, so that one hung request (an API server
// that froze) cannot hold the lead past it.
func (c *Campaign) lock() (resourcelock.Interface, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.Timeout = max(c.durationOr(c.RenewDeadline, DefaultRenewDeadline)/2, time.Second)
	cfg = rest.AddUserAgent(cfg, "leader-election")
	client, err := coordinationv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the leader Lease client: %w", err)
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
		Client:     client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity},
	}, nil
}

func (c *Campaign) retryPeriod() time.Duration {
	return c.durationOr(c.RetryPeriod, DefaultRetryPeriod)
}

func (c *Campaign) durationOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// term marks the replica leading while its manager runs the leader's
// runnables: it is one of them, so it starts once elected and stops when the
// term ends.
type term struct {
	campaign *Campaign
	elected  atomic.Bool
}

func (t *term) NeedLeaderElection() bool { return true }

func (t *term) Start(ctx context.Context) error {
	t.elected.Store(true)
	t.campaign.terms.Add(1)
	t.campaign.leading.Store(true)
	t.campaign.Log.Info("Elected leader", "lease", t.campaign.Namespace+"/"+t.campaign.Name, "identity", t.campaign.Identity)
	<-ctx.Done()
	t.campaign.leading.Store(false)
	return nil
}

func errString(err error) string {
	if err == nil || errors.Is(err, context.Canceled) {
		return "stopped"
	}
	return err.Error()
}
