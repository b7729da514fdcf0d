package server

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// TestTheHubKeepsTheHoldsASpokeReportsWhileItsStreamIsHere: the hub holds
// a spoke reports in its Snapshot, then replaced by a Delta that says they
// changed and kept by one that does not, are what the replica with the
// stream reconciles; a spoke without the capability is not judged.
func TestTheHubKeepsTheHoldsASpokeReportsWhileItsStreamIsHere(t *testing.T) {
	h := startTestHub(t)
	open := func(cluster string, capabilities ...string) federationv1.Federation_ReportClient {
		stream, err := h.client(t, h.certificate(t, cluster, identity.SpokeOrganization)).Report(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		hi := hello(cluster, 1)
		hi.GetHello().Capabilities = capabilities
		if err := stream.Send(hi); err != nil {
			t.Fatal(err)
		}
		return stream
	}
	send := func(stream federationv1.Federation_ReportClient, msg *federationv1.SpokeMessage) {
		t.Helper()
		if err := stream.Send(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil { // the Ack
			t.Fatal(err)
		}
	}
	train := &federationv1.HubHold{Name: "train", FleetHold: "imperator-system/train", Booking: "u1", Count: 2}
	reporting := open("a", HubHoldsCapability)
	snap := snapshotMsg(1)
	snap.GetSnapshot().HubHolds = []*federationv1.HubHold{train}
	send(reporting, snap)
	silent := open("b")
	send(silent, snapshotMsg(1))

	want := map[string][]*federationv1.HubHold{"a": {train}}
	if diff := cmp.Diff(want, h.server.HubHoldReports(), protocmp.Transform()); diff != "" {
		t.Errorf("after the snapshots (-want +got):\n%s", diff)
	}
	send(reporting, deltaMsg(2))
	if diff := cmp.Diff(want, h.server.HubHoldReports(), protocmp.Transform()); diff != "" {
		t.Errorf("after a delta that did not change them (-want +got):\n%s", diff)
	}
	released := deltaMsg(3)
	released.GetDelta().HubHoldsChanged = true
	send(reporting, released)
	want = map[string][]*federationv1.HubHold{"a": {}}
	if diff := cmp.Diff(want, h.server.HubHoldReports(), protocmp.Transform()); diff != "" {
		t.Errorf("after a delta with none (-want +got):\n%s", diff)
	}
	_ = reporting.CloseSend()
	deadline := time.Now().Add(5 * time.Second)
	for len(h.server.HubHoldReports()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := h.server.HubHoldReports(); len(got) > 0 {
		t.Errorf("after the stream ended: %v, want nothing", got)
	}
}
