package framework

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
)

// Options that cannot work are refused before anything starts, naming the
// fields at fault.
func TestRefusesOptionsThatCannotWork(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		start   func() error
		wantErr []string
	}{
		"webhooks on a harness cluster": {
			start: func() error {
				_, err := Start(ctx, Options{Harness: true, Mutating: func(string) []*admissionregistrationv1.MutatingWebhookConfiguration { return nil }})
				return err
			},
			wantErr: []string{"Mutating", "Harness"},
		},
		"a manager with both setups": {
			start: func() error {
				_, err := (&Environment{}).StartManager(ctx, ManagerOptions{
					Setup:             func(ctrl.Manager) error { return nil },
					SetupMulticluster: func(mcmanager.Manager) error { return nil },
				})
				return err
			},
			wantErr: []string{"Setup", "SetupMulticluster"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.start()
			if err == nil {
				t.Fatal("started; want an error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
}

// Stopping an environment that never started, or twice, is harmless: suites
// stop what they started also after a failure half-way.
func TestStopsWhatNeverStarted(t *testing.T) {
	e := &Environment{}
	if err := e.Stop(); err != nil {
		t.Fatalf("Stop of an empty environment: %v", err)
	}
	if err := e.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}
