package server

import (
	"testing"

	"github.com/imperator-federation/imperator/test/util/loadgen"
)

// TestLoadGenerator is BenchmarkFleet's load generator (test/util/loadgen),
// not a test: it is skipped unless the benchmark runs this test binary again
// with loadgen.Env set.
func TestLoadGenerator(t *testing.T) { loadgen.Serve(t) }
