// Package cli implements imperatorctl: its cobra commands and their flags,
// the configuration file, the connection to the hub and the output formats.
// It also builds the token command the hub binary embeds (NewHubTokenCommand),
// so that `imperatorctl token` and `hub token` are one implementation with
// two transports. Run is the whole of imperatorctl, so that tests drive it
// like a user.
//
// One file per command group, as kubectl's: clusters.go, machines.go,
// usage.go, capacity.go, holds.go (hold create, list, get and release: one
// group, so one file although long), cluster.go (cluster deregister),
// describe.go (describe and get), why.go, tokens.go, version.go. Around them:
// cli.go the root command, its flags, how a command runs and the connection
// to the hub; config.go the configuration file; kubecreds.go the bearer
// token of a kubeconfig context; target.go the machine type and shape
// arguments capacity and hold create share; watch.go the --watch stream;
// print.go and objects.go the output formats; completion.go shell
// completion.
package cli
