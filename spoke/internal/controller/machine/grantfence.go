package machine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// maxGrantAge bounds how old the confirmation of a grant decision may be
// when a gate is opened. A reconcile decides from the cache; an agent that
// stopped between deciding and opening the gates (SIGSTOP, a frozen node, a
// long pause) must not let guests through on what it knew before it
// stopped: the Machine's available may have been lowered meanwhile (found
// by the soak, seed 876393: two guests let through over a lowered
// available by an agent resumed after 13 s).
const maxGrantAge = time.Second

// grantRetry is how soon a reconcile whose grants were held back by the
// fence runs again.
const grantRetry = 200 * time.Millisecond

// errGrantStale says that grants were held back: the Machine changed since
// the decision, or the confirmation came too late to act on.
var errGrantStale = errors.New("the Machine changed since the grants were decided, or the agent was held up deciding them: decided again")

// grantFence confirms, from the API server rather than the cache, that the
// Machine a grant decision was made from is still the one in force, and
// keeps the confirmation for maxGrantAge.
type grantFence struct {
	// generation is the Machine's generation the decision was made from.
	generation int64
	// read returns the Machine's generation now, from the API server.
	read func(context.Context) (int64, error)
	now  func() time.Time
	// confirmed is when the last confirmation was asked for (zero: none).
	confirmed time.Time
}

// newGrantFence is the fence of a decision made from machine, reading it
// again through reader (the API server, not the cache).
func newGrantFence(reader client.Reader, machine *imperatorv1alpha1.Machine) *grantFence {
	key := client.ObjectKeyFromObject(machine)
	return &grantFence{
		generation: machine.Generation,
		read: func(ctx context.Context) (int64, error) {
			fresh := &imperatorv1alpha1.Machine{}
			if err := reader.Get(ctx, key, fresh); err != nil {
				return 0, err
			}
			return fresh.Generation, nil
		},
		now: time.Now,
	}
}

// allow returns nil when a gate may be opened now: confirmed within
// maxGrantAge, else confirmed again. errGrantStale when the Machine's spec
// changed, or when the confirmation itself took longer than maxGrantAge
// (the process may have been stopped while it waited: what it read is no
// longer known to be current).
func (f *grantFence) allow(ctx context.Context) error {
	if !f.confirmed.IsZero() && f.now().Sub(f.confirmed) <= maxGrantAge {
		return nil
	}
	f.confirmed = time.Time{}
	asked := f.now()
	generation, err := f.read(ctx)
	if err != nil {
		return fmt.Errorf("reading the Machine again before letting guests through: %w", err)
	}
	if generation != f.generation || f.now().Sub(asked) > maxGrantAge {
		return errGrantStale
	}
	f.confirmed = asked
	return nil
}

// withoutStale is err without errGrantStale (which is a requeue, not a
// failure), nil when nothing else is left.
func withoutStale(err error) error {
	var rest []error
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if joined, ok := e.(interface{ Unwrap() []error }); ok {
			for _, inner := range joined.Unwrap() {
				walk(inner)
			}
			return
		}
		if !errors.Is(e, errGrantStale) {
			rest = append(rest, e)
		}
	}
	walk(err)
	return errors.Join(rest...)
}
