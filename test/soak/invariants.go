package soak

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The named invariants (docs/soak.md says what each means).
const (
	InvariantCap       = "1-cap"             // guests holding units never exceed available
	InvariantNoEvict   = "2-no-eviction"     // no running guest evicted or deleted by us
	InvariantFIFO      = "3-fifo"            // no guest let through while an earlier one waits
	InvariantHolds     = "4-holds"           // held units really held, nothing held without an owner
	InvariantHubMatch  = "5-hub-matches"     // the hub's figures equal the spokes' objects
	InvariantProcesses = "6-processes"       // no process exits unless the schedule killed it
	InvariantGrowth    = "6-resource-growth" // goroutines and RSS stay within a bound
)

// Violation is one broken invariant: which, on what object, when.
type Violation struct {
	Invariant string
	Object    string
	At        time.Time
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("[%s] %s at %s: %s", v.Invariant, v.Object, v.At.UTC().Format("15:04:05.000"), v.Detail)
}

// Checker evaluates the invariants from watches on every spoke.
type Checker struct {
	mu         sync.Mutex
	violations []Violation
	// evaluated counts the checks evaluated per invariant.
	evaluated map[string]*atomic.Int64
	spokes    map[string]*spokeState
	// deletedBySoak are the guests the generator deleted (by UID).
	deletedBySoak sync.Map
	// now is the clock of the watches' observations.
	now func() time.Time
}

// NewChecker returns a checker with no spokes yet.
func NewChecker() *Checker {
	c := &Checker{evaluated: map[string]*atomic.Int64{}, spokes: map[string]*spokeState{}, now: time.Now}
	for _, name := range []string{InvariantCap, InvariantNoEvict, InvariantFIFO, InvariantHolds, InvariantHubMatch, InvariantProcesses, InvariantGrowth} {
		c.evaluated[name] = &atomic.Int64{}
	}
	return c
}

// Report records a violation.
func (c *Checker) Report(v Violation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, v)
}

// Count adds n evaluated checks of invariant.
func (c *Checker) Count(invariant string, n int) { c.evaluated[invariant].Add(int64(n)) }

// Violations returns every violation so far.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

// Evaluated returns the number of checks evaluated per invariant.
func (c *Checker) Evaluated() map[string]int64 {
	out := map[string]int64{}
	for k, v := range c.evaluated {
		out[k] = v.Load()
	}
	return out
}

// DeletedBySoak marks a guest the generator is about to delete.
func (c *Checker) DeletedBySoak(uid types.UID) { c.deletedBySoak.Store(uid, true) }
