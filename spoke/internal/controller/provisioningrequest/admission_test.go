package provisioningrequest

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

func TestOptedIn(t *testing.T) {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	enabled := map[string]string{imperatorv1alpha1.InjectResourceKey: imperatorv1alpha1.InjectResourceEnabled}
	cases := map[string]struct {
		ns   *corev1.Namespace
		want string // "" accepts; else a part of the message
	}{
		"labelled":           {ns: ns("team-a", enabled)},
		"legacy label":       {ns: ns("team-a", map[string]string{imperatorv1alpha1.LegacyInjectResourceKey: imperatorv1alpha1.InjectResourceEnabled})},
		"no label":           {ns: ns("team-b", nil), want: "namespace team-b is not opted in to guest injection (label imperator.tenzen-y.io/inject-resource=enabled)"},
		"label disabled":     {ns: ns("team-b", map[string]string{imperatorv1alpha1.InjectResourceKey: "disabled"}), want: "namespace team-b is not opted in"},
		"kube-system":        {ns: ns("kube-system", enabled), want: "namespace kube-system never gets guests injected"},
		"the agent's own":    {ns: ns("imperator-system", enabled), want: "namespace imperator-system never gets guests injected"},
		"no agent namespace": {ns: ns("", nil), want: "is not opted in"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := OptedIn(tc.ns, "imperator-system")
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("OptedIn refused: %v", got)
			case tc.want != "" && got == nil:
				t.Fatal("OptedIn accepted, want a refusal")
			case tc.want != "" && (got.Reason != ReasonNamespaceNotInjected || !strings.Contains(got.Message, tc.want)):
				t.Fatalf("OptedIn = %v, want reason %s and a message with %q", got, ReasonNamespaceNotInjected, tc.want)
			}
		})
	}
}

func TestWithinCap(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	hold := func(namespace, request, uid string, count int32, validUntil time.Time, mutate ...func(*imperatorv1alpha1.CapacityHold)) imperatorv1alpha1.CapacityHold {
		h := imperatorv1alpha1.CapacityHold{ObjectMeta: metav1.ObjectMeta{Name: "pr-" + request,
			Labels:      map[string]string{RequestNamespaceLabel: namespace, RequestUIDLabel: uid},
			Annotations: map[string]string{RequestNameAnnotation: request}},
			Spec: imperatorv1alpha1.CapacityHoldSpec{Count: count, ValidUntil: metav1.NewTime(validUntil)}}
		for _, m := range mutate {
			m(&h)
		}
		return h
	}
	later := now.Add(BookingDuration)
	three := []Booking{{MachineGroup: "g", MachineType: "t", Count: 2}, {MachineGroup: "g", MachineType: "u", Count: 1}}
	cases := map[string]struct {
		max   int32
		holds []imperatorv1alpha1.CapacityHold
		want  string
	}{
		"no cap":                        {max: 0, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "a", "ua", 1000, later)}},
		"fits exactly":                  {max: 5, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "a", "ua", 2, later)}},
		"alone above the cap":           {max: 2, want: "hold 0 units (requests: none) and this one asks 3 more: above the cap of 2 units per namespace (--provisioning-max-units-per-namespace)"},
		"with another request":          {max: 5, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "a", "ua", 2, later), hold("team-a", "b", "ub", 1, later)}, want: "namespace team-a's ProvisioningRequests hold 3 units (requests: a, b) and this one asks 3 more"},
		"its own holds do not count":    {max: 3, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "self", "me", 3, later)}},
		"another namespace's":           {max: 3, holds: []imperatorv1alpha1.CapacityHold{hold("team-b", "a", "ua", 3, later)}},
		"a consumed or expired booking": {max: 3, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "a", "ua", 3, now)}},
		"a failed hold": {max: 3, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "a", "ua", 3, later, func(h *imperatorv1alpha1.CapacityHold) {
			h.Status.Conditions = []metav1.Condition{{Type: imperatorv1alpha1.HoldConditionFailed, Status: metav1.ConditionTrue}}
		})}},
		"a hold being deleted": {max: 3, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "a", "ua", 3, later, func(h *imperatorv1alpha1.CapacityHold) {
			h.DeletionTimestamp = &metav1.Time{Time: now}
		})}},
		"counts do not wrap": {max: 2147483647, holds: []imperatorv1alpha1.CapacityHold{hold("team-a", "a", "ua", 2147483647, later)}, want: "hold 2147483647 units"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := WithinCap("team-a", "me", three, tc.holds, tc.max, now)
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("WithinCap refused: %v", got)
			case tc.want != "" && got == nil:
				t.Fatal("WithinCap accepted, want a refusal")
			case tc.want != "" && (got.Reason != ReasonNamespaceCapReached || !strings.Contains(got.Message, tc.want)):
				t.Fatalf("WithinCap = %v, want reason %s and a message with %q", got, ReasonNamespaceCapReached, tc.want)
			}
		})
	}
}
