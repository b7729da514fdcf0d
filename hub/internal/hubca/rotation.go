package hubca

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/imperator-federation/imperator/internal/pki"
)

// Keys of the CA Secret. tls.crt and tls.key are the current CA, the one
// that signs; during a rotation the Secret also holds the next CA (staged,
// trusted, not signing yet) or, once it is promoted, the previous CA's
// certificate (trusted until the rotation finishes; its key is dropped at
// promotion, so that nothing signs with it any more).
const (
	NextCertKey     = "next.crt"
	NextKeyKey      = "next.key"
	PreviousCertKey = "previous.crt"
	// CrossCertKey is, from promotion to finish, the current CA's
	// certificate signed by the previous CA: the hub presents it after its
	// serving certificate, so that a spoke or imperatorctl that trusts only
	// the previous CA (it has not renewed, or its configuration was not
	// re-issued, since the rotation was staged) still verifies the hub.
	CrossCertKey = "cross.crt"
)

// Phase is where a CA rotation stands, read from the CA Secret's keys.
type Phase string

const (
	// PhaseStable is one CA, no rotation under way.
	PhaseStable Phase = "Stable"
	// PhaseStaged is when `hub ca rotate` added the next CA; both are trusted and
	// handed out as the bundle, the current one still signs.
	PhaseStaged Phase = "Staged"
	// PhasePromoted is when `hub ca rotate --promote` made the next CA current (it
	// signs, the serving certificate is re-issued from it); the previous
	// CA stays trusted until `hub ca rotate --finish`.
	PhasePromoted Phase = "Promoted"
)

// Trust is what the CA Secret says: the CA that signs, every CA certificate
// trusted, and the bundle (PEM) handed to whoever fetches the hub's trust.
type Trust struct {
	Phase   Phase
	Current *pki.CA
	// Next is the staged CA (PhaseStaged only).
	Next *pki.CA
	// Previous is the CA certificate being retired and Cross the current
	// CA's certificate signed by it (PhasePromoted only).
	Previous *x509.Certificate
	Cross    *x509.Certificate
	// Trusted are the CA certificates clients and servers accept: current
	// first, then next or previous.
	Trusted []*x509.Certificate
}

// ParseTrust reads the CA Secret's data. Every error names the key at fault.
func ParseTrust(data map[string][]byte) (*Trust, error) {
	current, err := pki.LoadCA(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("%s/%s (current CA): %w", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
	}
	t := &Trust{Phase: PhaseStable, Current: current, Trusted: []*x509.Certificate{current.Cert}}
	_, hasNext := data[NextCertKey]
	_, hasPrevious := data[PreviousCertKey]
	switch {
	case hasNext && hasPrevious:
		return nil, fmt.Errorf("the CA Secret holds both %s and %s: a rotation is staged and promoted at once, which `hub ca rotate` never writes; remove the one that is wrong by hand", NextCertKey, PreviousCertKey)
	case hasNext:
		next, err := pki.LoadCA(data[NextCertKey], data[NextKeyKey])
		if err != nil {
			return nil, fmt.Errorf("%s/%s (next CA): %w", NextCertKey, NextKeyKey, err)
		}
		t.Phase, t.Next = PhaseStaged, next
		t.Trusted = append(t.Trusted, next.Cert)
	case hasPrevious:
		previous, err := pki.ParseCertificate(data[PreviousCertKey])
		if err != nil {
			return nil, fmt.Errorf("%s (previous CA): %w", PreviousCertKey, err)
		}
		if !previous.IsCA {
			return nil, fmt.Errorf("%s (previous CA): not a CA certificate", PreviousCertKey)
		}
		cross, err := pki.ParseCertificate(data[CrossCertKey])
		if err != nil {
			return nil, fmt.Errorf("%s (current CA signed by the previous one): %w", CrossCertKey, err)
		}
		if !bytes.Equal(cross.RawSubjectPublicKeyInfo, current.Cert.RawSubjectPublicKeyInfo) || cross.CheckSignatureFrom(previous) != nil {
			return nil, fmt.Errorf("%s: not the current CA signed by the previous one", CrossCertKey)
		}
		t.Phase, t.Previous, t.Cross = PhasePromoted, previous, cross
		t.Trusted = append(t.Trusted, previous)
	}
	return t, nil
}

// Bundle is the PEM of every trusted CA certificate, current first: what
// spokes and imperatorctl verify the hub with.
func (t *Trust) Bundle() []byte {
	var b bytes.Buffer
	for _, c := range t.Trusted {
		b.Write(pki.EncodeCertificate(c))
	}
	return b.Bytes()
}

// Intermediates is what the hub presents after its serving certificate:
// the cross-signed current CA while a promoted rotation is not finished.
func (t *Trust) Intermediates() [][]byte {
	if t.Cross == nil {
		return nil
	}
	return [][]byte{t.Cross.Raw}
}

// Pool is the trusted CA certificates as a pool, for verifying clients.
func (t *Trust) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range t.Trusted {
		pool.AddCert(c)
	}
	return pool
}

// Fingerprint is the SHA-256 of a certificate, in hex: how a CA is named in
// messages and in observations of the CA spokes present.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// Step is one phase of `hub ca rotate`.
type Step string

// The steps of `hub ca rotate`, in their order.
const (
	// StepStage adds a next CA (Stage).
	StepStage Step = "stage"
	// StepPromote makes the next CA current (Promote).
	StepPromote Step = "promote"
	// StepFinish drops the previous CA (Finish).
	StepFinish Step = "finish"
)

// ErrWrongOrder is returned for a step that the rotation's phase does not
// allow; the message says which step comes first.
var ErrWrongOrder = errors.New("wrong order of CA rotation steps")

// ErrOldCAInUse is returned by a finish refused because spokes still
// present certificates of the previous CA.
var ErrOldCAInUse = errors.New("spokes still present certificates of the previous CA")

// Outcome is what a step did: the Secret's new data (nil when nothing
// changes, which makes every step idempotent) and a sentence for the
// operator.
type Outcome struct {
	Data    map[string][]byte
	Message string
}

// Stage adds a next CA made by newCA. In PhaseStaged it does nothing (and
// makes no CA); in PhasePromoted it refuses: the previous rotation must
// finish first.
func Stage(data map[string][]byte, newCA func() (*pki.CA, error)) (Outcome, error) {
	t, err := ParseTrust(data)
	if err != nil {
		return Outcome{}, err
	}
	switch t.Phase {
	case PhaseStaged:
		return Outcome{Message: fmt.Sprintf("next CA %s already staged; nothing changed (promote it with `hub ca rotate --promote`)", short(t.Next.Cert))}, nil
	case PhasePromoted:
		return Outcome{}, fmt.Errorf("%w: the previous rotation is promoted but not finished (previous CA %s still trusted); run `hub ca rotate --finish` before staging another CA", ErrWrongOrder, short(t.Previous))
	}
	next, err := newCA()
	if err != nil {
		return Outcome{}, fmt.Errorf("creating the next CA: %w", err)
	}
	keyPEM, err := next.KeyPEM()
	if err != nil {
		return Outcome{}, err
	}
	out := cloneData(data)
	out[NextCertKey], out[NextKeyKey] = next.CertPEM, keyPEM
	return Outcome{Data: out, Message: fmt.Sprintf("staged next CA %s beside current CA %s: both are trusted and handed out as the bundle; the current CA still signs", short(next.Cert), short(t.Current.Cert))}, nil
}

// Promote makes the next CA current and keeps the previous one's
// certificate trusted. In PhasePromoted it does nothing; in PhaseStable it
// refuses: there is no next CA.
func Promote(data map[string][]byte) (Outcome, error) {
	t, err := ParseTrust(data)
	if err != nil {
		return Outcome{}, err
	}
	switch t.Phase {
	case PhaseStable:
		return Outcome{}, fmt.Errorf("%w: no next CA is staged; run `hub ca rotate` first (or, if a rotation just finished, there is nothing to promote)", ErrWrongOrder)
	case PhasePromoted:
		return Outcome{Message: fmt.Sprintf("CA %s is already current, previous CA %s still trusted; nothing changed (finish with `hub ca rotate --finish`)", short(t.Current.Cert), short(t.Previous))}, nil
	}
	cross, err := t.Current.CrossSign(t.Next.Cert)
	if err != nil {
		return Outcome{}, err
	}
	out := cloneData(data)
	out[corev1.TLSCertKey], out[corev1.TLSPrivateKeyKey] = data[NextCertKey], data[NextKeyKey]
	out[PreviousCertKey], out[CrossCertKey] = t.Current.CertPEM, cross
	delete(out, NextCertKey)
	delete(out, NextKeyKey)
	return Outcome{Data: out, Message: fmt.Sprintf("promoted CA %s: it signs new certificates and the hub's serving certificate; previous CA %s stays trusted until `hub ca rotate --finish`", short(t.Next.Cert), short(t.Current.Cert))}, nil
}

// Finish drops the previous CA. oldCAClusters are the clusters that still
// present a certificate of it; unless force, a finish with any is refused,
// naming them. In PhaseStable it does nothing; in PhaseStaged it refuses:
// the next CA is not promoted yet.
func Finish(data map[string][]byte, oldCAClusters []string, force bool) (Outcome, error) {
	t, err := ParseTrust(data)
	if err != nil {
		return Outcome{}, err
	}
	switch t.Phase {
	case PhaseStable:
		return Outcome{Message: fmt.Sprintf("no rotation under way, CA %s is the only one; nothing changed", short(t.Current.Cert))}, nil
	case PhaseStaged:
		return Outcome{}, fmt.Errorf("%w: next CA %s is staged but not promoted; run `hub ca rotate --promote` before `--finish`", ErrWrongOrder, short(t.Next.Cert))
	}
	if len(oldCAClusters) > 0 && !force {
		return Outcome{}, fmt.Errorf("%w: %s (they renew at two thirds of their certificate's life; wait for it, or pass --force to cut them off)", ErrOldCAInUse, strings.Join(oldCAClusters, ", "))
	}
	out := cloneData(data)
	delete(out, PreviousCertKey)
	delete(out, CrossCertKey)
	for k := range out {
		if strings.HasPrefix(k, observationPrefix) {
			delete(out, k)
		}
	}
	msg := fmt.Sprintf("finished: previous CA %s is no longer trusted; CA %s is the only one (checked were the spokes that connected to a running hub replica, as reported within the last %s; a spoke offline since the hub replicas started, whose certificate is of the previous CA, must join again)", short(t.Previous), short(t.Current.Cert), ObservationMaxAge)
	if len(oldCAClusters) > 0 {
		msg += fmt.Sprintf(" (forced: %s still presented certificates of the previous CA and must join again)", strings.Join(oldCAClusters, ", "))
	}
	return Outcome{Data: out, Message: msg}, nil
}

// short names a CA certificate in messages: its common name and the first
// bytes of its fingerprint.
func short(cert *x509.Certificate) string {
	return fmt.Sprintf("%q (sha256 %s…)", cert.Subject.CommonName, Fingerprint(cert)[:12])
}

func cloneData(data map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(data)+2)
	for k, v := range data {
		out[k] = slices.Clone(v)
	}
	return out
}
