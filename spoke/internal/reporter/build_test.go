package reporter

import (
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

func TestToWire(t *testing.T) {
	machine := wrappers.MakeMachine("gpu", "team-a").
		Type("compute-xlarge", "40", "128Gi", 2).GPU("nvidia.com/gpu", 2, "NVIDIA-GeForce-RTX-3090", "ampere").
		Type("small", "2", "4Gi", 3).
		Node("n1", "compute-xlarge").Node("n2", "compute-xlarge").Node("n3", "small").
		Obj()
	machine.Generation = 4
	machine.Status = imperatorv1alpha1.MachineStatus{
		ObservedGeneration: 3,
		Conditions:         []metav1.Condition{{Type: imperatorv1alpha1.ConditionReady, Status: metav1.ConditionTrue}},
		AvailableMachines:  []imperatorv1alpha1.AvailableMachine{{Name: "compute-xlarge", Usage: imperatorv1alpha1.Usage{Maximum: 2, Reserved: 1, Used: 1, Waiting: 2, Queued: 1}}},
	}
	pool := &imperatorv1alpha1.MachineNodePool{Status: imperatorv1alpha1.MachineNodePoolStatus{NodePool: []imperatorv1alpha1.NodePoolStatus{
		{Name: "n2", MachineType: "compute-xlarge", Condition: imperatorv1alpha1.NodeConditionMaintenance},
		{Name: "n1", MachineType: "compute-xlarge", Condition: imperatorv1alpha1.NodeConditionReady},
		{Name: "n3", MachineType: "small", Condition: imperatorv1alpha1.NodeConditionMissing},
	}}}
	cases := map[string]struct {
		pool *imperatorv1alpha1.MachineNodePool
		want *federationv1.Machine
	}{
		"with node pool status": {
			pool: pool,
			want: &federationv1.Machine{
				Name: "gpu", Group: "team-a", ObjectGeneration: 4, ObservedGeneration: 3,
				Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
				Types: []*federationv1.MachineType{
					{
						Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: 2,
						Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090", Family: "ampere"},
						Usage: &federationv1.Usage{Maximum: 2, Reserved: 1, Used: 1, Waiting: 2, Queued: 1},
						Nodes: &federationv1.NodeCounts{Ready: 1, Maintenance: 1},
					},
					{Name: "small", Cpu: "2", Memory: "4Gi", Available: 3, Nodes: &federationv1.NodeCounts{Missing: 1}},
				},
				Nodes: []*federationv1.PoolNode{
					{Name: "n1", MachineType: "compute-xlarge", Condition: federationv1.NodeCondition_NODE_CONDITION_READY},
					{Name: "n2", MachineType: "compute-xlarge", Condition: federationv1.NodeCondition_NODE_CONDITION_MAINTENANCE},
					{Name: "n3", MachineType: "small", Condition: federationv1.NodeCondition_NODE_CONDITION_MISSING},
				},
			},
		},
		"node pool not created yet": {
			pool: &imperatorv1alpha1.MachineNodePool{},
			want: &federationv1.Machine{
				Name: "gpu", Group: "team-a", ObjectGeneration: 4, ObservedGeneration: 3,
				Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
				Types: []*federationv1.MachineType{
					{
						Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: 2,
						Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090", Family: "ampere"},
						Usage: &federationv1.Usage{Maximum: 2, Reserved: 1, Used: 1, Waiting: 2, Queued: 1},
						Nodes: &federationv1.NodeCounts{},
					},
					{Name: "small", Cpu: "2", Memory: "4Gi", Available: 3, Nodes: &federationv1.NodeCounts{}},
				},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, toWire(machine, tc.pool), protocmp.Transform()); diff != "" {
				t.Errorf("toWire (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	m := func(name string, available int32) *federationv1.Machine {
		return &federationv1.Machine{Name: name, Types: []*federationv1.MachineType{{Name: "t", Available: available}}}
	}
	cases := map[string]struct {
		sent, current map[string]*federationv1.Machine
		wantUpserts   []*federationv1.Machine
		wantRemovals  []string
	}{
		"nothing changed": {
			sent:    map[string]*federationv1.Machine{"a": m("a", 1)},
			current: map[string]*federationv1.Machine{"a": m("a", 1)},
		},
		"changed, added and removed": {
			sent:         map[string]*federationv1.Machine{"a": m("a", 1), "b": m("b", 1), "c": m("c", 1)},
			current:      map[string]*federationv1.Machine{"a": m("a", 2), "c": m("c", 1), "d": m("d", 1)},
			wantUpserts:  []*federationv1.Machine{m("a", 2), m("d", 1)},
			wantRemovals: []string{"b"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			upserts, removals := diff(tc.sent, tc.current)
			if d := cmp.Diff(tc.wantUpserts, upserts, protocmp.Transform()); d != "" {
				t.Errorf("upserts (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantRemovals, removals); d != "" {
				t.Errorf("removals (-want +got):\n%s", d)
			}
		})
	}
}

func TestRenewalIsDueAfterTwoThirdsOfTheLifeSinceTheAgentObtainedTheCertificate(t *testing.T) {
	issued := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	// The hub backdates NotBefore by 5 minutes to tolerate clock skew.
	const backdate = 5 * time.Minute
	cases := map[string]struct {
		life     time.Duration
		obtained time.Time
		want     time.Time
	}{
		"a year, obtained at issue": {
			life: 365 * 24 * time.Hour, obtained: issued,
			want: issued.Add(365 * 24 * time.Hour * 2 / 3),
		},
		"two minutes, obtained at issue: not due at once despite the backdated NotBefore": {
			life: 2 * time.Minute, obtained: issued,
			want: issued.Add(80 * time.Second),
		},
		"obtained time unknown (Secret of an older agent): counted from NotBefore": {
			life: 30 * time.Minute, obtained: time.Time{},
			want: issued.Add(-backdate).Add(35 * time.Minute * 2 / 3),
		},
		"obtained time after expiry (clock jumped): counted from NotBefore": {
			life: 30 * time.Minute, obtained: issued.Add(time.Hour),
			want: issued.Add(-backdate).Add(35 * time.Minute * 2 / 3),
		},
		"obtained a while after issue (answer delayed)": {
			life: 3 * time.Minute, obtained: issued.Add(30 * time.Second),
			want: issued.Add(30 * time.Second).Add(100 * time.Second),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			leaf := &x509.Certificate{NotBefore: issued.Add(-backdate), NotAfter: issued.Add(tc.life)}
			c := &credential{cert: &tls.Certificate{Leaf: leaf}, obtained: tc.obtained}
			if got := c.renewalTime(); !got.Equal(tc.want) {
				t.Errorf("renewalTime() = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestObtainedAtIsReadOnlyForTheCertificateItWasWrittenFor(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 0, 0, 123, time.UTC)
	mine := &x509.Certificate{SerialNumber: big.NewInt(0xabc)}
	other := &x509.Certificate{SerialNumber: big.NewInt(0xdef)}
	cases := map[string]struct {
		value string
		want  time.Time
	}{
		"written for this certificate":         {value: obtainedAtValue(at, mine), want: at},
		"written for another certificate":      {value: obtainedAtValue(at, other)},
		"no annotation":                        {value: ""},
		"time without serial (edited by hand)": {value: at.Format(time.RFC3339Nano)},
		"unreadable time for this certificate": {value: "yesterday for serial abc"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := obtainedAt(tc.value, mine); !got.Equal(tc.want) {
				t.Errorf("obtainedAt(%q) = %s, want %s", tc.value, got, tc.want)
			}
		})
	}
}
