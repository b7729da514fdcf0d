// Package reporter is the spoke agent's hub client: a manager Runnable that
// reads the cluster's Machines and MachineNodePools from the manager's cache
// and streams them to the hub — Hello, a Snapshot, then debounced Deltas as
// they change and Heartbeats — over mTLS with the certificate it obtained by
// joining with a bootstrap token. It reconnects with capped exponential
// backoff and jitter and resends a Snapshot after every reconnect. When the
// hub refuses its certificate because it belongs to no current registration
// of the cluster (deregistered, or registered again), it joins again with
// the bootstrap token it reads afresh for every attempt, so that an operator
// only has to give it a new token. The hub being unreachable is never an
// error of the Runnable: the agent's local controllers keep working.
package reporter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/keepalive"
	toolscache "k8s.io/client-go/tools/cache"
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
	DefaultMaxBackoff        = 30 * time.Second
	// stableSession is how long a session must last for the backoff to reset.
	stableSession   = 30 * time.Second
	maxSendMsgBytes = 16 << 20
)

// clientKeepalive pings an idle connection; the hub allows pings every 10s.
var clientKeepalive = keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}

// capabilities are the protocol features this agent implements.
var capabilities = []string{"snapshot", "delta", "heartbeat", "node-counts"}

// The reporter reads Machines and MachineNodePools, and keeps its client
// certificate in a Secret of the agent's namespace.
// +kubebuilder:rbac:groups=imperator.tenzen-y.io,resources=machines;machinenodepools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",namespace=imperator-system,resources=secrets,verbs=get;create;update

// Options configure a Reporter.
type Options struct {
	// Cache is the manager's cache; Machines and MachineNodePools are read
	// from it and its informers signal changes.
	Cache cache.Cache
	// Client reads and writes the credentials Secret; an uncached client,
	// so that the agent does not cache every Secret of the cluster.
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
	// HeartbeatInterval, InitialBackoff and MaxBackoff default to the
	// Default* constants.
	HeartbeatInterval time.Duration
	InitialBackoff    time.Duration
	MaxBackoff        time.Duration
	Log               logr.Logger
}

// Reporter streams the cluster's inventory to the hub.
type Reporter struct {
	opts       Options
	log        logr.Logger
	caPEM      []byte
	serverName string
	epoch      uint64
	// generation of the inventory, monotonic for the life of the Reporter.
	generation uint64
	changed    chan struct{}
	// refused is the stored certificate the hub refused for a reason that
	// calls for joining again (joinAgainAfter); credentials joins instead of
	// using it. Only the Start goroutine uses it.
	refused *refusedCertificate
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
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = DefaultInitialBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	return &Reporter{
		opts:       opts,
		log:        opts.Log,
		caPEM:      caPEM,
		serverName: host,
		epoch:      uint64(time.Now().UnixNano()),
		changed:    make(chan struct{}, 1),
	}, nil
}

// NeedLeaderElection is true: one replica reports.
func (r *Reporter) NeedLeaderElection() bool { return true }

// Start reports until ctx is done. It returns an error only when it cannot
// watch the local cluster; hub trouble is retried forever.
func (r *Reporter) Start(ctx context.Context) error {
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
	if !r.opts.Cache.WaitForCacheSync(ctx) {
		return nil // ctx done
	}

	backoff := r.opts.InitialBackoff
	for {
		start := time.Now()
		err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > stableSession {
			backoff = r.opts.InitialBackoff
		}
		// Full jitter over [backoff/2, backoff): reconnecting spokes spread out.
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		var joinErr *joinAgainError
		if errors.As(err, &joinErr) {
			r.log.Error(err, "Joining the hub again failed; waiting for a new bootstrap token", "refusal", joinErr.reason, "retryIn", wait)
		} else {
			r.log.Info("Hub session ended; reconnecting", "err", err.Error(), "retryIn", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, r.opts.MaxBackoff)
	}
}

func (r *Reporter) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// session runs one connection to the hub; it always returns an error saying
// why it ended. When the hub refuses the certificate for a reason that calls
// for joining again, the next session joins instead of using it.
func (r *Reporter) session(ctx context.Context) error {
	cert, err := r.credentials(ctx)
	if err != nil {
		return err
	}
	err = r.report(ctx, cert)
	if reason, ok := hubRefusal(err); ok {
		if !joinAgainAfter(reason) {
			r.log.V(1).Info("Hub refused the client certificate; keeping it", "reason", reason)
			return err
		}
		r.refused = &refusedCertificate{der: cert.Certificate[0], reason: reason}
		r.log.Info("Hub refused the client certificate; joining again with the bootstrap token", "reason", reason, "notAfter", notAfter(cert))
	}
	return err
}

// report runs one Report stream with cert until it ends.
func (r *Reporter) report(ctx context.Context, cert *tls.Certificate) error {
	conn, err := r.dial(cert)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := federationv1.NewFederationClient(conn).Report(ctx)
	if err != nil {
		return fmt.Errorf("opening Report stream: %w", err)
	}
	err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{
		ClusterName:  r.opts.Hub.ClusterName,
		AgentVersion: r.opts.AgentVersion,
		Capabilities: capabilities,
		Epoch:        r.epoch,
	}}})
	if err != nil {
		// Send reports io.EOF; the stream's status comes from Recv.
		if _, rerr := stream.Recv(); rerr != nil {
			err = rerr
		}
		return fmt.Errorf("sending Hello: %w", err)
	}

	resync := make(chan string, 1)
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if rs := msg.GetResync(); rs != nil {
				select {
				case resync <- rs.GetReason():
				default:
				}
			}
		}
	}()

	// A failed Send reports io.EOF; the stream's status comes from Recv.
	streamError := func(err error) error {
		select {
		case rerr := <-recvErr:
			return rerr
		case <-time.After(time.Second):
			return err
		}
	}
	sent, err := r.sendSnapshot(ctx, stream)
	if err != nil {
		return streamError(err)
	}
	r.log.Info("Reporting to the hub", "hub", r.opts.Hub.Address, "machines", len(sent), "generation", r.generation)
	heartbeat := time.NewTicker(r.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			_ = stream.CloseSend()
			return ctx.Err()
		case err := <-recvErr:
			return fmt.Errorf("hub ended the Report stream: %w", err)
		case reason := <-resync:
			r.log.V(1).Info("Hub asked for a snapshot", "reason", reason)
			if sent, err = r.sendSnapshot(ctx, stream); err != nil {
				return streamError(err)
			}
		case <-r.changed:
			if debounce == nil {
				debounce = time.After(r.opts.Hub.ReportDebounce)
			}
		case <-debounce:
			debounce = nil
			if sent, err = r.sendDelta(ctx, stream, sent); err != nil {
				return streamError(err)
			}
		case <-heartbeat.C:
			err := stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{
				Generation: r.generation, SentAt: timestamp(time.Now()),
			}}})
			if err != nil {
				return fmt.Errorf("sending Heartbeat: %w", streamError(err))
			}
		}
	}
}

func (r *Reporter) sendSnapshot(ctx context.Context, stream federationv1.Federation_ReportClient) (map[string]*federationv1.Machine, error) {
	current, observedAt, err := inventory(ctx, r.opts.Cache)
	if err != nil {
		return nil, err
	}
	r.generation++
	err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{
		Generation: r.generation, ObservedAt: timestamp(observedAt), Machines: sortedMachines(current),
	}}})
	if err != nil {
		return nil, fmt.Errorf("sending Snapshot: %w", err)
	}
	return current, nil
}

func (r *Reporter) sendDelta(ctx context.Context, stream federationv1.Federation_ReportClient, sent map[string]*federationv1.Machine) (map[string]*federationv1.Machine, error) {
	current, observedAt, err := inventory(ctx, r.opts.Cache)
	if err != nil {
		return nil, err
	}
	upserts, removals := diff(sent, current)
	if len(upserts) == 0 && len(removals) == 0 {
		return sent, nil
	}
	r.generation++
	err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Delta{Delta: &federationv1.Delta{
		Generation: r.generation, ObservedAt: timestamp(observedAt), Upserts: upserts, Removals: removals,
	}}})
	if err != nil {
		return nil, fmt.Errorf("sending Delta: %w", err)
	}
	r.log.V(2).Info("Sent delta", "generation", r.generation, "upserts", len(upserts), "removals", len(removals))
	return current, nil
}
