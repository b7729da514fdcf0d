package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// simSpoke is a spoke agent reduced to its protocol: it joins with a
// bootstrap token, then reports a Snapshot, Deltas and Heartbeats over
// mTLS with the certificate it got, as spoke/internal/reporter does.
type simSpoke struct {
	name string
	// addr is the hub replica the spoke dials.
	addr   string
	cert   tls.Certificate
	conn   *grpc.ClientConn
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	stream     federationv1.Federation_ReportClient
	generation uint64
	// onHold, when set before start, answers the hub's HoldRequests (nil:
	// none is sent back) and makes the Hello list the "holds" capability.
	onHold func(*federationv1.HoldRequest) *federationv1.HoldResponse
	// mode, when set before start, is the agent mode the Hello announces.
	mode federationv1.AgentMode
	// version, when set before start, is the agent version the Hello
	// announces (default v0.1.0).
	version string
}

func joinSpoke(ctx context.Context, name string) (*simSpoke, error) {
	return joinSpokeVia(ctx, hub.Address(), name)
}

// joinSpokeVia joins through the hub replica at addr, which the spoke then
// reports to.
func joinSpokeVia(ctx context.Context, addr, name string) (*simSpoke, error) {
	token, err := hubtest.CreateToken(ctx, hubClient, hubNamespace, time.Hour, name)
	if err != nil {
		return nil, err
	}
	csrPEM, keyPEM, err := pki.NewCSR(name)
	if err != nil {
		return nil, err
	}
	anon, err := dial(addr, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = anon.Close() }()
	resp, err := federationv1.NewFederationClient(anon).Join(ctx, &federationv1.JoinRequest{ClusterName: name, Token: token, Csr: csrPEM, AgentVersion: "v0.1.0"})
	if err != nil {
		return nil, fmt.Errorf("joining as %s: %w", name, err)
	}
	cert, err := tls.X509KeyPair(resp.GetCertificate(), keyPEM)
	if err != nil {
		return nil, err
	}
	return &simSpoke{name: name, addr: addr, cert: cert}, nil
}

func dial(addr string, cert *tls.Certificate) (*grpc.ClientConn, error) {
	cfg, err := identity.ClientTLS(caPEM, cert, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
}

// start opens the Report stream, sends the Snapshot and heartbeats until stop.
func (s *simSpoke) start(machines ...*federationv1.Machine) error {
	conn, err := dial(s.addr, &s.cert)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := federationv1.NewFederationClient(conn).Report(ctx)
	if err != nil {
		cancel()
		return err
	}
	s.conn, s.cancel, s.stream, s.done = conn, cancel, stream, make(chan struct{})
	s.generation = 1
	var capabilities []string
	if s.onHold != nil {
		capabilities = []string{"holds"}
	}
	version := s.version
	if version == "" {
		version = "v0.1.0"
	}
	if err := s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{ClusterName: s.name, AgentVersion: version, Capabilities: capabilities, Epoch: uint64(time.Now().UnixNano()), AgentMode: s.mode}}}); err != nil {
		return err
	}
	if err := s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.Now(), Machines: machines}}}); err != nil {
		return err
	}
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				return
			}
			if req := msg.GetHoldRequest(); req != nil && s.onHold != nil {
				if resp := s.onHold(req); resp != nil {
					resp.RequestId = req.GetRequestId()
					_ = s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_HoldResponse{HoldResponse: resp}})
				}
			}
		}
	}()
	go func() {
		defer close(s.done)
		ticker := time.NewTicker(300 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				s.mu.Lock()
				gen := s.generation
				s.mu.Unlock()
				if s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{Generation: gen, SentAt: timestamppb.Now()}}}) != nil {
					return
				}
			}
		}
	}()
	return nil
}

func (s *simSpoke) send(m *federationv1.SpokeMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream.Send(m)
}

// update reports changed Machines in a Delta.
func (s *simSpoke) update(machines ...*federationv1.Machine) error {
	s.mu.Lock()
	s.generation++
	gen := s.generation
	s.mu.Unlock()
	return s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Delta{Delta: &federationv1.Delta{Generation: gen, ObservedAt: timestamppb.Now(), Upserts: machines}}})
}

// stop ends the stream and the heartbeats: the spoke goes silent.
func (s *simSpoke) stop() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	<-s.done
	s.cancel = nil
	return s.conn.Close()
}

// gpuMachine is the sample compute-xlarge group with the given usage at the
// spoke's steady state (reserved = maximum − used).
func gpuMachine(group string, maximum, used int32) *federationv1.Machine {
	return &federationv1.Machine{
		Name: "gpu-" + group, Group: group, ObjectGeneration: 1, ObservedGeneration: 1,
		Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
		Types: []*federationv1.MachineType{{
			Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: maximum,
			Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090", Family: "ampere"},
			Usage: &federationv1.Usage{Maximum: maximum, Reserved: maximum - used, Used: used},
			Nodes: &federationv1.NodeCounts{Ready: 2},
		}},
	}
}
