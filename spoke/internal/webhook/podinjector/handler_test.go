package podinjector

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func testScheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	return scheme
}

func request(t testing.TB, op admissionv1.Operation, raw []byte) admission.Request {
	t.Helper()
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "req-1", Operation: op, Namespace: "team-a", Object: runtime.RawExtension{Raw: raw},
	}}
}

func rawPod(t testing.TB, pod *corev1.Pod) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// applyPatch applies the response's JSON patch to raw, as the API server does.
func applyPatch(t *testing.T, raw []byte, resp admission.Response) []byte {
	t.Helper()
	if len(resp.Patches) == 0 {
		return raw
	}
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatalf("decoding the response patch: %v", err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("applying the response patch: %v", err)
	}
	return patched
}

type failingReader struct{ client.Reader }

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("cache is gone")
}

func TestHandle(t *testing.T) {
	scheme := testScheme(t)
	general := wrappers.GeneralMachine().Obj()
	guestPod := guest().Label(containerL, "main").Obj()
	injected, _, err := Inject(guestPod, general)
	if err != nil {
		t.Fatal(err)
	}
	// admittedAt is what the handler's clock stamps on every guest it admits.
	admittedAt := time.Date(2026, time.November, 25, 18, 4, 5, 123456789, time.FixedZone("CET", 3600))
	injected.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = "2026-11-25T17:04:05.123456789Z"
	// A guest that sets the annotation itself, to jump the queue.
	early := guest().Label(containerL, "main").Obj()
	early.Annotations = map[string]string{imperatorv1alpha1.AdmittedAtAnnotation: "2000-01-01T00:00:00Z"}

	cases := map[string]struct {
		machines []client.Object
		reader   client.Reader
		req      admission.Request
		// wantPod is the pod after applying the response's patch to the request.
		wantPod     *corev1.Pod
		wantRaw     string // checked instead of wantPod when set: a substring of the patched JSON
		wantAllowed bool
		wantCode    int32
		wantMessage string
	}{
		"create of a guest: patched into the injected pod": {
			machines:    []client.Object{general},
			req:         request(t, admissionv1.Create, rawPod(t, guestPod)),
			wantAllowed: true,
			wantPod:     injected,
		},
		"create of a guest stamping its own admission time: overwritten with the injector's": {
			machines:    []client.Object{general},
			req:         request(t, admissionv1.Create, rawPod(t, early)),
			wantAllowed: true,
			wantPod:     injected,
		},
		"create of a guest naming its node: denied naming the field": {
			machines:    []client.Object{general},
			req:         request(t, admissionv1.Create, rawPod(t, guest().Label(containerL, "main").NodeName("michiru").Obj())),
			wantCode:    http.StatusForbidden,
			wantMessage: `spec.nodeName "michiru": a guest does not name its node`,
		},
		"update of a guest: allowed untouched": {
			machines:    []client.Object{general},
			req:         request(t, admissionv1.Update, rawPod(t, guestPod)),
			wantAllowed: true,
			wantPod:     guestPod,
		},
		"update of a guest whose group is gone: still allowed": {
			req:         request(t, admissionv1.Update, rawPod(t, guestPod)),
			wantAllowed: true,
			wantPod:     guestPod,
		},
		"delete: allowed untouched": {
			req:         request(t, admissionv1.Delete, nil),
			wantAllowed: true,
		},
		"create of a pod that is not a guest: allowed untouched": {
			machines:    []client.Object{general},
			req:         request(t, admissionv1.Create, rawPod(t, wrappers.MakePod("team-a", "web").Label("app", "web").Obj())),
			wantAllowed: true,
			wantPod:     wrappers.MakePod("team-a", "web").Label("app", "web").Obj(),
		},
		"create with an undecodable object: 400 with the decoding error": {
			req:         request(t, admissionv1.Create, []byte(`{"spec":{"containers":"not-a-list"}}`)),
			wantCode:    http.StatusBadRequest,
			wantMessage: "decoding the pod",
		},
		"create without an object: 400": {
			req:         request(t, admissionv1.Create, nil),
			wantCode:    http.StatusBadRequest,
			wantMessage: "carries no object",
		},
		"create of a guest of an unknown group: denied with the reason": {
			req:         request(t, admissionv1.Create, rawPod(t, guestPod)),
			wantCode:    http.StatusForbidden,
			wantMessage: `unknown machine group "general-machine"`,
		},
		"create of a guest of a group claimed by two Machines: denied naming both": {
			machines: []client.Object{
				general,
				wrappers.MakeMachine("impostor", group).Type("compute-xlarge", "1", "1Gi", 1).Obj(),
			},
			req:         request(t, admissionv1.Create, rawPod(t, guestPod)),
			wantCode:    http.StatusForbidden,
			wantMessage: "Machines general-machine, impostor are all labelled",
		},
		"cache failure: 500, not a denial": {
			reader:      failingReader{},
			req:         request(t, admissionv1.Create, rawPod(t, guestPod)),
			wantCode:    http.StatusInternalServerError,
			wantMessage: "cache is gone",
		},
		"fields unknown to the agent's API types survive the patch": {
			machines: []client.Object{general},
			req: request(t, admissionv1.Create, []byte(`{"metadata":{"name":"guest","labels":{`+
				`"imperator.tenzen-y.io/machine-group":"general-machine","imperator.tenzen-y.io/machine-type":"compute-xlarge",`+
				`"imperator.tenzen-y.io/pod-role":"guest"}},"spec":{"futureField":{"x":1},`+
				`"containers":[{"name":"main","image":"pause","futureContainerField":true}]}}`)),
			wantAllowed: true,
			wantRaw:     `"futureContainerField":true`,
		},
		"spelling of the user's quantities and empty lists survive": {
			machines: []client.Object{general},
			req: request(t, admissionv1.Create, []byte(`{"metadata":{"name":"guest","labels":{`+
				`"imperator.tenzen-y.io/machine-group":"general-machine","imperator.tenzen-y.io/machine-type":"compute-xlarge",`+
				`"imperator.tenzen-y.io/pod-role":"guest"}},"spec":{"volumes":[],`+
				`"containers":[{"name":"main","image":"pause","resources":{"requests":{"ephemeral-storage":"10Gi"}}}]}}`)),
			wantAllowed: true,
			wantRaw:     `"volumes":[]`,
		},
	}

	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reader := tc.reader
			if reader == nil {
				reader = fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.machines...).Build()
			}
			h := NewHandler(reader, scheme)
			h.Clock = clocktesting.NewFakePassiveClock(admittedAt)
			resp := h.Handle(context.Background(), tc.req)

			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("Allowed = %v, want %v (result %+v)", resp.Allowed, tc.wantAllowed, resp.Result)
			}
			if !tc.wantAllowed {
				if resp.Result == nil || resp.Result.Code != tc.wantCode || !strings.Contains(resp.Result.Message, tc.wantMessage) {
					t.Fatalf("Result = %+v, want code %d and a message containing %q", resp.Result, tc.wantCode, tc.wantMessage)
				}
				if len(resp.Patches) > 0 {
					t.Errorf("a refused request carries a patch: %v", resp.Patches)
				}
				return
			}

			patched := applyPatch(t, tc.req.Object.Raw, resp)
			if tc.wantRaw != "" {
				if !strings.Contains(string(patched), tc.wantRaw) || !strings.Contains(string(patched), imperatorv1alpha1.InjectedAnnotation) {
					t.Errorf("patched pod %s lacks %s or the injection annotation", patched, tc.wantRaw)
				}
				return
			}
			if tc.wantPod == nil {
				if len(resp.Patches) > 0 {
					t.Errorf("unexpected patch %v", resp.Patches)
				}
				return
			}
			got := &corev1.Pod{}
			if err := json.Unmarshal(patched, got); err != nil {
				t.Fatalf("decoding the patched pod: %v", err)
			}
			if diff := cmp.Diff(tc.wantPod, got, quantities); diff != "" {
				t.Errorf("patched pod mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzHandle sends arbitrary bytes as the pod of a CREATE request: the
// handler answers every one of them without panicking.
func FuzzHandle(f *testing.F) {
	f.Add([]byte(`{"metadata":{"labels":{"imperator.tenzen-y.io/pod-role":"guest"}}}`))
	f.Add([]byte(`{"metadata":{"labels":{"imperator.tenzen-y.io/pod-role":"guest","imperator.tenzen-y.io/machine-group":"general-machine","imperator.tenzen-y.io/machine-type":"compute-xlarge"}},"spec":{"containers":[{"name":"main"}]}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":null}}}}`))
	scheme := testScheme(f)
	h := NewHandler(fake.NewClientBuilder().WithScheme(scheme).WithObjects(wrappers.GeneralMachine().Obj()).Build(), scheme)
	f.Fuzz(func(t *testing.T, raw []byte) {
		resp := h.Handle(context.Background(), request(t, admissionv1.Create, raw))
		if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
			t.Fatalf("refused without a message: %+v", resp)
		}
	})
}

// BenchmarkHandle measures one CREATE admission of the seed's guest pod:
// decoding, the Machine lookup, the mutation and the JSON patch.
func BenchmarkHandle(b *testing.B) {
	scheme := testScheme(b)
	h := NewHandler(fake.NewClientBuilder().WithScheme(scheme).WithObjects(wrappers.GeneralMachine().Obj()).Build(), scheme)
	pod := guest().Label(containerL, "main").Request(0, corev1.ResourceEphemeralStorage, "10Gi").
		RequiredNodeAffinity(term(in("topology.kubernetes.io/zone", "a")), term(in("topology.kubernetes.io/zone", "b"))).Obj()
	req := request(b, admissionv1.Create, rawPod(b, pod))
	ctx := context.Background()

	b.ReportAllocs()
	for b.Loop() {
		if resp := h.Handle(ctx, req); !resp.Allowed || len(resp.Patches) == 0 {
			b.Fatalf("guest pod not injected: %+v", resp.Result)
		}
	}
}

// FuzzHandlePatchIsTheInjection checks the webhook's JSON patch, built from
// the fields it decodes, against Inject run on the whole pod: applied to the
// pod as the API server applies it, the patch must give exactly Inject's pod
// (plus admitted-at), whatever affinity, tolerations, gates, annotations and
// resources the pod already has. A patch that drops, reorders or misses a
// change of Inject fails here.
func FuzzHandlePatchIsTheInjection(f *testing.F) {
	for _, seed := range []string{
		"", "\x00\x01\x01\x01", "\x00\x01\x01\x00\x01\x03\x01\x02\x03\x04\x05\x06\x07",
		"\x03\x01\x01\x01\x01\x01\x02\x00\x01\x04\x01\x03\x00\x00\x02\x03\x04",
		"\x02\x00\x01\x00\x01\x04\x01\x02\x02\x01\x03\x01\x03\x02\x04\x00\x00\x04\x01\x03\x03\x05\x02",
	} {
		f.Add([]byte(seed))
	}
	scheme := testScheme(f)
	var objects []client.Object
	for _, m := range fuzzMachines() {
		if m != nil {
			objects = append(objects, m)
		}
	}
	machineOf := func(pod *corev1.Pod) *imperatorv1alpha1.Machine {
		group := pod.Labels[imperatorv1alpha1.MachineGroupKey]
		for _, o := range objects {
			if group != "" && o.GetLabels()[imperatorv1alpha1.MachineGroupKey] == group {
				return o.(*imperatorv1alpha1.Machine)
			}
		}
		return nil
	}
	// And 200 fixed random pods that Inject admits as guests, so that go
	// test alone (without -fuzz) compares many injections, not a few.
	random := rand.New(rand.NewPCG(23, 25))
	for added, tries := 0, 0; added < 200 && tries < 100000; tries++ {
		seed := make([]byte, 64)
		for i := range seed {
			seed[i] = byte(random.UintN(256))
		}
		pod := fuzzPod(&fuzzBytes{data: slices.Clone(seed)})
		if _, record, err := Inject(pod, machineOf(pod)); err == nil && record != nil {
			f.Add(seed)
			added++
		}
	}
	admittedAt := time.Date(2026, 11, 25, 12, 0, 0, 42, time.UTC)
	h := NewHandler(fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).Build(), scheme)
	h.Clock = clocktesting.NewFakePassiveClock(admittedAt)

	f.Fuzz(func(t *testing.T, data []byte) {
		pod := fuzzPod(&fuzzBytes{data: data})
		want, record, err := Inject(pod, machineOf(pod))
		raw := rawPod(t, pod)
		resp := h.Handle(context.Background(), request(t, admissionv1.Create, raw))
		if err != nil || record == nil {
			if err != nil && resp.Allowed {
				t.Fatalf("Inject denies (%v), the webhook admits", err)
			}
			if err == nil && len(resp.Patches) > 0 {
				t.Fatalf("a pod that is not a guest got a patch: %v", resp.Patches)
			}
			return
		}
		if !resp.Allowed {
			t.Fatalf("Inject admits, the webhook refuses: %+v", resp.Result)
		}
		if want.Annotations == nil {
			want.Annotations = map[string]string{}
		}
		want.Annotations[imperatorv1alpha1.AdmittedAtAnnotation] = admittedAt.Format(time.RFC3339Nano)
		// As the API server stores it: JSON drops empty maps and lists.
		stored := &corev1.Pod{}
		if err := json.Unmarshal(rawPod(t, want), stored); err != nil {
			t.Fatal(err)
		}
		want = stored
		got := &corev1.Pod{}
		if err := json.Unmarshal(applyPatch(t, raw, resp), got); err != nil {
			t.Fatalf("decoding the patched pod: %v", err)
		}
		if diff := cmp.Diff(want, got, quantities); diff != "" {
			t.Fatalf("the patched pod is not Inject's pod (-Inject +patched):\n%s", diff)
		}
	})
}
