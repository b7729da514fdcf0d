// Command gen writes the spoke's webhook configurations
// (install.Manifests) to stdout; make generate stores them as
// deploy/spoke/webhook/manifests.yaml.
package main

import (
	"fmt"
	"os"

	"github.com/imperator-federation/imperator/spoke/internal/webhook/install"
)

func main() {
	data, err := install.Manifests()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(data); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
