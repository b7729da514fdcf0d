package query

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/imperator-federation/imperator/hub/internal/join"
	"github.com/imperator-federation/imperator/hub/internal/store"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// fakeTokens records token calls.
type fakeTokens struct {
	created []join.CreateOptions
	revoked []string
}

func (f *fakeTokens) Create(_ context.Context, opts join.CreateOptions) (string, join.TokenInfo, error) {
	f.created = append(f.created, opts)
	return "abcdef.0123456789abcdef", join.TokenInfo{ID: "abcdef", ClusterName: opts.ClusterName, Expiration: time.Unix(1e9, 0)}, nil
}

func (f *fakeTokens) List(context.Context) ([]join.TokenInfo, error) {
	return []join.TokenInfo{{ID: "abcdef", UsedBy: "a"}}, nil
}

func (f *fakeTokens) Revoke(_ context.Context, id string) error {
	if id != "abcdef" {
		return join.ErrUnknownToken
	}
	f.revoked = append(f.revoked, id)
	return nil
}

type testEnv struct {
	store   *store.Store
	clock   *clocktesting.FakeClock
	tokens  *fakeTokens
	clients map[string]queryv1.QueryClient // by role: admin, viewer, spoke, stranger, anonymous
}

func startService(t *testing.T) *testEnv {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServer("hub", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	env := &testEnv{clock: clocktesting.NewFakeClock(time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)), tokens: &fakeTokens{}}
	env.store = store.New(env.clock, time.Minute)
	svc := New(env.store, env.tokens, env.clock)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(identity.ServerTLS(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &serving, nil }, pool))))
	svc.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = svc.Start(ctx) }()
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { cancel(); srv.Stop() })

	env.clients = map[string]queryv1.QueryClient{}
	for role, orgs := range map[string][]string{
		"admin":     {AdminOrganization},
		"viewer":    {ViewerOrganization},
		"spoke":     {identity.SpokeOrganization, AdminOrganization},
		"stranger":  {"someone-else"},
		"anonymous": nil,
	} {
		var cert *tls.Certificate
		if orgs != nil {
			c, k, err := ca.IssueClient(role, orgs, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			pair, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			cert = &pair
		}
		cfg, err := identity.ClientTLS(ca.CertPEM, cert, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		env.clients[role] = queryv1.NewQueryClient(conn)
	}
	return env
}

func (e *testEnv) report(name string, machines ...*federationv1.Machine) {
	e.store.Connect(name, &federationv1.Hello{ClusterName: name, AgentVersion: "v1", Epoch: 1})
	e.store.ApplySnapshot(name, 1, &federationv1.Snapshot{Generation: 1, ObservedAt: timestamppb.New(e.clock.Now()), Machines: machines})
}

func gpuMachine(group string, maximum, used int32) *federationv1.Machine {
	return &federationv1.Machine{Name: "gpu", Group: group, Types: []*federationv1.MachineType{{
		Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: maximum,
		Gpu:   &federationv1.GPU{Type: "nvidia.com/gpu", Num: 2, Product: "NVIDIA-GeForce-RTX-3090", Family: "ampere"},
		Usage: &federationv1.Usage{Maximum: maximum, Used: used, Reserved: maximum - used},
	}}}
}

func TestAuthorization(t *testing.T) {
	env := startService(t)
	ctx := context.Background()
	cases := map[string]struct {
		role     string
		call     func(queryv1.QueryClient) error
		wantCode codes.Code
	}{
		"viewer lists clusters": {role: "viewer", call: func(c queryv1.QueryClient) error {
			_, err := c.ListClusters(ctx, &queryv1.ListClustersRequest{})
			return err
		}, wantCode: codes.OK},
		"spoke lists clusters": {role: "spoke", call: func(c queryv1.QueryClient) error {
			_, err := c.ListClusters(ctx, &queryv1.ListClustersRequest{})
			return err
		}, wantCode: codes.OK},
		"no certificate": {role: "anonymous", call: func(c queryv1.QueryClient) error {
			_, err := c.ListClusters(ctx, &queryv1.ListClustersRequest{})
			return err
		}, wantCode: codes.Unauthenticated},
		"certificate without a role": {role: "stranger", call: func(c queryv1.QueryClient) error {
			_, err := c.GetUsage(ctx, &queryv1.GetUsageRequest{})
			return err
		}, wantCode: codes.PermissionDenied},
		"viewer cannot create tokens": {role: "viewer", call: func(c queryv1.QueryClient) error {
			_, err := c.CreateToken(ctx, &queryv1.CreateTokenRequest{})
			return err
		}, wantCode: codes.PermissionDenied},
		"spoke certificate never grants admin": {role: "spoke", call: func(c queryv1.QueryClient) error {
			_, err := c.CreateToken(ctx, &queryv1.CreateTokenRequest{})
			return err
		}, wantCode: codes.PermissionDenied},
		"admin lists tokens": {role: "admin", call: func(c queryv1.QueryClient) error {
			_, err := c.ListTokens(ctx, &queryv1.ListTokensRequest{})
			return err
		}, wantCode: codes.OK},
		"viewer asks the hub's version": {role: "viewer", call: func(c queryv1.QueryClient) error {
			_, err := c.GetVersion(ctx, &queryv1.GetVersionRequest{})
			return err
		}, wantCode: codes.OK},
		"certificate without a role cannot ask the version": {role: "stranger", call: func(c queryv1.QueryClient) error {
			_, err := c.GetVersion(ctx, &queryv1.GetVersionRequest{})
			return err
		}, wantCode: codes.PermissionDenied},
		"certificate without a role cannot watch": {role: "stranger", call: func(c queryv1.QueryClient) error {
			stream, err := c.Watch(ctx, &queryv1.WatchRequest{})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, wantCode: codes.PermissionDenied},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.call(env.clients[tc.role])
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("code = %v, want %v (%v)", got, tc.wantCode, err)
			}
		})
	}
}

func TestValidation(t *testing.T) {
	env := startService(t)
	c := env.clients["admin"]
	ctx := context.Background()
	typeTarget := &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}
	cases := map[string]struct {
		call      func() error
		wantField string // empty: the call must succeed
	}{
		"capacity without target": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Count: 1})
			return err
		}, wantField: "target"},
		"capacity count zero": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: typeTarget})
			return err
		}, wantField: "count"},
		"capacity unknown mode": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: typeTarget, Count: 1, Mode: 9})
			return err
		}, wantField: "mode"},
		"capacity bad type name": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "Bad_Name"}}, Count: 1})
			return err
		}, wantField: "machine_type.type"},
		"capacity empty shape": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_Shape{Shape: &queryv1.ResourceShape{}}, Count: 1})
			return err
		}, wantField: "shape"},
		"capacity bad cpu": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_Shape{Shape: &queryv1.ResourceShape{Cpu: "lots"}}, Count: 1})
			return err
		}, wantField: "shape.cpu"},
		"capacity negative memory": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_Shape{Shape: &queryv1.ResourceShape{Memory: "-1Gi"}}, Count: 1})
			return err
		}, wantField: "shape.memory"},
		"capacity negative gpus": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_Shape{Shape: &queryv1.ResourceShape{GpuCount: -1}}, Count: 1})
			return err
		}, wantField: "shape.gpu_count"},
		"capacity valid shape": {call: func() error {
			_, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{Target: &queryv1.FindCapacityRequest_Shape{Shape: &queryv1.ResourceShape{GpuCount: 1, GpuProduct: "NVIDIA-A100"}}, Count: 3, Mode: queryv1.CapacityMode_CAPACITY_MODE_SPREAD})
			return err
		}},
		"machines bad cluster": {call: func() error {
			_, err := c.ListMachines(ctx, &queryv1.ListMachinesRequest{Cluster: "A B"})
			return err
		}, wantField: "cluster"},
		"machines bad product": {call: func() error {
			_, err := c.ListMachines(ctx, &queryv1.ListMachinesRequest{GpuProduct: "a/b"})
			return err
		}, wantField: "gpu_product"},
		"token ttl too long": {call: func() error {
			_, err := c.CreateToken(ctx, &queryv1.CreateTokenRequest{Ttl: durationpb.New(365 * 24 * time.Hour)})
			return err
		}, wantField: "ttl"},
		"token bad cluster": {call: func() error {
			_, err := c.CreateToken(ctx, &queryv1.CreateTokenRequest{ClusterName: "-x"})
			return err
		}, wantField: "cluster_name"},
		"revoke bad id": {call: func() error {
			_, err := c.RevokeToken(ctx, &queryv1.RevokeTokenRequest{Id: "abcdef.0123456789abcdef"})
			return err
		}, wantField: "id"},
		"watch bad cluster": {call: func() error {
			stream, err := c.Watch(ctx, &queryv1.WatchRequest{Clusters: []string{""}})
			if err != nil {
				return err
			}
			_, err = stream.Recv()
			return err
		}, wantField: "clusters[0]"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), tc.wantField+":") {
				t.Errorf("error = %v, want InvalidArgument naming %s", err, tc.wantField)
			}
		})
	}
}

func TestQueriesAndTokens(t *testing.T) {
	env := startService(t)
	ctx := context.Background()
	env.report("a", gpuMachine("team-a", 4, 3))
	env.report("b", gpuMachine("team-b", 4, 0))
	c := env.clients["admin"]

	capResp, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{
		Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}, Count: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !capResp.Satisfiable || len(capResp.Candidates) != 1 || capResp.Candidates[0].Cluster != "b" || capResp.Candidates[0].Take != 2 ||
		len(capResp.Excluded) != 1 || capResp.Excluded[0].Reason != queryv1.ExclusionReason_EXCLUSION_REASON_NOT_ENOUGH {
		t.Errorf("FindCapacity = %v", capResp)
	}

	if _, err := c.GetUsage(ctx, &queryv1.GetUsageRequest{Cluster: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetUsage of an unknown cluster: %v, want NotFound", err)
	}
	usage, err := c.GetUsage(ctx, &queryv1.GetUsageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(usage.Fleet) != 2 || usage.Fleet[0].Group != "team-a" || usage.Fleet[0].Free != 1 || usage.Fleet[1].Free != 4 {
		t.Errorf("fleet usage = %v", usage.Fleet)
	}

	created, err := c.CreateToken(ctx, &queryv1.CreateTokenRequest{ClusterName: "c", Ttl: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if created.Token == "" || created.Info.GetClusterName() != "c" {
		t.Errorf("CreateToken = %v", created)
	}
	if diff := cmp.Diff([]join.CreateOptions{{TTL: time.Hour, ClusterName: "c"}}, env.tokens.created); diff != "" {
		t.Errorf("created tokens (-want +got):\n%s", diff)
	}
	if _, err := c.RevokeToken(ctx, &queryv1.RevokeTokenRequest{Id: "zzzzzz"}); status.Code(err) != codes.NotFound {
		t.Errorf("revoking an unknown token: %v, want NotFound", err)
	}
	if _, err := c.RevokeToken(ctx, &queryv1.RevokeTokenRequest{Id: "abcdef"}); err != nil {
		t.Errorf("revoking: %v", err)
	}
}

func TestWatch(t *testing.T) {
	env := startService(t)
	env.report("a", gpuMachine("team-a", 4, 0))
	env.report("b", gpuMachine("team-b", 4, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := env.clients["viewer"].Watch(ctx, &queryv1.WatchRequest{Clusters: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if !first.Initial || first.Cluster.GetName() != "a" || first.Usage.GetTypes()[0].GetFree() != 4 {
		t.Fatalf("initial event = %v", first)
	}
	// A change of b is filtered out; a change of a arrives with its latest figures.
	env.report("b", gpuMachine("team-b", 4, 4))
	env.store.ApplyDelta("a", 1, &federationv1.Delta{Generation: 2, Upserts: []*federationv1.Machine{gpuMachine("team-a", 4, 3)}})
	next, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if next.Initial || next.Type != queryv1.ClusterEventType_CLUSTER_EVENT_TYPE_UPDATED || next.Cluster.GetName() != "a" || next.Usage.GetTypes()[0].GetFree() != 1 {
		t.Fatalf("change event = %v", next)
	}
}

// Guests held at a spoke's slot gate show as queued in every answer, and the
// slot the first of them is about to take is not offered as free.
func TestQueuedGuestsInAnswers(t *testing.T) {
	env := startService(t)
	ctx := context.Background()
	// One unit, its reservation pod still running while the oldest of two
	// queued guests is granted it.
	m := gpuMachine("team-a", 1, 0)
	m.Types[0].Usage = &federationv1.Usage{Maximum: 1, Reserved: 1, Waiting: 2, Queued: 2}
	env.report("a", m)
	c := env.clients["viewer"]

	usage, err := c.GetUsage(ctx, &queryv1.GetUsageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &queryv1.TypeUsage{Group: "team-a", Type: "compute-xlarge", Maximum: 1, Reserved: 1, Waiting: 2, Queued: 2, Free: 0}
	if len(usage.GetClusters()) != 1 || len(usage.GetFleet()) != 1 {
		t.Fatalf("GetUsage = %v, want one cluster and one fleet row", usage)
	}
	for what, got := range map[string]*queryv1.TypeUsage{"cluster a": usage.GetClusters()[0].GetTypes()[0], "fleet": usage.GetFleet()[0]} {
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s usage (-want +got):\n%s", what, diff)
		}
	}
	machines, err := c.ListMachines(ctx, &queryv1.ListMachinesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := machines.GetMachineTypes(); len(got) != 1 || got[0].GetUsage().GetQueued() != 2 || got[0].GetFree() != 0 {
		t.Errorf("ListMachines = %v, want 2 queued and none free", got)
	}
	found, err := c.FindCapacity(ctx, &queryv1.FindCapacityRequest{
		Target: &queryv1.FindCapacityRequest_MachineType{MachineType: &queryv1.MachineTypeRef{Type: "compute-xlarge"}}, Count: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if found.GetSatisfiable() {
		t.Errorf("FindCapacity = %v, want the slot a queued guest is taking not offered", found)
	}
}
