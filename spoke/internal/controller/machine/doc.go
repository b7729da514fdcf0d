// Package machine is the spoke agent's Machine controller. For every machine
// type a Machine's node pool serves, it keeps a reservation StatefulSet and a
// headless Service named <machine-type>-<machine-group> in the agent's
// namespace, owned by the Machine: placeholder pods that request exactly the
// type's cpu, memory and GPUs on the type's ready nodes and so hold its
// capacity. Reservations shrink as guest pods of the type arrive
// (replicas = available − used − (waiting − unplaceable)) and grow back when
// they leave;
// reservation pods have no grace period, so the slot of the one removed for a
// guest is free at once, and run at a PriorityClass that never preempts
// anything (value 0, preemptionPolicy Never). deploy/spoke ships that class;
// the controller only reads it, watching PriorityClasses. While it is
// missing, the API server refuses reservation pods that name it: the
// reservations are kept as they are and none is added, and every Machine's
// Ready condition says ReservationPriorityClassMissing, naming the class and
// the fix (apply deploy/spoke). One of that name with another value,
// preemptionPolicy or globalDefault (immutable fields) holds every
// reservation at 0 replicas, since pods admitted under it would keep guests
// out or preempt, and Ready says ReservationPriorityClassMismatch, naming the
// class, the found and wanted values and the fix (delete it, apply
// deploy/spoke). The reservations come back as soon as the class is right.
// The Machine's status reports maximum/reserved/used/waiting per type and
// the Ready, InsufficientCapacity, OverSubscribed and StrayGuests
// conditions; the same figures are Prometheus gauges, and
// the time a guest takes to run is a histogram. A reservation pod is reserved
// only while its node carries node-pool=ready, the only nodes a guest may be
// placed on: those left on a not-ready or maintenance node stay where they
// are, are not counted, and are named in InsufficientCapacity; the
// controller watches the node-pool labels of Nodes for that.
//
// It also runs the guest queue (queue.go, grant.go): the Pod Resource
// Injector holds every guest at the imperator.tenzen-y.io/slot scheduling
// gate, and per machine type the controller removes the gate of the oldest
// gated guest (admitted-at annotation, else creation time, then UID) while
// fewer than available units are held by guests, once the reservation pod
// scaled away for it is gone (or stuck terminating) and a node-pool=ready
// node of the type can take the guest (its nodeSelector, required node
// affinity and taint tolerations). available is
// so a hard cap that refuses nobody; guests beyond it wait SchedulingGated,
// told their place in the imperator.tenzen-y.io/queue annotation (written
// only when its text changes) and a Queued event. Guests running without the
// gate (from before an upgrade) count as used and are never evicted. Usage
// counts the gated guests as queued, a part of waiting; those no ready node
// of the type can take by their own constraints are unplaceable, a part of
// queued: they keep their place in line but hold no unit.
//
// Guests of one gang (gang.go: a native or coscheduling PodGroup, a Kueue
// pod group, or the imperator.tenzen-y.io/gang label) pass the gate
// together, only when every member it needs fits in the free units at once;
// a gang that does not fit keeps its place and free units are set aside for
// it, up to what it needs.
//
// Only pods the agent's admission path made guests count: a pod labelled
// pod-role=guest is one only with the Pod Resource Injector's record
// (imperator.tenzen-y.io/injected) naming the group and type of its labels,
// which the API server lets only the injector's guests carry. Labelled pods
// without it count nowhere and are named, per type, in the StrayGuests
// condition. Likewise, the only reservation pods a Machine counts are those
// of the reservation StatefulSets it controls: the original Imperator's,
// labelled alike in the same namespace while a migration hands them over
// (package migrate), count nowhere. A Machine created again under the name
// of one deleted a moment ago takes over the reservation StatefulSets and
// Services the earlier one left (and their running pods) instead of
// waiting for the garbage collector.
//
// It also decides and accounts the CapacityHolds of its group (holds.go,
// with the rules of package capacityhold): while a hold is active, its held
// units stay reservation pods that other guests cannot take, its guests take
// them ahead of the line, and the Machine's usage shows them as held.
//
// It is a multicluster-runtime reconciler: SetupWithManager registers it with
// a multi-cluster manager, which runs it against every cluster it engages.
package machine
