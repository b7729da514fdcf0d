package v1alpha1

// Condition types of a Machine.
const (
	// ConditionReady is True when the reservations are in line with the
	// spec; its reason says why not otherwise.
	ConditionReady = "Ready"
	// ConditionInsufficientCapacity is True when reservation pods of a
	// machine type cannot be held: unschedulable, on nodes that are not
	// node-pool=ready, or no node serves the type.
	ConditionInsufficientCapacity = "InsufficientCapacity"
	// ConditionOverSubscribed is True when guests hold more units of a
	// machine type than it makes available (bound, let through the slot gate
	// and not bound yet, or leaving): after available was lowered, or guests
	// that ran before the agent's upgrade. Nobody is evicted; it turns False
	// as they leave. Guests waiting at the slot gate are a queue, not
	// oversubscription.
	ConditionOverSubscribed = "OverSubscribed"
	// ConditionNodePoolConflict is True while a MachineNodePool with the
	// Machine's pool name (<machine>-node-pool) exists that the Machine does
	// not control: the Machine has no node pool until it is deleted. It is
	// set only once such a conflict was seen, and False after it ended.
	ConditionNodePoolConflict = "NodePoolConflict"
	// ConditionStrayGuests is True while pods labelled as guests of a
	// machine type of the Machine's group (pod-role=guest and the group and
	// type labels) exist that the Pod Resource Injector did not admit as
	// such: they lack its imperator.tenzen-y.io/injected record, or the
	// record names another group or type than their labels. They count as
	// nothing (neither used nor waiting); the message names, per type, how
	// many there are and a few of their namespaces.
	ConditionStrayGuests = "StrayGuests"
)

// Reasons of the StrayGuests condition of a Machine.
const (
	// ReasonGuestsNotAdmitted: pods carry a machine type's guest labels
	// without the injector's record; they are not counted.
	ReasonGuestsNotAdmitted = "GuestsNotAdmitted"
	// ReasonNoStrayGuests: every pod labelled as a guest of the group was
	// admitted by the injector.
	ReasonNoStrayGuests = "NoStrayGuests"
)

// Reasons of the NodePoolConflict condition of a Machine.
const (
	// ReasonNodePoolNotControlled: the MachineNodePool of the Machine's pool
	// name belongs to something else.
	ReasonNodePoolNotControlled = "NodePoolNotControlled"
	// ReasonNodePoolControlled: the Machine controls its MachineNodePool.
	ReasonNodePoolControlled = "NodePoolControlled"
)

// Reasons of the Ready condition of a Machine.
const (
	// ReasonReservationsReconciled: every served machine type has its
	// reservation StatefulSet and Service, in line with the spec.
	ReasonReservationsReconciled = "ReservationsReconciled"
	// ReasonMachineGroupMissing: the Machine has no machine-group label, so
	// nothing can be reserved for it.
	ReasonMachineGroupMissing = "MachineGroupMissing"
	// ReasonReservationConflict: an object with a reservation's name exists and
	// belongs to something else.
	ReasonReservationConflict = "ReservationConflict"
	// ReasonReservationPriorityClassMismatch: the reservation PriorityClass
	// exists with another value, preemptionPolicy or globalDefault than
	// deploy/spoke ships it with. Both value and preemptionPolicy are
	// immutable: the reservations are scaled to 0 until it is replaced by
	// the shipped one.
	ReasonReservationPriorityClassMismatch = "ReservationPriorityClassMismatch"
	// ReasonReservationPriorityClassMissing: the reservation PriorityClass,
	// which deploy/spoke ships and the agent only reads, does not exist. No
	// reservation pod can be created without it: the reservations are kept
	// as they are and none is added until it is applied again.
	ReasonReservationPriorityClassMissing = "ReservationPriorityClassMissing"
	// ReasonReconcileFailed: the agent could not bring the reservations in line
	// with the spec; the message carries the error.
	ReasonReconcileFailed = "ReconcileFailed"
)

// Reasons of the InsufficientCapacity condition of a Machine.
const (
	// ReasonReservationsUnschedulable: reservation pods of a machine type cannot
	// be scheduled, the nodes cannot hold what available asks for.
	ReasonReservationsUnschedulable = "ReservationsUnschedulable"
	// ReasonPoolNodesWithoutGPUs: reservation pods of a machine type cannot
	// be scheduled and ready pool nodes of the type advertise 0 of its GPU
	// resource (gpu.type): the GPU driver or device plugin does not run
	// there (docs/gpu-operator.md). The message names the nodes.
	ReasonPoolNodesWithoutGPUs = "PoolNodesWithoutGPUs"
	// ReasonNoNodePool: a machine type with available units is served by no
	// node of spec.nodePool.
	ReasonNoNodePool = "NoNodePool"
	// ReasonReservationsOnUnreadyNodes: reservation pods stay bound to nodes
	// that are no longer node-pool=ready (cordoned, unhealthy, in
	// maintenance); they hold units no guest can take, so they are not
	// counted as reserved.
	ReasonReservationsOnUnreadyNodes = "ReservationsOnUnreadyNodes"
	// ReasonCapacitySufficient: every reservation pod is scheduled.
	ReasonCapacitySufficient = "CapacitySufficient"
)

// Reasons of the OverSubscribed condition of a Machine.
const (
	// ReasonGuestsExceedAvailable: more guests than available units; the
	// extra ones wait.
	ReasonGuestsExceedAvailable = "GuestsExceedAvailable"
	// ReasonWithinAvailable: every machine type has at most as many guests as
	// available units.
	ReasonWithinAvailable = "WithinAvailable"
)
