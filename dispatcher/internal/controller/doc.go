// Package controller is the MultiKueue dispatcher imperator.tenzen-y.io/dispatcher:
// a controller on Kueue's Workloads of the MultiKueue manager cluster that
// writes status.nominatedClusterNames from the hub's capacity ranking, so that
// Kueue copies a workload only to the worker clusters where all of it fits now.
//
// A Workload is acted on while Kueue waits for a worker (workload.go:
// pending): quota reserved on the manager, its MultiKueue admission check
// Pending, not finished, no status.clusterName yet. Its demand (demand.go) is
// one count of units per machine type (the pod template's machine-group and
// machine-type labels) or per resource shape (the template's requests); the
// hub's FindCapacity answers each demand and a cluster is nominated only when
// all the demands fit there together, each taking its units of the cluster's
// free units per machine type before the next is checked (nominate.go), best
// first, mapped to the
// MultiKueueClusters of the check's MultiKueueConfig (clusters.go). No fit:
// nobody is nominated and a Warning event says why on the Workload. Changes of
// the hub's figures arrive on the hub's Watch stream (hubwatch.go) and requeue
// every pending Workload; a nomination is kept while each of its clusters
// still fits, and replaced when one goes Offline or Stale or stops fitting.
// Units nominated but not yet shown taken by the hub are claimed (claims.go)
// and count as taken in later decisions, so that a burst is spread.
//
// The list is written with a JSON merge patch on the status subresource under
// resourceVersion: Kueue v0.17.0 must run with its feature gate
// WorkloadRequestUseMergePatch, or Kueue's own server-side apply as
// kueue-admission keeps our field and cannot set status.clusterName
// (docs/multikueue.md).
package controller
