package reporter

import (
	"bytes"
	"crypto/tls"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/internal/identity"
)

// hubRefusal returns the reason with which the hub refused the spoke's
// certificate when err, possibly wrapped, is such a refusal: a
// PermissionDenied status carrying an ErrorInfo of identity.RefusalDomain. A refusal
// without that ErrorInfo (a hub that predates it) has no reason: ok is false.
func hubRefusal(err error) (reason identity.RefusalReason, ok bool) {
	st, isStatus := status.FromError(err)
	if err == nil || !isStatus || st.Code() != codes.PermissionDenied {
		return "", false
	}
	for _, detail := range st.Details() {
		if info, isInfo := detail.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == identity.RefusalDomain && info.GetReason() != "" {
			return identity.RefusalReason(info.GetReason()), true
		}
	}
	return "", false
}

// joinAgainAfter reports whether a refusal for reason means that the
// certificate belongs to no current registration of the cluster, so that
// only joining again — with a new bootstrap token, which the operator gives
// when they want the cluster back — can bring the agent back:
//   - EarlierRegistration and NoRegistration: the certificate will never be
//     accepted again.
//   - NotRegistered: the cluster was deregistered; the hub creates its new
//     registration only through a join, so waiting with the old certificate
//     would wait forever. Joining needs an unused token: the one the agent
//     first joined with is consumed, so a cluster deregistered for good stays
//     out (its joins are refused) until its operator gives a new token.
//
// NotAccepted is not one of them: the platform team paused the cluster
// (spec.hubAcceptsClient=false) and the certificate works again once they
// resume it. Unknown reasons, from a newer hub, are not either: the agent
// keeps what it has rather than spend a token.
func joinAgainAfter(reason identity.RefusalReason) bool {
	switch reason {
	case identity.RefusedEarlierRegistration, identity.RefusedNoRegistration, identity.RefusedNotRegistered:
		return true
	default:
		return false
	}
}

// refusedCertificate is a stored certificate the hub refused for a reason
// that calls for joining again.
type refusedCertificate struct {
	der    []byte
	reason identity.RefusalReason
}

// is reports whether cert is the refused certificate.
func (rc *refusedCertificate) is(cert *tls.Certificate) bool {
	return rc != nil && cert != nil && len(cert.Certificate) > 0 && bytes.Equal(rc.der, cert.Certificate[0])
}

// joinAgainError is the error of a failed join after the hub refused the
// stored certificate: the operator must act (give a new token).
type joinAgainError struct {
	reason identity.RefusalReason
	err    error
}

func (e *joinAgainError) Error() string {
	return "the hub refused the stored certificate (" + string(e.reason) + ") and joining again failed; the agent needs a new bootstrap token in its token file: " + e.err.Error()
}

func (e *joinAgainError) Unwrap() error { return e.err }
