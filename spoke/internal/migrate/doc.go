// Package migrate moves a cluster from the original single-cluster Imperator
// (github.com/tenzen-y/imperator) to the agent.
//
// Preflight finds what the original leaves in a cluster — its controller
// Deployment, its webhook configurations, its MachineNodePools with the
// finalizer imperator-machinenodepool-finalizer, its reservation
// StatefulSets <machine-group>-<machine-type>, and Machines whose
// gpu.num it stored as a string — and says, for each, what to do. The agent
// runs it at start-up (Startup: it refuses to start while the original's
// controller or webhooks run, or while a Machine holds a gpu.num the agent
// cannot read), and `spoke migrate preflight` prints it for a kubeconfig.
// Before the controllers start, Startup also takes the original's
// reservations out of the Machine controller's reach (Detach) and its pools
// out of the node-pool controller's (RetirePools).
//
// Adopter hands the units of a Machine annotated
// imperator.tenzen-y.io/adopt-original=true over from the original's
// reservation StatefulSets to the agent's, one unit at a time, deleting the
// original's StatefulSet of a type only when its replicas are 0 and its pods
// gone, and removes the original's MachineNodePools (their old finalizer
// first) once no StatefulSet of the original is left for the group. It
// touches reservation pods only through their StatefulSet and never a
// guest. docs/migration.md is the user's side of it.
package migrate
