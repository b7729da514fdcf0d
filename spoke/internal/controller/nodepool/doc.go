// Package nodepool owns the node side of Machines in a spoke cluster.
//
// Two multicluster-runtime reconcilers live here. The pool-sync reconciler
// keeps, for every Machine, its MachineNodePool <machine>-node-pool: spec
// copied from the Machine, labelled with the machine group and controlled by
// the Machine, so that deleting the Machine garbage-collects it. The node-pool
// reconciler works on MachineNodePools: it puts the machine-group annotation,
// the machine-type, <type> and node-pool labels and, with taint: true, the
// matching NoSchedule taints on every node of the pool (named by an entry, or
// matched by an entry's nodeSelector as it appears or is labelled: node
// events are matched against the few pools with selectors, Members and Owner
// decide), keeps the node-pool label in
// step with the pool mode and the node's health, removes everything it put on
// a node when that node leaves the pool, changes type, stops being tainted or
// the pool is deleted (finalizer), and reports each node in the
// MachineNodePool status. When a listed node turns Missing (it does not
// exist) or Conflict (another pool owns it: one naming it, else the one
// holding it, else the oldest), a Warning event
// says so on the Machine, once per change; a Normal event follows when such a
// node joins the pool. The nodes of a pool are written a few at a time.
// Every key under imperator.tenzen-y.io/ on a Node is
// this package's; nothing else on a node is touched, and a node is written
// only when something changes.
//
// DesiredState, Health and Apply are the pure decisions; SetupWithManager
// wires the index and both reconcilers into the agent's manager.
package nodepool
