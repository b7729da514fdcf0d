package identity

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

func TestClusterFromCertificate(t *testing.T) {
	cases := map[string]struct {
		subject     pkix.Name
		wantCluster string
		wantErr     bool
	}{
		"spoke certificate": {
			subject:     pkix.Name{CommonName: "cluster-a", Organization: []string{SpokeOrganization}},
			wantCluster: "cluster-a",
		},
		"same CA, not a spoke": {
			subject: pkix.Name{CommonName: "admin", Organization: []string{"platform"}},
			wantErr: true,
		},
		"empty common name": {
			subject: pkix.Name{Organization: []string{SpokeOrganization}},
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ClusterFromCertificate(&x509.Certificate{Subject: tc.subject})
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %t", err, tc.wantErr)
			}
			if got != tc.wantCluster {
				t.Errorf("cluster = %q, want %q", got, tc.wantCluster)
			}
		})
	}
}
