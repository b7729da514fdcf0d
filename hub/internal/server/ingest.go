package server

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/imperator-federation/imperator/hub/internal/ingest"
	"github.com/imperator-federation/imperator/internal/identity"
)

// Reasons of rejectedConnections for what a spoke sent.
const (
	// rejectInvalidInventory: a Hello, Snapshot or Delta broke a limit.
	rejectInvalidInventory = "invalid_inventory"
	// rejectMessageRate: a Snapshot or Delta over the stream's message rate.
	rejectMessageRate = "message_rate_exceeded"
)

// ReasonMessageRateExceeded is the ErrorInfo reason of a Report stream
// ended for sending more than the hub's message rate.
const ReasonMessageRateExceeded = "MessageRateExceeded"

// messageBudget is the token bucket of one Report stream (see
// ingest.Limits.MessagesPerSecond). Over it the hub drops Heartbeats — the
// next message says the same — and ends the stream with ResourceExhausted
// on a Snapshot or Delta: dropping those would only cost a Resync and a
// larger Snapshot, and a spoke that sends more than the rate is
// misconfigured or hostile; its reconnect backoff spaces it out.
type messageBudget struct {
	limiter flowcontrol.PassiveRateLimiter
	limits  ingest.Limits
}

func newMessageBudget(l ingest.Limits) *messageBudget {
	if l.MessagesPerSecond <= 0 {
		return &messageBudget{limiter: flowcontrol.NewFakeAlwaysRateLimiter(), limits: l}
	}
	return &messageBudget{limiter: flowcontrol.NewTokenBucketRateLimiter(float32(l.MessagesPerSecond), max(l.MessageBurst, 1)), limits: l}
}

// take reports whether the stream may send one more message now.
func (b *messageBudget) take() bool { return b.limiter.TryAccept() }

// exceeded is the ResourceExhausted status that ends a stream over its rate.
func (b *messageBudget) exceeded(cluster, kind string) error {
	rate := strconv.FormatFloat(b.limits.MessagesPerSecond, 'f', -1, 64)
	return withErrorInfo(codes.ResourceExhausted,
		fmt.Sprintf("cluster %q sent a %s over the hub's limit of %s messages per second (bursts of %d) on one Report stream; reconnect and send less often", cluster, kind, rate, b.limits.MessageBurst),
		&errdetails.ErrorInfo{
			Reason: ReasonMessageRateExceeded,
			Domain: identity.RefusalDomain,
			Metadata: map[string]string{
				"cluster":           cluster,
				"messagesPerSecond": rate,
				"burst":             strconv.Itoa(b.limits.MessageBurst),
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
