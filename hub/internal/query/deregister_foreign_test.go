package query

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// adminContext is a call's context as an admin certificate's handshake
// leaves it.
func adminContext(t *testing.T) context.Context {
	t.Helper()
	ca, err := pki.NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.IssueClient("alice", []string{AdminOrganization}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert, ca.Cert}}}}})
}

// The hub cluster may be an OCM hub: a ManagedCluster no spoke joined as is
// not Imperator's to delete.
func TestDeregisterLeavesManagedClustersNoSpokeJoinedAs(t *testing.T) {
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		cluster     *clusterv1.ManagedCluster
		wantDeleted bool
		wantMsg     string
	}{
		"an OCM cluster the hub never registered": {
			cluster: &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "local-cluster"}},
			wantMsg: "no spoke joined as",
		},
		"a reserved name": {
			cluster: &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "open-cluster-management-hub",
				Annotations: map[string]string{registry.CertificatesAnnotation: `{"current":"1"}`}}},
			wantMsg: "reserved",
		},
		"a cluster a spoke joined as": {
			cluster: &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "spoke-a",
				Annotations: map[string]string{registry.CertificatesAnnotation: `{"current":"1"}`}}},
			wantDeleted: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.cluster).Build()
			clk := clocktesting.NewFakeClock(time.Now())
			svc := New(store.New(clk, time.Minute), nil, clk)
			svc.SetRegistry(c)
			_, err := svc.DeregisterCluster(adminContext(t), &queryv1.DeregisterClusterRequest{Name: tc.cluster.Name})
			getErr := c.Get(context.Background(), client.ObjectKey{Name: tc.cluster.Name}, &clusterv1.ManagedCluster{})
			if deleted := apierrors.IsNotFound(getErr); deleted != tc.wantDeleted {
				t.Fatalf("ManagedCluster %s deleted: %v, want %v (DeregisterCluster: %v)", tc.cluster.Name, deleted, tc.wantDeleted, err)
			}
			if tc.wantDeleted {
				if err != nil {
					t.Fatalf("DeregisterCluster: %v", err)
				}
				return
			}
			if st := status.Convert(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), tc.wantMsg) {
				t.Fatalf("got %v %q, want NotFound naming %q", st.Code(), st.Message(), tc.wantMsg)
			}
		})
	}
}
