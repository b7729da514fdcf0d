package loadgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// stopTimeout is how long a load generator gets to close its spokes and
// exit once its stdin ends; it is killed after that.
const stopTimeout = time.Minute

// Generators are the benchmark's side of its load-generator processes.
type Generators struct {
	procs []*process
}

// process is one load generator.
type process struct {
	in      io.WriteCloser
	answers *bufio.Scanner
}

// Start writes job's spokes into job files of SpokesPerProcess spokes each
// and starts a load generator per file: this test binary again, running
// only HookTest. They are stopped when tb ends (their stdin closed, then
// killed after a minute).
func Start(tb testing.TB, job Job) (*Generators, error) {
	tb.Helper()
	snapshot, err := marshalMachines(job.Snapshot)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	rounds, err := marshalMachines(job.Rounds)
	if err != nil {
		return nil, fmt.Errorf("rounds: %w", err)
	}
	dir := tb.TempDir()
	gens := &Generators{}
	for first := 0; first < len(job.Spokes); first += SpokesPerProcess {
		file := jobFile{
			Addr: job.Addr, CAPEM: job.CAPEM, AgentVersion: job.AgentVersion,
			Snapshot: snapshot, Rounds: rounds, HeartbeatInterval: job.HeartbeatInterval,
			Spokes: job.Spokes[first:min(len(job.Spokes), first+SpokesPerProcess)],
		}
		if err := file.validate(); err != nil {
			return nil, fmt.Errorf("job: %w", err)
		}
		data, err := json.Marshal(file)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "job-"+strconv.Itoa(first)+".json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
		p, err := startProcess(tb, path)
		if err != nil {
			return nil, err
		}
		gens.procs = append(gens.procs, p)
	}
	return gens, nil
}

func startProcess(tb testing.TB, jobPath string) (*process, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+HookTest+"$", "-test.bench=^$", "-test.count=1")
	cmd.Env = append(os.Environ(), Env+"="+jobPath)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a load generator: %w", err)
	}
	// Its stdin ending is its signal to close its spokes and exit.
	tb.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(stopTimeout):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	answers := bufio.NewScanner(out)
	answers.Buffer(make([]byte, 0, 1<<20), 64<<20)
	return &process{in: in, answers: answers}, nil
}

// Connect connects every spoke (each sends its Hello and Snapshot and waits
// for the Snapshot's Ack) and returns each one's time to connect; with a
// HeartbeatInterval the spokes heartbeat from then on.
func (g *Generators) Connect() ([]time.Duration, error) { return g.do("connect") }

// Round sends one Delta from every spoke at once, upserting the job's
// Rounds[round mod len(Rounds)], and returns each one's time until the
// hub's Ack.
func (g *Generators) Round(round int) ([]time.Duration, error) {
	return g.do("round " + strconv.Itoa(round))
}

// do sends command to every load generator at once and returns every
// latency they answered with.
func (g *Generators) do(command string) ([]time.Duration, error) {
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

func (p *process) do(command string) ([]time.Duration, error) {
	if _, err := fmt.Fprintln(p.in, command); err != nil {
		return nil, fmt.Errorf("load generator: sending %q: %w", command, err)
	}
	for p.answers.Scan() {
		latencies, ok, err := parseLatencies(p.answers.Text())
		if err != nil {
			return nil, fmt.Errorf("load generator: answer to %q: %w", command, err)
		}
		if ok {
			return latencies, nil
		}
	}
	return nil, fmt.Errorf("load generator exited before answering %q (its stderr is above): %v", command, p.answers.Err())
}
