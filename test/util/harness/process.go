package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// stopGrace is how long a process has to exit after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// Process is a binary the harness started in its own process group, with its
// output appended to <dir>/<name>.log.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has exited
	err     error         // exit status, valid once exited is closed
}

// StartProcess starts bin with args in dir. The process gets its own process
// group (so a Ctrl-C in the terminal reaches the test binary, which stops it
// in order, instead of killing it half way) and, on Linux, is killed by the
// kernel if the test binary dies without cleaning up. env entries are added
// to the environment of the test binary.
func StartProcess(name, bin string, args []string, dir string, env ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, bin, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// Pid is the process id, e.g. to read its /proc/<pid>/status.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file that receives the process output.
func (p *Process) LogPath() string { return p.logPath }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM to the process group, waits up to stopGrace, then sends
// SIGKILL. It returns once the process is gone.
func (p *Process) Stop() error {
	if !p.Running() {
		return nil
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	// A process frozen by a fault test (SIGSTOP) handles SIGTERM only once resumed.
	_ = syscall.Kill(pgid, syscall.SIGCONT)
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// Kill ends the process group with SIGKILL — no graceful stop, as a crash
// or an OOM kill would — and returns once the process is gone.
func (p *Process) Kill() error {
	if !p.Running() {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// Tail returns the last n lines of the process log.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// exitError describes an unexpected exit, with the end of the log.
func (p *Process) exitError() error {
	return fmt.Errorf("%s exited early (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, p.Tail(20))
}

// errPortInUse reports whether a process failed because a port was taken
// between choosing it and binding it.
func (p *Process) errPortInUse() bool {
	return strings.Contains(p.Tail(50), "address already in use")
}

// waitFor polls check every interval until it returns true, ctx ends, or one
// of procs exits.
func waitFor(ctx context.Context, what string, interval time.Duration, procs []*Process, check func(context.Context) bool) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		for _, p := range procs {
			if !p.Running() {
				return p.exitError()
			}
		}
		if check(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, errors.Join(ctx.Err(), context.Cause(ctx)))
		case <-ticker.C:
		}
	}
}

// WaitReady polls url (a health endpoint of the process, on 127.0.0.1)
// until it answers 200, for at most timeout; it fails at once if the
// process exits.
func (p *Process) WaitReady(ctx context.Context, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("%s exited", p.Name())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
