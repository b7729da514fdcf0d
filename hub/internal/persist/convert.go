package persist

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

var nodeConditionToAPI = map[federationv1.NodeCondition]imperatorv1alpha1.NodeCondition{
	federationv1.NodeCondition_NODE_CONDITION_READY:       imperatorv1alpha1.NodeConditionReady,
	federationv1.NodeCondition_NODE_CONDITION_NOT_READY:   imperatorv1alpha1.NodeConditionNotReady,
	federationv1.NodeCondition_NODE_CONDITION_MAINTENANCE: imperatorv1alpha1.NodeConditionMaintenance,
	federationv1.NodeCondition_NODE_CONDITION_MISSING:     imperatorv1alpha1.NodeConditionMissing,
	federationv1.NodeCondition_NODE_CONDITION_CONFLICT:    imperatorv1alpha1.NodeConditionConflict,
}

var conditionStatusToAPI = map[federationv1.ConditionStatus]metav1.ConditionStatus{
	federationv1.ConditionStatus_CONDITION_STATUS_TRUE:    metav1.ConditionTrue,
	federationv1.ConditionStatus_CONDITION_STATUS_FALSE:   metav1.ConditionFalse,
	federationv1.ConditionStatus_CONDITION_STATUS_UNKNOWN: metav1.ConditionUnknown,
}

func invert[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

var (
	nodeConditionFromAPI   = invert(nodeConditionToAPI)
	conditionStatusFromAPI = invert(conditionStatusToAPI)
)

// machinesToAPI converts the wire Machines into the ClusterInventory's.
func machinesToAPI(machines []*federationv1.Machine) []imperatorv1alpha1.InventoryMachine {
	if len(machines) == 0 {
		return nil
	}
	out := make([]imperatorv1alpha1.InventoryMachine, 0, len(machines))
	for _, m := range machines {
		im := imperatorv1alpha1.InventoryMachine{Name: m.GetName(), Group: m.GetGroup(), Ready: conditionStatusToAPI[m.GetReady()]}
		for _, t := range m.GetTypes() {
			it := imperatorv1alpha1.InventoryMachineType{
				Name:      t.GetName(),
				CPU:       t.GetCpu(),
				Memory:    t.GetMemory(),
				Available: t.GetAvailable(),
				Nodes: imperatorv1alpha1.NodeCounts{
					Ready: t.GetNodes().GetReady(), NotReady: t.GetNodes().GetNotReady(),
					Maintenance: t.GetNodes().GetMaintenance(), Missing: t.GetNodes().GetMissing(), Conflict: t.GetNodes().GetConflict(),
				},
			}
			if u := t.GetUsage(); u != nil {
				it.Usage = &imperatorv1alpha1.Usage{Maximum: u.GetMaximum(), Reserved: u.GetReserved(), Used: u.GetUsed(), Waiting: u.GetWaiting(), Queued: u.GetQueued(), Held: u.GetHeld()}
			}
			if g := t.GetGpu(); g != nil {
				it.GPU = &imperatorv1alpha1.GPUSpec{Type: g.GetType(), Num: g.GetNum(), Product: g.GetProduct(), Family: g.GetFamily(), Machine: g.GetMachine()}
			}
			im.Types = append(im.Types, it)
		}
		for _, n := range m.GetNodes() {
			im.NodePool = append(im.NodePool, imperatorv1alpha1.NodePoolStatus{Name: n.GetName(), MachineType: n.GetMachineType(), Condition: nodeConditionToAPI[n.GetCondition()]})
		}
		out = append(out, im)
	}
	return out
}

// machinesFromAPI converts a ClusterInventory's Machines back to the wire form.
func machinesFromAPI(machines []imperatorv1alpha1.InventoryMachine) []*federationv1.Machine {
	out := make([]*federationv1.Machine, 0, len(machines))
	for _, im := range machines {
		m := &federationv1.Machine{Name: im.Name, Group: im.Group, Ready: conditionStatusFromAPI[im.Ready]}
		for _, it := range im.Types {
			t := &federationv1.MachineType{
				Name: it.Name, Cpu: it.CPU, Memory: it.Memory, Available: it.Available,
				Nodes: &federationv1.NodeCounts{Ready: it.Nodes.Ready, NotReady: it.Nodes.NotReady, Maintenance: it.Nodes.Maintenance, Missing: it.Nodes.Missing, Conflict: it.Nodes.Conflict},
			}
			if u := it.Usage; u != nil {
				t.Usage = &federationv1.Usage{Maximum: u.Maximum, Reserved: u.Reserved, Used: u.Used, Waiting: u.Waiting, Queued: u.Queued, Held: u.Held}
			}
			if g := it.GPU; g != nil {
				t.Gpu = &federationv1.GPU{Type: g.Type, Num: g.Num, Product: g.Product, Family: g.Family, Machine: g.Machine}
			}
			m.Types = append(m.Types, t)
		}
		for _, n := range im.NodePool {
			m.Nodes = append(m.Nodes, &federationv1.PoolNode{Name: n.Name, MachineType: n.MachineType, Condition: nodeConditionFromAPI[n.Condition]})
		}
		out = append(out, m)
	}
	return out
}

// clusterFromInventory is the store value of a persisted inventory.
func clusterFromInventory(inv *imperatorv1alpha1.ClusterInventory) store.Cluster {
	return store.Cluster{
		Name:          inv.Spec.ClusterName,
		AgentVersion:  inv.Status.AgentVersion,
		Epoch:         inv.Status.Epoch,
		Generation:    inv.Status.Generation,
		ObservedAt:    timeOf(inv.Status.ObservedAt),
		LastHeartbeat: timeOf(inv.Status.LastHeartbeatTime),
		Machines:      machinesFromAPI(inv.Status.Machines),
	}
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

func metaTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
