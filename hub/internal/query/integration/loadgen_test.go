package integration

import (
	"testing"

	"github.com/imperator-federation/imperator/test/util/loadgen"
)

// TestLoadGenerator is BenchmarkHubAPIWrites' load generator
// (test/util/loadgen), not a test: it is skipped unless the benchmark runs
// this test binary again with loadgen.Env set.
func TestLoadGenerator(t *testing.T) { loadgen.Serve(t) }
