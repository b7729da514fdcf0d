package server

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
	"github.com/imperator-federation/imperator/hub/internal/registry"
)

// errorDomain is the Domain of the ErrorInfo the hub attaches to its
// refusals of a spoke certificate: the project's API group, which the spoke
// agent matches too.
var errorDomain = imperatorv1alpha1.GroupVersion.Group

// refusal is the PermissionDenied status with which the hub refuses cluster's
// certificate: message for people, and an ErrorInfo whose Reason (a
// registry.RefusalReason) tells the spoke agent what to do — join again
// with its bootstrap token when the certificate is of no current
// registration, wait while the cluster is not accepted.
func refusal(reason registry.RefusalReason, cluster, message string) error {
	st := status.New(codes.PermissionDenied, message)
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   string(reason),
		Domain:   errorDomain,
		Metadata: map[string]string{"cluster": cluster},
	})
	if err != nil {
		// Marshalling a well-formed ErrorInfo does not fail; the message
		// alone still tells the spoke's operator what to do.
		return st.Err()
	}
	return withInfo.Err()
}
