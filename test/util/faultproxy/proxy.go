// Package faultproxy is a TCP proxy on loopback that injects network faults
// between two processes of a test fleet (a spoke agent and the hub): it
// forwards bytes both ways until told to cut every connection (the peers see
// the connection close), to blackhole it (connections stay open and nothing
// arrives — a partition without FIN, as a dead router gives), or to delay
// every chunk it forwards. It sees only bytes, so TLS passes through intact.
package faultproxy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	// Pass forwards every byte (after the configured latency).
	Pass Mode = iota
	// Cut closes every open connection and refuses new ones: the peers see
	// the connection end at once.
	Cut
	// Blackhole keeps connections open, accepts new ones, and forwards
	// nothing: the peers notice only through their own timeouts.
	Blackhole
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// Proxy forwards connections accepted on Addr to a target address.
type Proxy struct {
	target   string
	listener net.Listener

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	// changed is closed and replaced whenever the mode or latency changes,
	// waking the forwarders that wait in Blackhole.
	changed chan struct{}
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// Start listens on a free port of 127.0.0.1 and forwards to target.
func Start(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening: %w", err)
	}
	p := &Proxy{target: target, listener: lis, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's address, host:port, for the client to dial.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// SetMode switches the proxy to m. Switching to Cut closes every open
// connection; switching back to Pass lets blackholed connections flow again.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	p.wake()
	if m == Cut {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// SetLatency delays every chunk forwarded in either direction by d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
	p.wake()
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Close stops listening, closes every connection and waits for the
// forwarders to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.wake()
	p.mu.Unlock()
	err := p.listener.Close()
	p.wg.Wait()
	return err
}

// wake releases the forwarders waiting for a change; p.mu is held.
func (p *Proxy) wake() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		if p.Mode() == Cut {
			_ = client.Close()
			continue
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve dials the target for one client connection and forwards both ways
// until either side ends or the proxy cuts them.
func (p *Proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	defer p.untrack(client, server)
	var wg sync.WaitGroup
	wg.Go(func() { p.forward(server, client) })
	wg.Go(func() { p.forward(client, server) })
	wg.Wait()
}

// track registers the pair, or closes it when the proxy is closed or cut.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == Cut {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// chunk is bytes read from one side and when they arrived.
type chunk struct {
	data []byte
	at   time.Time
}

// forward copies src to dst. A reader takes chunks off src as they arrive
// and the writer passes each on once the latency has passed since its
// arrival — a delay, not a bandwidth cap: chunks in flight overlap — holding
// it while the proxy blackholes. Either side failing ends both connections,
// so that the other direction ends too.
func (p *Proxy) forward(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	chunks := make(chan chunk, 64)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: buf[:n], at: time.Now()}:
				case <-done:
					return
				}
			}
			if err != nil {
				return // io.EOF or a closed connection alike: the pair ends
			}
		}
	}()
	for c := range chunks {
		if !p.hold(c.at) {
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// hold waits while the proxy blackholes, then until the latency has passed
// since arrived; it returns false when the connection must end (cut or
// closed).
func (p *Proxy) hold(arrived time.Time) bool {
	for {
		p.mu.Lock()
		mode, latency, changed, closed := p.mode, p.latency, p.changed, p.closed
		p.mu.Unlock()
		switch {
		case closed || mode == Cut:
			return false
		case mode == Blackhole:
			<-changed
			continue
		}
		wait := time.Until(arrived.Add(latency))
		if wait <= 0 {
			return true
		}
		select {
		case <-time.After(wait):
			return true
		case <-changed:
			// Re-read: the mode may be Cut or Blackhole now.
		}
	}
}
