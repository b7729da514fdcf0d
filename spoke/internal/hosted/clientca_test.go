package hosted

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/podinjector"
)

const testCASecret = "imperator-webhook-cert-member-client-ca"

// newTestClientCA returns a loaded ClientCA on a fake management cluster.
func newTestClientCA(t *testing.T, c client.Client, clk *clocktesting.FakeClock, caValidity time.Duration) *ClientCA {
	t.Helper()
	ca, err := NewClientCA(c, ClientCAOptions{Namespace: "imperator-system", SecretName: testCASecret, CAValidity: caValidity, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ca
}

func fakeManagement(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// clientCertificate issues a client certificate for member from ca.
func clientCertificate(t *testing.T, ca *ClientCA, member string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.issue(member)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// asMember makes req look as if it came over a connection whose client
// certificate ca verified for member.
func asMember(t *testing.T, ca *ClientCA, member string, req *http.Request) *http.Request {
	t.Helper()
	cert := clientCertificate(t, ca, member)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf, ca.state.Load().signer.Cert}}}
	return req
}

// TestOnlyTheMembersOwnAPIServerIsAnswered runs the members' webhooks behind
// a real TLS server configured as the agent configures it: a caller without
// a client certificate, with another member's, or with one of another CA
// learns nothing about the member — not its Machines, not whether it exists
// — and cannot pass for its reachability probe; the member's own API server
// is answered.
func TestOnlyTheMembersOwnAPIServerIsAnswered(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	ca := newTestClientCA(t, fakeManagement(t), clk, 0)
	w := &Webhooks{Scheme: mustSpokeScheme(t), ClientCA: ca}
	alpha := w.newMemberHooks(fakeManagement(t))
	w.members = map[string]*memberHooks{"alpha": alpha}

	serving, err := pki.NewCA("serving", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	servingCert, servingKey, err := serving.IssueServer("127.0.0.1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(servingCert, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(w)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	ca.TLSOption(srv.TLS)
	srv.StartTLS()
	defer srv.Close()

	otherCA := newTestClientCA(t, fakeManagement(t), clk, 0)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(serving.CertPEM)
	send := func(cert *tls.Certificate, member, path, body string) (int, string, error) {
		transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
		if cert != nil {
			transport.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		defer transport.CloseIdleConnections()
		resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Post(srv.URL+PathPrefix+member+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		answer, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(answer), err
	}
	alphaCert := clientCertificate(t, ca, "alpha")
	betaCert := clientCertificate(t, ca, "beta")
	forged := clientCertificate(t, otherCA, "alpha")
	probe := machineReview(ProbeMachineName, true)

	cases := map[string]struct {
		cert       *tls.Certificate
		member     string
		path       string
		wantStatus int
		// wantAnswer is in the answer; wantHandshakeRefused: no answer.
		wantAnswer           string
		wantHandshakeRefused bool
	}{
		"no client certificate, a member that exists": {
			member: "alpha", path: podinjector.WebhookPath, wantStatus: http.StatusUnauthorized, wantAnswer: "client certificate",
		},
		"no client certificate, a member that does not exist: the same answer": {
			member: "zeta", path: podinjector.WebhookPath, wantStatus: http.StatusUnauthorized, wantAnswer: "client certificate",
		},
		"no client certificate, a made-up probe": {
			member: "alpha", path: machinevalidator.WebhookPath, wantStatus: http.StatusUnauthorized,
		},
		"another member's certificate": {
			cert: &betaCert, member: "alpha", path: machinevalidator.WebhookPath, wantStatus: http.StatusForbidden, wantAnswer: "not this member's",
		},
		"another member's certificate, a member that does not exist: the same answer": {
			cert: &betaCert, member: "zeta", path: machinevalidator.WebhookPath, wantStatus: http.StatusForbidden, wantAnswer: "not this member's",
		},
		"a certificate naming the member from another CA": {
			cert: &forged, member: "alpha", path: machinevalidator.WebhookPath, wantHandshakeRefused: true,
		},
		"the member's own API server": {
			cert: &alphaCert, member: "alpha", path: machinevalidator.WebhookPath, wantStatus: http.StatusOK, wantAnswer: `"response":{"uid":"u1"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sent := time.Now().UnixNano()
			status, answer, err := send(tc.cert, tc.member, tc.path, probe)
			if tc.wantHandshakeRefused {
				if err == nil {
					t.Fatalf("answered %d %s, want the handshake refused", status, answer)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if status != tc.wantStatus || !strings.Contains(answer, tc.wantAnswer) {
					t.Errorf("answer %d %q, want %d containing %q", status, answer, tc.wantStatus, tc.wantAnswer)
				}
			}
			if tc.wantStatus == http.StatusOK {
				if alpha.lastRequest.Load() < sent {
					t.Error("the member's own probe was not counted")
				}
				return
			}
			if strings.Contains(answer, "alpha") || strings.Contains(answer, "zeta") || strings.Contains(answer, "response") {
				t.Errorf("a refusal tells about the member: %q", answer)
			}
			if alpha.lastRequest.Load() >= sent {
				t.Error("a request that was not the member's own counted as its probe")
			}
		})
	}
}

// machineReview is an AdmissionReview of a Machine create.
func machineReview(name string, dryRun bool) string {
	return fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1","kind":{"group":"imperator.tenzen-y.io","version":"v1alpha1","kind":"Machine"},"resource":{"group":"imperator.tenzen-y.io","version":"v1alpha1","resource":"machines"},"name":%q,"operation":"CREATE","dryRun":%t,"object":{"apiVersion":"imperator.tenzen-y.io/v1alpha1","kind":"Machine","metadata":{"name":%q},"spec":{"machineTypes":[{"name":"probe","spec":{"cpu":"1","memory":"1Gi"}}]}}}}`, name, dryRun, name)
}

func mustSpokeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	return scheme
}

// TestClientCAIsSharedByTheReplicasAndRollsOver: the first replica creates
// the CA and the others use it; with a third of its life left it rolls over,
// and a member's certificate from the previous CA is still accepted until
// that CA expires, so that the member's API server has time to pick up its
// new one; a certificate from an expired CA is not.
func TestClientCAIsSharedByTheReplicasAndRollsOver(t *testing.T) {
	// pki backdates by five minutes: a two-minute CA has less than a third
	// of its life left from the start, due for a rollover yet valid.
	old, err := pki.NewCA("old", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	oldKey, err := old.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	c := fakeManagement(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "imperator-system", Name: testCASecret},
		Data:       map[string][]byte{ClientCACertKey: old.CertPEM, ClientCAKeyKey: oldKey},
	})
	oldPEM, _, err := old.IssueClient("alpha", []string{ClientOrganization}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	oldLeaf, err := pki.ParseCertificate(oldPEM)
	if err != nil {
		t.Fatal(err)
	}
	fromOldCA := httptest.NewRequest(http.MethodPost, "/", nil)
	fromOldCA.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{oldLeaf, old.Cert}}}
	accepted := func(ca *ClientCA, req *http.Request) bool {
		status, _ := ca.authenticate(req, "alpha")
		return status == 0
	}

	clk := clocktesting.NewFakeClock(time.Now())
	first := newTestClientCA(t, c, clk, time.Hour)
	second := newTestClientCA(t, c, clk, time.Hour)
	if first.state.Load().signer.Cert.Equal(old.Cert) {
		t.Fatal("the CA did not roll over with a third of its life left")
	}
	if !first.state.Load().signer.Cert.Equal(second.state.Load().signer.Cert) {
		t.Fatal("two replicas sign with two CAs")
	}
	for name, ca := range map[string]*ClientCA{"the replica that rolled over": first, "the other replica": second} {
		if !accepted(ca, fromOldCA) {
			t.Errorf("%s refuses a certificate of the previous CA before it expired", name)
		}
		if !accepted(ca, asMember(t, first, "alpha", httptest.NewRequest(http.MethodPost, "/", nil))) {
			t.Errorf("%s refuses a certificate of the new CA", name)
		}
	}
	if first.fresh(oldLeaf, "alpha") {
		t.Error("a certificate of the previous CA is not issued again")
	}

	clk.Step(3 * time.Minute) // the previous CA has expired
	for _, ca := range []*ClientCA{first, second} {
		if err := ca.Ensure(context.Background()); err != nil {
			t.Fatal(err)
		}
		if accepted(ca, fromOldCA) {
			t.Error("a certificate of an expired CA is accepted")
		}
	}
	secret := &corev1.Secret{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "imperator-system", Name: testCASecret}, secret); err != nil {
		t.Fatal(err)
	}
	if _, ok := secret.Data[ClientPreviousCACertKey]; ok {
		t.Error("the expired previous CA is still in the Secret")
	}
	if !first.state.Load().signer.Cert.Equal(second.state.Load().signer.Cert) {
		t.Error("the replicas sign with two CAs after the previous one expired")
	}
}

// TestClientCertificateNamesTheMember: the certificate the CA issues is a
// client certificate whose subject is the member, which authenticate maps
// back to it; a certificate of the CA with another organization names no
// member.
func TestClientCertificateNamesTheMember(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	ca := newTestClientCA(t, fakeManagement(t), clk, 0)
	cert := clientCertificate(t, ca, "edge-1")
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage); diff != "" {
		t.Errorf("key usage (-want +got):\n%s", diff)
	}
	if got := memberOf(leaf); got != "edge-1" {
		t.Errorf("the certificate names member %q, want edge-1", got)
	}
	otherPEM, _, err := ca.state.Load().signer.IssueClient("edge-1", []string{"system:masters"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.ParseCertificate(otherPEM)
	if err != nil {
		t.Fatal(err)
	}
	if got := memberOf(other); got != "" {
		t.Errorf("a certificate of another organization names member %q", got)
	}
}
