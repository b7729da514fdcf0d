// Package soak is the seeded soak of Imperator Federation (`make soak`): a
// fleet of its own (two hub replicas, two spokes, a fault proxy between each
// agent and its replica) on which a generator does random work — guests
// created and deleted in several namespaces and types, Machines' `available`
// raised and lowered, types added and removed, nodes to maintenance and
// back, CapacityHolds that expire, fleet holds created, claimed and released
// — while a fault schedule drawn from the same seed applies overlapping
// faults: agents and hub replicas SIGKILLed, agents and API servers frozen
// (SIGSTOP), links cut, blackholed and slowed, nodes flapping.
//
// Invariants are checked continuously from watches on every spoke and the
// hub, each a named check that reports the object and the time it broke
// (invariants.go names them and holds the Checker; watches.go judges
// invariants 1 to 3 from the spokes' pod and Machine watches; settled.go
// reads invariants 4 and 5 once a round is calm; faults.go keeps invariant
// 6's account of the processes the schedule took down). One number, SOAK_SEED, replays a run: the schedule and
// the generator's choices are drawn from it. docs/soak.md says how to run it
// and what a run measured.
package soak
