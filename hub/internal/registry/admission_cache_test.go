package registry

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/identity"
)

// informerLike reads one ManagedCluster as the manager's cache does: a deep
// copy of the object it holds, no encoding.
type informerLike struct{ mc *clusterv1.ManagedCluster }

func (r *informerLike) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mc.DeepCopyInto(obj.(*clusterv1.ManagedCluster))
	return nil
}

func (r *informerLike) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

// BenchmarkAdmitCurrentCertificateFromCache is the hub's cost of admitting
// one message of a Report stream (every message is admitted): a connected
// spoke's current certificate, decided from the cache.
func BenchmarkAdmitCurrentCertificateFromCache(b *testing.B) {
	joined := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	until := joined.Add(time.Hour)
	raw, err := json.Marshal(CertificateRecord{
		Current: "4f2a", CurrentKey: "9d1c0b7e5a3f2d4c6b8a0e1f3d5c7b9a1e3f5d7c9b0a2e4f6d8c0b1a3e5f7d9c",
		JoinSerial: "1a2b", JoinedAt: joined, Replaced: "3c4d", ReplacedUntil: &until,
		Renewed: []string{"3c4d", "4f2a"},
	})
	if err != nil {
		b.Fatal(err)
	}
	mc := managedCluster(true, false)
	mc.ResourceVersion = "4711"
	mc.Annotations = map[string]string{CertificatesAnnotation: string(raw)}
	mc.Status.Conditions = []metav1.Condition{{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionTrue, Reason: "Streaming", Message: "the spoke streams to replica hub-0"}}
	admitter := NewAdmitter(&informerLike{mc: mc}, &informerLike{mc: mc}, nil)
	spoke := identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "4f2a", NotBefore: joined.Add(time.Minute)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := admitter.Admit(ctx, spoke); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAdmitterReadsACertificateRecordAgainWhenItChanges: the Admitter keeps
// each cluster's record parsed, and a record rewritten by a Renew on another
// replica (the cache shows it; no Wrote here) must retire what it retires.
func TestAdmitterReadsACertificateRecordAgainWhenItChanges(t *testing.T) {
	joined := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	withRecord := func(rv string, rec CertificateRecord) *clusterv1.ManagedCluster {
		raw, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		mc := managedCluster(true, false)
		mc.ResourceVersion = rv
		mc.Annotations = map[string]string{CertificatesAnnotation: string(raw)}
		return mc
	}
	cache := &informerLike{mc: withRecord("10", CertificateRecord{Current: "aa", JoinSerial: "aa", JoinedAt: joined})}
	admitter := NewAdmitter(cache, cache, nil)
	old := identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "aa", NotBefore: joined}
	renewed := identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: "bb", NotBefore: joined.Add(time.Hour)}
	if err := admitter.Admit(context.Background(), old); err != nil {
		t.Fatalf("the current certificate was refused: %v", err)
	}
	// Renewed on another replica, past the overlap: aa is retired.
	past := joined.Add(-time.Minute)
	cache.mc = withRecord("11", CertificateRecord{Current: "bb", JoinSerial: "aa", JoinedAt: joined, Replaced: "aa", ReplacedUntil: &past, Renewed: []string{"bb"}})
	var refused *RefusedError
	if err := admitter.Admit(context.Background(), old); !errors.As(err, &refused) || refused.Reason != RefusedReplacedCertificate {
		t.Fatalf("the certificate the cached record retires: got %v, want a refusal %s", err, RefusedReplacedCertificate)
	}
	if err := admitter.Admit(context.Background(), renewed); err != nil {
		t.Fatalf("the renewed certificate was refused: %v", err)
	}
}
