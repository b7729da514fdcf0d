// Package integration runs the dispatcher end to end on a real API server
// (envtest) that serves Kueue v0.17.0's own CRDs, against a complete hub
// in-process (hub/hubtest) fed by simulated spokes that join with bootstrap
// tokens and report over mTLS as the spoke agent does. The dispatcher runs
// as its binary assembles it (an unstructured cache, the Reconciler and the
// hub Watch), with a viewer certificate of the hub CA, under exactly the
// RBAC of deploy/dispatcher (its ServiceAccount impersonated). Kueue's controllers
// do not run: the tests write what Kueue would (quota reserved, the
// MultiKueue check Pending) and read what the dispatcher writes.
package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/dispatcher/internal/controller"
	"github.com/imperator-federation/imperator/hub/hubtest"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
	"github.com/imperator-federation/imperator/test/util/framework"
	"github.com/imperator-federation/imperator/test/util/kueue"
	"github.com/imperator-federation/imperator/test/util/repo"
)

const (
	hubNamespace = framework.AgentNamespace
	// gracePeriod is how long the hub waits for a silent spoke's heartbeat
	// before it counts the cluster Unknown (offline).
	gracePeriod = 2 * time.Second
	// checkName and configName are the MultiKueue AdmissionCheck and
	// MultiKueueConfig of every Workload.
	checkName  = "multikueue"
	configName = "fleet"
	// group and machineType are the machine type every spoke offers.
	group       = "h100"
	machineType = "compute-xlarge"
)

// env is a Kueue manager cluster (API server with Kueue's CRDs), a hub on
// the same API server, simulated spokes and the dispatcher.
type env struct {
	c      client.Client
	cfg    *rest.Config
	hub    *hubtest.Hub
	caPEM  []byte
	spokes map[string]*simSpoke
}

// startEnv starts everything with one spoke per entry of free (its
// compute-xlarge free units) and the MultiKueue objects naming them, and
// stops it all when tb ends.
func startEnv(tb testing.TB, free map[string]int32) *env {
	tb.Helper()
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	opts, err := hubtest.ClusterOptions()
	must(tb, err)
	must(tb, apiextensionsv1.AddToScheme(opts.Scheme))
	must(tb, clientgoscheme.AddToScheme(opts.Scheme))
	cluster, err := framework.Start(ctx, opts)
	must(tb, err)
	tb.Cleanup(func() {
		if err := cluster.Stop(); err != nil {
			tb.Errorf("stopping the API server: %v", err)
		}
	})
	crds, err := kueue.CRDDir()
	must(tb, err)
	must(tb, kueue.InstallCRDs(ctx, cluster.Client, crds))

	e := &env{c: cluster.Client, cfg: cluster.Config, spokes: map[string]*simSpoke{}}
	caFile, err := hubtest.WriteCAFile(ctx, e.c, hubNamespace, tb.TempDir())
	must(tb, err)
	e.caPEM, err = os.ReadFile(caFile)
	must(tb, err)
	e.hub, err = hubtest.Start(cluster.Config, hubtest.Options{Namespace: hubNamespace, GracePeriod: gracePeriod})
	must(tb, err)
	tb.Cleanup(func() {
		if err := e.hub.Stop(); err != nil {
			tb.Errorf("stopping the hub: %v", err)
		}
	})

	var names []string
	for name, n := range free {
		s, err := e.joinSpoke(ctx, name)
		must(tb, err)
		must(tb, s.start(gpuMachine(n)))
		tb.Cleanup(func() { _ = s.stop() })
		e.spokes[name] = s
		names = append(names, name)
		must(tb, e.c.Create(ctx, obj(controller.MultiKueueClusterGVK, "", name, map[string]any{
			"clusterSource": map[string]any{"kubeConfig": map[string]any{"locationType": "Secret", "location": name + "-kubeconfig"}},
		})))
	}
	must(tb, e.c.Create(ctx, obj(controller.MultiKueueConfigGVK, "", configName, map[string]any{"clusters": names})))
	must(tb, e.c.Create(ctx, obj(controller.AdmissionCheckGVK, "", checkName, map[string]any{
		"controllerName": controller.MultiKueueControllerName,
		"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": configName},
	})))
	must(tb, e.waitForHub(ctx, names))
	dispatcherConfig, err := underDeployedRBAC(ctx, e.c, cluster.Config)
	must(tb, err)
	e.startDispatcher(tb, ctx, dispatcherConfig)
	return e
}

// dispatcherServiceAccount is the dispatcher's identity in deploy/dispatcher.
const dispatcherServiceAccount = "system:serviceaccount:imperator-system:imperator-dispatcher"

// underDeployedRBAC creates the roles and bindings of deploy/dispatcher and
// returns cfg impersonating the dispatcher's ServiceAccount: the dispatcher
// of the tests runs with exactly the rights its install grants.
func underDeployedRBAC(ctx context.Context, c client.Client, cfg *rest.Config) (*rest.Config, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	for _, file := range []string{"role.yaml", "rbac_bindings.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "deploy", "dispatcher", file))
		if err != nil {
			return nil, err
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := decoder.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("deploy/dispatcher/%s: %w", file, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := c.Create(ctx, u); err != nil {
				return nil, fmt.Errorf("creating %s %s of deploy/dispatcher/%s: %w", u.GetKind(), u.GetName(), file, err)
			}
		}
	}
	impersonating := rest.CopyConfig(cfg)
	impersonating.Impersonate = rest.ImpersonationConfig{UserName: dispatcherServiceAccount}
	return impersonating, nil
}

// waitForHub waits until the hub answers that every spoke has free units.
func (e *env) waitForHub(ctx context.Context, names []string) error {
	hub, closeHub, err := e.queryClient()
	if err != nil {
		return err
	}
	defer closeHub()
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := hub.FindCapacity(ctx, &queryv1.FindCapacityRequest{Count: 1,
			Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Group: group, Type: machineType}}})
		if err != nil {
			last = err
			return false, nil
		}
		last = fmt.Errorf("%d of %d clusters offer units", len(resp.GetCandidates()), len(names))
		return len(resp.GetCandidates()) == len(names), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the hub to offer every spoke: %w (last: %v)", err, last)
	}
	return nil
}

// queryClient dials the hub's query API with a viewer certificate, as the
// dispatcher's --hub-client-cert does.
func (e *env) queryClient() (queryv1.QueryClient, func(), error) {
	cert, err := hubtest.ClientCertificate(context.Background(), e.c, hubNamespace, "dispatcher", "viewer")
	if err != nil {
		return nil, nil, err
	}
	conn, err := dial(e.hub.Address(), e.caPEM, &cert)
	if err != nil {
		return nil, nil, err
	}
	return queryv1.NewQueryClient(conn), func() { _ = conn.Close() }, nil
}

// startDispatcher runs the dispatcher as dispatcher/main.go assembles it.
func (e *env) startDispatcher(tb testing.TB, ctx context.Context, cfg *rest.Config) {
	tb.Helper()
	hub, closeHub, err := e.queryClient()
	must(tb, err)
	scheme := runtime.NewScheme()
	must(tb, clientgoscheme.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		HealthProbeBindAddress: "0",
		// Each test and benchmark size runs a dispatcher of its own in
		// this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Metrics:    metricsserver.Options{BindAddress: "0"},
	})
	must(tb, err)
	changes := make(chan event.GenericEvent, 1024)
	r := &controller.Reconciler{Client: mgr.GetClient(), Hub: hub, Recorder: mgr.GetEventRecorder("imperator-dispatcher"),
		Limit: 1, CallTimeout: 5 * time.Second, PlacementGrace: 10 * time.Second}
	must(tb, r.SetupWithManager(mgr, changes))
	must(tb, mgr.Add(&controller.HubWatch{Hub: hub, Client: mgr.GetClient(), Out: changes, Spacing: 100 * time.Millisecond}))
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	tb.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			tb.Errorf("the dispatcher's manager: %v", err)
		}
		closeHub()
	})
}

// workload is a Workload of one pod set of count units of the machine type,
// as Kueue's Job integration creates it.
func workload(namespace, name string, count int64) *unstructured.Unstructured {
	return obj(controller.WorkloadGVK, namespace, name, map[string]any{
		"queueName": "user-queue",
		"podSets": []any{map[string]any{
			"name": "main", "count": count,
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{
					imperatorv1alpha1.MachineGroupKey: group, imperatorv1alpha1.MachineTypeKey: machineType,
					imperatorv1alpha1.PodRoleKey: "guest"}},
				"spec": map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{"name": "main", "image": "busybox"}}},
			},
		}},
	})
}

// reserveQuota writes what Kueue writes when it reserves the workload's
// quota on the manager: QuotaReserved and the MultiKueue check Pending.
func reserveQuota(ctx context.Context, c client.Client, wl *unstructured.Unstructured) error {
	now := metav1.Now().UTC().Format(time.RFC3339)
	patch := map[string]any{"status": map[string]any{
		"conditions": []any{map[string]any{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
			"message": "Quota reserved in ClusterQueue cluster-queue", "lastTransitionTime": now}},
		"admissionChecks": []any{map[string]any{"name": checkName, "state": "Pending", "message": "", "lastTransitionTime": now}},
	}}
	u := &unstructured.Unstructured{Object: patch}
	u.SetGroupVersionKind(controller.WorkloadGVK)
	u.SetNamespace(wl.GetNamespace())
	u.SetName(wl.GetName())
	return c.Status().Patch(ctx, u, client.Merge)
}

// nominated is the Workload's status.nominatedClusterNames.
func nominated(ctx context.Context, c client.Client, namespace, name string) ([]string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(controller.WorkloadGVK)
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
		return nil, err
	}
	names, _, err := unstructured.NestedStringSlice(u.Object, "status", "nominatedClusterNames")
	return names, err
}

func obj(gvk schema.GroupVersionKind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// createNamespace creates a namespace for a test's Workloads.
func createNamespace(ctx context.Context, tb testing.TB, c client.Client, name string) {
	tb.Helper()
	must(tb, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

// gpuMachine is a Machine of the compute-xlarge type with free units free,
// at the spoke's steady state (every unit reserved, none used).
func gpuMachine(free int32) *federationv1.Machine {
	return &federationv1.Machine{
		Name: "gpu-" + group, Group: group, ObjectGeneration: 1, ObservedGeneration: 1,
		Ready: federationv1.ConditionStatus_CONDITION_STATUS_TRUE,
		Types: []*federationv1.MachineType{{
			Name: machineType, Cpu: "40", Memory: "128Gi", Available: free,
			Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-H100-80GB-HBM3", Family: "hopper"},
			Usage: &federationv1.Usage{Maximum: free, Reserved: free},
			Nodes: &federationv1.NodeCounts{Ready: 2},
		}},
	}
}

// simSpoke is a spoke agent reduced to its protocol: it joins with a
// bootstrap token, then reports a Snapshot and Heartbeats over mTLS with
// the certificate it got, as spoke/internal/reporter does.
type simSpoke struct {
	name, addr string
	caPEM      []byte
	cert       tls.Certificate
	conn       *grpc.ClientConn
	cancel     context.CancelFunc
	done       chan struct{}
	mu         sync.Mutex
	stream     federationv1.Federation_ReportClient
}

func (e *env) joinSpoke(ctx context.Context, name string) (*simSpoke, error) {
	token, err := hubtest.CreateToken(ctx, e.c, hubNamespace, time.Hour, name)
	if err != nil {
		return nil, err
	}
	csrPEM, keyPEM, err := pki.NewCSR(name)
	if err != nil {
		return nil, err
	}
	anon, err := dial(e.hub.Address(), e.caPEM, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = anon.Close() }()
	resp, err := federationv1.NewFederationClient(anon).Join(ctx, &federationv1.JoinRequest{ClusterName: name, Token: token, Csr: csrPEM, AgentVersion: "v0.1.0"})
	if err != nil {
		return nil, fmt.Errorf("joining as %s: %w", name, err)
	}
	cert, err := tls.X509KeyPair(resp.GetCertificate(), keyPEM)
	if err != nil {
		return nil, err
	}
	return &simSpoke{name: name, addr: e.hub.Address(), caPEM: e.caPEM, cert: cert}, nil
}

func dial(addr string, caPEM []byte, cert *tls.Certificate) (*grpc.ClientConn, error) {
	cfg, err := identity.ClientTLS(caPEM, cert, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
}

// start opens the Report stream, sends the Snapshot and heartbeats until stop.
func (s *simSpoke) start(machines ...*federationv1.Machine) error {
	conn, err := dial(s.addr, s.caPEM, &s.cert)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := federationv1.NewFederationClient(conn).Report(ctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		return err
	}
	s.conn, s.cancel, s.stream, s.done = conn, cancel, stream, make(chan struct{})
	hello := &federationv1.Hello{ClusterName: s.name, AgentVersion: "v0.1.0", Epoch: uint64(time.Now().UnixNano())}
	if err := s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Hello{Hello: hello}}); err != nil {
		return err
	}
	snapshot := &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.Now(), Machines: machines}
	if err := s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Snapshot{Snapshot: snapshot}}); err != nil {
		return err
	}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(s.done)
		ticker := time.NewTicker(300 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				if s.send(&federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{Generation: 1, SentAt: timestamppb.Now()}}}) != nil {
					return
				}
			}
		}
	}()
	return nil
}

func (s *simSpoke) send(m *federationv1.SpokeMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream.Send(m)
}

// stop ends the stream and the heartbeats: the spoke goes silent.
func (s *simSpoke) stop() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	<-s.done
	s.cancel = nil
	return s.conn.Close()
}
