package reporter

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// lead is a Leader whose answer the test sets.
type lead struct{ leading atomic.Bool }

func (l *lead) Leading() bool { return l.leading.Load() }

// A replica that lost its Lease because its API server went away must keep
// reporting (stale) until the API server answers again; when it does not
// win the Lease back soon after, it stops, for the new leader to report.
func TestLastLeaderReportsUntilTheAPIServerAnswersAgain(t *testing.T) {
	l := &lead{}
	l.leading.Store(true)
	r := &Reporter{opts: Options{Leader: l}, log: logr.Discard(), reclaim: 2 * mandateCheck}
	r.lastContact.Store(time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ended := make(chan struct{})
	go r.mandate(ctx, func() { close(ended) })

	time.Sleep(2 * mandateCheck)
	l.leading.Store(false) // the Lease could not be renewed
	select {
	case <-ended:
		t.Fatal("the last leader stopped reporting while its API server was unreachable")
	case <-time.After(4 * mandateCheck):
	}

	r.lastContact.Store(time.Now().UnixNano()) // the probe reached the API server
	select {
	case <-ended:
		t.Fatal("the last leader stopped reporting as soon as its API server answered, without a chance to win its Lease back")
	case <-time.After(mandateCheck):
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("a replica that does not lead kept reporting after its API server answered again")
	}
}

// A replica that wins its Lease back keeps its turn.
func TestLeaderThatLeadsAgainKeepsReporting(t *testing.T) {
	l := &lead{}
	r := &Reporter{opts: Options{Leader: l}, log: logr.Discard(), reclaim: 2 * mandateCheck}
	r.lastContact.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan struct{})
	go r.mandate(ctx, func() { close(ended) })
	time.Sleep(2 * mandateCheck) // lost the lead
	r.lastContact.Store(time.Now().UnixNano())
	time.Sleep(mandateCheck)
	l.leading.Store(true)
	select {
	case <-ended:
		t.Fatal("the leader stopped reporting")
	case <-time.After(4 * mandateCheck):
	}
}

// Without leader election the agent always reports.
func TestWithoutLeaderElectionTheAgentAlwaysLeads(t *testing.T) {
	if !(&Reporter{}).leading() {
		t.Fatal("a reporter without a Leader does not report")
	}
}
