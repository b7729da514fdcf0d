package server

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/identity"
)

// refusal is the PermissionDenied status with which the hub refuses cluster's
// certificate: message for people, and an ErrorInfo whose Reason (a
// registry.RefusalReason) tells the spoke agent what to do — join again
// with its bootstrap token when the certificate is of no current
// registration, wait while the cluster is not accepted.
func refusal(reason registry.RefusalReason, cluster, message string) error {
	st := status.New(codes.PermissionDenied, message)
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   string(reason),
		Domain:   identity.RefusalDomain,
		Metadata: map[string]string{"cluster": cluster},
	})
	if err != nil {
		// Marshalling a well-formed ErrorInfo does not fail; the message
		// alone still tells the spoke's operator what to do.
		return st.Err()
	}
	return withInfo.Err()
}
