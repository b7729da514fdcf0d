package hubtest

import (
	"context"
	"crypto/x509"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
)

// ErrOldCAInUse is RotateCA's refusal to finish while spokes still present
// certificates of the previous CA.
var ErrOldCAInUse = hubca.ErrOldCAInUse

// CA rotation steps for RotateCA, as `hub ca rotate` names them.
const (
	RotateStage   = string(hubca.StepStage)
	RotatePromote = string(hubca.StepPromote)
	RotateFinish  = string(hubca.StepFinish)
)

// RotateCA runs one step of `hub ca rotate` on the hub CA of namespace
// (without --force).
func RotateCA(ctx context.Context, c client.Client, namespace, step string) error {
	_, err := hubca.Rotate(ctx, c, namespace, config.Default().CASecret, hubca.Step(step), hubca.RotateOptions{})
	return err
}

// CurrentCA is the certificate of the hub CA of namespace that signs, and
// the rotation's phase (hubca.Phase).
func CurrentCA(ctx context.Context, c client.Reader, namespace string) (*x509.Certificate, string, error) {
	trust, err := hubca.LoadTrust(ctx, c, namespace, config.Default().CASecret)
	if err != nil {
		return nil, "", err
	}
	return trust.Current.Cert, string(trust.Phase), nil
}
