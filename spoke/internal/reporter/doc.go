// Package reporter is the spoke agent's hub client: a manager Runnable that
// reads the cluster's Machines and MachineNodePools from the manager's cache
// and streams them to the hub — Hello, a Snapshot, then debounced Deltas as
// they change and Heartbeats — over mTLS with the certificate it obtained by
// joining with a bootstrap token. It reconnects with capped exponential
// backoff and jitter and resends a Snapshot after every reconnect.
//
// Certificates need no operator. The agent renews its client certificate
// with the Renew RPC once two thirds of its life (counted from when the agent
// obtained it) have passed, on a timer of its own whether or not a Report
// stream is up, stores it, and moves its stream to it make-before-break: it
// opens the new stream and closes the old one only once the hub has answered
// on the new one (the hub replaces the older stream of a cluster with the
// newer), so the cluster never looks disconnected. Before calling Join or Renew it stores the new key and its
// CSR in the credentials Secret (pending.key, pending.csr) and sends that same
// CSR again on every retry, so that a lost answer can be retried with the
// same token (the hub answers a retry of the same token and public key).
//
// A certificate the hub issued is used at once, even when writing it to the
// credentials Secret fails: the hub has made it the cluster's current one
// and keeps the one it replaced good only for a short overlap. The agent
// keeps it in memory and retries the write with backoff until it succeeds
// (see hubCredentials.keep for what an agent restarted before that does). A
// renewal whose key cannot be stored, because the API server is unreachable
// through the renewal window, goes ahead with a key kept in memory once half
// of that window has passed, and both are stored when the API server is back.
//
// Heartbeats are honest about freshness: the agent reads its own Namespace
// from its API server every few seconds, and once it has not reached the
// API server for longer than APIServerStaleAfter, its heartbeats carry
// api_server_unreachable_since, since its figures come from a cache that no
// longer hears of changes.
//
// It runs on every replica of the agent and reports while its replica leads
// (Options.Leader); the last leader reports on, stale, while its API server
// is unreachable and so nobody can hold the Lease (see Reporter.mandate).
//
// When the hub refuses its certificate because it belongs to no current
// registration of the cluster (deregistered, or registered again), it joins
// again with the bootstrap token it reads afresh for every attempt, so that
// an operator only has to give it a new token. The hub being unreachable is
// never an error of the Runnable: the agent's local controllers keep working.
package reporter
