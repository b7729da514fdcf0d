package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// capabilities are what a load generator's Hello announces: the agent's
// reporter's, without holds, which a load generator does not answer.
var capabilities = []string{"snapshot", "delta", "heartbeat", "node-counts"}

// maxLoggedFailures bounds the heartbeat failures one generator logs.
const maxLoggedFailures = 10

// Serve is the load generator's side of a test binary, run by its HookTest
// function: skipped unless Env is set, it plays the job Env names, driven by
// stdin and answering on stdout, until stdin ends.
func Serve(t *testing.T) {
	path := os.Getenv(Env)
	if path == "" {
		t.Skip("a load generator of the hub's fleet benchmarks: runs only with " + Env + " set")
	}
	if err := Run(path, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// Run plays the job in the file at path: it connects the job's spokes when
// it reads "connect" and sends one Delta from every spoke when it reads
// "round K", answering each with the latencies it measured (see Start). It
// closes every connection when in ends.
func Run(path string, in io.Reader, out io.Writer) error {
	g, err := newGenerator(path)
	if err != nil {
		return err
	}
	defer g.close()
	commands := bufio.NewScanner(in)
	for commands.Scan() {
		var latencies []time.Duration
		switch command := commands.Text(); {
		case command == "connect":
			latencies, err = g.connect()
		case strings.HasPrefix(command, "round "):
			round, convErr := strconv.Atoi(strings.TrimPrefix(command, "round "))
			if convErr != nil || round < 0 {
				return fmt.Errorf("command %q: want round and a round number", command)
			}
			latencies, err = g.round(round)
		default:
			return fmt.Errorf("unknown command %q: want connect or round K", command)
		}
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(out, formatLatencies(latencies)); err != nil {
			return err
		}
	}
	return commands.Err()
}

// generator plays one job file's spokes.
type generator struct {
	job      jobFile
	snapshot []*federationv1.Machine
	rounds   []*federationv1.Machine
	// epoch is the Hellos' epoch: one agent start per spoke.
	epoch  uint64
	ctx    context.Context
	cancel context.CancelFunc
	spokes []*spoke
	// failures counts heartbeats that could not be sent.
	failures atomic.Int64
	// heartbeaters are the spokes' heartbeat and receive loops.
	heartbeaters sync.WaitGroup
}

// spoke is one connected spoke.
// ackTimeout bounds the wait for the hub's Ack of a connection's Snapshot
// or of a round's Delta.
const ackTimeout = 2 * time.Minute

type spoke struct {
	conn *grpc.ClientConn
	// cancel ends the stream: when the hub does not answer within
	// ackTimeout, instead of a benchmark hanging until its own timeout.
	cancel context.CancelFunc
	// mu serializes the stream's Sends (rounds, heartbeats).
	mu         sync.Mutex
	stream     federationv1.Federation_ReportClient
	generation uint64
}

func newGenerator(path string) (*generator, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the job: %w", err)
	}
	g := &generator{epoch: uint64(time.Now().UnixNano())}
	if err := json.Unmarshal(data, &g.job); err != nil {
		return nil, fmt.Errorf("reading the job %s: %w", path, err)
	}
	if err := g.job.validate(); err != nil {
		return nil, fmt.Errorf("job %s: %w", path, err)
	}
	if g.snapshot, err = unmarshalMachines("snapshot", g.job.Snapshot); err != nil {
		return nil, fmt.Errorf("job %s: %w", path, err)
	}
	if g.rounds, err = unmarshalMachines("rounds", g.job.Rounds); err != nil {
		return nil, fmt.Errorf("job %s: %w", path, err)
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g, nil
}

// close ends every stream and connection.
func (g *generator) close() {
	g.cancel()
	g.heartbeaters.Wait()
	for _, s := range g.spokes {
		if s != nil {
			s.cancel()
			_ = s.conn.Close()
		}
	}
	if n := g.failures.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "load generator: %d heartbeats could not be sent\n", n)
	}
}

// connect connects the job's spokes, connectParallelism at a time, and
// returns each one's time from dialing to the Ack of its Snapshot.
func (g *generator) connect() ([]time.Duration, error) {
	if g.spokes != nil {
		return nil, errors.New("connect: the spokes are connected already")
	}
	g.spokes = make([]*spoke, len(g.job.Spokes))
	times := make([]time.Duration, len(g.job.Spokes))
	var eg errgroup.Group
	eg.SetLimit(connectParallelism)
	for i, job := range g.job.Spokes {
		eg.Go(func() error {
			t0 := time.Now()
			s, err := g.connectSpoke(job)
			if err != nil {
				return err
			}
			g.spokes[i] = s
			times[i] = time.Since(t0)
			if g.job.HeartbeatInterval > 0 {
				g.heartbeaters.Add(2)
				go g.drain(s)
				go g.heartbeat(s, job.Cluster)
			}
			return nil
		})
	}
	return times, eg.Wait()
}

// connectSpoke dials the hub with the spoke's certificate, opens its Report
// stream, sends the Hello and the Snapshot and waits for the Snapshot's Ack.
func (g *generator) connectSpoke(job Spoke) (*spoke, error) {
	cert, err := tls.X509KeyPair(job.CertPEM, job.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate of %s: %w", job.Cluster, err)
	}
	cfg, err := identity.ClientTLS(g.job.CAPEM, &cert, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	addr := job.Addr
	if addr == "" {
		addr = g.job.Addr
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return nil, fmt.Errorf("dialing %s for %s: %w", addr, job.Cluster, err)
	}
	ctx, cancel := context.WithCancel(g.ctx)
	stream, err := federationv1.NewFederationClient(conn).Report(ctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("opening the Report stream of %s: %w", job.Cluster, err)
	}
	s := &spoke{conn: conn, cancel: cancel, stream: stream, generation: 1}
	unanswered := time.AfterFunc(ackTimeout, cancel)
	defer unanswered.Stop()
	err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: &federationv1.Hello{
		ClusterName: job.Cluster, AgentVersion: g.job.AgentVersion, Capabilities: capabilities, Epoch: g.epoch,
	}}})
	if err == nil {
		err = stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: &federationv1.Snapshot{
			Generation: s.generation, ObservedAt: timestamppb.Now(), Machines: g.snapshot,
		}}})
	}
	if err == nil {
		_, err = stream.Recv()
	} else if _, recvErr := stream.Recv(); recvErr != nil {
		// A failed Send reports io.EOF; the stream's status comes from Recv.
		err = recvErr
	}
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("connecting %s (Hello, Snapshot, its Ack within %s): %w", job.Cluster, ackTimeout, err)
	}
	return s, nil
}

// drain reads the hub's answers to the heartbeats until the stream ends.
func (g *generator) drain(s *spoke) {
	defer g.heartbeaters.Done()
	for {
		if _, err := s.stream.Recv(); err != nil {
			return
		}
	}
}

// heartbeat sends a Heartbeat every HeartbeatInterval, the first at a
// random point of the first interval, until the generator closes or the
// stream ends.
func (g *generator) heartbeat(s *spoke, cluster string) {
	defer g.heartbeaters.Done()
	every := g.job.HeartbeatInterval
	timer := time.NewTimer(rand.N(every))
	defer timer.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-timer.C:
		}
		s.mu.Lock()
		err := s.stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{
			Generation: s.generation, SentAt: timestamppb.Now(),
		}}})
		s.mu.Unlock()
		if err != nil {
			if g.failures.Add(1) <= maxLoggedFailures && g.ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "load generator: %s stopped heartbeating: %v\n", cluster, err)
			}
			return
		}
		timer.Reset(every)
	}
}

// round sends a Delta from every spoke at once and returns each one's time
// until the hub's Ack.
func (g *generator) round(round int) ([]time.Duration, error) {
	switch {
	case g.spokes == nil:
		return nil, errors.New("round before connect")
	case len(g.rounds) == 0:
		return nil, errors.New("round: the job has no rounds")
	}
	machine := g.rounds[round%len(g.rounds)]
	latencies := make([]time.Duration, len(g.spokes))
	var eg errgroup.Group
	for i, s := range g.spokes {
		eg.Go(func() error {
			s.mu.Lock()
			s.generation++
			t0 := time.Now()
			err := s.stream.Send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Delta{Delta: &federationv1.Delta{
				Generation: s.generation, ObservedAt: timestamppb.Now(), Upserts: []*federationv1.Machine{machine},
			}}})
			s.mu.Unlock()
			if err != nil {
				return fmt.Errorf("round %d: sending a Delta: %w", round, err)
			}
			unanswered := time.AfterFunc(ackTimeout, s.cancel)
			_, err = s.stream.Recv()
			unanswered.Stop()
			if err != nil {
				return fmt.Errorf("round %d: waiting for the Delta's Ack (at most %s): %w", round, ackTimeout, err)
			}
			latencies[i] = time.Since(t0)
			return nil
		})
	}
	return latencies, eg.Wait()
}
