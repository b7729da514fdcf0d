package reporter

import (
	"testing"
	"time"
)

// Spokes that lose a restarting hub at the same moment must come back spread
// over their whole backoff, and never wait longer than it.
func TestReconnectWaitSpreadsSpokesOverTheWholeBackoff(t *testing.T) {
	const backoff = 8 * time.Second
	var low, high int
	for range 2000 {
		w := reconnectWait(backoff)
		if w < 0 || w > backoff {
			t.Fatalf("reconnect wait %s outside [0, %s]", w, backoff)
		}
		switch {
		case w < backoff/4:
			low++
		case w > 3*backoff/4:
			high++
		}
	}
	// Uniform: about 500 in each outer quarter.
	if low < 350 || high < 350 {
		t.Fatalf("reconnect waits not spread over the backoff: %d of 2000 in its first quarter, %d in its last", low, high)
	}
}

func TestReconnectWaitOfZeroBackoffIsZero(t *testing.T) {
	if w := reconnectWait(0); w != 0 {
		t.Fatalf("reconnect wait %s for a zero backoff", w)
	}
}

// A spoke that keeps failing to reach the hub waits longer each time, but
// never more than MaxBackoff: it must come back within one cap of the hub.
func TestReconnectBackoffDoublesUpToTheCap(t *testing.T) {
	r := &Reporter{opts: Options{InitialBackoff: 500 * time.Millisecond, MaxBackoff: 10 * time.Second}}
	b := r.reconnectBackoff()
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.Step(); got != w {
			t.Fatalf("reconnect %d: backoff %s, want %s", i+1, got, w)
		}
	}
}
