package registry

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/imperator-federation/imperator/internal/schemes"
)

func TestRevokedCertificatesAreRefusedAndOldEntriesDropped(t *testing.T) {
	ctx := context.Background()
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ancient, err := json.Marshal(Revocation{RevokedAt: now.Add(-RevocationRetention - time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "hub", Name: RevocationsConfigMap},
		Data:       map[string]string{"aa": string(ancient)},
	}).Build()
	list := &Revocations{Reader: c, Namespace: "hub"}
	cert := &x509.Certificate{SerialNumber: big.NewInt(0x1f)}
	if err := list.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if list.Revoked(cert) {
		t.Fatal("certificate 1f is revoked before anyone revoked it")
	}
	if err := Revoke(ctx, c, "hub", "1f", "laptop lost", now); err != nil {
		t.Fatalf("Revoke(1f) = %v", err)
	}
	if err := Revoke(ctx, c, "hub", "not-hex", "", now); err == nil {
		t.Error("Revoke(not-hex) = nil, want an error naming the serial format")
	}
	if err := list.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if !list.Revoked(cert) {
		t.Error("certificate 1f is not refused after it was revoked")
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: "hub", Name: RevocationsConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Data["aa"]; ok {
		t.Error("an entry older than the retention is still listed")
	}
}

func TestRevocationListSurvivesAFailedRead(t *testing.T) {
	ctx := context.Background()
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	if err := Revoke(ctx, c, "hub", "1f", "", time.Now()); err != nil {
		t.Fatal(err)
	}
	list := &Revocations{Reader: c, Namespace: "hub"}
	if err := list.Load(ctx); err != nil {
		t.Fatal(err)
	}
	// The API server goes away: a failing reader keeps the last list.
	list.Reader = fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return apierrors.NewServiceUnavailable("hub API down")
		},
	}).Build()
	if err := list.Load(ctx); err == nil {
		t.Fatal("Load with a failing reader = nil, want its error")
	}
	if !list.Revoked(&x509.Certificate{SerialNumber: big.NewInt(0x1f)}) {
		t.Error("a failed read forgot a revocation")
	}
}
