// Package uninstall removes what the spoke agent leaves in its cluster once
// the agent itself is gone, so that uninstalling sets no trap: the node
// labels, taints and annotation of its node pools, the finalizer of the
// MachineNodePools, the reservation StatefulSets and Services that would keep
// holding capacity for nobody, and it tells every guest still waiting at the
// slot scheduling gate why nobody will open it. `spoke uninstall` runs it;
// the spoke chart runs that as a post-delete hook, kustomize users by hand
// after `kubectl delete -k` (docs/uninstall.md).
//
// Waiting guests stay gated, on purpose: a guest was injected with a
// required node affinity to the pool labels this step removes, so without
// the gate it would be Pending as unschedulable for a reason nobody reading
// it would guess. Each gets the queue annotation and a Warning event saying
// that Imperator was uninstalled and the pod must be created again.
//
// Every step is idempotent: running it twice changes nothing the second time.
package uninstall
