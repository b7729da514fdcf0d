package machinevalidator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/spoke/internal/webhook/machinevalidator"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/wrappers"
)

// BenchmarkValidateCreate validates a new Machine of 100 nodes while 100
// Machines of 100 nodes each exist: "cache" calls the validator on the
// manager's cache (index lookups), "dry-run" creates the Machine with
// dryRun=All through the API server, schema, CEL and webhook included. Run
// with `go test -run '^$' -bench ValidateCreate`.
func BenchmarkValidateCreate(b *testing.B) {
	const machines, nodesPerMachine = 100, 100
	ctx := context.Background()
	e, err := framework.Start(ctx, environment())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Error(err)
		}
	})
	for m := range machines {
		w := wrappers.MakeMachine(fmt.Sprintf("m%d", m), fmt.Sprintf("g%d", m)).Type("small", "1", "1Gi", 1)
		for n := range nodesPerMachine {
			w.Node(fmt.Sprintf("m%d-n%d", m, n), "small")
		}
		if err := e.Client.Create(ctx, w.Obj()); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.WaitForCache(ctx, 30*time.Second, func(ctx context.Context, cache client.Reader) (bool, error) {
		list := &imperatorv1alpha1.MachineList{}
		if err := cache.List(ctx, list); err != nil {
			return false, err
		}
		return len(list.Items) == machines, nil
	}); err != nil {
		b.Fatalf("the validator's cache never saw every Machine: %v", err)
	}

	w := wrappers.MakeMachine("new", "new").Type("small", "1", "1Gi", 1)
	for n := range nodesPerMachine {
		w.Node(fmt.Sprintf("new-n%d", n), "small")
	}
	machine := w.Obj()

	b.Run("cache", func(b *testing.B) {
		v := &machinevalidator.Validator{Reader: e.Manager.Cache}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.ValidateCreate(ctx, machine); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dry-run", func(b *testing.B) {
		for b.Loop() {
			if err := e.Client.Create(ctx, machine.DeepCopy(), client.DryRunAll); err != nil {
				b.Fatal(err)
			}
		}
	})
}
