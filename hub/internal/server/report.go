package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/hub/internal/versionskew"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/version"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// helloTimeout bounds the wait for the first message of a Report stream.
const helloTimeout = 30 * time.Second

// Report runs one spoke's stream: Hello, then Snapshots, Deltas and
// Heartbeats applied to the store, each answered with an Ack or a Resync.
func (s *Server) Report(stream federationv1.Federation_ReportServer) error {
	ctx := stream.Context()
	spoke, ok := identity.SpokeFrom(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "Report requires a spoke client certificate")
	}
	// One goroutine receives; this one applies and sends, so that a stream
	// replaced, stopped or silent ends without waiting for the spoke's next
	// message.
	msgs, recvErr := receive(ctx, stream)
	hello, err := s.awaitHello(ctx, spoke, msgs, recvErr)
	if err != nil {
		return err
	}
	cluster := spoke.Cluster
	sess := s.openSession(cluster, supportsHolds(hello))
	sess.reportsHubHolds = reportsHubHolds(hello)
	defer s.closeSession(cluster, sess)
	s.store.Connect(cluster, hello)
	log := ctrl.LoggerFrom(ctx)
	log.Info("Spoke connected", "agentVersion", hello.GetAgentVersion(), "epoch", hello.GetEpoch())
	if skew := versionskew.Unsupported(version.Get().Version, hello.GetAgentVersion()); skew != "" {
		// Warned, not refused: the protocol's capabilities keep both sides
		// working as far as they can, and refusing would detach the
		// cluster in the middle of an upgrade (docs/upgrading.md).
		log.Info("Unsupported version skew between hub and agent: "+skew, "agentVersion", hello.GetAgentVersion(), "hubVersion", version.Get().Version)
	}
	return s.serve(ctx, stream, spoke, sess, hello.GetEpoch(), msgs, recvErr)
}

// receive receives stream's messages on a goroutine of its own until the
// stream fails (the error, once) or ctx ends.
func receive(ctx context.Context, stream federationv1.Federation_ReportServer) (<-chan *federationv1.SpokeMessage, <-chan error) {
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
	return msgs, recvErr
}

// awaitHello waits for the stream's first message, which must be a valid
// Hello of the certificate's cluster, admitted.
func (s *Server) awaitHello(ctx context.Context, spoke identity.Spoke, msgs <-chan *federationv1.SpokeMessage, recvErr <-chan error) (*federationv1.Hello, error) {
	var first *federationv1.SpokeMessage
	select {
	case first = <-msgs:
	case err := <-recvErr:
		return nil, err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-s.stopping:
		return nil, status.Error(codes.Unavailable, "hub is shutting down; reconnect")
	case <-time.After(helloTimeout):
		s.metrics.rejectedConnections.WithLabelValues(rejectProtocol).Inc()
		return nil, status.Errorf(codes.DeadlineExceeded, "no Hello within %s of opening the Report stream", helloTimeout)
	}
	hello := first.GetHello()
	if hello == nil {
		s.metrics.rejectedConnections.WithLabelValues(rejectProtocol).Inc()
		return nil, status.Error(codes.InvalidArgument, "the first message of Report must be a Hello")
	}
	s.metrics.streamMessages.WithLabelValues("received", "hello").Inc()
	cluster := spoke.Cluster
	if hello.GetClusterName() != cluster {
		s.metrics.rejectedConnections.WithLabelValues(rejectWrongCluster).Inc()
		ctrl.LoggerFrom(ctx).Info("Rejected report for another cluster", "claimedCluster", hello.GetClusterName())
		return nil, status.Errorf(codes.PermissionDenied, "the client certificate identifies cluster %q, which may not report for %q", cluster, hello.GetClusterName())
	}
	if err := s.admit(ctx, spoke); err != nil {
		return nil, err
	}
	if err := ingest.ValidateHello(hello); err != nil {
		s.metrics.rejectedConnections.WithLabelValues(rejectInvalidInventory).Inc()
		return nil, invalidInventory(cluster, "Hello", err)
	}
	return hello, nil
}

// serve applies the stream's messages after its Hello and sends the
// session's hold requests, until the stream, the session or the hub ends.
func (s *Server) serve(ctx context.Context, stream federationv1.Federation_ReportServer, spoke identity.Spoke, sess *session, epoch uint64,
	msgs <-chan *federationv1.SpokeMessage, recvErr <-chan error) error {
	budget := s.budgetOf(spoke.Cluster)
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
