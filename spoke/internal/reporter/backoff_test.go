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
