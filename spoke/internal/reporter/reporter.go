package reporter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/spoke/internal/config"
)

// Defaults of Options.
const (
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultInitialBackoff    = 500 * time.Millisecond
	// DefaultMaxBackoff caps the reconnect backoff. A hub restart takes
	// seconds: with a 30 s cap the spokes came back 9–26 s after it; with
	// 10 s and full jitter (reconnectWait) they are back within about one
	// backoff of the hub's return, while 10,000 spokes still arrive spread
	// over up to 10 s (about 1,000 a second), not all at once.
	DefaultMaxBackoff = 10 * time.Second
	// DefaultAPIServerStaleAfter is how long the agent may go without
	// reaching its API server before its heartbeats say its figures are stale.
	DefaultAPIServerStaleAfter = 30 * time.Second
	// mandateCheck is how often a replica checks whether it leads (and so
	// may report).
	mandateCheck = 500 * time.Millisecond
	// reclaimWindow is how long the last leader, reaching its API server
	// again, keeps reporting while it has not won the Lease back: twice the
	// default Lease duration — within it the replica sets up a term again
	// (leader.Campaign retries every few seconds) and wins its Lease back,
	// unless another replica holds it.
	reclaimWindow = 30 * time.Second
	// stableSession is how long a session must last for the backoff to reset.
	stableSession = 30 * time.Second
	// handoverTimeout bounds how long the previous stream stays open while
	// the hub has not answered the stream that replaces it.
	handoverTimeout = 10 * time.Second
	maxSendMsgBytes = 16 << 20
)

// clientKeepalive pings an idle connection; the hub allows pings every 10s.
var clientKeepalive = keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}

// capabilities are the protocol features this agent implements.
var capabilities = []string{"snapshot", "delta", "heartbeat", "node-counts", holdCapability}

// The reporter reads Machines and MachineNodePools, and keeps its client
// certificate in a Secret of the agent's namespace.
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines;machinenodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=secrets,verbs=get;create;update
// Its freshness probe reads the agent's own Namespace.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// Options configure a Reporter.
type Options struct {
	// Cache is the manager's cache; Machines and MachineNodePools are read
	// from it and its informers signal changes.
	Cache cache.Cache
	// Client reads and writes the credentials Secret and reads the agent's
	// Namespace to tell whether the API server answers; an uncached client,
	// so that the agent does not cache every Secret of the cluster and the
	// read goes to the API server.
	Client client.Client
	// Namespace holds the credentials Secret.
	Namespace string
	// Hub is the agent's hub configuration (Address, ClusterName, CAFile,
	// CredentialsSecret, ReportDebounce).
	Hub config.Hub
	// Token returns the bootstrap token, "" when there is none
	// (config.Config.JoinToken).
	Token        func() (string, error)
	AgentVersion string
	// AgentMode is told to the hub in Hello; unspecified means in-cluster.
	AgentMode federationv1.AgentMode
	// InjectionUnavailable, when set, says why the cluster's API server
	// cannot reach the agent's webhooks ("" when it can); heartbeats carry it.
	InjectionUnavailable func() string
	// HeartbeatInterval, InitialBackoff, MaxBackoff and APIServerStaleAfter
	// default to the Default* constants.
	HeartbeatInterval time.Duration
	InitialBackoff    time.Duration
	MaxBackoff        time.Duration
	// APIServerStaleAfter is how long the agent may go without reaching its
	// API server before its heartbeats carry api_server_unreachable_since.
	APIServerStaleAfter time.Duration
	// Leader tells whether this replica leads (leader.Campaign); nil when
	// the agent runs without leader election and always reports.
	Leader interface{ Leading() bool }
	// Clock gives every instant the reporter reads: hold requests' arrival
	// (a CapacityHold's validUntil), observedAt, heartbeats and the API
	// server's last contact (config.Config.Clock; the system clock when
	// nil). Durations are the system clock's.
	Clock clock.PassiveClock
	Log   logr.Logger
}

// Reporter streams the cluster's inventory to the hub.
type Reporter struct {
	opts  Options
	log   logr.Logger
	epoch uint64
	// reclaim is reclaimWindow (shorter in tests).
	reclaim time.Duration
	// generation of the inventory, monotonic for the life of the Reporter.
	generation uint64
	changed    chan struct{}
	// reportsHubHolds is set once the CapacityHolds can be watched (their
	// CRD is served): the agent then reports the hub's holds (hubHolds).
	reportsHubHolds atomic.Bool
	// sentHubHolds are the hub holds the open stream last sent.
	sentHubHolds []*federationv1.HubHold
	// creds is the hub client certificate and how it is kept current.
	creds *hubCredentials

	// lastContact is when the freshness probe last reached the API server
	// (Unix nanoseconds).
	lastContact atomic.Int64

	// metrics are this reporter's series, labelled with its cluster.
	metrics *clusterMetrics
}

// New validates opts and reads the hub CA bundle.
func New(opts Options) (*Reporter, error) {
	if opts.Cache == nil || opts.Client == nil || opts.Token == nil {
		return nil, errors.New("creating hub reporter: Cache, Client and Token are required")
	}
	host, _, err := net.SplitHostPort(opts.Hub.Address)
	if err != nil {
		return nil, fmt.Errorf("creating hub reporter: hub address %q: %w", opts.Hub.Address, err)
	}
	caPEM, err := os.ReadFile(opts.Hub.CAFile)
	if err != nil {
		return nil, fmt.Errorf("creating hub reporter: reading hub CA file: %w", err)
	}
	if opts.AgentMode == federationv1.AgentMode_AGENT_MODE_UNSPECIFIED {
		opts.AgentMode = federationv1.AgentMode_AGENT_MODE_IN_CLUSTER
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = DefaultInitialBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.APIServerStaleAfter <= 0 {
		opts.APIServerStaleAfter = DefaultAPIServerStaleAfter
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	r := &Reporter{
		opts:    opts,
		log:     opts.Log,
		epoch:   uint64(time.Now().UnixNano()),
		reclaim: reclaimWindow,
		changed: make(chan struct{}, 1),
		metrics: metricsFor(opts.Hub.ClusterName),
	}
	r.creds = newCredentials(&r.opts, caPEM, host, r.metrics)
	return r, nil
}

// NeedLeaderElection is false: the reporter runs on every replica and
// reports while Options.Leader says this replica leads — and, as the last
// leader, on through an outage of the cluster's API server (see mandate).
func (r *Reporter) NeedLeaderElection() bool { return false }

// Start reports until ctx is done, in turns: each turn begins when this
// replica leads and ends when it no longer may report (mandate). It returns
// an error only when it cannot watch the local cluster; hub trouble is
// retried forever. Its metrics go when it returns (a hosted agent's member
// removed).
func (r *Reporter) Start(ctx context.Context) error {
	defer r.metrics.forget()
	for _, obj := range []client.Object{&imperatorv1alpha1.Machine{}, &imperatorv1alpha1.MachineNodePool{}} {
		informer, err := r.opts.Cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T for the hub reporter: %w", obj, err)
		}
		reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { r.signal() },
			UpdateFunc: func(any, any) { r.signal() },
			DeleteFunc: func(any) { r.signal() },
		})
		if err != nil {
			return fmt.Errorf("watching %T for the hub reporter: %w", obj, err)
		}
		defer func() { _ = informer.RemoveEventHandler(reg) }()
	}
	r.watchHubHolds(ctx)
	if !r.opts.Cache.WaitForCacheSync(ctx) {
		return nil // ctx done
	}
	for {
		r.metrics.setState(stateStandby)
		if !r.awaitLead(ctx) {
			return nil
		}
		turn, end := context.WithCancel(ctx)
		var watcher sync.WaitGroup
		watcher.Go(func() { r.mandate(turn, end) })
		r.run(turn)
		end()
		watcher.Wait()
		if ctx.Err() != nil {
			return nil
		}
		r.log.Info("Stopped reporting to the hub: this replica no longer leads and another one reports")
	}
}

// run is one turn of reporting, until ctx is done or the hub replaced the
// stream of a replica that no longer leads.
func (r *Reporter) run(ctx context.Context) {
	// The cache has listed everything, or the last turn's probe reached
	// the API server: count from now.
	r.lastContact.Store(r.now().UnixNano())
	r.metrics.setState(stateConnecting)

	var workers sync.WaitGroup
	defer workers.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers.Add(3)
	go func() { defer workers.Done(); r.probeAPIServer(ctx) }()
	go func() { defer workers.Done(); r.creds.renewer(ctx) }()
	go func() { defer workers.Done(); r.creds.saver(ctx) }()

	backoff := r.reconnectBackoff()
	var previous *openStream
	defer func() { previous.close() }()
	for {
		start := time.Now()
		var err error
		previous, err = r.session(ctx, previous)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, errRotated):
			// The renewer stored a new certificate: open the next stream
			// at once, the current one stays up until it is.
			r.log.Info("Moving the Report stream to the renewed certificate")
			continue
		case errors.Is(err, errDraining):
			// The hub asked for a new connection (its maximum connection
			// age, or it is stopping): the current stream stays up while
			// the next one opens.
			r.log.V(1).Info("Moving the Report stream to a new connection; the hub is draining this one")
			continue
		case status.Code(err) == codes.Aborted && !r.leading():
			// Another replica's newer stream replaced this one (see mandate).
			return
		}
		if time.Since(start) > stableSession {
			backoff = r.reconnectBackoff()
		}
		delay := reconnectWait(backoff.Step())
		var joinErr *joinAgainError
		if errors.As(err, &joinErr) {
			r.log.Error(err, "Joining the hub again failed; waiting for a new bootstrap token", "refusal", joinErr.reason, "retryIn", delay)
		} else {
			r.log.Info("Hub session ended; reconnecting", "err", err.Error(), "retryIn", delay)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// reconnectBackoff is the exponential backoff between reconnects, from
// InitialBackoff doubling up to MaxBackoff. Its Jitter is left at zero:
// wait.Backoff adds jitter on top of the step ([d, d(1+j)]), and the
// reporter wants the full jitter of reconnectWait instead.
func (r *Reporter) reconnectBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: r.opts.InitialBackoff, Factor: 2, Cap: r.opts.MaxBackoff, Steps: math.MaxInt32}
}

// reconnectWait is the wait before the next reconnect: full jitter, uniform
// over [0, backoff], so that spokes that lost the hub at the same moment (it
// restarted) come back spread over their whole backoff — twice the spread of
// [backoff/2, backoff] against a thundering herd — and wait half of it on
// average. The backoff itself restarts from InitialBackoff after a stream
// that was up for stableSession, so a hub restart is met with short waits.
func reconnectWait(backoff time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(backoff) + 1))
}

func (r *Reporter) signal() { notify(r.changed) }

// capabilities are the protocol features this agent offers now: holds
// (holdCapability, hubHoldsCapability) only where the CapacityHold CRD is
// served and the agent may create and delete CapacityHolds, so that the
// hub does not place holds on a spoke that can only refuse them.
func (r *Reporter) capabilities(ctx context.Context) []string {
	out := slices.DeleteFunc(slices.Clone(capabilities), func(c string) bool { return c == holdCapability })
	if !r.reportsHubHolds.Load() {
		return out
	}
	out = append(out, hubHoldsCapability)
	if may, why := mayWriteHolds(ctx, r.opts.Client); may {
		out = append(out, holdCapability)
	} else {
		r.log.Info("Not offering the hub capacity holds", "reason", why)
	}
	return out
}

// watchHubHolds watches the CapacityHolds, so that a change of the hub's
// holds is reported at once. Where their CRD is not served the agent
// reports none and does not claim to (hubHoldsCapability).
func (r *Reporter) watchHubHolds(ctx context.Context) {
	informer, err := r.opts.Cache.GetInformer(ctx, &imperatorv1alpha1.CapacityHold{}, cache.BlockUntilSynced(false))
	if err != nil {
		r.log.Info("Not reporting the hub's CapacityHolds: they cannot be watched", "err", err.Error())
		return
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.signal() },
		UpdateFunc: func(any, any) { r.signal() },
		DeleteFunc: func(any) { r.signal() },
	}); err != nil {
		r.log.Info("Not reporting the hub's CapacityHolds: they cannot be watched", "err", err.Error())
		return
	}
	r.reportsHubHolds.Store(true)
}

// now is the reporter's clock's instant (Options.Clock).
func (r *Reporter) now() time.Time {
	if r.opts.Clock == nil {
		return time.Now()
	}
	return r.opts.Clock.Now()
}

// hubHolds are the hub holds to report: none when they are not watched.
func (r *Reporter) hubHolds(ctx context.Context) ([]*federationv1.HubHold, error) {
	if !r.reportsHubHolds.Load() {
		return nil, nil
	}
	return hubHolds(ctx, r.opts.Cache, r.now())
}
