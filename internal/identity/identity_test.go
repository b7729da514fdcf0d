package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestSpokeFromCertificate(t *testing.T) {
	spokeSubject := pkix.Name{CommonName: "cluster-a", Organization: []string{SpokeOrganization}}
	cases := map[string]struct {
		subject   pkix.Name
		uris      []string
		nilCert   bool
		wantSpoke Spoke
		wantErr   bool
	}{
		"spoke certificate bound to a registration": {
			subject:   spokeSubject,
			uris:      []string{"imperator://cluster/cluster-a/0b7f4c1e-5d4a-4f7e-9c1a-2b3c4d5e6f70"},
			wantSpoke: Spoke{Cluster: "cluster-a", RegistrationUID: "0b7f4c1e-5d4a-4f7e-9c1a-2b3c4d5e6f70"},
		},
		"URIs of other schemes are ignored": {
			subject:   spokeSubject,
			uris:      []string{"spiffe://example.org/ns/a", "imperator://cluster/cluster-a/uid-1"},
			wantSpoke: Spoke{Cluster: "cluster-a", RegistrationUID: "uid-1"},
		},
		"spoke certificate without registration (older hub)": {
			subject:   spokeSubject,
			wantSpoke: Spoke{Cluster: "cluster-a"},
		},
		"registration URI of another cluster": {
			subject: spokeSubject,
			uris:    []string{"imperator://cluster/cluster-b/uid-1"},
			wantErr: true,
		},
		"two registration URIs": {
			subject: spokeSubject,
			uris:    []string{"imperator://cluster/cluster-a/uid-1", "imperator://cluster/cluster-a/uid-2"},
			wantErr: true,
		},
		"registration URI without UID": {
			subject: spokeSubject,
			uris:    []string{"imperator://cluster/cluster-a/"},
			wantErr: true,
		},
		"registration URI with only a name": {
			subject: spokeSubject,
			uris:    []string{"imperator://cluster/cluster-a"},
			wantErr: true,
		},
		"registration URI with extra segments": {
			subject: spokeSubject,
			uris:    []string{"imperator://cluster/cluster-a/uid-1/more"},
			wantErr: true,
		},
		"registration URI of another host": {
			subject: spokeSubject,
			uris:    []string{"imperator://clusters/cluster-a/uid-1"},
			wantErr: true,
		},
		"opaque registration URI": {
			subject: spokeSubject,
			uris:    []string{"imperator:cluster-a/uid-1"},
			wantErr: true,
		},
		"registration URI with a query": {
			subject: spokeSubject,
			uris:    []string{"imperator://cluster/cluster-a/uid-1?uid=uid-2"},
			wantErr: true,
		},
		"same CA, not a spoke": {
			subject: pkix.Name{CommonName: "admin", Organization: []string{"platform"}},
			uris:    []string{"imperator://cluster/admin/uid-1"},
			wantErr: true,
		},
		"empty common name": {
			subject: pkix.Name{Organization: []string{SpokeOrganization}},
			wantErr: true,
		},
		"no certificate": {
			nilCert: true,
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var cert *x509.Certificate
			if !tc.nilCert {
				cert = &x509.Certificate{Subject: tc.subject}
				for _, raw := range tc.uris {
					cert.URIs = append(cert.URIs, mustURL(t, raw))
				}
			}
			got, err := SpokeFromCertificate(cert)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantSpoke, got); diff != "" {
				t.Errorf("spoke (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegistrationURIIsReadBack(t *testing.T) {
	want := Spoke{Cluster: "cluster-a", RegistrationUID: "0b7f4c1e-5d4a-4f7e-9c1a-2b3c4d5e6f70"}
	u := RegistrationURI(want.Cluster, want.RegistrationUID)
	if got := u.String(); got != "imperator://cluster/cluster-a/0b7f4c1e-5d4a-4f7e-9c1a-2b3c4d5e6f70" {
		t.Errorf("RegistrationURI = %q", got)
	}
	// Parsed back from its text, as x509 parses the SAN of a presented certificate.
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: want.Cluster, Organization: []string{SpokeOrganization}}, URIs: []*url.URL{mustURL(t, u.String())}}
	got, err := SpokeFromCertificate(cert)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spoke (-want +got):\n%s", diff)
	}
}

func TestVerifiedCertificate(t *testing.T) {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}
	cases := map[string]struct {
		ctx      context.Context
		wantCert *x509.Certificate
	}{
		"no peer": {ctx: context.Background()},
		"peer without TLS": {
			ctx: peer.NewContext(context.Background(), &peer.Peer{}),
		},
		"TLS peer without a verified client certificate": {
			ctx: peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}),
		},
		"TLS peer with a verified client certificate": {
			ctx: peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
				State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf, {}}}},
			}}),
			wantCert: leaf,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cert, err := VerifiedCertificate(tc.ctx)
			if tc.wantCert == nil {
				if !errors.Is(err, ErrNoClientCertificate) {
					t.Errorf("VerifiedCertificate() error = %v, want ErrNoClientCertificate", err)
				}
				return
			}
			if err != nil || cert != tc.wantCert {
				t.Errorf("VerifiedCertificate() = %v, %v; want the chain's leaf", cert, err)
			}
		})
	}
}
