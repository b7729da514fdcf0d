package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return lis.Addr().String()
}

func startProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and returns the answer, or the read error after timeout.
func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) (string, error) {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	return r.ReadString('\n')
}

func TestPassForwardsBothWays(t *testing.T) {
	p := startProxy(t)
	c, r := dial(t, p)
	if got, err := roundTrip(c, r, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("round trip through a passing proxy = %q, %v; want the echo", got, err)
	}
}

func TestCutEndsOpenConnectionsAndRefusesNewOnes(t *testing.T) {
	p := startProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Cut)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read on a cut connection = %v; want it closed at once, not a timeout", err)
	}
	c2, r2 := dial(t, p)
	if _, err := roundTrip(c2, r2, 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("a new connection through a cut proxy answered (%v); want it closed", err)
	}
	p.SetMode(Pass)
	c3, r3 := dial(t, p)
	if got, err := roundTrip(c3, r3, 5*time.Second); err != nil || got != "ping\n" {
		t.Fatalf("after the cut heals, round trip = %q, %v; want the echo", got, err)
	}
}

func TestBlackholeHoldsTrafficWithoutClosingUntilHealed(t *testing.T) {
	p := startProxy(t)
	c, r := dial(t, p)
	p.SetMode(Blackhole)
	if _, err := roundTrip(c, r, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("read through a blackhole = %v; want a timeout (no FIN, no data)", err)
	}
	p.SetMode(Pass)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "ping\n" {
		t.Fatalf("after the blackhole heals, the held line = %q, %v; want it delivered", got, err)
	}
}

func TestLatencyDelaysEveryChunk(t *testing.T) {
	p := startProxy(t)
	p.SetLatency(200 * time.Millisecond)
	c, r := dial(t, p)
	start := time.Now()
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// One chunk each way: at least twice the latency.
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("round trip with 200ms latency took %s; want >= 400ms", took)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestLatencyIsADelayNotABandwidthCap(t *testing.T) {
	p := startProxy(t)
	p.SetLatency(200 * time.Millisecond)
	c, r := dial(t, p)
	// Ten lines written at once arrive together after one latency each way,
	// not one latency per chunk after another.
	start := time.Now()
	for range 10 {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // separate writes, separate chunks
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := range 10 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("ten chunks with 200ms latency took %s; want about 400ms (a delay per chunk, overlapping)", took)
	}
}
