package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// usageHub answers GetUsage with usage (or err) and records the requests.
type usageHub struct {
	queryv1.QueryClient
	usage    *queryv1.GetUsageResponse
	err      error
	requests []*queryv1.GetUsageRequest
}

func (u *usageHub) GetUsage(_ context.Context, req *queryv1.GetUsageRequest, _ ...grpc.CallOption) (*queryv1.GetUsageResponse, error) {
	u.requests = append(u.requests, req)
	return u.usage, u.err
}

// waitingGuest is a guest of team-a/compute-xlarge waiting at the gate.
func waitingGuest() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer-0", Labels: map[string]string{
			imperatorv1alpha1.PodRoleKey:      string(imperatorv1alpha1.PodRoleGuest),
			imperatorv1alpha1.MachineGroupKey: "team-a",
			imperatorv1alpha1.MachineTypeKey:  "compute-xlarge",
		}},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: imperatorv1alpha1.SlotSchedulingGate}}},
	}
}

// The hub's part of imperatorctl why --cluster: what it asks the hub and
// the Hub line it prints from the answer.
func TestWhyHubPart(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	spokeA := func(types ...*queryv1.TypeUsage) *queryv1.GetUsageResponse {
		return &queryv1.GetUsageResponse{Clusters: []*queryv1.ClusterUsage{{
			Cluster: "spoke-a", State: queryv1.ClusterState_CLUSTER_STATE_AVAILABLE,
			ObservedAt: timestamppb.New(now.Add(-3 * time.Second)), Types: types,
		}}}
	}
	xlarge := func(group string, free, maximum int32) *queryv1.TypeUsage {
		return &queryv1.TypeUsage{Group: group, Type: "compute-xlarge", Free: free, Maximum: maximum}
	}
	cases := map[string]struct {
		cluster      string
		usage        *queryv1.GetUsageResponse
		err          error
		pod          func() *corev1.Pod
		wantRequests []*queryv1.GetUsageRequest
		wantHubLine  string
	}{
		"the hub's free units of the pod's type in the cluster": {
			cluster: "spoke-a", usage: spokeA(xlarge("team-b", 3, 3), xlarge("team-a", 1, 4)),
			wantRequests: []*queryv1.GetUsageRequest{{Cluster: "spoke-a"}},
			wantHubLine:  "Hub:          cluster spoke-a is Available; the hub counts 1 free of 4 for team-a/compute-xlarge (observed 3s ago)",
		},
		"a pod without a group label takes the type in any group": {
			cluster: "spoke-a", usage: spokeA(xlarge("team-b", 3, 3)),
			pod: func() *corev1.Pod {
				p := waitingGuest()
				delete(p.Labels, imperatorv1alpha1.MachineGroupKey)
				return p
			},
			wantRequests: []*queryv1.GetUsageRequest{{Cluster: "spoke-a"}},
			wantHubLine:  "the hub counts 3 free of 3 for team-b/compute-xlarge",
		},
		"the hub knows the cluster but not the type": {
			cluster: "spoke-a", usage: spokeA(),
			wantRequests: []*queryv1.GetUsageRequest{{Cluster: "spoke-a"}},
			wantHubLine:  "Hub:          the hub knows no type team-a/compute-xlarge in cluster spoke-a",
		},
		"the hub does not know the cluster": {
			cluster: "spoke-z", err: status.Error(codes.NotFound, `cluster "spoke-z" is not known to the hub`),
			wantRequests: []*queryv1.GetUsageRequest{{Cluster: "spoke-z"}},
			wantHubLine:  `Hub:          could not ask the hub about cluster spoke-z: rpc error: code = NotFound desc = cluster "spoke-z" is not known to the hub`,
		},
		"the hub answers for another cluster only": {
			cluster: "spoke-b", usage: spokeA(xlarge("team-a", 1, 4)),
			wantRequests: []*queryv1.GetUsageRequest{{Cluster: "spoke-b"}},
			wantHubLine:  "Hub:          could not ask the hub about cluster spoke-b: the hub knows no cluster spoke-b",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			hub := &usageHub{usage: tc.usage, err: tc.err}
			pod := waitingGuest()
			if tc.pod != nil {
				pod = tc.pod()
			}
			e := &guestExplanation{pod: pod}
			e.hub, e.hubErr = hubUsage(context.Background(), hub, tc.cluster)
			if diff := cmp.Diff(tc.wantRequests, hub.requests, protocmp.Transform()); diff != "" {
				t.Errorf("requests to the hub (-want +got):\n%s", diff)
			}
			var out bytes.Buffer
			p, err := newPrinter(formatTable, Env{Stdout: &out, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			p.explain(e, tc.cluster)
			var hubLines []string
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "Hub:") {
					hubLines = append(hubLines, l)
				}
			}
			if len(hubLines) != 1 || !strings.Contains(hubLines[0], tc.wantHubLine) {
				t.Errorf("Hub lines %q, want one containing %q; output:\n%s", hubLines, tc.wantHubLine, out.String())
			}
		})
	}
}

// Without --cluster the hub is neither asked nor mentioned; a hub that
// could not be reached is said so, the spoke's explanation kept.
func TestWhyWithoutTheHub(t *testing.T) {
	cases := map[string]struct {
		cluster string
		hubErr  error
		wantHub string
	}{
		"no --cluster":               {},
		"--cluster, hub unreachable": {cluster: "spoke-a", hubErr: errors.New("hub unreachable at hub:9443"), wantHub: "could not ask the hub about cluster spoke-a: hub unreachable at hub:9443"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			p, err := newPrinter(formatTable, Env{Stdout: &out, Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			p.explain(&guestExplanation{pod: waitingGuest(), hubErr: tc.hubErr}, tc.cluster)
			if !strings.Contains(out.String(), "Gate:         waits at the slot gate") {
				t.Errorf("the spoke's explanation is missing:\n%s", out.String())
			}
			gotHub := strings.Contains(out.String(), "Hub:")
			if gotHub != (tc.wantHub != "") || tc.wantHub != "" && !strings.Contains(out.String(), tc.wantHub) {
				t.Errorf("want hub line %q, got:\n%s", tc.wantHub, out.String())
			}
		})
	}
}
