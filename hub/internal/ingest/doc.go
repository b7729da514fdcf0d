// Package ingest decides what the hub accepts from a spoke. Every Snapshot
// and Delta is checked against the limits the spoke's own CRDs enforce
// (api/v1alpha1: names are DNS-1123, counts are never negative, list entries
// are unique by name, enums hold known values, quantities parse) and against
// per-cluster caps that keep one spoke from exhausting the hub's memory, its
// aggregation time or the 1.5 MiB an object may take in etcd. A refused
// message is reported as an *Error naming the field; the store keeps the
// last good inventory.
//
// The checks are pure functions over the wire messages: the store runs them
// before it takes its lock.
//
// limits.go holds the limits and the per-cluster totals checked against
// them; validate.go the checks of Snapshot, Delta and Hello; errors.go the
// *Error a refusal is; fieldpath.go the allocation-free field path the
// checks walk a message with.
package ingest
