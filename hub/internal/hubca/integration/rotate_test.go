package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/hubca/hubcatest"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/pki"
	"github.com/imperator-federation/imperator/internal/schemes"
	"github.com/imperator-federation/imperator/test/util/framework"
)

// TestRotateAgainstTheAPIServer runs `hub ca rotate`'s steps on the CA
// Secret of a real API server, with a hub replica's Authority following
// them: no step creates a missing CA; the replica picks up each step; the
// finish is refused, naming the cluster, while a spoke connected to the
// replica with a certificate of the previous CA, and goes through once it
// connected with one of the new CA.
func TestRotateAgainstTheAPIServer(t *testing.T) {
	ctx := context.Background()
	scheme, err := schemes.Hub()
	if err != nil {
		t.Fatal(err)
	}
	env := startAPIServer(t, framework.Options{Scheme: scheme, CRDs: framework.HubCRDs})
	key := client.ObjectKey{Namespace: namespace, Name: secret}
	// spoke-a is registered; spoke-gone was deregistered (no
	// ManagedCluster) after it connected with a certificate of the
	// previous CA, so it does not hold up the finish.
	if _, err := registry.Register(ctx, env.Client, "spoke-a"); err != nil {
		t.Fatal(err)
	}

	for _, step := range []hubca.Step{hubca.StepStage, hubca.StepPromote, hubca.StepFinish} {
		if _, err := hubca.Rotate(ctx, env.Client, namespace, secret, step, hubca.RotateOptions{}); !errors.Is(err, hubca.ErrNoCA) {
			t.Errorf("%s on a cluster without a CA: %v, want ErrNoCA", step, err)
		}
	}
	if err := env.Client.Get(ctx, key, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after rotation steps on a cluster without a CA the Secret: %v, want NotFound", err)
	}

	old, err := hubca.Create(ctx, env.Client, namespace, secret)
	if err != nil {
		t.Fatal(err)
	}
	authority, serving := startReplica(ctx, t, env.Client, "hub-0")
	hub := authority.TLSConfig()
	oldSpoke := hubcatest.SpokeCertificate(t, old, "spoke-a")

	rotate := func(step hubca.Step, opts hubca.RotateOptions) error {
		t.Helper()
		_, err := hubca.Rotate(ctx, env.Client, namespace, secret, step, opts)
		if err == nil {
			if err := authority.Refresh(ctx); err != nil {
				t.Fatalf("the replica reading the Secret after %s: %v", step, err)
			}
		}
		return err
	}

	if err := rotate(hubca.StepPromote, hubca.RotateOptions{}); !errors.Is(err, hubca.ErrWrongOrder) {
		t.Fatalf("promote before stage: %v, want ErrWrongOrder", err)
	}
	if err := rotate(hubca.StepStage, hubca.RotateOptions{}); err != nil {
		t.Fatal(err)
	}
	staged := authority.Trust()
	if staged.Phase != hubca.PhaseStaged || staged.Next == nil {
		t.Fatalf("the replica after stage: phase %s", staged.Phase)
	}
	if err := rotate(hubca.StepStage, hubca.RotateOptions{}); err != nil {
		t.Fatal(err)
	}
	if again := authority.Trust(); !again.Next.Cert.Equal(staged.Next.Cert) {
		t.Fatal("a second stage replaced the next CA")
	}
	if err := rotate(hubca.StepFinish, hubca.RotateOptions{}); !errors.Is(err, hubca.ErrWrongOrder) {
		t.Fatalf("finish before promote: %v, want ErrWrongOrder", err)
	}
	if err := rotate(hubca.StepPromote, hubca.RotateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := authority.Trust(); got.Phase != hubca.PhasePromoted || !got.Current.Cert.Equal(staged.Next.Cert) {
		t.Fatalf("the replica after promote: phase %s", got.Phase)
	}

	// spoke-a connects with its certificate of the previous CA, trusting
	// only that CA (it has not renewed since the stage).
	if err := handshake(t, hub, old.CertPEM, oldSpoke); err != nil {
		t.Fatalf("a spoke of the previous CA after promote: %v", err)
	}
	if err := handshake(t, hub, old.CertPEM, hubcatest.SpokeCertificate(t, old, "spoke-gone")); err != nil {
		t.Fatalf("a deregistered spoke of the previous CA after promote: %v", err)
	}
	if err := authority.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	err = rotate(hubca.StepFinish, hubca.RotateOptions{})
	if !errors.Is(err, hubca.ErrOldCAInUse) || !strings.Contains(err.Error(), "spoke-a") {
		t.Fatalf("finish while spoke-a presents the previous CA: %v, want ErrOldCAInUse naming spoke-a", err)
	}
	if strings.Contains(err.Error(), "spoke-gone") {
		t.Errorf("finish names the deregistered spoke-gone: %v", err)
	}

	// A report of a replica gone long ago is removed by the next report.
	var current corev1.Secret
	if err := env.Client.Get(ctx, key, &current); err != nil {
		t.Fatal(err)
	}
	current.Data["observed.hub-gone"] = []byte(`{"at":"2020-01-01T00:00:00Z","previous":"x","clusters":{}}`)
	if err := env.Client.Update(ctx, &current); err != nil {
		t.Fatal(err)
	}
	if err := authority.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, key, &current); err != nil {
		t.Fatal(err)
	}
	if _, ok := current.Data["observed.hub-gone"]; ok {
		t.Error("a report older than ObservationMaxAge stays in the CA Secret")
	}
	if _, ok := current.Data["observed.hub-0"]; !ok {
		t.Error("the replica's own report is missing from the CA Secret")
	}

	// A changed cross-signed certificate (same CAs) is put in force: the
	// hub presents it after its serving certificate.
	cross, err := old.CrossSign(authority.Trust().Current.Cert)
	if err != nil {
		t.Fatal(err)
	}
	current.Data[hubca.CrossCertKey] = cross
	if err := env.Client.Update(ctx, &current); err != nil {
		t.Fatal(err)
	}
	if err := authority.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	crossCert, err := pki.ParseCertificate(cross)
	if err != nil {
		t.Fatal(err)
	}
	if presented, err := serving.GetCertificate(nil); err != nil {
		t.Fatal(err)
	} else if len(presented.Certificate) != 2 || !crossCert.Equal(mustParse(t, presented.Certificate[1])) {
		t.Error("the hub does not present the changed cross-signed certificate")
	}

	// spoke-a renewed: a certificate of the new CA and the bundle; it now
	// connects to another replica, hub-1, while hub-0 still last saw it
	// with its certificate of the previous CA. The newest handshake wins.
	replica1, _ := startReplica(ctx, t, env.Client, "hub-1")
	newSpoke := hubcatest.SpokeCertificate(t, authority.Trust().Current, "spoke-a")
	if err := handshake(t, replica1.TLSConfig(), authority.TrustBundle(), newSpoke); err != nil {
		t.Fatalf("the renewed spoke: %v", err)
	}
	for _, a := range []*hubca.Authority{authority, replica1} {
		if err := a.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := rotate(hubca.StepFinish, hubca.RotateOptions{}); err != nil {
		t.Fatalf("finish once spoke-a renewed: %v", err)
	}
	if got := authority.Trust(); got.Phase != hubca.PhaseStable || len(got.Trusted) != 1 {
		t.Fatalf("the replica after finish: phase %s, %d CAs trusted", got.Phase, len(got.Trusted))
	}
	if err := handshake(t, hub, authority.TrustBundle(), newSpoke); err != nil {
		t.Errorf("the renewed spoke after finish: %v", err)
	}
	if err := handshake(t, hub, authority.TrustBundle(), oldSpoke); err == nil {
		t.Error("a certificate of the dropped CA is still accepted after finish")
	}
	if err := rotate(hubca.StepFinish, hubca.RotateOptions{}); err != nil {
		t.Errorf("a second finish: %v", err)
	}
}

// handshake connects over loopback as a spoke presenting cert and
// verifying the hub with trustPEM; nil when both sides accept and the hub
// verified the spoke's certificate.
func handshake(t *testing.T, hub *tls.Config, trustPEM []byte, cert *tls.Certificate) error {
	t.Helper()
	hubErr, clientErr := hubcatest.Handshake(t, hub, trustPEM, cert)
	return errors.Join(hubErr, clientErr)
}

func mustParse(t *testing.T, der []byte) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
