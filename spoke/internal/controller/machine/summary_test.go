package machine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/repo"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// kubectlColumns is what the API server answers kubectl get with for m:
// the printer columns, by name, evaluated as the apiextensions-apiserver's
// table convertor does (tableconvertor.ConvertToTable): the column's
// JSONPath, and of its results only the first value.
func kubectlColumns(t *testing.T, columns []apiextensionsv1.CustomResourceColumnDefinition, m *imperatorv1alpha1.Machine) map[string]any {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for _, c := range columns {
		path := jsonpath.New(c.Name).AllowMissingKeys(true)
		if err := path.Parse("{" + c.JSONPath + "}"); err != nil {
			t.Fatalf("column %s: %v", c.Name, err)
		}
		results, err := path.FindResults(content)
		if err != nil || len(results) == 0 || len(results[0]) == 0 {
			out[c.Name] = nil
			continue
		}
		out[c.Name] = results[0][0].Interface()
	}
	return out
}

func machineCRDColumns(t *testing.T) []apiextensionsv1.CustomResourceColumnDefinition {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy/spoke/crd/imperator.tenzen-y.io_machines.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].AdditionalPrinterColumns
}

func TestKubectlGetMachinesShowsEveryTypeInTypes(t *testing.T) {
	machine := wrappers.MakeMachine("gpu-a", "training").
		Type("compute-xlarge", "32", "128Gi", 2).
		Type("compute-small", "4", "16Gi", 8).Obj()
	setStatus(&machine.Status, machine, &reconcileState{}, nil)

	got := kubectlColumns(t, machineCRDColumns(t), machine)["Types"]
	if got != "compute-xlarge,compute-small" {
		t.Errorf("kubectl get machines TYPES = %v, want compute-xlarge,compute-small", got)
	}

	// What the column showed before: only the first type.
	old := []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Types", Type: "string", JSONPath: ".spec.machineTypes[*].name"}}
	if got := kubectlColumns(t, old, machine)["Types"]; got != "compute-xlarge" {
		t.Errorf("a [*] column shows %v; the reason for status.typesSummary is that it shows only compute-xlarge", got)
	}
}

func TestMachineConditionGaugesFollowTheStatus(t *testing.T) {
	machine := wrappers.MakeMachine("gpu-b", "training").Type("a100", "32", "128Gi", 2).Obj()
	meta.SetStatusCondition(&machine.Status.Conditions, metav1.Condition{Type: imperatorv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready"})
	meta.SetStatusCondition(&machine.Status.Conditions, metav1.Condition{Type: imperatorv1alpha1.ConditionOverSubscribed, Status: metav1.ConditionTrue, Reason: imperatorv1alpha1.ReasonGuestsExceedAvailable})
	meta.SetStatusCondition(&machine.Status.Conditions, metav1.Condition{Type: imperatorv1alpha1.ConditionInsufficientCapacity, Status: metav1.ConditionFalse, Reason: imperatorv1alpha1.ReasonCapacitySufficient})
	summarize(&machine.Status, machine)
	gauge := func(condition string) float64 {
		return testutil.ToFloat64(machineCondition.WithLabelValues("training", "gpu-b", condition))
	}
	got := map[string]float64{}
	for _, c := range []string{imperatorv1alpha1.ConditionReady, imperatorv1alpha1.ConditionOverSubscribed, imperatorv1alpha1.ConditionInsufficientCapacity} {
		got[c] = gauge(c)
	}
	want := map[string]float64{imperatorv1alpha1.ConditionReady: 1, imperatorv1alpha1.ConditionOverSubscribed: 1, imperatorv1alpha1.ConditionInsufficientCapacity: 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("imperator_machine_condition (-want +got):\n%s", diff)
	}

	// The Machine is deleted: its series go.
	var series usageSeries
	series.set("/gpu-b", "", "", nil)
	if n := machineCondition.DeletePartialMatch(map[string]string{labelMachine: "gpu-b"}); n != 0 {
		t.Errorf("imperator_machine_condition has %d series of gpu-b after it was deleted, want 0", n)
	}
}
