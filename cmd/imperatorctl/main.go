// Command imperatorctl is the command-line client of the Imperator hub's
// query API: the clusters of the fleet, their machine types and usage, where
// N more units fit, and bootstrap tokens. `imperatorctl help` documents the
// commands, the configuration and the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/imperator-federation/imperator/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
