package store

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	clocktesting "k8s.io/utils/clock/testing"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestHeartbeatsSayTheAgentCannotReachItsAPIServer(t *testing.T) {
	start := time.Unix(100_000, 0).UTC()
	down := start.Add(-45 * time.Second)
	hb := func(since *timestamppb.Timestamp) *federationv1.Heartbeat {
		return &federationv1.Heartbeat{Generation: 1, ApiServerUnreachableSince: since}
	}
	type want struct {
		Since    time.Time
		Stale    bool
		Message  string
		Notified int
	}
	cases := map[string]struct {
		heartbeats []*federationv1.Heartbeat
		want       want
	}{
		"a current cluster stays current": {
			heartbeats: []*federationv1.Heartbeat{hb(nil), hb(nil)},
			want:       want{},
		},
		"unreachable: stale from the first heartbeat saying so, with the spoke's time": {
			heartbeats: []*federationv1.Heartbeat{hb(nil), hb(timestamppb.New(down))},
			want: want{Since: down, Stale: true, Notified: 1,
				Message: "the spoke agent cannot reach its own cluster's API server since 1970-01-02T03:45:55Z: its figures come from its cache and may be out of date"},
		},
		"repeated unreachable heartbeats change nothing more": {
			heartbeats: []*federationv1.Heartbeat{hb(timestamppb.New(down)), hb(timestamppb.New(down)), hb(timestamppb.New(down))},
			want: want{Since: down, Stale: true, Notified: 1,
				Message: "the spoke agent cannot reach its own cluster's API server since 1970-01-02T03:45:55Z: its figures come from its cache and may be out of date"},
		},
		"current again at the first heartbeat without it": {
			heartbeats: []*federationv1.Heartbeat{hb(timestamppb.New(down)), hb(nil)},
			want:       want{Notified: 2},
		},
		"a time ahead of the hub's clock is taken as the hub's now, once": {
			heartbeats: []*federationv1.Heartbeat{hb(timestamppb.New(start.Add(time.Hour))), hb(timestamppb.New(start.Add(2 * time.Hour)))},
			want: want{Since: start, Stale: true, Notified: 1,
				Message: "the spoke agent cannot reach its own cluster's API server since 1970-01-02T03:46:40Z: its figures come from its cache and may be out of date"},
		},
		"an invalid timestamp still marks the cluster stale": {
			heartbeats: []*federationv1.Heartbeat{hb(&timestamppb.Timestamp{Seconds: 1, Nanos: -5})},
			want: want{Since: start, Stale: true, Notified: 1,
				Message: "the spoke agent cannot reach its own cluster's API server since 1970-01-02T03:46:40Z: its figures come from its cache and may be out of date"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := New(clocktesting.NewFakePassiveClock(start), 40*time.Second)
			s.Connect("a", &federationv1.Hello{Epoch: 1})
			s.ApplySnapshot("a", 1, snapshot(1, machine("m1", 1)))
			var got want
			s.OnChange(func(string) { got.Notified++ })
			for _, h := range tc.heartbeats {
				s.Heartbeat("a", 1, h)
			}
			c, _ := s.Get("a")
			got.Since, got.Stale, got.Message = c.APIServerUnreachableSince, c.Stale(), c.APIServerUnreachableMessage()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cluster after the heartbeats (-want +got):\n%s", diff)
			}
			if c.Liveness != LivenessAvailable {
				t.Errorf("Liveness = %s, want %s: the spoke heartbeats", c.Liveness, LivenessAvailable)
			}
		})
	}
}
