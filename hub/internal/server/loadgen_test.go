package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/imperator-federation/imperator/internal/identity"
)

// BenchmarkFleet's spokes run in load-generator processes: the test binary
// run again with loadGeneratorEnv naming a job file. Two reasons. The hub's
// figures (CPU, RSS) are then the hub's alone, as a real hub's are. And a
// process holds both ends of an in-process connection: 10,000 spokes and
// the hub in one process need 20,000 descriptors and more, beyond the
// 20,000 this machine's hard limit allows; split across processes each
// needs at most spokesPerLoadGenerator.
const (
	loadGeneratorEnv       = "IMPERATOR_BENCH_LOADGEN"
	spokesPerLoadGenerator = 5000
	// loadGeneratorPrefix starts every line a load generator answers with,
	// so that nothing else the test binary prints is mistaken for one.
	loadGeneratorPrefix = "loadgen "
)

// loadJob is what one load generator plays: the hub to dial and its spokes,
// with their certificates (issued by the benchmark, which holds the CA).
type loadJob struct {
	Addr   string      `json:"addr"`
	CAPEM  []byte      `json:"caPEM"`
	Spokes []loadSpoke `json:"spokes"`
}

type loadSpoke struct {
	Cluster string `json:"cluster"`
	CertPEM []byte `json:"certPEM"`
	KeyPEM  []byte `json:"keyPEM"`
}

// TestFleetLoadGenerator is BenchmarkFleet's load generator, not a test: it
// is skipped unless BenchmarkFleet runs the test binary with
// IMPERATOR_BENCH_LOADGEN set. It connects the job's spokes when it reads
// "connect" and sends one Delta from every spoke when it reads "round K",
// answering each with the latencies it measured; it closes every
// connection when its input ends.
func TestFleetLoadGenerator(t *testing.T) {
	path := os.Getenv(loadGeneratorEnv)
	if path == "" {
		t.Skip("BenchmarkFleet's load generator: runs only with " + loadGeneratorEnv + " set")
	}
	if err := runLoadGenerator(path, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func runLoadGenerator(path string, in io.Reader, out io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var job loadJob
	if err := json.Unmarshal(data, &job); err != nil {
		return fmt.Errorf("reading the job %s: %w", path, err)
	}
	h := &testHub{addr: job.Addr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spokes := make([]*benchSpoke, len(job.Spokes))
	defer func() {
		for _, s := range spokes {
			if s != nil {
				_ = s.conn.Close()
			}
		}
	}()

	commands := bufio.NewScanner(in)
	for commands.Scan() {
		var latencies []time.Duration
		switch command := commands.Text(); {
		case command == "connect":
			latencies, err = connectAll(ctx, h, job, spokes)
		case strings.HasPrefix(command, "round "):
			round, convErr := strconv.Atoi(strings.TrimPrefix(command, "round "))
			if convErr != nil {
				return fmt.Errorf("command %q: %w", command, convErr)
			}
			latencies, err = sendRound(spokes, round)
		default:
			return fmt.Errorf("unknown command %q", command)
		}
		if err != nil {
			return err
		}
		if err := writeLatencies(out, latencies); err != nil {
			return err
		}
	}
	return commands.Err()
}

// connectAll connects the job's spokes, 64 at a time, and returns each
// one's time to connect.
func connectAll(ctx context.Context, h *testHub, job loadJob, spokes []*benchSpoke) ([]time.Duration, error) {
	times := make([]time.Duration, len(job.Spokes))
	var g errgroup.Group
	g.SetLimit(64)
	for i, spoke := range job.Spokes {
		g.Go(func() error {
			cert, err := tls.X509KeyPair(spoke.CertPEM, spoke.KeyPEM)
			if err != nil {
				return fmt.Errorf("certificate of %s: %w", spoke.Cluster, err)
			}
			t0 := time.Now()
			s, err := connectSpoke(ctx, h, job.CAPEM, &cert, spoke.Cluster)
			if err != nil {
				return err
			}
			spokes[i] = s
			times[i] = time.Since(t0)
			return nil
		})
	}
	return times, g.Wait()
}

// sendRound sends a Delta from every spoke at once and returns each one's
// time until the hub's Ack.
func sendRound(spokes []*benchSpoke, round int) ([]time.Duration, error) {
	latencies := make([]time.Duration, len(spokes))
	var g errgroup.Group
	for i, s := range spokes {
		g.Go(func() error {
			if s == nil {
				return errors.New("round before connect")
			}
			s.gen++
			t0 := time.Now()
			if err := s.stream.Send(deltaMsg(s.gen, benchMachine(int32(3+round%5)))); err != nil {
				return err
			}
			if _, err := s.stream.Recv(); err != nil {
				return err
			}
			latencies[i] = time.Since(t0)
			return nil
		})
	}
	return latencies, g.Wait()
}

func writeLatencies(out io.Writer, latencies []time.Duration) error {
	fields := make([]string, len(latencies))
	for i, d := range latencies {
		fields[i] = strconv.FormatInt(int64(d), 10)
	}
	_, err := fmt.Fprintln(out, loadGeneratorPrefix+strings.Join(fields, ","))
	return err
}

// loadGenerators are the benchmark's side of its load-generator processes.
type loadGenerators struct {
	procs []*loadGenerator
}

type loadGenerator struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	answers *bufio.Scanner
}

// startLoadGenerators starts the processes that play n spokes of h, each
// with its certificate, and stops them when the benchmark ends.
func startLoadGenerators(b *testing.B, h *testHub, n int) *loadGenerators {
	b.Helper()
	dir := b.TempDir()
	gens := &loadGenerators{}
	for first := 0; first < n; first += spokesPerLoadGenerator {
		job := loadJob{Addr: h.addr, CAPEM: h.ca.CertPEM}
		for i := first; i < min(n, first+spokesPerLoadGenerator); i++ {
			cluster := "spoke-" + strconv.Itoa(i)
			certPEM, keyPEM := h.certificatePEM(b, cluster, []string{identity.SpokeOrganization}, identity.RegistrationURI(cluster, testUID(cluster)))
			job.Spokes = append(job.Spokes, loadSpoke{Cluster: cluster, CertPEM: certPEM, KeyPEM: keyPEM})
		}
		data, err := json.Marshal(job)
		if err != nil {
			b.Fatal(err)
		}
		path := filepath.Join(dir, "job-"+strconv.Itoa(first)+".json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		gens.procs = append(gens.procs, startLoadGenerator(b, path))
	}
	return gens
}

func startLoadGenerator(b *testing.B, jobPath string) *loadGenerator {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFleetLoadGenerator$", "-test.bench=^$", "-test.count=1")
	cmd.Env = append(os.Environ(), loadGeneratorEnv+"="+jobPath)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting a load generator: %v", err)
	}
	// Its input ending is its signal to close its spokes and exit; a
	// generator that does not within a minute is killed.
	b.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	answers := bufio.NewScanner(out)
	answers.Buffer(make([]byte, 0, 1<<20), 64<<20)
	return &loadGenerator{cmd: cmd, in: in, answers: answers}
}

// do sends command to every load generator at once and returns every
// latency they answered with.
func (g *loadGenerators) do(command string) ([]time.Duration, error) {
	var (
		mu  sync.Mutex
		all []time.Duration
		eg  errgroup.Group
	)
	for _, p := range g.procs {
		eg.Go(func() error {
			got, err := p.do(command)
			mu.Lock()
			all = append(all, got...)
			mu.Unlock()
			return err
		})
	}
	return all, eg.Wait()
}

func (p *loadGenerator) do(command string) ([]time.Duration, error) {
	if _, err := fmt.Fprintln(p.in, command); err != nil {
		return nil, fmt.Errorf("load generator: sending %q: %w", command, err)
	}
	for p.answers.Scan() {
		line, ok := strings.CutPrefix(p.answers.Text(), loadGeneratorPrefix)
		if !ok {
			continue // the test binary's own output
		}
		var latencies []time.Duration
		for f := range strings.SplitSeq(line, ",") {
			if f == "" {
				continue
			}
			ns, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("load generator: answer to %q: %w", command, err)
			}
			latencies = append(latencies, time.Duration(ns))
		}
		return latencies, nil
	}
	return nil, fmt.Errorf("load generator exited before answering %q (its stderr is above): %v", command, p.answers.Err())
}
