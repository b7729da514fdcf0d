package query

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/identity"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// TestEveryQueryMethodHasARole fails when a method is added to the Query
// service without a role: Authorize would refuse it to everyone.
func TestEveryQueryMethodHasARole(t *testing.T) {
	desc := queryv1.Query_ServiceDesc
	var missing []string
	for _, m := range desc.Methods {
		if _, ok := methodRoles["/"+desc.ServiceName+"/"+m.MethodName]; !ok {
			missing = append(missing, m.MethodName)
		}
	}
	for _, s := range desc.Streams {
		if _, ok := methodRoles["/"+desc.ServiceName+"/"+s.StreamName]; !ok {
			missing = append(missing, s.StreamName)
		}
	}
	if len(missing) > 0 {
		t.Errorf("Query methods without a role in methodRoles: %v", missing)
	}
}

// withCertificate is ctx of a call whose verified client certificate is cert
// (nil: none).
func withCertificate(cert *x509.Certificate) context.Context {
	info := credentials.TLSInfo{}
	if cert != nil {
		info.State = tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
}

func certificate(org string, life time.Duration) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		Subject:   pkix.Name{CommonName: "someone", Organization: []string{org}},
		NotBefore: now.Add(-5 * time.Minute),
		NotAfter:  now.Add(life),
	}
}

func TestAuthorize(t *testing.T) {
	cases := map[string]struct {
		cert     *x509.Certificate
		method   string
		wantCode codes.Code
	}{
		"no certificate": {
			method: queryv1.Query_ListClusters_FullMethodName, wantCode: codes.Unauthenticated,
		},
		"viewer lists clusters": {
			cert: certificate(ViewerOrganization, 90*24*time.Hour), method: queryv1.Query_ListClusters_FullMethodName,
		},
		"viewer may not create tokens": {
			cert: certificate(ViewerOrganization, time.Hour), method: queryv1.Query_CreateToken_FullMethodName, wantCode: codes.PermissionDenied,
		},
		"admin creates tokens": {
			cert: certificate(AdminOrganization, time.Hour), method: queryv1.Query_CreateToken_FullMethodName,
		},
		"spoke may not create tokens": {
			cert: certificate(identity.SpokeOrganization, time.Hour), method: queryv1.Query_CreateToken_FullMethodName, wantCode: codes.PermissionDenied,
		},
		"spoke certificates may live a year": {
			cert: certificate(identity.SpokeOrganization, 2*365*24*time.Hour), method: queryv1.Query_ListClusters_FullMethodName,
		},
		"viewer certificate living longer than the maximum": {
			cert: certificate(ViewerOrganization, MaxClientCertValidity+time.Hour), method: queryv1.Query_ListClusters_FullMethodName, wantCode: codes.PermissionDenied,
		},
		"admin certificate of the maximum lifetime": {
			cert: certificate(AdminOrganization, MaxClientCertValidity), method: queryv1.Query_ListTokens_FullMethodName,
		},
		"viewer may not create fleet holds": {
			cert: certificate(ViewerOrganization, time.Hour), method: queryv1.Query_CreateHold_FullMethodName, wantCode: codes.PermissionDenied,
		},
		"viewer reads fleet holds": {
			cert: certificate(ViewerOrganization, time.Hour), method: queryv1.Query_ListHolds_FullMethodName,
		},
		"holder creates and releases fleet holds": {
			cert: certificate(HolderOrganization, time.Hour), method: queryv1.Query_ReleaseHold_FullMethodName,
		},
		"holder may not create tokens": {
			cert: certificate(HolderOrganization, time.Hour), method: queryv1.Query_CreateToken_FullMethodName, wantCode: codes.PermissionDenied,
		},
		"admin creates fleet holds": {
			cert: certificate(AdminOrganization, time.Hour), method: queryv1.Query_CreateHold_FullMethodName,
		},
		"spoke may not create fleet holds": {
			cert: certificate(identity.SpokeOrganization, time.Hour), method: queryv1.Query_CreateHold_FullMethodName, wantCode: codes.PermissionDenied,
		},
		"certificate without a role": {
			cert: certificate("someone-else", time.Hour), method: queryv1.Query_ListClusters_FullMethodName, wantCode: codes.PermissionDenied,
		},
		"method without a role": {
			cert: certificate(AdminOrganization, time.Hour), method: "/imperator.query.v1.Query/DropEverything", wantCode: codes.PermissionDenied,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := Authorize(withCertificate(tc.cert), tc.method)
			if diff := cmp.Diff(tc.wantCode, status.Code(err)); diff != "" {
				t.Errorf("code (-want +got):\n%s\nerror: %v", diff, err)
			}
		})
	}
}
