package reporter

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/internal/pki"
)

// testCA is a CA created at notBefore, with its key.
type testCA struct {
	*pki.CA
}

func newTestCA(t *testing.T, name string, notBefore time.Time) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(notBefore.Unix()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{&pki.CA{Cert: cert, Key: key, CertPEM: pki.EncodeCertificate(cert)}}
}

// client issues a spoke certificate of ca.
func (ca testCA) client(t *testing.T) *x509.Certificate {
	t.Helper()
	certPEM, _, err := ca.IssueClient(testCluster, []string{"imperator.tenzen-y.io:spokes"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// crossSigned is other's certificate signed by ca, as the hub presents the
// promoted CA.
func (ca testCA) crossSigned(t *testing.T, other testCA) *x509.Certificate {
	t.Helper()
	crossPEM, err := ca.CrossSign(other.Cert)
	if err != nil {
		t.Fatal(err)
	}
	cross, err := pki.ParseCertificate(crossPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cross
}

func TestCARenewalPlan(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	oldCA := newTestCA(t, "old", start)
	newCA := newTestCA(t, "new", start.Add(24*time.Hour))
	newerCA := newTestCA(t, "newer", start.Add(48*time.Hour))
	cross := oldCA.crossSigned(t, newCA)
	ofOld, ofNew := oldCA.client(t), newCA.client(t)
	now := start.Add(100 * 24 * time.Hour)
	const jitter = 17 * time.Second
	planned := func(ca *x509.Certificate, at time.Time, attempts int) caRenewal {
		return caRenewal{target: keyFingerprint(ca), at: at, attempts: attempts}
	}

	cases := map[string]struct {
		previous      caRenewal
		client        *x509.Certificate
		servingIssuer *x509.Certificate
		trusted       []*x509.Certificate
		want          caRenewal
		wantDue       bool
	}{
		"no handshake with the hub yet": {
			client: ofOld, trusted: []*x509.Certificate{oldCA.Cert},
		},
		"no certificate yet": {
			servingIssuer: newCA.Cert, trusted: []*x509.Certificate{oldCA.Cert, newCA.Cert},
		},
		"the hub serves with the CA of the certificate": {
			client: ofOld, servingIssuer: oldCA.Cert, trusted: []*x509.Certificate{oldCA.Cert},
		},
		"a rotation is staged: the hub still serves with the old CA": {
			client: ofOld, servingIssuer: oldCA.Cert, trusted: []*x509.Certificate{oldCA.Cert, newCA.Cert},
		},
		"promoted, the agent has the bundle: renew within the jitter": {
			client: ofOld, servingIssuer: newCA.Cert, trusted: []*x509.Certificate{oldCA.Cert, newCA.Cert},
			want: planned(newCA.Cert, now.Add(jitter), 0), wantDue: true,
		},
		"promoted, the agent trusts only the old CA and verified the cross-signed copy": {
			client: ofOld, servingIssuer: cross, trusted: []*x509.Certificate{oldCA.Cert},
			want: planned(newCA.Cert, now.Add(jitter), 0), wantDue: true,
		},
		"renewed into the new CA, seen through the cross-signed copy: stop": {
			previous: planned(newCA.Cert, now.Add(-time.Second), 1),
			client:   ofNew, servingIssuer: cross, trusted: []*x509.Certificate{oldCA.Cert},
		},
		"renewed into the new CA: stop": {
			previous: planned(newCA.Cert, now.Add(-time.Second), 1),
			client:   ofNew, servingIssuer: newCA.Cert, trusted: []*x509.Certificate{newCA.Cert, oldCA.Cert},
		},
		"a replica that has not followed the promotion serves the old CA: never back": {
			client: ofNew, servingIssuer: oldCA.Cert, trusted: []*x509.Certificate{newCA.Cert, oldCA.Cert},
		},
		"the CA of the certificate is no longer trusted: renew": {
			client: ofOld, servingIssuer: newCA.Cert, trusted: []*x509.Certificate{newCA.Cert},
			want: planned(newCA.Cert, now.Add(jitter), 0), wantDue: true,
		},
		"already planned: keeps its time": {
			previous: planned(newCA.Cert, now.Add(5*time.Second), 0),
			client:   ofOld, servingIssuer: newCA.Cert, trusted: []*x509.Certificate{oldCA.Cert, newCA.Cert},
			want: planned(newCA.Cert, now.Add(5*time.Second), 0), wantDue: true,
		},
		"a renewal did not move it: the next attempt keeps its later time": {
			previous: planned(newCA.Cert, now.Add(4*time.Minute), 1),
			client:   ofOld, servingIssuer: newCA.Cert, trusted: []*x509.Certificate{oldCA.Cert, newCA.Cert},
			want: planned(newCA.Cert, now.Add(4*time.Minute), 1), wantDue: true,
		},
		"attempts used up: left to the scheduled renewal": {
			previous: planned(newCA.Cert, now.Add(-time.Minute), caRenewalAttempts),
			client:   ofOld, servingIssuer: newCA.Cert, trusted: []*x509.Certificate{oldCA.Cert, newCA.Cert},
			want: planned(newCA.Cert, now.Add(-time.Minute), caRenewalAttempts),
		},
		"a newer rotation starts over": {
			previous: planned(newCA.Cert, now.Add(-time.Minute), caRenewalAttempts),
			client:   ofNew, servingIssuer: newerCA.Cert, trusted: []*x509.Certificate{newCA.Cert, newerCA.Cert},
			want: planned(newerCA.Cert, now.Add(jitter), 0), wantDue: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := tc.previous.plan(tc.client, tc.servingIssuer, tc.trusted, now, func() time.Duration { return jitter })
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(caRenewal{})); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			at, due := got.due()
			if due != tc.wantDue {
				t.Errorf("due = %v, want %v", due, tc.wantDue)
			}
			if due && !at.Equal(tc.want.at) {
				t.Errorf("due at %s, want %s", at, tc.want.at)
			}
		})
	}
}

func TestCARenewalRenewedBacksOff(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	noJitter := func() time.Duration { return 0 }
	p := caRenewal{target: "new", at: now}
	var waits []time.Duration
	for range caRenewalAttempts {
		p = p.renewed(now, noJitter)
		waits = append(waits, p.at.Sub(now))
	}
	if diff := cmp.Diff([]time.Duration{2 * caRenewalJitter, 4 * caRenewalJitter, 8 * caRenewalJitter}, waits); diff != "" {
		t.Errorf("waits after renewals that did not move the agent (-want +got):\n%s", diff)
	}
	if _, due := p.due(); due {
		t.Errorf("still due after %d attempts", caRenewalAttempts)
	}
	if got := (caRenewal{}).renewed(now, noJitter); got != (caRenewal{}) {
		t.Errorf("a scheduled renewal changed the empty plan: %+v", got)
	}
}

func TestCARenewalJitterDelay(t *testing.T) {
	for range 1000 {
		if d := caRenewalJitterDelay(); d < 0 || d >= caRenewalJitter {
			t.Fatalf("jitter %s outside [0, %s)", d, caRenewalJitter)
		}
	}
}

// TestObserveServing runs TLS handshakes with a hub that presents a serving
// certificate of the new CA followed by the new CA cross-signed by the old
// one, as after `hub ca rotate --promote`, and checks that the agent
// remembers the new CA's key, whichever CAs it trusts.
func TestObserveServing(t *testing.T) {
	start := time.Now().Add(-48 * time.Hour)
	oldCA := newTestCA(t, "old", start)
	newCA := newTestCA(t, "new", start.Add(24*time.Hour))
	cross := oldCA.crossSigned(t, newCA)
	servingPEM, servingKey, err := newCA.IssueServer("hub", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(servingPEM, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	serving.Certificate = append(serving.Certificate, cross.Raw)

	cases := map[string][]byte{
		"trusts only the old CA":    oldCA.CertPEM,
		"trusts only the new CA":    newCA.CertPEM,
		"trusts the bundle of both": append(append([]byte{}, newCA.CertPEM...), oldCA.CertPEM...),
	}
	for name, trust := range cases {
		t.Run(name, func(t *testing.T) {
			cr := newCredentials(&Options{Log: logr.Discard()}, trust, "127.0.0.1", nil)
			handshake(t, cr, serving)
			issuer := cr.lastServingIssuer()
			if issuer == nil {
				t.Fatal("no serving CA remembered")
			}
			if keyFingerprint(issuer) != keyFingerprint(newCA.Cert) {
				t.Errorf("remembered %q, want the new CA's key", issuer.Subject.CommonName)
			}
			select {
			case <-cr.servingChanged:
			default:
				t.Error("the renewer was not woken")
			}
			handshake(t, cr, serving)
			select {
			case <-cr.servingChanged:
				t.Error("the renewer was woken again for the same CA")
			default:
			}
		})
	}
}

// handshake runs one TLS handshake of cr's client configuration against a
// server presenting serving.
func handshake(t *testing.T, cr *hubCredentials, serving tls.Certificate) {
	t.Helper()
	cfg, err := cr.clientTLS(nil)
	if err != nil {
		t.Fatal(err)
	}
	clientConn, serverConn := net.Pipe()
	defer func() { _ = clientConn.Close() }()
	defer func() { _ = serverConn.Close() }()
	done := make(chan error, 1)
	go func() {
		done <- tls.Server(serverConn, &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS13}).Handshake()
	}()
	if err := tls.Client(clientConn, cfg).Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
}
