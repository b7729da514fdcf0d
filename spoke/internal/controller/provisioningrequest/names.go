package provisioningrequest

import (
	"crypto/sha256"
	"encoding/hex"

	imperatorv1alpha1 "github.com/imperator-federation/imperator/api/v1alpha1"
)

// Labels and annotation on the CapacityHolds the Controller makes, naming
// the ProvisioningRequest they serve.
const (
	// RequestNamespaceLabel is the namespace of the ProvisioningRequest.
	RequestNamespaceLabel = "imperator.tenzen-y.io/provisioning-request-namespace"
	// RequestNameAnnotation is the name of the ProvisioningRequest: an
	// annotation, since Kueue's request names may be longer than a label
	// value.
	RequestNameAnnotation = "imperator.tenzen-y.io/provisioning-request-name"
	// RequestUIDLabel is the UID of the ProvisioningRequest: a hold left by
	// an earlier request of the same name is not this request's.
	RequestUIDLabel = "imperator.tenzen-y.io/provisioning-request-uid"
)

// HoldName is the name of the CapacityHold serving the units of machine
// type machineType of group that the ProvisioningRequest namespace/request
// books. The pod injector computes it from what a pod Kueue stamped
// carries (its namespace, the request it consumes, its group and type
// labels), so it is a function of those alone: a DNS-1123 label of 40
// characters, whatever the length of the request's name.
func HoldName(namespace, request, group, machineType string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + request + "/" + group + "/" + machineType))
	return "pr-" + hex.EncodeToString(sum[:])[:37]
}

// MadeFor tells whether hold is one the Controller made for the
// ProvisioningRequest namespace/request. A hold of the name HoldName gives
// that was not (a fleet hold named so: fleet hold names are chosen by their
// holder and HoldName is no secret) serves neither the request nor its pods.
func MadeFor(hold *imperatorv1alpha1.CapacityHold, namespace, request string) bool {
	return hold.Labels[RequestNamespaceLabel] == namespace && hold.Annotations[RequestNameAnnotation] == request
}
