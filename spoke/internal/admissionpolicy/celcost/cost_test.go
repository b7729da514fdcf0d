// Package celcost measures what the guest injection policies of
// deploy/spoke/policy/injection cost in CEL cost units, evaluated as the API
// server evaluates them (k8s.io/apiserver's composited compiler, the
// variables, the match conditions and the JSONPatch mutation of
// imperator-guest-injection; the variables and validations of
// imperator-guest-injection-refusals), for a heavy guest of a Machine with 50
// types and 100 nodes and of one at the CRD's limits (64 types, 1,000
// nodes). Run: cd spoke/internal/admissionpolicy/celcost && go test -v .
package celcost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"
)

// policyDir is deploy/spoke/policy/injection from this directory.
var policyDir = filepath.Join("..", "..", "..", "..", "deploy", "spoke", "policy", "injection")

// machine is a Machine of group name with types GPU types (every GPU
// selector set) and nodes pool nodes, as the benchmark of the podinjector
// integration suite builds it.
func machine(name string, types, nodes int) *unstructured.Unstructured {
	var machineTypes, pool []any
	for i := range types {
		machineTypes = append(machineTypes, map[string]any{"name": fmt.Sprintf("t%02d", i), "available": int64(4), "spec": map[string]any{
			"cpu": "40", "memory": "128Gi",
			"gpu": map[string]any{"type": "nvidia.com/gpu", "num": int64(2), "product": "NVIDIA-H100-80GB-HBM3", "family": "hopper", "machine": "DGX-H100"},
		}})
	}
	for i := range nodes {
		pool = append(pool, map[string]any{"name": fmt.Sprintf("%s-node-%04d", name, i), "mode": "ready", "taint": true,
			"machineType": []any{map[string]any{"name": fmt.Sprintf("t%02d", i%types)}}})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "imperator.tenzen-y.io/v1alpha1", "kind": "Machine",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"imperator.tenzen-y.io/machine-group": name}},
		"spec":     map[string]any{"machineTypes": machineTypes, "nodePool": pool},
	}}
}

// heavyGuest is the benchmark's guest of machine type typ: three
// containers with requests of their own, three required node selector terms
// of three expressions each, tolerations.
func heavyGuest(group, typ string) *unstructured.Unstructured {
	var terms []any
	for t := range 3 {
		terms = append(terms, map[string]any{"matchExpressions": []any{
			map[string]any{"key": "topology.kubernetes.io/zone", "operator": "In", "values": []any{fmt.Sprintf("zone-%d", t)}},
			map[string]any{"key": "nvidia.com/gpu.family", "operator": "In", "values": []any{"hopper"}},
			map[string]any{"key": "imperator.tenzen-y.io/node-pool", "operator": "NotIn", "values": []any{"maintenance"}},
		}})
	}
	var containers []any
	for _, c := range []string{"main", "sidecar", "logger"} {
		containers = append(containers, map[string]any{"name": c, "image": "pause",
			"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"}}})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "heavy", "namespace": "team-a", "labels": map[string]any{
			"imperator.tenzen-y.io/pod-role": "guest", "imperator.tenzen-y.io/machine-group": group, "imperator.tenzen-y.io/machine-type": typ,
			"imperator.tenzen-y.io/injecting-container": "main",
		}},
		"spec": map[string]any{
			"containers":  containers,
			"tolerations": []any{map[string]any{"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}},
			"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
				"nodeSelectorTerms": terms}}},
		},
	}}
}

// readPolicy decodes the first document of a file of policyDir into obj.
func readPolicy(t *testing.T, file string, obj any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(policyDir, file))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.SplitN(string(raw), "\n---\n", 2)[0]
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("decoding %s: %v", file, err)
	}
}

// input is what the API server binds for a CREATE of pod with params.
func input(pod, params *unstructured.Unstructured) (*admission.VersionedAttributes, *plugincel.OptionalVariableBindings, *corev1.Namespace, *plugincel.OptionalVariableDeclarations) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	attr := admission.NewAttributesRecord(pod, nil, gvk, pod.GetNamespace(), pod.GetName(), gvr, "", admission.Create,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "tenant"})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.GetNamespace(), Labels: map[string]string{
		"kubernetes.io/metadata.name": pod.GetNamespace(), "imperator.tenzen-y.io/inject-resource": "enabled"}}}
	return &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: pod},
		&plugincel.OptionalVariableBindings{VersionedParams: params}, ns,
		&plugincel.OptionalVariableDeclarations{HasParams: true}
}

// variables converts a policy's variables for the compiler.
func variables(vars []admissionregistrationv1.Variable) []plugincel.NamedExpressionAccessor {
	out := make([]plugincel.NamedExpressionAccessor, len(vars))
	for i, v := range vars {
		out[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	return out
}

// cost runs evaluate with the API server's budget for one policy
// evaluation and returns what it used; evaluate returns the budget left.
func cost(t *testing.T, what string, evaluate func(budget int64) (int64, error)) int64 {
	t.Helper()
	left, err := evaluate(celconfig.RuntimeCELCostBudget)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return celconfig.RuntimeCELCostBudget - left
}

func TestInjectionPoliciesStayWithinTheAPIServersCELBudgets(t *testing.T) {
	var injection admissionregistrationv1.MutatingAdmissionPolicy
	readPolicy(t, "guest-injection.yaml", &injection)
	var refusals admissionregistrationv1.ValidatingAdmissionPolicy
	readPolicy(t, "guest-injection-refusals.yaml", &refusals)

	for _, m := range []struct {
		name         string
		types, nodes int
	}{{"big", 50, 100}, {"max", 64, 1000}} {
		params := machine(m.name, m.types, m.nodes)
		pod := heavyGuest(m.name, fmt.Sprintf("t%02d", m.types-1))
		attr, bindings, ns, decls := input(pod, params)
		request := plugincel.CreateAdmissionRequest(attr.Attributes, metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			metav1.GroupVersionKind{Version: "v1", Kind: "Pod"})

		// imperator-guest-injection, as the API server compiles a
		// MutatingAdmissionPolicy (mutating.compilePolicy).
		compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
		if err != nil {
			t.Fatal(err)
		}
		compiler.CompileAndStoreVariables(variables(injection.Spec.Variables), *decls, environment.StoredExpressions)
		var conditions []plugincel.ExpressionAccessor
		for i := range injection.Spec.MatchConditions {
			conditions = append(conditions, &validating.ValidationCondition{Expression: injection.Spec.MatchConditions[i].Expression})
		}
		matchCost := cost(t, "match conditions", func(budget int64) (int64, error) {
			results, left, err := compiler.CompileCondition(conditions, *decls, environment.StoredExpressions).
				ForInput(compiler.CreateContext(context.Background()), attr, request, *bindings, ns, budget)
			for _, r := range results {
				err = errorsJoin(err, r.Error)
			}
			return left, err
		})
		patchDecls := *decls
		patchDecls.HasPatchTypes = true
		mutator := compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: injection.Spec.Mutations[0].JSONPatch.Expression},
			patchDecls, environment.StoredExpressions)
		if errs := mutator.CompilationErrors(); len(errs) > 0 {
			t.Fatalf("compiling the mutation: %v", errs)
		}
		var patches int
		mutationCost := cost(t, "mutation", func(budget int64) (int64, error) {
			result, left, err := mutator.ForInput(compiler.CreateContext(context.Background()), attr, request, *bindings, ns, budget)
			if err == nil && result.Error != nil {
				err = result.Error
			}
			if err == nil {
				list, ok := result.EvalResult.Value().([]any)
				if !ok {
					if native, convErr := result.EvalResult.ConvertToNative(anySliceType); convErr == nil {
						list = native.([]any)
					}
				}
				patches = len(list)
			}
			return left, err
		})
		if patches == 0 {
			t.Errorf("Machine %s: the mutation patched nothing: the guest was not injected", m.name)
		}

		// imperator-guest-injection-refusals, as a ValidatingAdmissionPolicy.
		vcompiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
		if err != nil {
			t.Fatal(err)
		}
		vcompiler.CompileAndStoreVariables(variables(refusals.Spec.Variables), *decls, environment.StoredExpressions)
		var validations []plugincel.ExpressionAccessor
		for _, v := range refusals.Spec.Validations {
			validations = append(validations, &validating.ValidationCondition{Expression: v.Expression})
		}
		refusalCost := cost(t, "refusals", func(budget int64) (int64, error) {
			results, left, err := vcompiler.CompileCondition(validations, *decls, environment.StoredExpressions).
				ForInput(vcompiler.CreateContext(context.Background()), attr, request, *bindings, ns, budget)
			for _, r := range results {
				err = errorsJoin(err, r.Error)
				if err == nil && r.EvalResult.Value() != true {
					err = fmt.Errorf("validation %q refused the guest", r.ExpressionAccessor.GetExpression())
				}
			}
			return left, err
		})
		t.Logf("Machine %s (%d types, %d nodes), heavy guest of its last type: runtime cost %d (match conditions) + %d (variables and JSONPatch mutation, %d operations) + %d (refusals' variables and validations) cost units; budget per policy evaluation %d, per expression %d",
			m.name, m.types, m.nodes, matchCost, mutationCost, patches, refusalCost, celconfig.RuntimeCELCostBudget, celconfig.PerCallLimit)
		for what, c := range map[string]int64{"mutation": mutationCost, "refusals": refusalCost} {
			if c > celconfig.PerCallLimit {
				t.Errorf("Machine %s: the %s cost %d units, above one expression's limit %d", m.name, what, c, celconfig.PerCallLimit)
			}
		}
	}
}

var anySliceType = reflectTypeOf([]any{})
