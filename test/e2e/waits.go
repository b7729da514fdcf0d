package e2e

import "time"

// How long the journeys wait for what a user would wait for.
const (
	poll = 500 * time.Millisecond
	// joinTimeout: spokes show up at the hub after they joined.
	joinTimeout = time.Minute
	// spokeTimeout: the agent labels nodes, reconciles reservations and the
	// scheduler and kwok run the pods.
	spokeTimeout = time.Minute
	// hubPropagation: "the hub's usage moves within seconds" once the
	// spoke's Machine status moved.
	hubPropagation = 10 * time.Second
	// reconnectTimeout: agents reconnect to a restarted hub by themselves,
	// with capped backoff.
	reconnectTimeout = 90 * time.Second
	// offlineSlack is added to the hub's grace period before a silent spoke
	// must show offline.
	offlineSlack = 20 * time.Second
)
