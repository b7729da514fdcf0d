package registry

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/imperator-federation/imperator/internal/identity"
)

func TestCertificateRecordAdmission(t *testing.T) {
	joinedAt := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	until := joinedAt.Add(time.Hour)
	withRecord := func(rec any) map[string]string {
		raw, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{CertificatesAnnotation: string(raw)}
	}
	renewed := CertificateRecord{Current: "c2", JoinSerial: "c1", JoinedAt: joinedAt, Replaced: "c1", ReplacedUntil: &until}
	cases := map[string]struct {
		annotations map[string]string
		serial      string
		notBefore   time.Time
		now         time.Time
		wantReason  RefusalReason
	}{
		"no record: a registration from an older hub admits its certificates": {
			serial: "old", notBefore: joinedAt.Add(-time.Hour), now: joinedAt,
		},
		"the current certificate": {
			annotations: withRecord(renewed), serial: "c2", notBefore: joinedAt.Add(time.Minute), now: until.Add(time.Hour),
		},
		"the replaced certificate within the overlap": {
			annotations: withRecord(renewed), serial: "c1", notBefore: joinedAt, now: until.Add(-time.Second),
		},
		"the replaced certificate after the overlap": {
			annotations: withRecord(renewed), serial: "c1", notBefore: joinedAt, now: until, wantReason: RefusedReplacedCertificate,
		},
		"a certificate renewed away before the last renewal": {
			annotations: withRecord(renewed), serial: "c0", notBefore: joinedAt.Add(time.Second), now: joinedAt, wantReason: RefusedReplacedCertificate,
		},
		"a renewed certificate issued within the join's second": {
			annotations: withRecord(CertificateRecord{Current: "c3", JoinSerial: "c1", JoinedAt: joinedAt, Renewed: []string{"c2", "c3"}}),
			serial:      "c2", notBefore: joinedAt, now: joinedAt, wantReason: RefusedReplacedCertificate,
		},
		"a certificate issued before the last join": {
			annotations: withRecord(renewed), serial: "b9", notBefore: joinedAt.Add(-time.Second), now: joinedAt, wantReason: RefusedEarlierRegistration,
		},
		"an unreadable record admits nobody": {
			annotations: map[string]string{CertificatesAnnotation: "{not json"}, serial: "c2", now: joinedAt, wantReason: RefusedEarlierRegistration,
		},
		"a record without a current certificate admits nobody": {
			annotations: withRecord(CertificateRecord{JoinedAt: joinedAt}), serial: "", now: joinedAt, wantReason: RefusedEarlierRegistration,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mc := managedCluster(true, false)
			mc.Annotations = tc.annotations
			err := Admission(mc, identity.Spoke{Cluster: "a", RegistrationUID: currentUID, Serial: tc.serial, NotBefore: tc.notBefore}, tc.now)
			var got RefusalReason
			if refused, ok := err.(*RefusedError); ok {
				got = refused.Reason
			} else if err != nil {
				t.Fatalf("Admission = %v, want nil or a *RefusedError", err)
			}
			if diff := cmp.Diff(tc.wantReason, got); diff != "" {
				t.Errorf("refusal (-want +got):\n%s\nerror: %v", diff, err)
			}
		})
	}
}

func TestValidSerial(t *testing.T) {
	cases := map[string]bool{
		"1f":                       true,
		"72486b92e4320ecfa5e27819": true,
		"":                         false,
		"1F":                       false,
		"0x1f":                     false,
		"../configmap":             false,
		"0123456789abcdef0123456789abcdef012345678": false,
	}
	for serial, want := range cases {
		if got := ValidSerial(serial); got != want {
			t.Errorf("ValidSerial(%q) = %t, want %t", serial, got, want)
		}
	}
}
