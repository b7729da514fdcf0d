// Package loadgen plays many spoke agents against a hub from processes of
// their own, for the hub's fleet benchmarks (BenchmarkFleet,
// BenchmarkHubAPIWrites). Every spoke is a real gRPC connection with mTLS and
// a Report stream, which sends a Hello and a Snapshot as the agent's reporter
// does, then either Deltas on command (rounds) or Heartbeats on its own
// (idle spokes). Three reasons for other processes: a process holds both ends
// of an in-process connection, so 10,000 spokes and their hub in one process
// need more than the 20,000 descriptors a machine's hard limit may allow;
// the hub's CPU and RSS are then its own; and the spokes' goroutines do not
// share the hub's scheduler.
//
// A load generator is the benchmark's own test binary run again with Env
// naming a job file; each test binary that uses this package needs the hook
//
//	func TestLoadGenerator(t *testing.T) { loadgen.Serve(t) }
//
// which is skipped unless Env is set. The benchmark side (Start) writes the
// job files, SpokesPerProcess spokes each, starts the processes and drives
// them over their stdin: "connect" connects every spoke, "round K" sends one
// Delta from every spoke; each command is answered by one line of the
// latencies measured. A generator closes its spokes and exits when its stdin
// ends.
package loadgen
