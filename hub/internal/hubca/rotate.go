package hubca

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/pki"
)

// RotateOptions are the choices of one `hub ca rotate` step.
type RotateOptions struct {
	// Force finishes although spokes still present certificates of the
	// previous CA (or no replica reported which CA its spokes present).
	Force bool
	// Now is the time observations are judged at (time.Now when zero).
	Now time.Time
}

// Rotate runs one rotation step on the CA Secret namespace/name: the
// Secret is updated with its resourceVersion and the step recomputed on a
// conflict, so that two operators (or a replica's report) racing never
// stage two CAs. A missing Secret is an error: no step creates a CA but
// the staged next one.
func Rotate(ctx context.Context, c client.Client, namespace, name string, step Step, opts RotateOptions) (string, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	var message string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var secret corev1.Secret
		if err := c.Get(ctx, key, &secret); apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: secret %s not found (is this the hub cluster? `hub ca init` creates the CA)", ErrNoCA, key)
		} else if err != nil {
			return fmt.Errorf("reading hub CA secret %s: %w", key, err)
		}
		outcome, err := runStep(secret.Data, step, opts.Force, now, func(cluster string) (bool, error) {
			return registry.Exists(ctx, c, cluster)
		})
		if err != nil {
			return fmt.Errorf("hub CA secret %s: %w", key, err)
		}
		message = outcome.Message
		if outcome.Data == nil {
			return nil
		}
		secret.Data = outcome.Data
		return c.Update(ctx, &secret)
	})
	if err != nil {
		return "", err
	}
	return message, nil
}

// runStep computes step on data. registered says whether a cluster is
// registered (its ManagedCluster exists): at finish, a cluster reported as
// presenting the previous CA but deregistered since does not hold it up
// (the hub admits no spoke of it, whichever CA its certificate is of).
func runStep(data map[string][]byte, step Step, force bool, now time.Time, registered func(cluster string) (bool, error)) (Outcome, error) {
	switch step {
	case StepStage:
		return Stage(data, func() (*pki.CA, error) {
			return pki.NewCA("imperator-hub-ca "+now.UTC().Format("2006-01-02T15:04:05Z"), caValidity)
		})
	case StepPromote:
		return Promote(data)
	case StepFinish:
		reported, reporting, err := OldCAClusters(data, now, ObservationMaxAge)
		if err != nil {
			return Outcome{}, err
		}
		var clusters []string
		for _, cluster := range reported {
			ok, err := registered(cluster)
			if err != nil {
				return Outcome{}, fmt.Errorf("checking whether cluster %q, reported presenting the previous CA, is still registered: %w", cluster, err)
			}
			if ok {
				clusters = append(clusters, cluster)
			}
		}
		if t, err := ParseTrust(data); err == nil && t.Phase == PhasePromoted && reporting == 0 && !force {
			return Outcome{}, fmt.Errorf("%w: no hub replica reported in the last %s which CA its spokes present (is the hub running, at a version that reports it?); pass --force to finish without knowing", ErrOldCAInUse, ObservationMaxAge)
		}
		return Finish(data, clusters, force)
	default:
		return Outcome{}, fmt.Errorf("unknown rotation step %q", step)
	}
}
