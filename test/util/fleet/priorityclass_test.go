package fleet

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/utils/ptr"
)

// The suites create the class the agent runs reservation pods at from
// deploy/spoke: it must decode to what the manifest says.
func TestReservationPriorityClassReadsTheShippedManifest(t *testing.T) {
	pc, err := ReservationPriorityClass()
	if err != nil {
		t.Fatal(err)
	}
	got := struct {
		Name             string
		Value            int32
		PreemptionPolicy *corev1.PreemptionPolicy
		GlobalDefault    bool
	}{pc.Name, pc.Value, pc.PreemptionPolicy, pc.GlobalDefault}
	want := got
	want.Name, want.Value, want.PreemptionPolicy, want.GlobalDefault = "imperator-reservation", 0, ptr.To(corev1.PreemptNever), false
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PriorityClass of %s (-want +got):\n%s", ReservationPriorityClassFile, diff)
	}
}

func TestDecodePriorityClassRefusesOtherManifests(t *testing.T) {
	cases := map[string]struct {
		manifest string
		wantErr  string
	}{
		"a PriorityClass": {
			manifest: "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: x\nvalue: 7\n",
		},
		"another kind": {
			manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
			wantErr:  `apiVersion "v1" and kind "ConfigMap", want scheduling.k8s.io/v1 PriorityClass`,
		},
		"an older version": {
			manifest: "apiVersion: scheduling.k8s.io/v1beta1\nkind: PriorityClass\nmetadata:\n  name: x\n",
			wantErr:  `apiVersion "scheduling.k8s.io/v1beta1"`,
		},
		"a misspelt field": {
			manifest: "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: x\npreemptPolicy: Never\n",
			wantErr:  `unknown field "preemptPolicy"`,
		},
		"no name": {
			manifest: "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nvalue: 0\n",
			wantErr:  "metadata.name is empty",
		},
		"two documents": {
			manifest: "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: x\n---\napiVersion: v1\nkind: ConfigMap\n",
			wantErr:  "pc.yaml: 2 YAML documents, want 1",
		},
		"only comments": {
			manifest: "# nothing here\n",
			wantErr:  "pc.yaml: 0 YAML documents, want 1",
		},
		"not YAML": {
			manifest: "{",
			wantErr:  "decoding the PriorityClass of pc.yaml",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pc, err := decodePriorityClass("pc.yaml", []byte(tc.manifest))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				if diff := cmp.Diff(&schedulingv1.PriorityClass{Value: 7}, pc, cmp.FilterPath(func(p cmp.Path) bool {
					return p.Last().String() == ".TypeMeta" || p.Last().String() == ".ObjectMeta"
				}, cmp.Ignore())); diff != "" || pc.Name != "x" {
					t.Errorf("PriorityClass %s (-want +got):\n%s", pc.Name, diff)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
