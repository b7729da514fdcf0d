package reporter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// errRotated ends a session whose certificate the renewer replaced;
// errDraining one whose connection the hub is draining (it sent GOAWAY).
// Both leave the stream open for the next session to replace.
var (
	errRotated  = errors.New("the client certificate was renewed")
	errDraining = errors.New("the hub is draining the connection")
)

// openStream is a Report stream left open for the next session to replace:
// close ends it.
type openStream struct {
	cancel context.CancelFunc
	conn   io.Closer
}

func (s *openStream) close() {
	if s != nil {
		s.cancel()
		_ = s.conn.Close()
	}
}

// session runs one connection to the hub; it always returns an error saying
// why it ended. previous, when not nil, is the stream of the last session,
// still open: session closes it once its own stream is up (or failed), and
// returns its own stream open when it ended because the certificate was
// renewed (errRotated). When the hub refuses the certificate for a reason
// that calls for joining again, the next session joins instead of using it.
func (r *Reporter) session(ctx context.Context, previous *openStream) (*openStream, error) {
	cert, err := r.creds.certificate(ctx)
	if err != nil {
		previous.close()
		return nil, err
	}
	open, err := r.report(ctx, cert, previous)
	if reason, ok := hubRefusal(err); ok {
		if !joinAgainAfter(reason) {
			r.log.V(1).Info("Hub refused the client certificate; keeping it", "reason", reason)
			return nil, err
		}
		r.creds.refused = &refusedCertificate{der: cert.Certificate[0], reason: reason}
		r.log.Info("Hub refused the client certificate; joining again with the bootstrap token", "reason", reason, "notAfter", notAfter(cert))
	}
	return open, err
}

// report runs one Report stream with cert until it ends, closing previous
// once the stream's Hello and Snapshot are sent (or it failed). When it ends
// because the certificate was renewed it returns its stream open, with
// errRotated.
func (r *Reporter) report(ctx context.Context, cert *tls.Certificate, previous *openStream) (_ *openStream, err error) {
	defer func() { previous.close() }()
	defer r.metrics.setState(stateConnecting)
	conn, err := r.creds.dial(cert)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	this := &openStream{cancel: cancel, conn: conn}
	defer func() {
		if !errors.Is(err, errRotated) && !errors.Is(err, errDraining) {
			this.close()
		}
	}()
	stream, err := r.hello(ctx, conn)
	if err != nil {
		return nil, err
	}
	s := r.receive(ctx, stream)
	sent, err := r.sendSnapshot(ctx, stream)
	if err != nil {
		return nil, s.streamError(err)
	}
	if err := s.handover(ctx, previous); err != nil {
		return nil, err
	}
	r.log.Info("Reporting to the hub", "hub", r.opts.Hub.Address, "machines", len(sent), "generation", r.generation)
	r.metrics.setState(stateReporting)
	return r.loop(ctx, s, drained(ctx, conn), cert, this, sent)
}

// hello opens a Report stream on conn and sends the Hello.
func (r *Reporter) hello(ctx context.Context, conn *grpc.ClientConn) (federationv1.Federation_ReportClient, error) {
	stream, err := federationv1.NewFederationClient(conn).Report(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening Report stream: %w", err)
	}
	err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{
		ClusterName:  r.opts.Hub.ClusterName,
		AgentVersion: r.opts.AgentVersion,
		Capabilities: r.capabilities(ctx),
		Epoch:        r.epoch,
		AgentMode:    r.opts.AgentMode,
	}}})
	if err != nil {
		// Send reports io.EOF; the stream's status comes from Recv.
		if _, rerr := stream.Recv(); rerr != nil {
			err = rerr
		}
		return nil, fmt.Errorf("sending Hello: %w", err)
	}
	return stream, nil
}

// reportStream is an open Report stream and what its receiving goroutine
// hands to the loop that sends.
type reportStream struct {
	federationv1.Federation_ReportClient
	// resync carries the reason of the hub's last Resync not acted on yet.
	resync chan string
	// recvErr carries the error that ended the receiving side.
	recvErr chan error
	// answered is closed at the hub's first answer (Ack or Resync): the hub
	// has taken this stream as the cluster's, replacing any older one.
	answered chan struct{}
	// holdAnswers carries the answers to the hub's HoldRequests, each
	// carried out in a goroutine of its own, to the loop that sends.
	holdAnswers chan *federationv1.HoldResponse
}

// receive starts the goroutine that reads the hub's messages from stream
// until it ends: Acks, Resyncs and HoldRequests (each answered in a
// goroutine of its own).
func (r *Reporter) receive(ctx context.Context, stream federationv1.Federation_ReportClient) *reportStream {
	s := &reportStream{
		Federation_ReportClient: stream,
		resync:                  make(chan string, 1),
		recvErr:                 make(chan error, 1),
		answered:                make(chan struct{}),
		holdAnswers:             make(chan *federationv1.HoldResponse, 16),
	}
	hs := holds{client: r.opts.Client, cache: r.opts.Cache, now: r.now}
	go func() {
		first := true
		for {
			msg, err := stream.Recv()
			if err != nil {
				s.recvErr <- err
				return
			}
			r.metrics.reported()
			if first {
				first = false
				close(s.answered)
			}
			if rs := msg.GetResync(); rs != nil {
				select {
				case s.resync <- rs.GetReason():
				default:
				}
			}
			if hr := msg.GetHoldRequest(); hr != nil {
				go func() {
					answer := hs.answer(ctx, hr)
					select {
					case s.holdAnswers <- answer:
					case <-ctx.Done():
					}
				}()
			}
		}
	}()
	return s
}

// streamError is the error to report for a failed Send: Send reports
// io.EOF, the stream's status comes from Recv.
func (s *reportStream) streamError(err error) error {
	timeout := time.NewTimer(time.Second)
	defer timeout.Stop()
	select {
	case rerr := <-s.recvErr:
		return rerr
	case <-timeout.C:
		return err
	}
}

// handover closes previous, the last session's stream, once the hub has
// answered on this one (make before break), so that the hub never sees the
// cluster without a stream. A hub that does not answer gets the switch
// after handoverTimeout.
func (s *reportStream) handover(ctx context.Context, previous *openStream) error {
	if previous == nil {
		return nil
	}
	select {
	case <-s.answered:
	case err := <-s.recvErr:
		return fmt.Errorf("hub ended the Report stream: %w", err)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(handoverTimeout):
	}
	previous.close()
	return nil
}

// loop sends on s until the stream ends: Deltas as the inventory changes,
// Snapshots the hub asks for, hold answers and heartbeats. sent is what the
// hub holds. It returns this, the stream left open, when the certificate
// was renewed (errRotated) or the hub is draining the connection
// (errDraining).
func (r *Reporter) loop(ctx context.Context, s *reportStream, draining <-chan struct{}, cert *tls.Certificate, this *openStream, sent map[string]*federationv1.Machine) (*openStream, error) {
	heartbeat := time.NewTicker(r.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	// Changes go out on the leading edge: the first change after a quiet
	// ReportDebounce is sent at once; changes within ReportDebounce of a
	// Delta wait for its end and go together.
	var debounce <-chan time.Time
	var lastSent time.Time // of the last Delta
	var err error
	for {
		select {
		case <-ctx.Done():
			_ = s.CloseSend()
			return nil, ctx.Err()
		case err := <-s.recvErr:
			return nil, fmt.Errorf("hub ended the Report stream: %w", err)
		case <-r.creds.rotated:
			if current := r.creds.currentCertificate(); current != nil && current != cert {
				return this, errRotated
			}
		case <-draining:
			return this, errDraining
		case reason := <-s.resync:
			r.log.V(1).Info("Hub asked for a snapshot", "reason", reason)
			if sent, err = r.sendSnapshot(ctx, s); err != nil {
				return nil, s.streamError(err)
			}
		case <-r.changed:
			if debounce != nil {
				break // goes with the coming send
			}
			if wait := r.opts.Hub.ReportDebounce - time.Since(lastSent); wait > 0 {
				debounce = time.After(wait)
				break
			}
			if sent, err = r.sendDelta(ctx, s, sent); err != nil {
				return nil, s.streamError(err)
			}
			lastSent = time.Now()
		case <-debounce:
			debounce = nil
			if sent, err = r.sendDelta(ctx, s, sent); err != nil {
				return nil, s.streamError(err)
			}
			lastSent = time.Now()
		case answer := <-s.holdAnswers:
			if answer.GetResult() == federationv1.HoldResult_HOLD_RESULT_HELD {
				// The usage that shows the held units goes first, so that
				// the hub answers with them once it learns the hold is Held.
				debounce = nil
				if sent, err = r.sendDelta(ctx, s, sent); err != nil {
					return nil, s.streamError(err)
				}
				lastSent = time.Now()
			}
			r.log.V(1).Info("Answered a hold request", "requestID", answer.GetRequestId(), "result", answer.GetResult().String(), "reason", answer.GetReason())
			if err := s.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_HoldResponse{HoldResponse: answer}}); err != nil {
				return nil, fmt.Errorf("sending HoldResponse: %w", s.streamError(err))
			}
		case <-heartbeat.C:
			if err := s.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: r.heartbeat(r.now())}}); err != nil {
				return nil, fmt.Errorf("sending Heartbeat: %w", s.streamError(err))
			}
			r.metrics.reportedIfAnswered(s.answered)
		}
	}
}

// drained returns a channel closed when conn, once ready, goes idle: the
// hub sent GOAWAY (its maximum connection age, or it is stopping), and the
// streams on conn end after its grace period. The stream can move to a new
// connection meanwhile.
func drained(ctx context.Context, conn *grpc.ClientConn) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		ready := false
		for state := conn.GetState(); ; state = conn.GetState() {
			switch state {
			case connectivity.Ready:
				ready = true
			case connectivity.Idle:
				if ready {
					close(done)
					return
				}
			}
			if !conn.WaitForStateChange(ctx, state) {
				return // ctx done
			}
		}
	}()
	return done
}

func (r *Reporter) sendSnapshot(ctx context.Context, stream federationv1.Federation_ReportClient) (map[string]*federationv1.Machine, error) {
	current, observedAt, err := inventory(ctx, r.opts.Cache, r.now)
	if err != nil {
		return nil, err
	}
	held, err := r.hubHolds(ctx)
	if err != nil {
		return nil, err
	}
	r.generation++
	err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{
		Generation: r.generation, ObservedAt: timestamp(observedAt), Machines: sortedMachines(current), HubHolds: held,
	}}})
	if err != nil {
		return nil, fmt.Errorf("sending Snapshot: %w", err)
	}
	r.sentHubHolds = held
	return current, nil
}

func (r *Reporter) sendDelta(ctx context.Context, stream federationv1.Federation_ReportClient, sent map[string]*federationv1.Machine) (map[string]*federationv1.Machine, error) {
	current, observedAt, err := inventory(ctx, r.opts.Cache, r.now)
	if err != nil {
		return nil, err
	}
	held, err := r.hubHolds(ctx)
	if err != nil {
		return nil, err
	}
	upserts, removals := diff(sent, current)
	holdsChanged := !sameHubHolds(held, r.sentHubHolds)
	if len(upserts) == 0 && len(removals) == 0 && !holdsChanged {
		return sent, nil
	}
	r.generation++
	delta := &federationv1.Delta{Generation: r.generation, ObservedAt: timestamp(observedAt), Upserts: upserts, Removals: removals}
	if holdsChanged {
		delta.HubHolds, delta.HubHoldsChanged = held, true
	}
	err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Delta{Delta: delta}})
	if err != nil {
		return nil, fmt.Errorf("sending Delta: %w", err)
	}
	r.sentHubHolds = held
	r.log.V(2).Info("Sent delta", "generation", r.generation, "upserts", len(upserts), "removals", len(removals))
	return current, nil
}
