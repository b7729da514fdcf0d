package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	queryv1 "github.com/imperator-federation/imperator/proto/imperator/query/v1"
)

// scriptedStream answers Recv with its events, then err.
type scriptedStream struct {
	grpc.ClientStream
	events []*queryv1.ClusterEvent
	err    error
}

func (s *scriptedStream) Recv() (*queryv1.ClusterEvent, error) {
	if len(s.events) == 0 {
		return nil, s.err
	}
	ev := s.events[0]
	s.events = s.events[1:]
	return ev, nil
}

// scriptedWatcher is a Query client whose Watch calls get the streams in
// turn; no stream left is Unavailable (the hub is gone).
type scriptedWatcher struct {
	queryv1.QueryClient
	streams []*scriptedStream
	calls   int
}

func (w *scriptedWatcher) Watch(context.Context, *queryv1.WatchRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[queryv1.ClusterEvent], error) {
	w.calls++
	if len(w.streams) == 0 {
		return nil, status.Error(codes.Unavailable, "connection refused")
	}
	s := w.streams[0]
	w.streams = w.streams[1:]
	return s, nil
}

func event(cluster string) *queryv1.ClusterEvent {
	return &queryv1.ClusterEvent{Cluster: &queryv1.Cluster{Name: cluster}}
}

func TestWatchSurvivesTheHubRecyclingItsConnection(t *testing.T) {
	recycled := status.Error(codes.Unavailable, `received prior goaway: code: NO_ERROR, debug data: "max_age"`)
	cases := map[string]struct {
		streams      []*scriptedStream
		wantCalls    int
		wantClusters []string
		wantExit     bool
	}{
		"a working stream recycled by the hub is opened again": {
			streams: []*scriptedStream{
				{events: []*queryv1.ClusterEvent{event("a")}, err: recycled},
				{events: []*queryv1.ClusterEvent{event("b")}, err: io.EOF},
			},
			wantCalls:    2,
			wantClusters: []string{"a", "b"},
		},
		"a hub that stays away ends the watch": {
			streams: []*scriptedStream{
				{events: []*queryv1.ClusterEvent{event("a")}, err: recycled},
			},
			wantCalls:    2,
			wantClusters: []string{"a"},
			wantExit:     true,
		},
		"a stream failing before it worked ends the watch at once": {
			streams: []*scriptedStream{
				{err: status.Error(codes.Unavailable, "connection refused")},
			},
			wantCalls: 1,
			wantExit:  true,
		},
		"a refusal is not retried": {
			streams: []*scriptedStream{
				{events: []*queryv1.ClusterEvent{event("a")}, err: status.Error(codes.PermissionDenied, "revoked")},
			},
			wantCalls:    1,
			wantClusters: []string{"a"},
			wantExit:     true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			w := &scriptedWatcher{streams: tc.streams}
			c := &command{
				client:  w,
				ctx:     context.Background(),
				printer: printer{format: "json", out: &output{w: &out}, now: time.Now},
				hub:     "hub.example.com:9443",
			}
			err := c.watch(func(*table, *queryv1.ClusterEvent) error { return nil }, nil)
			if gotExit := err != nil; gotExit != tc.wantExit {
				t.Errorf("watch() = %v, want an error: %t", err, tc.wantExit)
			}
			if w.calls != tc.wantCalls {
				t.Errorf("Watch opened %d times, want %d", w.calls, tc.wantCalls)
			}
			for _, cluster := range tc.wantClusters {
				if !strings.Contains(out.String(), `"`+cluster+`"`) {
					t.Errorf("output lacks the event of cluster %q:\n%s", cluster, out.String())
				}
			}
		})
	}
}
