package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/install"
)

const (
	testNamespace  = "imperator-system"
	testSecret     = "imperator-webhook-cert"
	testMutating   = "imperator-pod-injector"
	testValidating = "imperator-machine-validator"
)

func newTestRotator(t *testing.T, objs ...client.Object) (*Rotator, client.Client, *clocktesting.FakeClock) {
	t.Helper()
	scheme, err := schemes.Spoke()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	clk := clocktesting.NewFakeClock(time.Now())
	m, err := New(c, Options{
		Namespace: testNamespace, SecretName: testSecret, Hosts: []string{"127.0.0.1"},
		Bundles:    &install.CABundles{Client: c, Mutating: []string{testMutating}, Validating: []string{testValidating}},
		CAValidity: time.Hour, CertValidity: time.Hour, CheckInterval: time.Second, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, c, clk
}

// secretWithCA is the certificate Secret holding a CA valid for caValidity
// and a one-hour leaf it signed. pki backdates NotBefore by five minutes, so
// a two-minute CA has less than a third of its lifetime left from the start:
// due for a rollover, yet valid for the whole test.
func secretWithCA(t *testing.T, caValidity time.Duration) *corev1.Secret {
	t.Helper()
	ca, err := pki.NewCA("test-webhook-ca", caValidity)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	leaf, leafKey, err := ca.IssueServer("127.0.0.1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			CACertKey: ca.CertPEM, CAKeyKey: key,
			corev1.TLSCertKey: leaf, corev1.TLSPrivateKeyKey: leafKey,
		},
	}
}

func webhookConfigurations() []client.Object {
	return []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testMutating},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "a.example.com"}, {Name: "b.example.com"}},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testValidating},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "c.example.com"}},
		},
	}
}

// bundlesOf returns the CA bundle of every webhook the API server would use.
func bundlesOf(t *testing.T, c client.Client) [][]byte {
	t.Helper()
	ctx := context.Background()
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: testMutating}, m); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: testValidating}, v); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// trusts reports whether caBundle verifies the leaf certificate leafPEM.
func trusts(t *testing.T, caBundle, leafPEM []byte) bool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return false
	}
	leaf, err := pki.ParseCertificate(leafPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1", CurrentTime: leaf.NotBefore.Add(time.Minute)})
	return err == nil
}

func countCerts(bundle []byte) int {
	n := 0
	for rest := bundle; ; n++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return n
		}
	}
}

// A CA rollover never leaves a replica serving a leaf the webhook
// configurations do not trust: the replica that renews and the one that has
// not re-read the Secret yet are both admitted at every step.
func TestCARolloverKeepsEveryServedLeafTrusted(t *testing.T) {
	ctx := context.Background()
	m, c, clk := newTestRotator(t, append(webhookConfigurations(), secretWithCA(t, 2*time.Minute))...)
	secret := func() *corev1.Secret {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testSecret}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	type phase struct {
		CAsInBundle int
		Next        bool
		Previous    bool
		NewLeaf     bool
	}
	// Overlap is two check intervals: 2s.
	steps := []struct {
		name    string
		advance time.Duration
		want    phase
	}{
		{name: "a third of the CA's life left: a next CA joins the bundle, the leaf stays", want: phase{CAsInBundle: 2, Next: true}},
		{name: "before the overlap has passed the next CA does not sign yet", advance: time.Second, want: phase{CAsInBundle: 2, Next: true}},
		{name: "after the overlap the next CA signs a new leaf, the old CA stays trusted", advance: 2 * time.Second, want: phase{CAsInBundle: 2, Previous: true, NewLeaf: true}},
		{name: "before the overlap has passed the previous CA stays", advance: time.Second, want: phase{CAsInBundle: 2, Previous: true}},
		{name: "after the overlap the previous CA leaves the bundle", advance: 2 * time.Second, want: phase{CAsInBundle: 1}},
		{name: "with a fresh CA nothing changes", advance: 10 * time.Second, want: phase{CAsInBundle: 1}},
	}
	served := secret().Data[corev1.TLSCertKey]
	for _, step := range steps {
		clk.Step(step.advance)
		if err := m.Ensure(ctx); err != nil {
			t.Fatalf("%s: Ensure: %v", step.name, err)
		}
		s := secret()
		leaf := s.Data[corev1.TLSCertKey]
		got := phase{
			CAsInBundle: countCerts(m.CABundle()),
			Next:        len(s.Data[NextCACertKey]) > 0,
			Previous:    len(s.Data[PreviousCACertKey]) > 0,
			NewLeaf:     !bytes.Equal(leaf, served),
		}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", step.name, diff)
		}
		for i, b := range bundlesOf(t, c) {
			if !bytes.Equal(b, m.CABundle()) {
				t.Errorf("%s: webhook %d carries another bundle than the Secret's", step.name, i)
			}
			// A replica that has not re-read the Secret still serves the
			// leaf of the step before; one that has serves the new one.
			if !trusts(t, b, served) {
				t.Errorf("%s: webhook %d no longer trusts the leaf replicas served before this step: their admissions would be refused", step.name, i)
			}
			if !trusts(t, b, leaf) {
				t.Errorf("%s: webhook %d does not trust the leaf in the Secret", step.name, i)
			}
		}
		served = leaf
	}
}

// A next CA is not promoted while a webhook configuration does not carry it
// (another replica's patch failed, or someone re-applied the configuration):
// a leaf it signed would be refused there.
func TestCARolloverWaitsForEveryConfigurationToTrustTheNextCA(t *testing.T) {
	ctx := context.Background()
	m, c, clk := newTestRotator(t, append(webhookConfigurations(), secretWithCA(t, 2*time.Minute))...)
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// Someone strips the validating configuration's bundle back to the old CA.
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testSecret}, s); err != nil {
		t.Fatal(err)
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: testValidating}, v); err != nil {
		t.Fatal(err)
	}
	v.Webhooks[0].ClientConfig.CABundle = s.Data[CACertKey]
	if err := c.Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	clk.Step(3 * time.Second)
	changed, err := m.step(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if changed || len(s.Data[NextCACertKey]) == 0 {
		t.Fatalf("the next CA was promoted while %s did not trust it", testValidating)
	}
	// The next check puts the bundle back, and the one after promotes.
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: testNamespace, Name: testSecret}, s); err != nil {
		t.Fatal(err)
	}
	if len(s.Data[PreviousCACertKey]) == 0 {
		t.Error("the next CA was never promoted after every configuration trusted it")
	}
}

func TestStepRepairsWhatItCannotUse(t *testing.T) {
	foreign, err := pki.NewCA("foreign", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		// secret returns the Secret to repair, given a good one.
		secret     func(good *corev1.Secret) *corev1.Secret
		wantSameCA bool
	}{
		"empty secret": {secret: func(*corev1.Secret) *corev1.Secret { return &corev1.Secret{} }},
		"garbage": {secret: func(*corev1.Secret) *corev1.Secret {
			return &corev1.Secret{Data: map[string][]byte{CACertKey: []byte("x"), corev1.TLSCertKey: []byte("y")}}
		}},
		// The clock is one second on: a one-millisecond CA has expired.
		"expired CA, replaced at once (nothing trusts its leaves anyway)": {secret: func(*corev1.Secret) *corev1.Secret {
			return secretWithCA(t, time.Millisecond)
		}},
		"leaf signed by another CA": {
			secret:     func(good *corev1.Secret) *corev1.Secret { good.Data[corev1.TLSCertKey] = foreign.CertPEM; return good },
			wantSameCA: true,
		},
		"damaged next CA": {
			secret:     func(good *corev1.Secret) *corev1.Secret { good.Data[NextCACertKey] = []byte("x"); return good },
			wantSameCA: true,
		},
		"previous CA without a date": {
			secret:     func(good *corev1.Secret) *corev1.Secret { good.Data[PreviousCACertKey] = foreign.CertPEM; return good },
			wantSameCA: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m, _, clk := newTestRotator(t, webhookConfigurations()...)
			good := &corev1.Secret{}
			if _, err := m.step(ctx, good); err != nil {
				t.Fatal(err)
			}
			goodCA := good.Data[CACertKey]
			s := tc.secret(good.DeepCopy())
			clk.Step(time.Second)
			changed, err := m.step(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if !changed {
				t.Fatal("step() left data it cannot use unchanged")
			}
			ca, err := pki.LoadCA(s.Data[CACertKey], s.Data[CAKeyKey])
			if err != nil {
				t.Fatalf("step() left no usable CA: %v", err)
			}
			if !m.leafFresh(s.Data, ca.Cert, clk.Now()) {
				t.Error("step() left no fresh leaf signed by the CA")
			}
			if got := bytes.Equal(s.Data[CACertKey], goodCA); got != tc.wantSameCA {
				t.Errorf("kept the CA = %v, want %v", got, tc.wantSameCA)
			}
			if _, ok := s.Data[PreviousCACertKey]; ok {
				t.Error("a previous CA without a retirement date stays in the bundle")
			}
			if _, ok := s.Data[NextCACertKey]; ok {
				t.Error("a damaged next CA was kept")
			}
		})
	}
}

func TestNewRejectsIncompleteOptions(t *testing.T) {
	for name, opts := range map[string]Options{
		"no namespace":      {SecretName: "s", Hosts: []string{"h"}},
		"no secret":         {Namespace: "ns", Hosts: []string{"h"}},
		"no hosts":          {Namespace: "ns", SecretName: "s"},
		"negative validity": {Namespace: "ns", SecretName: "s", Hosts: []string{"h"}, CAValidity: -time.Hour},
	} {
		if _, err := New(nil, opts); err == nil {
			t.Errorf("%s: New() accepted incomplete options", name)
		}
	}
}

func TestCheckIntervalFollowsShortLifetimes(t *testing.T) {
	cases := map[string]struct {
		opts Options
		want time.Duration
	}{
		"defaults":        {want: 10 * time.Minute},
		"10-minute CA":    {opts: Options{CAValidity: 10 * time.Minute}, want: 30 * time.Second},
		"2-minute leaf":   {opts: Options{CertValidity: 2 * time.Minute}, want: 6 * time.Second},
		"explicit":        {opts: Options{CheckInterval: time.Hour}, want: time.Hour},
		"tiny is bounded": {opts: Options{CertValidity: time.Second}, want: time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tc.opts.Namespace, tc.opts.SecretName, tc.opts.Hosts = "ns", "s", []string{"h"}
			m, err := New(nil, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if m.opts.CheckInterval != tc.want {
				t.Errorf("CheckInterval = %s, want %s", m.opts.CheckInterval, tc.want)
			}
		})
	}
}
