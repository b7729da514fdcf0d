package server

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

func validMachine(name string, available int32) *federationv1.Machine {
	return &federationv1.Machine{Name: name, Group: "gpu", Types: []*federationv1.MachineType{{
		Name: "compute-xlarge", Cpu: "40", Memory: "128Gi", Available: available,
		Usage: &federationv1.Usage{Maximum: available, Reserved: available},
	}}}
}

// openReport opens cluster's Report stream and has the hub acknowledge a
// Snapshot of machines at generation 1.
func (h *testHub) openReport(t *testing.T, cluster string, machines ...*federationv1.Machine) federationv1.Federation_ReportClient {
	t.Helper()
	fed := h.client(t, h.certificate(t, cluster, identity.SpokeOrganization))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := fed.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*federationv1.SpokeMessage{hello(cluster, 1), snapshotMsg(1, machines...)} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if msg, err := stream.Recv(); err != nil || msg.GetAck().GetGeneration() != 1 {
		t.Fatalf("waiting for the ack of the first snapshot: %v %v", msg, err)
	}
	return stream
}

// streamEnd sends msgs, none of which the hub may answer, and returns the
// error that ended the stream.
func streamEnd(t *testing.T, stream federationv1.Federation_ReportClient, msgs ...*federationv1.SpokeMessage) error {
	t.Helper()
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			break // the stream ended; Recv says why
		}
	}
	msg, err := stream.Recv()
	if err == nil {
		t.Fatalf("the hub answered %v instead of ending the stream", msg)
	}
	return err
}

func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// A spoke that sends an inventory breaking the limits gets InvalidArgument
// naming the field, and queries keep the last good inventory.
func TestReportRefusesInventoryBreakingTheLimits(t *testing.T) {
	many := make([]*federationv1.Machine, ingest.DefaultMaxMachines+1)
	for i := range many {
		many[i] = validMachine(fmt.Sprintf("m%05d", i), 1)
	}
	duplicateTypes := validMachine("gpu", 4)
	duplicateTypes.Types = append(duplicateTypes.Types, duplicateTypes.Types[0])
	negative := validMachine("gpu", 4)
	negative.Types[0].Usage.Waiting = -5

	cases := map[string]struct {
		msg       *federationv1.SpokeMessage
		wantField string
		wantCause string
	}{
		"a Snapshot with 10,001 Machines": {
			msg: snapshotMsg(2, many...), wantField: "snapshot.machines", wantCause: "FieldValueTooMany",
		},
		"a Snapshot with duplicate type names": {
			msg: snapshotMsg(2, duplicateTypes), wantField: "snapshot.machines[0].types[1].name", wantCause: "FieldValueDuplicate",
		},
		"a Snapshot with a negative count": {
			msg: snapshotMsg(2, negative), wantField: "snapshot.machines[0].types[0].usage.waiting", wantCause: "FieldValueInvalid",
		},
		"a Delta with a negative count": {
			msg: deltaMsg(2, negative), wantField: "delta.upserts[0].types[0].usage.waiting", wantCause: "FieldValueInvalid",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := startTestHub(t)
			stream := h.openReport(t, "a", validMachine("gpu", 3))
			err := streamEnd(t, stream, tc.msg)
			if got := status.Code(err); got != codes.InvalidArgument {
				t.Fatalf("stream ended with %v (%v), want InvalidArgument", got, err)
			}
			want := &errdetails.ErrorInfo{Reason: tc.wantCause, Domain: identity.RefusalDomain, Metadata: map[string]string{"cluster": "a", "field": tc.wantField}}
			if diff := cmp.Diff(want, errorInfo(err), protocmp.Transform()); diff != "" {
				t.Errorf("ErrorInfo (-want +got):\n%s", diff)
			}
			if !strings.Contains(status.Convert(err).Message(), tc.wantField) {
				t.Errorf("message %q does not name the field %s", status.Convert(err).Message(), tc.wantField)
			}
			c, ok := h.store.Get("a")
			if !ok || c.Generation != 1 || len(c.Machines) != 1 || c.Machines[0].GetTypes()[0].GetAvailable() != 3 {
				t.Errorf("inventory after the refusal: %+v, want generation 1 with the first snapshot's Machine", c)
			}
			if !c.Stale() {
				t.Error("the refused cluster's figures still count as current")
			}
		})
	}
}

// A spoke flooding its stream loses it with ResourceExhausted on the first
// Snapshot or Delta over the rate; Heartbeats over it are only dropped.
func TestReportStreamOverItsMessageRate(t *testing.T) {
	h := startTestHub(t)
	limits := ingest.DefaultLimits()
	// One message more after the Snapshot, and no refill within the test.
	limits.MessagesPerSecond, limits.MessageBurst = 0.001, 2
	h.store.SetLimits(limits)
	stream := h.openReport(t, "a", validMachine("gpu", 3))

	msgs := []*federationv1.SpokeMessage{}
	for range 5 {
		msgs = append(msgs, &federationv1.SpokeMessage{Kind: &federationv1.SpokeMessage_Heartbeat{Heartbeat: &federationv1.Heartbeat{Generation: 1}}})
	}
	msgs = append(msgs, deltaMsg(2, validMachine("gpu", 4)))
	err := streamEnd(t, stream, msgs...)
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("stream ended with %v (%v), want ResourceExhausted", got, err)
	}
	if info := errorInfo(err); info.GetReason() != ReasonMessageRateExceeded || info.GetMetadata()["cluster"] != "a" {
		t.Errorf("ErrorInfo = %v, want reason %s for cluster a", info, ReasonMessageRateExceeded)
	}
	if !strings.Contains(status.Convert(err).Message(), "Delta") {
		t.Errorf("message %q does not say the Delta went over the rate (a Heartbeat must not end the stream)", status.Convert(err).Message())
	}
	if got := testutil.ToFloat64(h.server.metrics.streamMessages.WithLabelValues("dropped", "heartbeat")); got != 4 {
		t.Errorf("dropped heartbeats = %v, want 4 (one of the five fit in the burst)", got)
	}
	if c, _ := h.store.Get("a"); c.Generation != 1 {
		t.Errorf("generation = %d after the refused Delta, want 1", c.Generation)
	}
}

// A stream within the message rate but carrying more Machines, types and
// nodes than the entry rate loses the stream: a cluster at the caps cannot
// be sent a hundred times a second.
func TestReportStreamOverItsEntryRate(t *testing.T) {
	h := startTestHub(t)
	limits := ingest.DefaultLimits()
	limits.EntriesPerSecond, limits.EntryBurst = 0.001, 10
	h.store.SetLimits(limits)
	// The first Snapshot carries 2 entries: one Machine of one type.
	stream := h.openReport(t, "a", validMachine("gpu", 3))

	upserts := make([]*federationv1.Machine, 5)
	for i := range upserts {
		upserts[i] = validMachine(fmt.Sprintf("gpu-%d", i), 1)
	}
	err := streamEnd(t, stream, deltaMsg(2, upserts...))
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("stream ended with %v (%v), want ResourceExhausted", got, err)
	}
	if info := errorInfo(err); info.GetReason() != ReasonMessageRateExceeded || info.GetMetadata()["limit"] != "entries" {
		t.Errorf("ErrorInfo = %v, want reason %s for the entry limit", info, ReasonMessageRateExceeded)
	}
	if c, _ := h.store.Get("a"); c.Generation != 1 || len(c.Machines) != 1 {
		t.Errorf("after the refused Delta: generation %d with %d Machines, want 1 with 1", c.Generation, len(c.Machines))
	}
}

// Reopening the Report stream buys no fresh burst: the budget is the
// cluster's, across its streams.
func TestReportStreamsOfOneClusterShareItsMessageBudget(t *testing.T) {
	h := startTestHub(t)
	limits := ingest.DefaultLimits()
	// The first stream's Snapshot and one Delta; no refill within the test.
	limits.MessagesPerSecond, limits.MessageBurst = 0.001, 2
	h.store.SetLimits(limits)
	first := h.openReport(t, "a", validMachine("gpu", 3))
	if err := first.Send(deltaMsg(2, validMachine("gpu", 4))); err != nil {
		t.Fatal(err)
	}
	if msg, err := first.Recv(); err != nil || msg.GetAck().GetGeneration() != 2 {
		t.Fatalf("waiting for the Delta's ack: %v %v", msg, err)
	}

	fed := h.client(t, h.certificate(t, "a", identity.SpokeOrganization))
	second, err := fed.Report(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = streamEnd(t, second, hello("a", 2), snapshotMsg(1, validMachine("gpu", 9)))
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("a new stream's Snapshot over the cluster's spent budget ended with %v (%v), want ResourceExhausted", got, err)
	}
	if c, _ := h.store.Get("a"); c.Machines[0].GetTypes()[0].GetAvailable() != 4 {
		t.Errorf("available = %d after the refused Snapshot, want 4 (the last good inventory)", c.Machines[0].GetTypes()[0].GetAvailable())
	}
	// Another cluster's budget is its own.
	h.openReport(t, "b", validMachine("gpu", 1))
}
