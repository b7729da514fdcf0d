// Command fleet runs the local Imperator fleet of `make up`: a hub cluster and
// spoke clusters as local processes (test/util/fleet), the hub and one spoke
// agent per spoke with real mTLS (with --hosted, the named spokes are served
// instead by one hosted agent in the hub cluster, as `make up HOSTED=1` does;
// with --hub-replicas=2, two hub replicas with the spokes spread over them, as
// `make up HUB_REPLICAS=2` does).
// It writes <dir>/fleet.json once everything is ready and keeps the fleet running until it receives SIGINT or SIGTERM
// (`make down`), then stops every process it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/imperator-federation/imperator/test/util/fleet"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", ".fleet", "Directory for the clusters' data, logs and fleet.json.")
	binDir := flag.String("bin", "bin", "Directory holding the hub, spoke and imperatorctl binaries.")
	grace := flag.Duration("grace-period", fleet.DefaultGracePeriod, "How long the hub waits for a silent spoke before marking it Unknown.")
	replicas := flag.Int("hub-replicas", 1, "How many hub replicas serve the fleet; the spokes' agents are spread over them in turn.")
	var hosted []string
	flag.Func("hosted", "A spoke served by one hosted agent in the hub cluster (--clusters-from=kubeconfig-secrets) instead of an agent inside it; repeat or separate with commas.", func(v string) error {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				hosted = append(hosted, name)
			}
		}
		return nil
	})
	flag.Parse()

	absDir, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	absBin, err := filepath.Abs(*binDir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	f, err := fleet.Start(startCtx, fleet.Options{Dir: absDir, BinDir: absBin, GracePeriod: *grace, Hosted: hosted, HubReplicas: *replicas})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("fleet: stopping")
		if err := f.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "fleet: stopping:", err)
		}
	}()
	path := filepath.Join(absDir, "fleet.json")
	if err := f.WriteDescription(path); err != nil {
		return err
	}
	fmt.Println("fleet: ready, described in", path)
	<-ctx.Done()
	return nil
}
