package reporter

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/wire"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// inventory reads every Machine and its MachineNodePool from r (the
// manager's cache) and returns them in wire form, keyed by Machine name,
// with the instant (of now) they were read at.
func inventory(ctx context.Context, r client.Reader, now func() time.Time) (map[string]*federationv1.Machine, time.Time, error) {
	observedAt := now()
	var machines imperatorv1alpha1.MachineList
	if err := r.List(ctx, &machines); err != nil {
		return nil, observedAt, fmt.Errorf("listing Machines: %w", err)
	}
	out := make(map[string]*federationv1.Machine, len(machines.Items))
	for i := range machines.Items {
		m := &machines.Items[i]
		var pool imperatorv1alpha1.MachineNodePool
		if err := r.Get(ctx, client.ObjectKey{Name: imperatorv1alpha1.NodePoolName(m.Name)}, &pool); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, observedAt, fmt.Errorf("getting MachineNodePool of Machine %q: %w", m.Name, err)
			}
			pool = imperatorv1alpha1.MachineNodePool{}
		}
		out[m.Name] = toWire(m, &pool)
	}
	return out, observedAt, nil
}

// toWire converts a Machine and its node pool (possibly empty) to the
// protocol's Machine.
func toWire(m *imperatorv1alpha1.Machine, pool *imperatorv1alpha1.MachineNodePool) *federationv1.Machine {
	group := m.Labels[imperatorv1alpha1.MachineGroupKey]
	if group == "" {
		group = pool.Spec.MachineGroup
	}
	out := &federationv1.Machine{
		Name:               m.Name,
		Group:              group,
		ObjectGeneration:   m.Generation,
		ObservedGeneration: m.Status.ObservedGeneration,
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, imperatorv1alpha1.ConditionReady); c != nil {
		out.Ready = wire.ConditionStatus(c.Status)
	}
	usage := make(map[string]imperatorv1alpha1.Usage, len(m.Status.AvailableMachines))
	for _, am := range m.Status.AvailableMachines {
		usage[am.Name] = am.Usage
	}
	nodes := map[string]*federationv1.NodeCounts{}
	for _, n := range pool.Status.NodePool {
		counts, ok := nodes[n.MachineType]
		if !ok {
			counts = &federationv1.NodeCounts{}
			nodes[n.MachineType] = counts
		}
		switch n.Condition {
		case imperatorv1alpha1.NodeConditionReady:
			counts.Ready++
		case imperatorv1alpha1.NodeConditionNotReady:
			counts.NotReady++
		case imperatorv1alpha1.NodeConditionMaintenance:
			counts.Maintenance++
		case imperatorv1alpha1.NodeConditionMissing:
			counts.Missing++
		case imperatorv1alpha1.NodeConditionConflict:
			counts.Conflict++
		}
		out.Nodes = append(out.Nodes, &federationv1.PoolNode{Name: n.Name, MachineType: n.MachineType, Condition: wire.NodeCondition(n.Condition)})
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Name < out.Nodes[j].Name })
	for _, mt := range m.Spec.MachineTypes {
		t := &federationv1.MachineType{
			Name:      mt.Name,
			Cpu:       mt.Spec.CPU.String(),
			Memory:    mt.Spec.Memory.String(),
			Available: mt.Available,
			Nodes:     nodes[mt.Name],
			Gpu:       wire.GPU(mt.Spec.GPU),
		}
		if t.Nodes == nil {
			t.Nodes = &federationv1.NodeCounts{}
		}
		if u, ok := usage[mt.Name]; ok {
			t.Usage = wire.Usage(&u)
		}
		out.Types = append(out.Types, t)
	}
	return out
}

func sortedMachines(machines map[string]*federationv1.Machine) []*federationv1.Machine {
	out := make([]*federationv1.Machine, 0, len(machines))
	for _, m := range machines {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func timestamp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
