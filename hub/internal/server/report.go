package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/version"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// helloTimeout bounds the wait for the first message of a Report stream.
const helloTimeout = 30 * time.Second

// session is one open Report stream; a newer stream of the same cluster
// replaces it.
type session struct {
	id uint64
	// ended is closed when the stream ends, by the hub (reason says why)
	// or by the spoke: a hold request waiting for its answer learns at once.
	ended  chan struct{}
	reason error
	// deregistered is set when the cluster's ManagedCluster was deleted.
	deregistered bool
	// holds is set when the spoke's Hello listed HoldCapability; outbox
	// carries HoldRequests to the goroutine that sends on the stream.
	holds  bool
	outbox chan *federationv1.HubMessage
	// reportsHubHolds is set when the Hello listed HubHoldsCapability;
	// hubHolds is what the spoke last reported of them (guarded by the
	// Server's mu), nil until its first Snapshot.
	reportsHubHolds bool
	hubHolds        []*federationv1.HubHold
}

// Join delegates to the Joiner.
func (s *Server) Join(ctx context.Context, req *federationv1.JoinRequest) (*federationv1.JoinResponse, error) {
	return s.opts.Joiner.Join(ctx, req)
}

// Renew re-issues the caller's certificate while its cluster is accepted
// and the certificate is of its current registration.
func (s *Server) Renew(ctx context.Context, req *federationv1.RenewRequest) (*federationv1.RenewResponse, error) {
	spoke, ok := identity.SpokeFrom(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "Renew requires a spoke client certificate")
	}
	// A certificate a Renew replaced goes on to Joiner.Renew even past its
	// overlap: there it gets a certificate only for the key of the
	// registration's current certificate (registry.RecordRenewal), so that
	// an agent that lost its renewed certificate but holds its key recovers
	// without a new bootstrap token. Every other refusal ends here.
	if err := s.admitExcept(ctx, spoke, registry.RefusedReplacedCertificate); err != nil {
		return nil, err
	}
	return s.opts.Joiner.Renew(ctx, spoke, req)
}

// Report runs one spoke's stream: Hello, then Snapshots, Deltas and
// Heartbeats applied to the store, each answered with an Ack or a Resync.
func (s *Server) Report(stream federationv1.Federation_ReportServer) error {
	ctx := stream.Context()
	log := ctrl.LoggerFrom(ctx)
	spoke, ok := identity.SpokeFrom(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "Report requires a spoke client certificate")
	}
	cluster := spoke.Cluster
	// One goroutine receives; this one applies and sends, so that a stream
	// replaced, stopped or silent ends without waiting for the spoke's next
	// message.
	msgs := make(chan *federationv1.SpokeMessage)
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	var first *federationv1.SpokeMessage
	select {
	case first = <-msgs:
	case err := <-recvErr:
		return err
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-s.stopping:
		return status.Error(codes.Unavailable, "hub is shutting down; reconnect")
	case <-time.After(helloTimeout):
		s.metrics.rejectedConnections.WithLabelValues(rejectProtocol).Inc()
		return status.Errorf(codes.DeadlineExceeded, "no Hello within %s of opening the Report stream", helloTimeout)
	}
	hello := first.GetHello()
	if hello == nil {
		s.metrics.rejectedConnections.WithLabelValues(rejectProtocol).Inc()
		return status.Error(codes.InvalidArgument, "the first message of Report must be a Hello")
	}
	s.metrics.streamMessages.WithLabelValues("received", "hello").Inc()
	if hello.GetClusterName() != cluster {
		s.metrics.rejectedConnections.WithLabelValues(rejectWrongCluster).Inc()
		log.Info("Rejected report for another cluster", "claimedCluster", hello.GetClusterName())
		return status.Errorf(codes.PermissionDenied, "the client certificate identifies cluster %q, which may not report for %q", cluster, hello.GetClusterName())
	}
	if err := s.admit(ctx, spoke); err != nil {
		return err
	}
	if err := ingest.ValidateHello(hello); err != nil {
		s.metrics.rejectedConnections.WithLabelValues(rejectInvalidInventory).Inc()
		return invalidInventory(cluster, "Hello", err)
	}

	sess := s.openSession(cluster, supportsHolds(hello))
	sess.reportsHubHolds = reportsHubHolds(hello)
	defer s.closeSession(cluster, sess)
	s.store.Connect(cluster, hello)
	log.Info("Spoke connected", "agentVersion", hello.GetAgentVersion(), "epoch", hello.GetEpoch())
	if skew := unsupportedSkew(version.Get().Version, hello.GetAgentVersion()); skew != "" {
		// Warned, not refused: the protocol's capabilities keep both sides
		// working as far as they can, and refusing would detach the
		// cluster in the middle of an upgrade (docs/upgrading.md).
		log.Info("Unsupported version skew between hub and agent: "+skew, "agentVersion", hello.GetAgentVersion(), "hubVersion", version.Get().Version)
	}

	epoch := hello.GetEpoch()
	budget := s.budgetOf(cluster)
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.stopping:
			return status.Error(codes.Unavailable, "hub is shutting down; reconnect")
		case <-sess.ended:
			return sess.reason
		case err := <-recvErr:
			return err
		case msg := <-msgs:
			if err := s.handle(ctx, stream, spoke, epoch, budget, msg); err != nil {
				return err
			}
			if err := s.recordHubHolds(sess, msg); err != nil {
				return err
			}
		case out := <-sess.outbox:
			// A hold request names the hold, its units and namespaces: it
			// goes only to a certificate the hub still admits, not to a
			// stream of one retired while it stayed silent.
			if err := s.revokedDuring(ctx); err != nil {
				return err
			}
			if err := s.admit(ctx, spoke); err != nil {
				return err
			}
			s.metrics.streamMessages.WithLabelValues("sent", "hold_request").Inc()
			if err := stream.Send(out); err != nil {
				return err
			}
		}
	}
}

// handle applies one message of a Report stream after its Hello. Every
// message draws on the stream's budget (messages, and the entries Snapshots
// and Deltas carry): over it Heartbeats are dropped and a Snapshot or Delta
// ends the stream with ResourceExhausted. A Snapshot or
// Delta the store refused (it broke a limit) ends the stream with
// InvalidArgument naming the field; the store keeps the last good inventory.
func (s *Server) handle(ctx context.Context, stream federationv1.Federation_ReportServer, spoke identity.Spoke, epoch uint64, budget *messageBudget, msg *federationv1.SpokeMessage) error {
	start := time.Now()
	cluster := spoke.Cluster
	log := ctrl.LoggerFrom(ctx)
	if _, isHello := msg.GetKind().(*federationv1.SpokeMessage_Hello); !isHello {
		if over := budget.take(msg); over != "" {
			if msg.GetHeartbeat() != nil {
				s.metrics.streamMessages.WithLabelValues("dropped", "heartbeat").Inc()
				return nil
			}
			s.metrics.rejectedConnections.WithLabelValues(rejectMessageRate).Inc()
			log.Info("Ended a Report stream over its rate", "limit", over, "type", messageKind(msg))
			return budget.exceeded(cluster, messageKind(msg), over)
		}
		// Every message is admitted, not only the Hello: while the stream
		// was open the certificate may have been revoked, hubAcceptsClient
		// turned off, or the cluster registered again or its certificate
		// renewed (retiring this one). A retired certificate must not feed
		// the inventory, answer holds or keep the cluster live, whichever
		// message it sends. Admit answers from the informer cache (a Get)
		// once the cache shows the registration's last write.
		if err := s.revokedDuring(ctx); err != nil {
			return err
		}
		if err := s.admit(ctx, spoke); err != nil {
			return err
		}
	}
	var (
		res  store.Result
		kind string
	)
	switch m := msg.GetKind().(type) {
	case *federationv1.SpokeMessage_Snapshot:
		kind = "snapshot"
		res = s.store.ApplySnapshot(cluster, epoch, m.Snapshot)
		s.metrics.ingestLatency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	case *federationv1.SpokeMessage_Delta:
		kind = "delta"
		res = s.store.ApplyDelta(cluster, epoch, m.Delta)
		s.metrics.ingestLatency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	case *federationv1.SpokeMessage_Heartbeat:
		kind = "heartbeat"
		res = s.store.Heartbeat(cluster, epoch, m.Heartbeat)
	case *federationv1.SpokeMessage_HoldResponse:
		kind = "hold_response"
		s.holdAnswered(cluster, m.HoldResponse)
	case *federationv1.SpokeMessage_Hello:
		s.metrics.rejectedConnections.WithLabelValues(rejectProtocol).Inc()
		return status.Error(codes.InvalidArgument, "Hello may only be the first message of a Report stream")
	default:
		// A message kind from a newer protocol: ignore it.
		kind = "unknown"
	}
	s.metrics.streamMessages.WithLabelValues("received", kind).Inc()
	if res.Refused != nil {
		s.metrics.rejectedConnections.WithLabelValues(rejectInvalidInventory).Inc()
		log.Info("Refused a spoke's inventory; keeping the last good one", "type", kind, "err", res.Refused.Error())
		return invalidInventory(cluster, messageKind(msg), res.Refused)
	}
	if res.Resync != "" {
		log.V(1).Info("Asking spoke for a snapshot", "reason", res.Resync)
		s.metrics.streamMessages.WithLabelValues("sent", "resync").Inc()
		return stream.Send(&federationv1.HubMessage{Kind: &federationv1.HubMessage_Resync{Resync: &federationv1.Resync{Reason: res.Resync}}})
	}
	if res.Ack {
		if res.Stale {
			log.V(1).Info("Ignored stale inventory message", "type", kind)
		}
		s.metrics.streamMessages.WithLabelValues("sent", "ack").Inc()
		return stream.Send(&federationv1.HubMessage{Kind: &federationv1.HubMessage_Ack{Ack: &federationv1.Ack{Generation: res.Generation}}})
	}
	return nil
}

// messageKind names msg's kind for people: Snapshot, Delta, Heartbeat.
func messageKind(msg *federationv1.SpokeMessage) string {
	switch msg.GetKind().(type) {
	case *federationv1.SpokeMessage_Snapshot:
		return "Snapshot"
	case *federationv1.SpokeMessage_Delta:
		return "Delta"
	case *federationv1.SpokeMessage_Heartbeat:
		return "Heartbeat"
	default:
		return "message"
	}
}

// admit asks Admit whether spoke may talk to the hub: a refusal is
// PermissionDenied with Admit's message and reason (see refusal), failing
// to decide is Unavailable.
func (s *Server) admit(ctx context.Context, spoke identity.Spoke) error {
	return s.admitExcept(ctx, spoke, "")
}

// admitExcept is admit letting a refusal for reason pass (none when empty).
func (s *Server) admitExcept(ctx context.Context, spoke identity.Spoke, reason registry.RefusalReason) error {
	err := s.opts.Admit(ctx, spoke)
	if err == nil {
		return nil
	}
	var refused *registry.RefusedError
	if !errors.As(err, &refused) {
		return status.Errorf(codes.Unavailable, "checking whether the hub accepts cluster %q: %v", spoke.Cluster, err)
	}
	if reason != "" && refused.Reason == reason {
		return nil
	}
	s.metrics.rejectedConnections.WithLabelValues(rejectNotAccepted).Inc()
	ctrl.LoggerFrom(ctx).Info("Refused spoke certificate", "reason", refused.Reason, "registration", spoke.RegistrationUID)
	return refusal(refused.Reason, spoke.Cluster, refused.Error())
}

// revokedDuring is PermissionDenied when the certificate of the call in
// ctx was revoked since the call began (authenticate checked it then).
func (s *Server) revokedDuring(ctx context.Context) error {
	if s.opts.Revoked == nil {
		return nil
	}
	cert, err := identity.VerifiedCertificate(ctx)
	if err != nil || !s.opts.Revoked(cert) {
		return nil
	}
	s.metrics.rejectedConnections.WithLabelValues(rejectRevoked).Inc()
	ctrl.LoggerFrom(ctx).Info("Ended the stream of a revoked certificate", "serial", identity.SerialOf(cert))
	return status.Errorf(codes.PermissionDenied, "client certificate %q (serial %s) was revoked", cert.Subject.CommonName, identity.SerialOf(cert))
}

// EndSession ends the cluster's Report stream, if one is open here (its
// ManagedCluster was deleted).
func (s *Server) EndSession(cluster string) {
	s.endSession(cluster, true, refusal(registry.RefusedNotRegistered, cluster,
		fmt.Sprintf("cluster %q was deregistered from the hub; join again with a new token", cluster)))
}

// EndStaleSession ends the cluster's Report stream, if one is open here,
// because the spoke reports to another hub replica now: what is left here
// is a connection the spoke gave up (the spoke would reconnect if not).
func (s *Server) EndStaleSession(cluster string) {
	s.endSession(cluster, false, status.Error(codes.Aborted, "the spoke reports to another hub replica now"))
}

// endSession ends the cluster's open stream with reason.
func (s *Server) endSession(cluster string, deregistered bool, reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if deregistered {
		delete(s.budgets, cluster)
	}
	if sess, ok := s.sessions[cluster]; ok {
		sess.reason = reason
		sess.deregistered = deregistered
		close(sess.ended)
		delete(s.sessions, cluster)
		s.metrics.connectedSpokes.Dec()
	}
}

// budgetOf is the cluster's message budget, one for all of its Report
// streams (kept while the hub runs, dropped when the cluster is
// deregistered): a spoke that reopens its stream does not get a fresh burst.
func (s *Server) budgetOf(cluster string) *messageBudget {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.budgets[cluster]
	if !ok {
		b = newMessageBudget(s.store.Limits(), s.opts.Clock)
		s.budgets[cluster] = b
	}
	return b
}

func (s *Server) openSession(cluster string, holds bool) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	sess := &session{id: s.nextID, ended: make(chan struct{}), holds: holds, outbox: make(chan *federationv1.HubMessage, outboxSize)}
	if old, ok := s.sessions[cluster]; ok {
		old.reason = status.Error(codes.Aborted, "a newer Report stream of this cluster replaced this one")
		close(old.ended)
	} else {
		s.metrics.connectedSpokes.Inc()
	}
	s.sessions[cluster] = sess
	return sess
}

func (s *Server) closeSession(cluster string, sess *session) {
	s.mu.Lock()
	cur, ok := s.sessions[cluster]
	current := ok && cur.id == sess.id
	if current {
		// Still in the map, so nobody closed ended (endSession and a
		// replacing openSession close it as they take it out).
		delete(s.sessions, cluster)
		s.metrics.connectedSpokes.Dec()
		close(sess.ended)
	}
	deregistered := sess.deregistered
	s.mu.Unlock()
	switch {
	case deregistered:
		// A message applied while the cluster was being forgotten may have
		// brought it back; the stream is over now, forget it for good.
		s.store.Remove(cluster)
	case current:
		s.store.Disconnect(cluster)
	}
}

// unsupportedSkew says why an agent of version agent reporting to a hub of
// version hub is outside the skew policy of docs/upgrading.md, or "" when
// it is inside or either is not a release (a development build, a Go
// pseudo-version, free-form text): the policy is about releases. Inside: the
// same major version, the agent's minor equal to the hub's or one below
// (upgrade the hub first, then the agents).
func unsupportedSkew(hub, agent string) string {
	h, a := releaseVersion(hub), releaseVersion(agent)
	if h == nil || a == nil {
		return ""
	}
	switch {
	case a.Major() != h.Major():
		return fmt.Sprintf("agent %s and hub %s are of different major versions; upgrade both to the same one", agent, hub)
	case a.Minor() > h.Minor():
		return fmt.Sprintf("agent %s is newer than hub %s; upgrade the hub first (an agent may be as new as its hub, not newer)", agent, hub)
	case a.Minor()+1 < h.Minor():
		return fmt.Sprintf("agent %s is more than one minor version older than hub %s; upgrade the agent to v%d.%d or v%d.%d", agent, hub, h.Major(), h.Minor()-1, h.Major(), h.Minor())
	}
	return ""
}

// releaseVersion parses v as a release version vX.Y.Z[-pre], nil for
// anything else, Go pseudo-versions (v0.0.0-20260101120000-0123456789ab)
// included.
func releaseVersion(v string) *utilversion.Version {
	parsed, err := utilversion.ParseSemantic(v)
	if err != nil || len(v) == 0 || v[0] != 'v' {
		return nil
	}
	if pre := parsed.PreRelease(); pseudoVersion.MatchString(pre) {
		return nil
	}
	return parsed
}

// pseudoVersion matches the pre-release part of a Go pseudo-version: a
// timestamp and a commit.
var pseudoVersion = regexp.MustCompile(`(^|\.)[0-9]{14}-[0-9a-f]{12}`)
