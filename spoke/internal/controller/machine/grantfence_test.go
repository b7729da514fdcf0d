package machine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// fenceClock is a clock a test moves, and a Machine whose generation the
// fence reads, with how long each read takes.
type fenceClock struct {
	now        time.Time
	generation int64
	readTakes  time.Duration
	reads      int
	readErr    error
}

func (c *fenceClock) fence(decidedAt int64) *grantFence {
	return &grantFence{
		generation: decidedAt,
		now:        func() time.Time { return c.now },
		read: func(context.Context) (int64, error) {
			c.reads++
			c.now = c.now.Add(c.readTakes)
			return c.generation, c.readErr
		},
	}
}

func TestGrantFenceLetsNoGuestThroughOnAStaleDecision(t *testing.T) {
	start := time.Date(2026, 11, 28, 0, 53, 17, 0, time.UTC)
	type step struct {
		// before the allow: the clock moves, available changes (generation).
		advance    time.Duration
		generation int64
		readTakes  time.Duration
		want       error
		wantReads  int
	}
	cases := map[string][]step{
		"the Machine unchanged: one read confirms a second of grants": {
			{generation: 3, want: nil, wantReads: 1},
			{advance: 500 * time.Millisecond, generation: 3, want: nil, wantReads: 1},
			{advance: 400 * time.Millisecond, generation: 3, want: nil, wantReads: 1},
		},
		"past a second, confirmed again": {
			{generation: 3, want: nil, wantReads: 1},
			{advance: 1500 * time.Millisecond, generation: 3, want: nil, wantReads: 2},
		},
		"available lowered before the first grant: none": {
			{generation: 4, want: errGrantStale, wantReads: 1},
		},
		"the agent stopped 13 s mid-grants while available was lowered: the rest held back": {
			{generation: 3, want: nil, wantReads: 1},
			{advance: 13 * time.Second, generation: 4, want: errGrantStale, wantReads: 2},
		},
		"the agent stopped while confirming: not trusted, whatever it read": {
			{generation: 3, readTakes: 13 * time.Second, want: errGrantStale, wantReads: 1},
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			c := &fenceClock{now: start}
			f := c.fence(3)
			for i, s := range steps {
				c.now = c.now.Add(s.advance)
				c.generation, c.readTakes = s.generation, s.readTakes
				if err := f.allow(context.Background()); !errors.Is(err, s.want) || (s.want == nil && err != nil) {
					t.Fatalf("step %d: allow = %v, want %v", i, err, s.want)
				}
				if c.reads != s.wantReads {
					t.Fatalf("step %d: %d reads of the Machine, want %d", i, c.reads, s.wantReads)
				}
			}
		})
	}
}

func TestGrantFenceSaysWhyItCouldNotConfirm(t *testing.T) {
	c := &fenceClock{now: time.Now(), generation: 3, readErr: errors.New("context deadline exceeded")}
	err := c.fence(3).allow(context.Background())
	if err == nil || errors.Is(err, errGrantStale) {
		t.Fatalf("allow = %v, want the read's error", err)
	}
}

func TestWithoutStaleKeepsEveryOtherError(t *testing.T) {
	other := errors.New("writing a queue note")
	got := withoutStale(errors.Join(errGrantStale, errors.Join(nil, other)))
	if !errors.Is(got, other) || errors.Is(got, errGrantStale) {
		t.Fatalf("withoutStale = %v, want only %v", got, other)
	}
	if withoutStale(errors.Join(errGrantStale)) != nil || withoutStale(nil) != nil {
		t.Fatal("withoutStale of errGrantStale alone is not nil")
	}
	if got := withoutStale(fmt.Errorf("wrapped: %w", other)); !errors.Is(got, other) {
		t.Fatalf("withoutStale dropped a wrapped error: %v", got)
	}
}
