// Package e2e holds the multi-cluster end-to-end journeys of Imperator
// Federation: a hub and two spoke clusters on real control planes with
// simulated GPU nodes (test/util/fleet), driven the way a platform team
// drives them — Kubernetes objects on the spokes through client-go, questions
// to the hub through the real imperatorctl binary. Each journey is a reusable
// function taking an input struct (JoinSpec, MachineSpec, ...), so that the
// process-based fleet of suite_test.go and any other fleet (an existing one
// described by fleet.json, kind clusters) run the same assertions.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/test/util/fleet"
)

// Binaries are the programs of `make build` the journeys need.
var Binaries = []string{"hub", "spoke", "imperatorctl"}

// Lifecycle stops and starts the fleet's Imperator processes. A *fleet.Fleet
// is one; an attached fleet (fleet.json of `make up`) has none, and the
// journeys that need it are skipped.
type Lifecycle interface {
	StopAgent(spoke string) error
	StartAgent(ctx context.Context, spoke string) error
	StopHub() error
	StartHub(ctx context.Context) error
	Logs(lines int) string
}

// Cluster is one cluster of the fleet as the journeys reach it.
type Cluster struct {
	Name   string
	Config *rest.Config
	// Client reads and writes Kubernetes, Imperator and OCM objects.
	Client client.Client
}

// Env is the fleet the journeys run against.
type Env struct {
	Hub    *Cluster
	Spokes map[string]*Cluster
	// Ctl runs imperatorctl with an admin identity for the hub.
	Ctl *Imperatorctl
	// Fleet controls the hub and agent processes; nil when attached.
	Fleet Lifecycle
	// GracePeriod is the hub's grace period for silent spokes.
	GracePeriod time.Duration
	// Namespace is where the agents keep their reservation workloads.
	Namespace string
	// RepoRoot is the repository root, for the samples in deploy/.
	RepoRoot string
	// LogDirs are where the processes of an attached fleet write their logs.
	LogDirs []string
	// Modes is how each spoke's agent runs, as the hub must show it
	// (imperatorctl clusters -o wide, MODE): fleet.ModeInCluster or
	// fleet.ModeHosted; a spoke missing here is not checked.
	Modes map[string]string
}

// Spoke returns the named spoke cluster or fails the spec.
func (e *Env) Spoke(name string) *Cluster {
	GinkgoHelper()
	c, ok := e.Spokes[name]
	if !ok {
		Fail(fmt.Sprintf("the fleet has no spoke %q", name))
	}
	return c
}

// Sample is the path of a file in deploy/spoke/samples.
func (e *Env) Sample(name string) string {
	return filepath.Join(e.RepoRoot, "deploy", "spoke", "samples", name)
}

// Logs returns the end of every process log of the fleet, for failure reports.
func (e *Env) Logs(lines int) string {
	if e.Fleet != nil {
		return e.Fleet.Logs(lines)
	}
	return fmt.Sprintf("the attached fleet's process logs are in %v", e.LogDirs)
}

// Scheme knows the Kubernetes, Imperator and OCM cluster types.
func Scheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), imperatorv1alpha1.AddToScheme(scheme), clusterv1.Install(scheme)); err != nil {
		return nil, fmt.Errorf("building the scheme: %w", err)
	}
	return scheme, nil
}

// NewCluster makes the clients of one cluster.
func NewCluster(name string, cfg *rest.Config, scheme *runtime.Scheme) (*Cluster, error) {
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the client of %s: %w", name, err)
	}
	return &Cluster{Name: name, Config: cfg, Client: c}, nil
}

// NewEnvFromFleet wraps a fleet started with fleet.Start (with BinDir set).
func NewEnvFromFleet(f *fleet.Fleet, binDir, repoRoot string) (*Env, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	env := &Env{
		Spokes:      map[string]*Cluster{},
		Ctl:         &Imperatorctl{Bin: filepath.Join(binDir, "imperatorctl"), Config: f.ImperatorctlConfig()},
		Fleet:       f,
		GracePeriod: f.GracePeriod(),
		Namespace:   fleet.Namespace,
		RepoRoot:    repoRoot,
		Modes:       map[string]string{},
	}
	if env.Hub, err = NewCluster(f.Hub.Name, f.Hub.Config, scheme); err != nil {
		return nil, err
	}
	for _, name := range f.SpokeNames() {
		if env.Spokes[name], err = NewCluster(name, f.Spokes[name].Config, scheme); err != nil {
			return nil, err
		}
		env.Modes[name] = f.Mode(name)
	}
	return env, nil
}

// NewEnvFromDescription attaches to a running fleet described by fleet.json
// (`make up`). It cannot stop or start the fleet's processes.
func NewEnvFromDescription(path, binDir, repoRoot string) (*Env, error) {
	d, err := fleet.ReadDescription(path)
	if err != nil {
		return nil, err
	}
	if d.ImperatorctlConfig == "" {
		return nil, fmt.Errorf("%s describes a fleet without a hub (no imperatorctlConfig)", path)
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	env := &Env{
		Spokes:      map[string]*Cluster{},
		Ctl:         &Imperatorctl{Bin: filepath.Join(binDir, "imperatorctl"), Config: d.ImperatorctlConfig},
		GracePeriod: fleet.DefaultGracePeriod,
		Namespace:   fleet.Namespace,
		RepoRoot:    repoRoot,
		Modes:       map[string]string{},
	}
	attach := func(cd fleet.ClusterDescription) (*Cluster, error) {
		cfg, err := clientcmd.BuildConfigFromFlags("", cd.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading the kubeconfig of %s: %w", cd.Name, err)
		}
		env.LogDirs = append(env.LogDirs, filepath.Dir(cd.Kubeconfig))
		return NewCluster(cd.Name, cfg, scheme)
	}
	if env.Hub, err = attach(d.Hub); err != nil {
		return nil, err
	}
	for _, cd := range d.Spokes {
		if env.Spokes[cd.Name], err = attach(cd); err != nil {
			return nil, err
		}
		if cd.Mode != "" { // a fleet.json from before modes says nothing
			env.Modes[cd.Name] = cd.Mode
		}
	}
	return env, nil
}

// CheckBinaries fails with a message saying how to build them when a binary
// of Binaries is missing from binDir.
func CheckBinaries(binDir string) error {
	var missing []string
	for _, name := range Binaries {
		if info, err := os.Stat(filepath.Join(binDir, name)); err != nil || info.IsDir() {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("e2e: %v missing in %s: run `make build` (or set E2E_BIN_DIR to the directory holding hub, spoke and imperatorctl)", missing, binDir)
	}
	return nil
}
