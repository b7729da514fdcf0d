package hubca

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/internal/schemes"
)

func TestLoadOrCreate(t *testing.T) {
	cases := map[string]struct {
		existing *corev1.Secret
		wantErr  bool
	}{
		"created when missing, then loaded": {},
		"unreadable secret is an error": {
			existing: &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: "hub", Name: "ca"},
				Data:       map[string][]byte{corev1.TLSCertKey: []byte("not pem")},
			},
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			scheme, err := schemes.Hub()
			if err != nil {
				t.Fatal(err)
			}
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tc.existing != nil {
				b = b.WithObjects(tc.existing)
			}
			c := b.Build()
			first, err := LoadOrCreate(context.Background(), c, "hub", "ca")
			if (err != nil) != tc.wantErr {
				t.Fatalf("LoadOrCreate error = %v, want error %t", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			second, err := LoadOrCreate(context.Background(), c, "hub", "ca")
			if err != nil {
				t.Fatalf("second LoadOrCreate: %v", err)
			}
			if !bytes.Equal(first.CertPEM, second.CertPEM) {
				t.Error("second call returned another CA: replicas would not trust each other's certificates")
			}
		})
	}
}
