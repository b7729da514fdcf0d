package podinjector

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/controller/provisioningrequest"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// A hold's name is no secret: a guest claims a CapacityHold only through the
// UID the injector stamps from the hold that exists when the guest is
// created, never through a UID it writes itself.
func TestHandleStampsTheHoldAGuestClaims(t *testing.T) {
	scheme := testScheme(t)
	general := wrappers.GeneralMachine().Obj()
	hold := func(name string, uid types.UID, edit func(*wrappers.CapacityHoldWrapper)) *imperatorv1alpha1.CapacityHold {
		w := wrappers.MakeCapacityHold(name, group, "compute-xlarge", 2).ValidUntil(time.Now().Add(time.Hour))
		if edit != nil {
			edit(w)
		}
		h := w.Obj()
		h.UID = uid
		return h
	}
	labelled := func(name string) *corev1.Pod {
		return guest().Label(imperatorv1alpha1.HoldKey, name).Obj()
	}
	forged := func(p *corev1.Pod) *corev1.Pod {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[imperatorv1alpha1.HoldUIDAnnotation] = "uid-of-someone-elses-hold"
		return p
	}
	consumer := func(class string) *corev1.Pod {
		p := guest().Obj()
		p.Annotations = map[string]string{
			imperatorv1alpha1.ConsumeProvisioningRequestAnnotation: "train",
			imperatorv1alpha1.ProvisioningClassNameAnnotation:      class,
		}
		return p
	}
	requestHold := provisioningrequest.HoldName("team-a", "train", group, "compute-xlarge")
	// madeForTrain labels a hold as the agent labels the one it makes for
	// ProvisioningRequest team-a/train.
	madeForTrain := func(w *wrappers.CapacityHoldWrapper) {
		w.Labels = map[string]string{provisioningrequest.RequestNamespaceLabel: "team-a", provisioningrequest.RequestUIDLabel: "uid-of-train"}
		w.Annotations = map[string]string{provisioningrequest.RequestNameAnnotation: "train"}
		w.Namespaces("team-a")
	}

	cases := map[string]struct {
		holds       []client.Object
		pod         *corev1.Pod
		wantUID     string // "" : no hold-uid annotation after the patch
		wantDenied  string
		wantWarning string
	}{
		"a guest labelled with an existing hold's name is stamped with its UID": {
			holds:   []client.Object{hold("train", "uid-train", nil)},
			pod:     labelled("train"),
			wantUID: "uid-train",
		},
		"a ProvisioningRequest consumer of the capacity-hold class claims the hold made for its request and type": {
			holds:   []client.Object{hold("train", "uid-train", nil), hold(requestHold, "uid-request", madeForTrain)},
			pod:     consumer(imperatorv1alpha1.CapacityHoldProvisioningClass),
			wantUID: "uid-request",
		},
		"a hold named as the agent names a request's but not made for it (a fleet hold of another team) neither serves nor denies the request's pods": {
			holds:       []client.Object{hold(requestHold, "uid-squatter", func(w *wrappers.CapacityHoldWrapper) { w.Namespaces("team-b") })},
			pod:         consumer(imperatorv1alpha1.CapacityHoldProvisioningClass),
			wantWarning: "was not made for that request",
		},
		"a consumer of a request the agent made no hold for claims nothing, even if a hold has the request's name": {
			holds:       []client.Object{hold("train", "uid-train", nil)},
			pod:         consumer(imperatorv1alpha1.CapacityHoldProvisioningClass),
			wantWarning: "ProvisioningRequest team-a/train) does not exist",
		},
		"a consumer of the legacy class imperator.tenzen-y.io/capacity-hold claims the hold its annotation names": {
			holds:   []client.Object{hold("train", "uid-train", nil), hold(requestHold, "uid-request", nil)},
			pod:     consumer(imperatorv1alpha1.LegacyCapacityHoldProvisioningClass),
			wantUID: "uid-train",
		},
		"a consumer of another provisioning class claims nothing": {
			holds: []client.Object{hold("train", "uid-train", nil), hold(requestHold, "uid-request", nil)},
			pod:   consumer("check-capacity.autoscaling.x-k8s.io"),
		},
		"a guest naming a hold that does not exist claims nothing and is warned": {
			pod:         labelled("train"),
			wantWarning: `CapacityHold "train" (label imperator.tenzen-y.io/hold) does not exist`,
		},
		"a UID the user wrote without naming a hold is removed": {
			holds: []client.Object{hold("train", "uid-train", nil)},
			pod:   forged(guest().Obj()),
		},
		"a UID the user wrote is replaced by the named hold's": {
			holds:   []client.Object{hold("train", "uid-train", nil)},
			pod:     forged(labelled("train")),
			wantUID: "uid-train",
		},
		"a UID the user wrote for a hold that does not exist is removed": {
			pod:         forged(labelled("train")),
			wantWarning: "does not exist",
		},
		"a hold that does not allow the guest's namespace denies it, naming the label": {
			holds:      []client.Object{hold("train", "uid-train", func(w *wrappers.CapacityHoldWrapper) { w.Namespaces("team-b") })},
			pod:        labelled("train"),
			wantDenied: `label imperator.tenzen-y.io/hold: CapacityHold "train" does not allow guests of namespace "team-a"`,
		},
		"a hold of another machine type denies the guest": {
			holds: []client.Object{func() client.Object {
				h := hold("train", "uid-train", nil)
				h.Spec.MachineType = "compute-medium"
				return h
			}()},
			pod:        labelled("train"),
			wantDenied: `CapacityHold "train" holds compute-medium of machine group "general-machine", not compute-xlarge`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(tc.holds, general)...).Build()
			h := NewHandler(reader, scheme)
			h.Clock = clocktesting.NewFakePassiveClock(time.Now())
			req := request(t, admissionv1.Create, rawPod(t, tc.pod))
			resp := h.Handle(context.Background(), req)
			if tc.wantDenied != "" {
				if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusForbidden ||
					!strings.Contains(resp.Result.Message, tc.wantDenied) {
					t.Fatalf("response %+v, want a denial containing %q", resp.Result, tc.wantDenied)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			got := &corev1.Pod{}
			if err := json.Unmarshal(applyPatch(t, req.Object.Raw, resp), got); err != nil {
				t.Fatal(err)
			}
			uid, stamped := got.Annotations[imperatorv1alpha1.HoldUIDAnnotation]
			if tc.wantUID == "" && stamped {
				t.Errorf("guest stamped with hold UID %q, want none", uid)
			}
			if tc.wantUID != "" && uid != tc.wantUID {
				t.Errorf("guest stamped with hold UID %q, want %q", uid, tc.wantUID)
			}
			if tc.wantWarning == "" && len(resp.Warnings) > 0 {
				t.Errorf("warnings %q, want none", resp.Warnings)
			}
			if tc.wantWarning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tc.wantWarning)) {
				t.Errorf("warnings %q, want one containing %q", resp.Warnings, tc.wantWarning)
			}
		})
	}
}

// A guest created right after its hold, before the cache shows the hold,
// still claims it: the injector reads the hold through the API server, and
// nothing could stamp the claim later.
func TestHandleReadsAHoldTheCacheDoesNotShowYet(t *testing.T) {
	scheme := testScheme(t)
	general := wrappers.GeneralMachine().Obj()
	hold := wrappers.MakeCapacityHold("train", group, "compute-xlarge", 2).ValidUntil(time.Now().Add(time.Hour)).Obj()
	hold.UID = "uid-train"
	h := NewHandler(fake.NewClientBuilder().WithScheme(scheme).WithObjects(general).Build(), scheme)
	h.APIReader = fake.NewClientBuilder().WithScheme(scheme).WithObjects(general, hold).Build()
	h.Clock = clocktesting.NewFakePassiveClock(time.Now())
	req := request(t, admissionv1.Create, rawPod(t, guest().Label(imperatorv1alpha1.HoldKey, "train").Obj()))
	resp := h.Handle(context.Background(), req)
	if !resp.Allowed || len(resp.Warnings) > 0 {
		t.Fatalf("response %+v, warnings %q: want admitted without warning", resp.Result, resp.Warnings)
	}
	got := &corev1.Pod{}
	if err := json.Unmarshal(applyPatch(t, req.Object.Raw, resp), got); err != nil {
		t.Fatal(err)
	}
	if uid := got.Annotations[imperatorv1alpha1.HoldUIDAnnotation]; uid != "uid-train" {
		t.Errorf("guest stamped with hold UID %q, want uid-train", uid)
	}
}
