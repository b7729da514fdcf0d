package persist

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/wire"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// machinesToAPI converts the wire Machines into the ClusterInventory's.
func machinesToAPI(machines []*federationv1.Machine) []imperatorv1alpha1.InventoryMachine {
	if len(machines) == 0 {
		return nil
	}
	out := make([]imperatorv1alpha1.InventoryMachine, 0, len(machines))
	for _, m := range machines {
		im := imperatorv1alpha1.InventoryMachine{Name: m.GetName(), Group: m.GetGroup(), Ready: wire.ConditionStatusToAPI(m.GetReady())}
		for _, t := range m.GetTypes() {
			it := imperatorv1alpha1.InventoryMachineType{
				Name:      t.GetName(),
				CPU:       t.GetCpu(),
				Memory:    t.GetMemory(),
				Available: t.GetAvailable(),
				Nodes:     wire.NodeCountsToAPI(t.GetNodes()),
				Usage:     wire.UsageToAPI(t.GetUsage()),
				GPU:       wire.GPUToAPI(t.GetGpu()),
			}
			im.Types = append(im.Types, it)
		}
		for _, n := range m.GetNodes() {
			im.NodePool = append(im.NodePool, imperatorv1alpha1.NodePoolStatus{Name: n.GetName(), MachineType: n.GetMachineType(), Condition: wire.NodeConditionToAPI(n.GetCondition())})
		}
		out = append(out, im)
	}
	return out
}

// machinesFromAPI converts a ClusterInventory's Machines back to the wire form.
func machinesFromAPI(machines []imperatorv1alpha1.InventoryMachine) []*federationv1.Machine {
	out := make([]*federationv1.Machine, 0, len(machines))
	for _, im := range machines {
		m := &federationv1.Machine{Name: im.Name, Group: im.Group, Ready: wire.ConditionStatus(im.Ready)}
		for _, it := range im.Types {
			t := &federationv1.MachineType{
				Name: it.Name, Cpu: it.CPU, Memory: it.Memory, Available: it.Available,
				Nodes: wire.NodeCounts(it.Nodes), Usage: wire.Usage(it.Usage), Gpu: wire.GPU(it.GPU),
			}
			m.Types = append(m.Types, t)
		}
		for _, n := range im.NodePool {
			m.Nodes = append(m.Nodes, &federationv1.PoolNode{Name: n.Name, MachineType: n.MachineType, Condition: wire.NodeCondition(n.Condition)})
		}
		out = append(out, m)
	}
	return out
}

// clusterFromInventory is the store value of a persisted inventory.
func clusterFromInventory(inv *imperatorv1alpha1.ClusterInventory) store.Cluster {
	return store.Cluster{
		Name:                 inv.Spec.ClusterName,
		AgentVersion:         inv.Status.AgentVersion,
		AgentMode:            inv.Status.AgentMode,
		InjectionUnavailable: inv.Status.InjectionUnavailable,
		Epoch:                inv.Status.Epoch,
		Generation:           inv.Status.Generation,
		ObservedAt:           timeOf(inv.Status.ObservedAt),
		LastHeartbeat:        timeOf(inv.Status.LastHeartbeatTime),
		Machines:             machinesFromAPI(inv.Status.Machines),
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
