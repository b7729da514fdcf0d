package podinjector

import (
	"context"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// The handler decodes only the labels and annotations it reads, named in
// struct tags; a key renamed in the API package but not in the tags would
// make every guest look like a plain pod.
func TestDecodedLabelsAndAnnotationsAreTheContractKeys(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[guestLabels](), []string{imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.MachineGroupKey,
			imperatorv1alpha1.MachineTypeKey, imperatorv1alpha1.InjectingContainerKey, imperatorv1alpha1.HoldKey}},
		{reflect.TypeFor[guestAnnotations](), []string{imperatorv1alpha1.InjectedAnnotation, imperatorv1alpha1.AdmittedAtAnnotation,
			imperatorv1alpha1.HoldUIDAnnotation, imperatorv1alpha1.ConsumeProvisioningRequestAnnotation,
			imperatorv1alpha1.ProvisioningClassNameAnnotation}},
	} {
		var got []string
		for field := range tc.typ.Fields() {
			got = append(got, field.Tag.Get("json"))
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s decodes %v, want %v", tc.typ.Name(), got, tc.want)
		}
	}
}

// Label keys are case-sensitive: a pod labelled with our keys in other case
// is not a guest, and the injector must leave it alone (encoding/json would
// match the tags case-insensitively and inject it).
func TestPodLabelledInOtherCaseIsNotInjected(t *testing.T) {
	scheme := testScheme(t)
	h := NewHandler(fake.NewClientBuilder().WithScheme(scheme).WithObjects(wrappers.GeneralMachine().Obj()).Build(), scheme)
	pod := wrappers.MakePod("team-a", "plain").Obj()
	for _, key := range []string{imperatorv1alpha1.PodRoleKey, imperatorv1alpha1.MachineGroupKey, imperatorv1alpha1.MachineTypeKey} {
		pod.Labels[strings.ToUpper(key[len(imperatorv1alpha1.Prefix):])] = "x"
	}
	pod.Labels[imperatorv1alpha1.Prefix+"POD-ROLE"] = string(imperatorv1alpha1.PodRoleGuest)
	pod.Labels[imperatorv1alpha1.Prefix+"Machine-Group"] = group
	pod.Labels[imperatorv1alpha1.Prefix+"MACHINE-TYPE"] = "compute-xlarge"

	resp := h.Handle(context.Background(), request(t, admissionv1.Create, rawPod(t, pod)))
	if !resp.Allowed || len(resp.Patches) != 0 {
		t.Fatalf("a pod whose labels only differ in case from the guest labels was changed: allowed=%v, patches=%v", resp.Allowed, resp.Patches)
	}
}
