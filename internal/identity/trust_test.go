package identity

import (
	"bytes"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/imperator-federation/imperator/internal/pki"
)

// TestTrustPool: a hub CA bundle of two CAs (a rotation) trusts
// certificates of both; a bundle with a key pasted in, a broken
// certificate or no certificate at all is refused with the block named.
func TestTrustPool(t *testing.T) {
	oldCA, err := pki.NewCA("old", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA("new", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := newCA.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(append([]byte{}, oldCA.CertPEM...), newCA.CertPEM...)

	pool, err := TrustPool(bundle)
	if err != nil {
		t.Fatalf("a bundle of two CAs: %v", err)
	}
	for _, ca := range []*pki.CA{oldCA, newCA} {
		certPEM, _, err := ca.IssueServer("hub", []string{"hub.test"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertificate(certPEM)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "hub.test"}); err != nil {
			t.Errorf("a serving certificate of CA %q is not trusted by the bundle: %v", ca.Cert.Subject.CommonName, err)
		}
	}
	if _, err := TrustPool(oldCA.CertPEM, newCA.CertPEM); err != nil {
		t.Errorf("two bundles: %v", err)
	}

	broken := bytes.Replace(newCA.CertPEM, []byte("MII"), []byte("AAA"), 1)
	cases := map[string]struct {
		bundles  [][]byte
		wantText string
	}{
		"nothing":              {bundles: [][]byte{nil}, wantText: "no PEM certificate"},
		"not PEM":              {bundles: [][]byte{[]byte("hello")}, wantText: "no PEM certificate"},
		"a key in the bundle":  {bundles: [][]byte{oldCA.CertPEM, keyPEM}, wantText: "PEM block 2 is a PRIVATE KEY"},
		"a broken certificate": {bundles: [][]byte{broken}, wantText: "certificate 1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := TrustPool(tc.bundles...)
			if err == nil || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.wantText)
			}
		})
	}
}
