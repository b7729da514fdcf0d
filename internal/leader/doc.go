// Package leader runs leader-only work under a Lease that a replica can lose
// and win again without exiting: the hub's (publishing placement scores,
// marking silent clusters of departed replicas Unknown) and the spoke
// agent's (its controllers and the hub reporter).
//
// controller-runtime's manager ends the whole process when its leader Lease
// is lost ("leader election lost"): right for a controller whose every task
// needs the lead, wrong for the hub, whose replicas must keep serving spoke
// streams and queries from memory through a hub-cluster API-server outage,
// and for the spoke agent, whose replicas must keep serving admission
// webhooks and whose last leader keeps telling the hub that its cluster's
// API server is gone. So the main manager runs without leader election, and Campaign runs
// a second, small manager per term: it campaigns for the Lease, starts the
// term's runnables (fresh ones, built by Setup) once elected, stops them when
// the Lease is lost, and campaigns again. The term manager shares nothing
// with the main one but what Setup hands its runnables (the main manager's
// client and cache), so a term costs a Lease and no extra watches — unless
// ManagerOptions gives the term manager a scheme and cache of its own, as the
// spoke's multicluster controllers need.
package leader
