package server

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// Reasons of rejectedConnections for what a spoke sent.
const (
	// rejectInvalidInventory: a Hello, Snapshot or Delta broke a limit.
	rejectInvalidInventory = "invalid_inventory"
	// rejectMessageRate: a Snapshot or Delta over the stream's message or
	// entry rate.
	rejectMessageRate = "message_rate_exceeded"
)

// ReasonMessageRateExceeded is the ErrorInfo reason of a Report stream
// ended for sending more than the hub's message or entry rate; the
// metadata's "limit" says which.
const ReasonMessageRateExceeded = "MessageRateExceeded"

// messageBudget bounds one Report stream (see ingest.Limits): a token
// bucket of messages and one of entries (Machines, types, nodes) carried.
// Over the message rate the hub drops Heartbeats — the next message says the
// same — and ends the stream with ResourceExhausted on a Snapshot or Delta,
// as over the entry rate: dropping those would only cost a Resync and a
// larger Snapshot, and a spoke that sends more than the rates is
// misconfigured or hostile; its reconnect backoff spaces it out.
type messageBudget struct {
	messages, entries *rate.Limiter
	limits            ingest.Limits
	clock             clock.PassiveClock
}

func newMessageBudget(l ingest.Limits, clk clock.PassiveClock) *messageBudget {
	limiter := func(perSecond float64, burst int) *rate.Limiter {
		if perSecond <= 0 {
			return rate.NewLimiter(rate.Inf, 0)
		}
		return rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))
	}
	return &messageBudget{
		messages: limiter(l.MessagesPerSecond, l.MessageBurst),
		entries:  limiter(l.EntriesPerSecond, l.EntryBurst),
		limits:   l,
		clock:    clk,
	}
}

// Which budget a message went over.
const (
	overMessages = "messages"
	overEntries  = "entries"
)

// take reports whether the stream may send msg now, else which budget it
// went over. A message over the entry budget takes nothing from it.
func (b *messageBudget) take(msg *federationv1.SpokeMessage) (over string) {
	now := b.clock.Now()
	if !b.messages.AllowN(now, 1) {
		return overMessages
	}
	if n := ingest.Entries(msg); n > 0 && !b.entries.AllowN(now, n) {
		return overEntries
	}
	return ""
}

// exceeded is the ResourceExhausted status that ends a stream over a budget.
func (b *messageBudget) exceeded(cluster, kind, over string) error {
	perSecond, burst := b.limits.MessagesPerSecond, b.limits.MessageBurst
	what := "messages"
	if over == overEntries {
		perSecond, burst = b.limits.EntriesPerSecond, b.limits.EntryBurst
		what = "Machines, machine types and pool nodes"
	}
	rateText := strconv.FormatFloat(perSecond, 'f', -1, 64)
	return withErrorInfo(codes.ResourceExhausted,
		fmt.Sprintf("cluster %q sent a %s over the hub's limit of %s %s per second (bursts of %d), counted per cluster across its Report streams; send less often", cluster, kind, rateText, what, burst),
		&errdetails.ErrorInfo{
			Reason: ReasonMessageRateExceeded,
			Domain: identity.RefusalDomain,
			Metadata: map[string]string{
				"cluster":   cluster,
				"limit":     over,
				"perSecond": rateText,
				"burst":     strconv.Itoa(burst),
			},
		})
}

// invalidInventory is the InvalidArgument status that ends a stream whose
// message broke a limit: the ErrorInfo's reason is the kind of problem
// (FieldValueInvalid, FieldValueDuplicate, FieldValueTooMany, …) and its
// metadata names the field.
func invalidInventory(cluster, kind string, err error) error {
	msg := fmt.Sprintf("the hub refused the %s of cluster %q and keeps its last good inventory: %v", kind, cluster, err)
	info := &errdetails.ErrorInfo{Reason: "FieldValueInvalid", Domain: identity.RefusalDomain, Metadata: map[string]string{"cluster": cluster}}
	var ie *ingest.Error
	if errors.As(err, &ie) {
		info.Reason = ie.Reason()
		info.Metadata["field"] = ie.Field()
	}
	return withErrorInfo(codes.InvalidArgument, msg, info)
}

func withErrorInfo(code codes.Code, msg string, info *errdetails.ErrorInfo) error {
	st := status.New(code, msg)
	withInfo, err := st.WithDetails(info)
	if err != nil {
		// Marshalling a well-formed ErrorInfo does not fail; the message
		// alone still names the field.
		return st.Err()
	}
	return withInfo.Err()
}
