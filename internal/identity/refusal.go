package identity

// RefusalDomain is the Domain of the google.rpc.ErrorInfo with which the hub
// refuses a spoke certificate (gRPC PermissionDenied); its Reason is a
// RefusalReason. The spoke agent acts on it: it joins again when its
// certificate belongs to no current registration.
const RefusalDomain = "imperator.tenzen-y.io"

// RefusalReason says why the hub refuses a spoke certificate.
type RefusalReason string

const (
	// RefusedNotRegistered means the cluster has no ManagedCluster, or it is being
	// deleted (the cluster was deregistered).
	RefusedNotRegistered RefusalReason = "NotRegistered"
	// RefusedNotAccepted means the ManagedCluster has spec.hubAcceptsClient=false;
	// the platform team paused the cluster.
	RefusedNotAccepted RefusalReason = "NotAccepted"
	// RefusedEarlierRegistration means the certificate was issued for another
	// registration of the same name: its ManagedCluster was deleted since
	// (deregistered and registered again, or recreated), or the cluster
	// joined again with a token bound to its name, which retires every
	// certificate issued before.
	RefusedEarlierRegistration RefusalReason = "EarlierRegistration"
	// RefusedNoRegistration means the certificate names no registration; the hub
	// issued it before it recorded registrations in certificates.
	RefusedNoRegistration RefusalReason = "NoRegistration"
	// RefusedReplacedCertificate means the certificate is of the current
	// registration but a Renew replaced it with a newer one, and the
	// renewal overlap has passed; the agent must use the newer certificate
	// it stored.
	RefusedReplacedCertificate RefusalReason = "ReplacedCertificate"
)
