package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func TestLeaderMetricSaysWhetherThisReplicaLeads(t *testing.T) {
	for _, leading := range []bool{false, true} {
		reg := prometheus.NewPedanticRegistry()
		if _, err := NewMetrics(reg, func() bool { return leading }); err != nil {
			t.Fatal(err)
		}
		value := "0"
		if leading {
			value = "1"
		}
		want := `
# HELP imperator_hub_leader 1 while this hub replica leads (publishes placement scores and marks silent clusters Unknown), else 0.
# TYPE imperator_hub_leader gauge
imperator_hub_leader ` + value + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "imperator_hub_leader"); err != nil {
			t.Errorf("leading %v: %v", leading, err)
		}
	}
}

func TestJoinsAreCountedByOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	join := federationv1.Federation_Join_FullMethodName
	m.observeCall(join, time.Now(), nil)
	m.observeCall(join, time.Now(), status.Error(codes.Unauthenticated, "token expired"))
	m.observeCall(join, time.Now(), status.Error(codes.Unauthenticated, "token unknown"))
	m.observeCall(join, time.Now(), errors.New("plain error"))
	m.observeCall("/imperator.query.v1.Query/ListClusters", time.Now(), nil)
	for outcome, want := range map[string]float64{joinJoined: 1, joinBadToken: 2, joinError: 1, joinDenied: 0} {
		if got := testutil.ToFloat64(m.joins.WithLabelValues(outcome)); got != want {
			t.Errorf("imperator_hub_joins_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.CollectAndCount(m.requestDuration, "imperator_hub_grpc_request_duration_seconds"); got == 0 {
		t.Error("no request duration series")
	}
}

// An operator sees how many Report streams are open and how long they
// lasted: a spoke that reconnects over and over shows as many short streams.
func TestReportStreamsAreCountedWhileOpenAndTimedWhenTheyEnd(t *testing.T) {
	h := startTestHub(t)
	report := federationv1.Federation_Report_FullMethodName
	stream := h.openReport(t, "a", validMachine("gpu", 3))
	if got := testutil.ToFloat64(h.server.metrics.openStreams.WithLabelValues(report)); got != 1 {
		t.Errorf("imperator_hub_grpc_open_streams{method=Report} = %v with one stream open, want 1", got)
	}
	// A second Hello ends the stream with InvalidArgument; its status
	// reaches the client once the interceptor has recorded the end.
	if err := streamEnd(t, stream, hello("a", 1)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream ended with %v, want InvalidArgument", err)
	}
	if got := testutil.ToFloat64(h.server.metrics.openStreams.WithLabelValues(report)); got != 0 {
		t.Errorf("imperator_hub_grpc_open_streams{method=Report} = %v after the stream ended, want 0", got)
	}
	var duration dto.Metric
	if err := h.server.metrics.streamDuration.WithLabelValues(report).(prometheus.Histogram).Write(&duration); err != nil {
		t.Fatal(err)
	}
	if got := duration.GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("imperator_hub_grpc_stream_duration_seconds{method=Report} counted %d streams, want 1", got)
	}
	if got := duration.GetHistogram().GetSampleSum(); got <= 0 || got > 60 {
		t.Errorf("imperator_hub_grpc_stream_duration_seconds{method=Report} sum = %vs, want the stream's few seconds at most", got)
	}
	if got := testutil.ToFloat64(h.server.metrics.requests.WithLabelValues(report, codes.InvalidArgument.String())); got != 1 {
		t.Errorf("imperator_hub_grpc_requests_total{method=Report,code=InvalidArgument} = %v, want 1", got)
	}
}
