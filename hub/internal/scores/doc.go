// Package scores publishes the hub's free capacity to OCM Placement: one
// AddOnPlacementScore (cluster.open-cluster-management.io/v1alpha1) named
// ResourceName in each cluster's namespace on the hub, so that a Placement
// prioritizer of type AddOn can route work to clusters with free units:
//
//	prioritizerPolicy:
//	  configurations:
//	  - scoreCoordinate:
//	      type: AddOn
//	      addOn: {resourceName: imperator, scoreName: compute-xlarge}
//	    weight: 1
//
// Score names: "<type>" sums the free units of the machine type over every
// machine group of the cluster; "<group>.<type>" counts one group's units
// (type names are DNS labels, so the two forms never collide).
//
// Scale: value = −100 + 2 × min(free, 100). A cluster with no free unit
// scores −100, one free unit −98, 50 free units 0, 100 or more 100: the score
// grows with every free unit and compares across clusters of any size.
//
// Freshness: while a cluster is Available its scores carry validUntil =
// now + ValidFor and are refreshed before they expire. When a cluster goes
// offline validUntil is set to now, so Placement ignores its scores at once.
// Figures read back from the hub cluster and not confirmed yet (after a hub
// restart, or on a replica that just took the lead) change nothing: the
// published scores run out on their own unless the cluster reports again.
// Writes happen only when the scores or the validity change, at most once
// per MinInterval per cluster.
package scores
