package machinevalidator

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

const groupKey = imperatorv1alpha1.MachineGroupKey

// errorSummary keeps what a user reads of a field error: its type and path.
var errorSummary = cmpopts.IgnoreFields(field.Error{}, "BadValue", "Detail", "Origin", "CoveredByDeclarative")

func TestValidateMachine(t *testing.T) {
	labelPath := field.NewPath("metadata", "labels").Key(groupKey)
	cases := map[string]struct {
		machine  *imperatorv1alpha1.Machine
		wantErrs field.ErrorList
	}{
		"the sample general-machine Machine": {
			machine: wrappers.GeneralMachine().Obj(),
		},
		"missing group label": {
			machine:  wrappers.GeneralMachine().Label(groupKey, "").Obj(),
			wantErrs: field.ErrorList{field.Required(labelPath, "")},
		},
		"group not usable in object names": {
			machine:  wrappers.GeneralMachine().Label(groupKey, "General_Machine").Obj(),
			wantErrs: field.ErrorList{field.Invalid(labelPath, nil, "")},
		},
		"zero cpu and negative memory": {
			machine: wrappers.MakeMachine("m", "g").Type("small", "0", "-1Gi", 1).Obj(),
			wantErrs: field.ErrorList{
				field.Invalid(field.NewPath("spec", "machineTypes").Index(0).Child("spec", "cpu"), nil, ""),
				field.Invalid(field.NewPath("spec", "machineTypes").Index(0).Child("spec", "memory"), nil, ""),
			},
		},
		"reservation name starting with a digit": {
			machine:  wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).Type("4xl", "1", "1Gi", 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "machineTypes").Index(1).Child("name"), nil, "")},
		},
		"type named like one of the system's keys": {
			machine:  wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).Type("node-pool", "1", "1Gi", 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "machineTypes").Index(1).Child("name"), nil, "")},
		},
		"type named slot, whose node label and taint would be the slot gate's key": {
			machine:  wrappers.MakeMachine("m", "g").Type("slot", "1", "1Gi", 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "machineTypes").Index(0).Child("name"), nil, "")},
		},
		"reservation name too long": {
			machine: wrappers.MakeMachine("m", strings.Repeat("g", 40)).
				Type(strings.Repeat("t", 30), "1", "1Gi", 1).Obj(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "machineTypes").Index(0).Child("name"), nil, "")},
		},
		"unknown machine type": {
			machine: wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).
				Node("n1", "small").Node("n2", "large").Obj(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "nodePool").Index(1).Child("machineType").Index(0).Child("name"), nil, "")},
		},
		"a selector entry": {
			machine: wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).
				Select(map[string]string{imperatorv1alpha1.GPUProductLabel: "NVIDIA-H100-80GB-HBM3"}, "small").Node("n1", "small").Obj(),
		},
		"a node named twice": {
			machine: wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).
				Node("n1", "small").Node("n1", "small").Obj(),
			wantErrs: field.ErrorList{field.Duplicate(field.NewPath("spec", "nodePool").Index(1).Child("name"), nil)},
		},
		"neither name nor selector": {
			machine:  wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).Node("", "small").Obj(),
			wantErrs: field.ErrorList{field.Required(field.NewPath("spec", "nodePool").Index(0).Child("name"), "")},
		},
		"both name and selector": {
			machine: func() *imperatorv1alpha1.Machine {
				m := wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).Select(map[string]string{"a": "b"}, "small").Obj()
				m.Spec.NodePool[0].Name = "n1"
				return m
			}(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "nodePool").Index(0).Child("nodeSelector"), nil, "")},
		},
		"an empty selector, which would take every node": {
			machine:  wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).Select(nil, "small").Obj(),
			wantErrs: field.ErrorList{field.Required(field.NewPath("spec", "nodePool").Index(0).Child("nodeSelector"), "")},
		},
		"a selector that does not parse": {
			machine: func() *imperatorv1alpha1.Machine {
				m := wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).Select(nil, "small").Obj()
				m.Spec.NodePool[0].NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}
				return m
			}(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "nodePool").Index(0).Child("nodeSelector", "matchExpressions").Index(0).Child("operator"), nil, "")},
		},
		"two machine types on one node": {
			machine: func() *imperatorv1alpha1.Machine {
				m := wrappers.MakeMachine("m", "g").Type("small", "1", "1Gi", 1).Type("large", "2", "2Gi", 1).
					Node("n1", "small").Obj()
				m.Spec.NodePool[0].MachineType = append(m.Spec.NodePool[0].MachineType, imperatorv1alpha1.MachineTypeRef{Name: "large"})
				return m
			}(),
			wantErrs: field.ErrorList{field.Invalid(field.NewPath("spec", "nodePool").Index(0).Child("machineType"), nil, "")},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ValidateMachine(tc.machine)
			if diff := cmp.Diff(tc.wantErrs, got, errorSummary, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ValidateMachine() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateMachineRefusesReservedNames: no machine type takes a name whose
// key imperator.tenzen-y.io/<name> is one of Imperator's own (slot: the
// scheduling gate; queue, admitted-at: guest annotations; hold: a guest label).
func TestValidateMachineRefusesReservedNames(t *testing.T) {
	for _, name := range imperatorv1alpha1.ReservedMachineTypeNames {
		t.Run(name, func(t *testing.T) {
			errs := ValidateMachine(wrappers.MakeMachine("m", "g").Type(name, "1", "1Gi", 1).Obj())
			want := "spec.machineTypes[0].name: Invalid value: \"" + name + "\": is reserved: imperator.tenzen-y.io/" + name
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
				t.Fatalf("ValidateMachine() = %v, want one error containing %q", errs, want)
			}
		})
	}
	for _, name := range []string{"slot", "queue", "admitted-at", "hold"} {
		if !slices.Contains(imperatorv1alpha1.ReservedMachineTypeNames, name) {
			t.Errorf("%q is not reserved: a machine type of that name would share its node label and taint key with the guest queue's", name)
		}
	}
}

func TestValidateLabelUpdate(t *testing.T) {
	cases := map[string]struct {
		oldGroup, newGroup string
		wantErr            bool
	}{
		"unchanged":                 {oldGroup: "a", newGroup: "a"},
		"changed":                   {oldGroup: "a", newGroup: "b", wantErr: true},
		"removed":                   {oldGroup: "a", newGroup: "", wantErr: true},
		"set on an old Machine":     {oldGroup: "", newGroup: "a"},
		"still unset on an old one": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ValidateLabelUpdate(wrappers.MakeMachine("m", tc.oldGroup).Label(groupKey, tc.oldGroup).Obj(),
				wrappers.MakeMachine("m", tc.newGroup).Label(groupKey, tc.newGroup).Obj())
			if (len(got) > 0) != tc.wantErr {
				t.Errorf("ValidateLabelUpdate() = %v, want an error: %v", got, tc.wantErr)
			}
		})
	}
}

func newReader(t *testing.T, machines ...*imperatorv1alpha1.Machine) client.Reader {
	t.Helper()
	objs := make([]client.Object, 0, len(machines))
	for _, m := range machines {
		objs = append(objs, m)
	}
	return newReaderWith(t, objs...)
}

// newReaderWith is a cache holding objs (Machines and Nodes) with the
// validator's indexes.
func newReaderWith(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&imperatorv1alpha1.Machine{}, MachineNodeNameKey, indexMachineNodeNames).
		WithIndex(&imperatorv1alpha1.Machine{}, MachineSelectorKey, indexMachineSelects).
		WithObjects(objs...).Build()
}

func TestValidateAgainstOthers(t *testing.T) {
	existing := wrappers.MakeMachine("first", "first").Type("small", "1", "1Gi", 1).
		Node("shared", "small").Node("first-only", "small").Obj()
	cases := map[string]struct {
		machine, oldMachine *imperatorv1alpha1.Machine
		wantErrs            field.ErrorList
		wantDetail          string
	}{
		"other nodes and group": {
			machine: wrappers.MakeMachine("second", "second").Type("small", "1", "1Gi", 1).Node("own", "small").Obj(),
		},
		"node of another Machine": {
			machine: wrappers.MakeMachine("second", "second").Type("small", "1", "1Gi", 1).
				Node("own", "small").Node("shared", "small").Obj(),
			wantErrs:   field.ErrorList{field.Invalid(field.NewPath("spec", "nodePool").Index(1).Child("name"), nil, "")},
			wantDetail: `node shared is already in Machine first (machine group "first"); a node belongs to one Machine`,
		},
		"group of another Machine": {
			machine:    wrappers.MakeMachine("second", "first").Type("small", "1", "1Gi", 1).Obj(),
			wantErrs:   field.ErrorList{field.Invalid(field.NewPath("metadata", "labels").Key(groupKey), nil, "")},
			wantDetail: `machine group "first" is already used by Machine first; a machine group belongs to one Machine`,
		},
		"updating the Machine itself": {
			machine:    wrappers.MakeMachine("first", "first").Type("small", "1", "1Gi", 1).Node("shared", "small").Obj(),
			oldMachine: existing,
		},
		"an update keeping a node admitted by a race": {
			machine: wrappers.MakeMachine("second", "second").Type("small", "1", "1Gi", 2).Node("shared", "small").Obj(),
			oldMachine: wrappers.MakeMachine("second", "second").Type("small", "1", "1Gi", 1).
				Node("shared", "small").Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := &Validator{Reader: newReader(t, existing.DeepCopy())}
			got, err := v.validateAgainstOthers(context.Background(), tc.machine, tc.oldMachine)
			if err != nil {
				t.Fatalf("validateAgainstOthers() error = %v", err)
			}
			if diff := cmp.Diff(tc.wantErrs, got, errorSummary, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("validateAgainstOthers() mismatch (-want +got):\n%s", diff)
			}
			if tc.wantDetail != "" && len(got) > 0 && got[0].Detail != tc.wantDetail {
				t.Errorf("detail = %q, want %q", got[0].Detail, tc.wantDetail)
			}
		})
	}
}

func TestValidateSelectorOverlap(t *testing.T) {
	const h100 = "NVIDIA-H100-80GB-HBM3"
	byProduct := map[string]string{imperatorv1alpha1.GPUProductLabel: h100}
	named := wrappers.MakeMachine("named", "named-group").Type("small", "1", "1Gi", 1).Node("kasumi", "small").Obj()
	selects := wrappers.MakeMachine("selects", "selects-group").Type("small", "1", "1Gi", 1).Select(byProduct, "small").Obj()
	kasumi := wrappers.MakeNode("kasumi").Label(imperatorv1alpha1.GPUProductLabel, h100).Obj()
	megumi := wrappers.MakeNode("megumi").Label(imperatorv1alpha1.GPUProductLabel, h100).Obj()
	plain := wrappers.MakeNode("plain").Obj()
	selectorPath := field.NewPath("spec", "nodePool").Index(0).Child("nodeSelector")
	namePath := field.NewPath("spec", "nodePool").Index(0).Child("name")

	cases := map[string]struct {
		existing            []client.Object
		machine, oldMachine *imperatorv1alpha1.Machine
		wantErrs            field.ErrorList
		wantDetails         []string
	}{
		"a selector of nodes nobody has": {
			existing: []client.Object{kasumi, megumi},
			machine:  wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).Select(byProduct, "small").Obj(),
		},
		"a selector matching a node another Machine names": {
			existing:    []client.Object{named, kasumi, megumi},
			machine:     wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).Select(byProduct, "small").Obj(),
			wantErrs:    field.ErrorList{field.Invalid(selectorPath, nil, "")},
			wantDetails: []string{`selects node kasumi, which Machine named (machine group "named-group") names; a node belongs to one Machine`},
		},
		"two selectors of different groups matching an existing node": {
			existing: []client.Object{selects, kasumi, megumi},
			machine:  wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).Select(byProduct, "small").Obj(),
			wantErrs: field.ErrorList{field.Invalid(selectorPath, nil, ""), field.Invalid(selectorPath, nil, "")},
			wantDetails: []string{
				`selects node kasumi, which Machine selects (machine group "selects-group") selects by its spec.nodePool[0].nodeSelector; a node belongs to one Machine`,
				`selects node megumi, which Machine selects (machine group "selects-group") selects by its spec.nodePool[0].nodeSelector; a node belongs to one Machine`,
			},
		},
		"two selectors that match no existing node in common": {
			existing: []client.Object{selects, plain},
			machine: wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).
				Select(map[string]string{corev1.LabelHostname: "plain"}, "small").Obj(),
		},
		"naming a node another Machine's selector matches": {
			existing:    []client.Object{selects, kasumi},
			machine:     wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).Node("kasumi", "small").Obj(),
			wantErrs:    field.ErrorList{field.Invalid(namePath, nil, "")},
			wantDetails: []string{`node kasumi is already in Machine selects (machine group "selects-group") through its spec.nodePool[0].nodeSelector; a node belongs to one Machine`},
		},
		"naming a node that does not exist yet": {
			existing: []client.Object{selects},
			machine:  wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).Node("kasumi", "small").Obj(),
		},
		"a Machine selecting a node it names itself": {
			existing: []client.Object{kasumi},
			machine: wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).
				Select(byProduct, "small").Node("kasumi", "small").Obj(),
		},
		"an update keeping a selector admitted by a race": {
			existing: []client.Object{named, kasumi},
			machine: wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).
				Select(byProduct, "small").Maintenance().Obj(),
			oldMachine: wrappers.MakeMachine("new", "new-group").Type("small", "1", "1Gi", 1).Select(byProduct, "small").Obj(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := &Validator{Reader: newReaderWith(t, tc.existing...)}
			got, err := v.validateAgainstOthers(context.Background(), tc.machine, tc.oldMachine)
			if err != nil {
				t.Fatalf("validateAgainstOthers() error = %v", err)
			}
			if diff := cmp.Diff(tc.wantErrs, got, errorSummary, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("validateAgainstOthers() mismatch (-want +got):\n%s", diff)
			}
			var details []string
			for _, e := range got {
				details = append(details, e.Detail)
			}
			if diff := cmp.Diff(tc.wantDetails, details, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("details (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateCreateReturnsInvalid(t *testing.T) {
	v := &Validator{Reader: newReader(t)}
	_, err := v.ValidateCreate(context.Background(), wrappers.GeneralMachine().Label(groupKey, "").Obj())
	if !apierrors.IsInvalid(err) {
		t.Fatalf("ValidateCreate() error = %v, want an Invalid status error", err)
	}
	if !strings.Contains(err.Error(), "metadata.labels[imperator.tenzen-y.io/machine-group]: Required value") {
		t.Errorf("ValidateCreate() error = %q, want it to name the label", err)
	}
}

func TestValidateUpdateOfDeletedMachine(t *testing.T) {
	v := &Validator{Reader: newReader(t)}
	machine := wrappers.GeneralMachine().Label(groupKey, "").Obj()
	machine.DeletionTimestamp = ptr.To(metav1.Now())
	machine.Spec.MachineTypes[0].Spec.CPU = resource.MustParse("0")
	if _, err := v.ValidateUpdate(context.Background(), wrappers.GeneralMachine().Obj(), machine); err != nil {
		t.Errorf("ValidateUpdate() of a Machine being deleted = %v, want it admitted", err)
	}
}

func TestValidateUpdateOfMetadataOnly(t *testing.T) {
	v := &Validator{Reader: newReader(t)}
	// Admitted before the validator ran: no group label, zero cpu.
	old := wrappers.GeneralMachine().Label(groupKey, "").Obj()
	old.Spec.MachineTypes[0].Spec.CPU = resource.MustParse("0")
	withFinalizer := old.DeepCopy()
	withFinalizer.Finalizers = append(withFinalizer.Finalizers, "example.com/cleanup")
	if _, err := v.ValidateUpdate(context.Background(), old, withFinalizer); err != nil {
		t.Errorf("ValidateUpdate() adding a finalizer = %v, want it admitted", err)
	}
	specChange := withFinalizer.DeepCopy()
	specChange.Spec.MachineTypes[1].Available++
	if _, err := v.ValidateUpdate(context.Background(), old, specChange); !apierrors.IsInvalid(err) {
		t.Errorf("ValidateUpdate() changing the spec = %v, want an Invalid error", err)
	}
}
