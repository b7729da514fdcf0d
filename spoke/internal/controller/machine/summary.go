package machine

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// summarize writes what only summarizes the rest of status:
// status.typesSummary, the machine types the Machine serves as one string
// for kubectl's TYPES column (kubectl prints only the first element of a
// [*] JSONPath), and the Machine's conditions as the machineCondition
// gauges.
func summarize(status *imperatorv1alpha1.MachineStatus, machine *imperatorv1alpha1.Machine) {
	status.TypesSummary = typesSummary(machine.Spec.MachineTypes)
	// Replaced as a whole: the group may have changed, a condition gone.
	machineCondition.DeletePartialMatch(prometheus.Labels{labelMachine: machine.Name})
	group := machine.Labels[imperatorv1alpha1.MachineGroupKey]
	for _, c := range status.Conditions {
		switch c.Type {
		case imperatorv1alpha1.ConditionReady, imperatorv1alpha1.ConditionInsufficientCapacity, imperatorv1alpha1.ConditionOverSubscribed,
			imperatorv1alpha1.ConditionStrayGuests:
			value := 0.0
			if meta.IsStatusConditionTrue(status.Conditions, c.Type) {
				value = 1
			}
			machineCondition.WithLabelValues(group, machine.Name, c.Type).Set(value)
		}
	}
}

// typesSummary joins the names of types with commas, in spec order, e.g.
// "compute-xlarge,compute-small"; empty when there are none.
func typesSummary(types []imperatorv1alpha1.MachineType) string {
	names := make([]string, 0, len(types))
	for _, t := range types {
		names = append(names, t.Name)
	}
	return strings.Join(names, ",")
}
