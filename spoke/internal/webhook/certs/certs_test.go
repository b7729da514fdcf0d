package certs

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/imperator-federation/imperator/internal/pki"
)

func TestFreshDecidesWhenTheWebhookCertificateIsRenewed(t *testing.T) {
	m, err := New(nil, Options{Namespace: "ns", SecretName: "s", Hosts: []string{"imperator-webhook.ns.svc", "127.0.0.1"}, CertValidity: 90 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	good, err := m.issue(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherHost, err := (&Manager{opts: Options{Hosts: []string{"other.ns.svc"}, CAValidity: time.Hour, CertValidity: time.Hour}}).issue(nil)
	if err != nil {
		t.Fatal(err)
	}
	foreignCA, err := pki.NewCA("foreign", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	withForeignCA := maps.Clone(good)
	withForeignCA[CACertKey] = foreignCA.CertPEM
	mismatchedKey := maps.Clone(good)
	mismatchedKey[corev1.TLSPrivateKeyKey] = otherHost[corev1.TLSPrivateKeyKey]

	now := time.Now()
	cases := map[string]struct {
		data      map[string][]byte
		now       time.Time
		wantFresh bool
	}{
		"just issued":                         {data: good, now: now, wantFresh: true},
		"empty secret":                        {data: nil, now: now},
		"less than a third of lifetime left":  {data: good, now: now.Add(61 * 24 * time.Hour)},
		"certificate for another host":        {data: otherHost, now: now},
		"certificate not signed by stored CA": {data: withForeignCA, now: now},
		"private key does not match":          {data: mismatchedKey, now: now},
		"garbage":                             {data: map[string][]byte{CACertKey: []byte("x"), corev1.TLSCertKey: []byte("y")}, now: now},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := m.fresh(tc.data, tc.now); got != tc.wantFresh {
				t.Errorf("fresh() = %v, want %v", got, tc.wantFresh)
			}
		})
	}
}

func TestRenewalKeepsAFreshCA(t *testing.T) {
	m, err := New(nil, Options{Namespace: "ns", SecretName: "s", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.issue(nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.issue(first)
	if err != nil {
		t.Fatal(err)
	}
	if string(first[CACertKey]) != string(second[CACertKey]) {
		t.Error("renewing the serving certificate replaced a CA that was still valid; webhook CA bundles would change for nothing")
	}
	if string(first[corev1.TLSCertKey]) == string(second[corev1.TLSCertKey]) {
		t.Error("renewal returned the old serving certificate")
	}
}

func TestNewRejectsIncompleteOptions(t *testing.T) {
	for name, opts := range map[string]Options{
		"no namespace": {SecretName: "s", Hosts: []string{"h"}},
		"no secret":    {Namespace: "ns", Hosts: []string{"h"}},
		"no hosts":     {Namespace: "ns", SecretName: "s"},
	} {
		if _, err := New(nil, opts); err == nil {
			t.Errorf("%s: New() accepted incomplete options", name)
		}
	}
}
