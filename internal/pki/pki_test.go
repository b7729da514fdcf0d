package pki

import (
	"crypto/x509"
	"testing"
	"time"
)

// TestCrossSign: a leaf of the new CA verifies against the old CA's
// certificate alone when the cross-signed new CA is presented with it, and
// the cross-signed certificate never outlives the CA that signed it.
func TestCrossSign(t *testing.T) {
	oldCA, err := NewCA("old", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := NewCA("new", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	crossPEM, err := oldCA.CrossSign(newCA.Cert)
	if err != nil {
		t.Fatal(err)
	}
	cross, err := ParseCertificate(crossPEM)
	if err != nil {
		t.Fatal(err)
	}
	if cross.NotAfter.After(oldCA.Cert.NotAfter) {
		t.Errorf("the cross-signed CA is valid until %s, after the signing CA (%s)", cross.NotAfter, oldCA.Cert.NotAfter)
	}
	leafPEM, _, err := newCA.IssueServer("hub", []string{"hub.test"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ParseCertificate(leafPEM)
	if err != nil {
		t.Fatal(err)
	}
	oldRoots, intermediates := x509.NewCertPool(), x509.NewCertPool()
	oldRoots.AddCert(oldCA.Cert)
	intermediates.AddCert(cross)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: oldRoots, Intermediates: intermediates, DNSName: "hub.test"}); err != nil {
		t.Errorf("a leaf of the new CA with the cross-signed CA does not verify against the old CA: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: oldRoots, DNSName: "hub.test"}); err == nil {
		t.Error("a leaf of the new CA verifies against the old CA without the cross-signed CA")
	}
	if _, err := oldCA.CrossSign(leaf); err == nil {
		t.Error("cross-signing a leaf certificate succeeded")
	}
}
