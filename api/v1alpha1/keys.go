package v1alpha1

// The canonical keys, as docs/contract.md lists them; the original v1alpha1
// design was inconsistent about some of them (nodePool vs node-pool): these
// are the ones every component uses.
const (
	// Prefix is the prefix of every key the system writes.
	Prefix = "imperator.tenzen-y.io/"

	// MachineGroupKey labels Machines, MachineNodePools, guest and reservation
	// pods, reservation StatefulSets and Services, and annotates Nodes.
	MachineGroupKey = Prefix + "machine-group"
	// MachineTypeKey labels guest and reservation pods, StatefulSets, Services
	// and Nodes with the machine type name.
	MachineTypeKey = Prefix + "machine-type"
	// PodRoleKey labels pods, StatefulSets and Services with their PodRole.
	PodRoleKey = Prefix + "pod-role"
	// NodePoolKey labels (and, with taint: true, taints) a Node with its
	// NodePoolState.
	NodePoolKey = Prefix + "node-pool"
	// InjectingContainerKey optionally names the guest container that receives
	// the machine type's resources (default: the first container).
	InjectingContainerKey = Prefix + "injecting-container"
	// InjectResourceKey labels a Namespace in which guest pods are injected.
	InjectResourceKey = Prefix + "inject-resource"
	// LegacyInjectResourceKey is the original v1alpha1 design's spelling of
	// InjectResourceKey; it is honoured too (docs/contract.md).
	LegacyInjectResourceKey = "imperator.tenzen.io/inject-resource"
	// InjectResourceEnabled is the value of InjectResourceKey that enables injection.
	InjectResourceEnabled = "enabled"
	// InjectedAnnotation records on a guest pod what the injector did, as JSON.
	InjectedAnnotation = Prefix + "injected"
	// SlotSchedulingGate is the scheduling gate (spec.schedulingGates) the Pod
	// Resource Injector puts on every guest it admits. The scheduler does not
	// consider a gated pod; the agent's Machine controller removes the gate
	// when it grants the guest a unit of its machine type, in arrival order.
	// Only the agent's service account removes it: the pool-guests-only
	// ValidatingAdmissionPolicy (deploy/spoke/policy) refuses the removal
	// by anyone else.
	SlotSchedulingGate = Prefix + "slot"
	// QueueAnnotation tells a guest held at the SlotSchedulingGate where it
	// stands: its place in line for its machine type and the type's units in
	// use, e.g. "waiting for compute-xlarge: 2nd in line, 1 of 1 in use".
	// The agent writes it only when the text changes and removes it with the
	// gate.
	QueueAnnotation = Prefix + "queue"
	// AdmittedAtAnnotation records, in RFC 3339 with nanoseconds, when the
	// Pod Resource Injector admitted a guest. The queue orders guests by
	// it (creation timestamps have one-second resolution, so guests created
	// in the same second would otherwise go by name). The injector
	// overwrites any value a user sets, and only the agent may change it
	// afterwards.
	AdmittedAtAnnotation = Prefix + "admitted-at"
	// NodeAgentsKey, with the value NodeAgentsAllowed, labels a namespace
	// whose DaemonSets may tolerate every taint and so run on pool nodes too
	// (GPU operator, monitoring agents); only an administrator can label a
	// namespace. See deploy/spoke/policy/pool-guests-only.yaml.
	NodeAgentsKey     = Prefix + "node-agents"
	NodeAgentsAllowed = "allowed"
	// HoldKey labels a guest that asks for a unit of a CapacityHold: its
	// value is the hold's name. The name alone claims nothing (hold names
	// are no secret): the Pod Resource Injector looks the hold up when the
	// guest is created and stamps its UID in HoldUIDAnnotation.
	HoldKey = Prefix + "hold"
	// HoldUIDAnnotation is the UID of the CapacityHold a guest claims,
	// stamped by the Pod Resource Injector when it admits a guest that names
	// an existing hold of its machine group and type whose namespaces allow
	// the guest's (by HoldKey, or as a ProvisioningRequest consumer). Only a
	// guest carrying the UID of a hold claims it, so guests created before
	// the hold, or before a hold of the same name was created again, never
	// do. The injector overwrites or removes any value a user sets, and only
	// the agent may change it afterwards (deploy/spoke/policy).
	HoldUIDAnnotation = Prefix + "hold-uid"
	// GangKey labels a guest that belongs to a gang: guests of one
	// namespace and machine type with the same value pass the slot gate
	// together, once GangSizeAnnotation of them fit in the type's free units
	// at once. Like every key of the prefix it is set when the pod is
	// created; only the agent may change it afterwards.
	GangKey = Prefix + "gang"
	// GangSizeAnnotation is how many members a gang needs at once (a
	// positive number): for GangKey gangs, and for members of a
	// coscheduling PodGroup (CoschedulingPodGroupKey) or a native PodGroup
	// (spec.schedulingGroup), where it wins over the PodGroup's own size.
	GangSizeAnnotation = Prefix + "gang-size"

	// CoschedulingPodGroupKey is the scheduler-plugins coscheduling label
	// naming a pod's PodGroup (scheduling.x-k8s.io): its members form a gang.
	CoschedulingPodGroupKey = "scheduling.x-k8s.io/pod-group"
	// KueuePodGroupNameKey is Kueue's label naming a plain pod's pod group,
	// and KueuePodGroupTotalCountAnnotation its number of pods: the members
	// form a gang of that size.
	KueuePodGroupNameKey              = "kueue.x-k8s.io/pod-group-name"
	KueuePodGroupTotalCountAnnotation = "kueue.x-k8s.io/pod-group-total-count"
)

// PodRole is the value of PodRoleKey.
type PodRole string

const (
	// PodRoleReservation marks the placeholder pods that hold a machine type's capacity.
	PodRoleReservation PodRole = "reservation"
	// PodRoleGuest marks user workloads that consume a machine type.
	PodRoleGuest PodRole = "guest"
)

// NodePoolState is the value of NodePoolKey on a Node.
type NodePoolState string

const (
	// NodePoolReady marks a node that serves guests.
	NodePoolReady NodePoolState = "ready"
	// NodePoolNotReady marks a node of the pool that is unhealthy.
	NodePoolNotReady NodePoolState = "not-ready"
	// NodePoolMaintenance marks a node of the pool put in maintenance.
	NodePoolMaintenance NodePoolState = "maintenance"
)

// ReservedMachineTypeNames are the names a machine type cannot take: its
// node label and taint key imperator.tenzen-y.io/<name> would be one of the
// keys above.
var ReservedMachineTypeNames = []string{
	"machine-group", "machine-type", "pod-role", "node-pool",
	"injecting-container", "inject-resource", "injected",
	"slot", "queue", "admitted-at", "hold", "node-agents",
}

// MachineTypeKeyFor returns the per-type node label and taint key
// imperator.tenzen-y.io/<machine-type>, whose value is the machine group.
func MachineTypeKeyFor(machineType string) string { return Prefix + machineType }

// ReservationName is the name of the reservation StatefulSet and Service of a
// machine type in a group: <machine-type>-<machine-group> (docs/contract.md).
func ReservationName(machineType, machineGroup string) string {
	return machineType + "-" + machineGroup
}

// NodePoolName is the name of a Machine's MachineNodePool: <machine>-node-pool.
func NodePoolName(machineName string) string { return machineName + "-node-pool" }
