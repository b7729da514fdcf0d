package soak

import (
	"testing"
	"time"
)

// Seed 448054 (30 minutes): a hub-kill came while the previous hub-kill's
// restart still waited behind a frozen hub API server; the first fault's
// heal marked the hub up while the second one held it down, and invariant
// 6 reported the hub as exited on its own for 3.5 s.
func TestOverlappingFaultsOnOneProcessKeepItDownUntilTheLastHeals(t *testing.T) {
	stopped := func() bool { return false }
	running := func() bool { return true }
	for _, tc := range []struct {
		name       string
		downs, ups int
		running    func() bool
		violation  bool
	}{
		{"never taken down, running", 0, 0, running, false},
		{"never taken down, exited", 0, 0, stopped, true},
		{"one fault holds it down", 1, 0, stopped, false},
		{"one fault healed, running again", 1, 1, running, false},
		{"one fault healed, exited afterwards", 1, 1, stopped, true},
		{"two faults overlap, the first healed", 2, 1, stopped, false},
		{"two faults overlap, both healed, exited afterwards", 2, 2, stopped, true},
		{"more heals than faults (a heal after a failed kill) do not hide a later exit", 1, 2, stopped, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := NewInjector(nil, nil)
			for range tc.downs {
				in.setDown("hub", true)
			}
			for range tc.ups {
				in.setDown("hub", false)
			}
			c := NewChecker()
			in.checkProcess(c, time.Now(), "hub", tc.running)
			if got := len(c.Violations()) > 0; got != tc.violation {
				t.Fatalf("violation reported: %t, want %t (%v)", got, tc.violation, c.Violations())
			}
		})
	}
}

// A process taken down during the look at it (after the first read of the
// faults, before it is seen stopped) is not reported: the second read sees
// the fault.
func TestAProcessKilledDuringTheLookIsNotReported(t *testing.T) {
	in := NewInjector(nil, nil)
	c := NewChecker()
	in.checkProcess(c, time.Now(), "agent/spoke-a", func() bool {
		in.setDown("agent/spoke-a", true)
		return false
	})
	if v := c.Violations(); len(v) > 0 {
		t.Fatalf("violations: %v", v)
	}
}

// Seed 448054 sampled hub-2's goroutines at the end from the port it had
// before its restart (-1): growth went unchecked. An unknown figure at the
// end is now a violation, as is growth past the bound.
func TestGrowthIsCheckedForEveryProcessSampledAtTheStart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end Sample
		violation  bool
	}{
		{"steady", Sample{Goroutines: 200, RSS: 50 << 20}, Sample{Goroutines: 210, RSS: 60 << 20}, false},
		{"goroutines past 2x+100", Sample{Goroutines: 200}, Sample{Goroutines: 501}, true},
		{"RSS past 2x+64 MiB", Sample{Goroutines: 200, RSS: 50 << 20}, Sample{Goroutines: 200, RSS: 165 << 20}, true},
		{"metrics silent at the end", Sample{Goroutines: 174}, Sample{Goroutines: -1}, true},
		{"metrics never served", Sample{Goroutines: -1}, Sample{Goroutines: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewChecker()
			res := &Result{Resources: map[string][2]Sample{}}
			checkGrowth(c, map[string]Sample{"hub-2": tc.start}, map[string]Sample{"hub-2": tc.end}, res)
			if got := len(c.Violations()) > 0; got != tc.violation {
				t.Fatalf("violation reported: %t, want %t (%v)", got, tc.violation, c.Violations())
			}
		})
	}
}
