package hubca

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/internal/pki"
)

// verifyAt checks that cert chains to ca for host at time at, as a spoke
// dialing the hub with the CA pool would.
func verifyAt(t *testing.T, ca *pki.CA, cert *tls.Certificate, host string, at time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	_, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func TestServingRotatorRenewsBeforeExpiry(t *testing.T) {
	const validity = 3 * time.Minute
	ca, err := pki.NewCA("test-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The CA is two hours old: its own NotBefore (5 minutes back) is not
	// what this test is about.
	start := time.Now().Add(2 * time.Hour)
	clk := clocktesting.NewFakeClock(start)
	r, err := NewServingRotator(ca, "imperator-hub", []string{"hub.example", "127.0.0.1"}, validity, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := first.Leaf.NotBefore, start.Add(-ServingBackdate).Truncate(time.Second); !got.Equal(want) {
		t.Errorf("first NotBefore = %s, want %s (backdated by %s, so a spoke an hour behind accepts it)", got, want, ServingBackdate)
	}
	if err := verifyAt(t, ca, first, "hub.example", start.Add(-59*time.Minute)); err != nil {
		t.Errorf("a spoke 59 minutes behind refuses the certificate: %v", err)
	}

	// Before 2/3 of the life: the same certificate.
	clk.SetTime(start.Add(validity*2/3 - time.Second))
	same, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if same != first {
		t.Errorf("certificate renewed before 2/3 of its life")
	}

	// At 2/3: a new certificate, while the old one is still valid.
	renewedAt := start.Add(validity * 2 / 3)
	clk.SetTime(renewedAt)
	second, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if second == first || second.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatalf("no new certificate at 2/3 of the old one's life")
	}
	if !renewedAt.Before(first.Leaf.NotAfter) {
		t.Errorf("renewed at %s, after the old certificate expired at %s", renewedAt, first.Leaf.NotAfter)
	}
	for name, c := range map[string]*tls.Certificate{"old": first, "new": second} {
		if err := verifyAt(t, ca, c, "hub.example", renewedAt); err != nil {
			t.Errorf("%s certificate does not chain to the CA at the renewal: %v", name, err)
		}
		if err := verifyAt(t, ca, c, "127.0.0.1", renewedAt); err != nil {
			t.Errorf("%s certificate is not valid for the IP host: %v", name, err)
		}
	}
	// Past the old certificate's expiry, the new one is served and valid.
	after := first.Leaf.NotAfter.Add(time.Second)
	clk.SetTime(after)
	third, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if third != second {
		t.Errorf("certificate renewed again before 2/3 of the new one's life")
	}
	if err := verifyAt(t, ca, third, "hub.example", after); err != nil {
		t.Errorf("served certificate invalid after the first one expired: %v", err)
	}
	// Many lives later, still valid.
	for i := range 10 {
		at := after.Add(time.Duration(i+1) * validity)
		clk.SetTime(at)
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := verifyAt(t, ca, c, "hub.example", at); err != nil {
			t.Fatalf("life %d: served certificate invalid: %v", i+1, err)
		}
	}
}

func TestServingRotatorNeverOutlivesItsCA(t *testing.T) {
	ca, err := pki.NewCA("short-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	r, err := NewServingRotator(ca, "imperator-hub", []string{"hub.example"}, DefaultServingValidity, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Leaf.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("NotAfter %s is after the CA's %s", c.Leaf.NotAfter, ca.Cert.NotAfter)
	}
	// Once the CA has expired, renewal fails and so does the handshake,
	// with an error saying why.
	clk.SetTime(ca.Cert.NotAfter.Add(time.Minute))
	var renewErr error
	r.onError = func(err error) { renewErr = err }
	if _, err := r.GetCertificate(nil); err == nil {
		t.Errorf("an expired certificate was served")
	}
	if renewErr == nil {
		t.Errorf("the failed renewal was not reported")
	}
}

func TestNewServingRotatorRefusesBadInput(t *testing.T) {
	ca, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		ca       *pki.CA
		validity time.Duration
	}{
		"no CA":              {validity: time.Hour},
		"validity too short": {ca: ca, validity: time.Second},
		"negative validity":  {ca: ca, validity: -time.Hour},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := NewServingRotator(tc.ca, "imperator-hub", nil, tc.validity, nil, nil); err == nil {
				t.Errorf("no error")
			}
		})
	}
}
