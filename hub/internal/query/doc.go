// Package query is the hub's Query gRPC service (imperator.query.v1): the
// read-only queries over the in-memory store (clusters, machine types,
// usage, FindCapacity), the Watch stream of cluster changes, the hub's
// version, and the administration of bootstrap tokens (Tokens, which the hub
// binary's token command runs directly). It never reads the API server for a
// query; only the token calls reach it, through join.Tokens.
//
// Authentication is mTLS: the caller's client certificate, signed by the hub
// CA, carries its role in its organization (see RoleOf). Every handler
// authorizes the call itself, so the service is safe whatever interceptors
// the server chains before it.
//
// A caller may instead present a bearer token of the hub cluster
// (TokenAuthorizer): tokenauth.go holds the authorizer and its per-call
// entry (Authorize), tokenreview.go the authentication (TokenReview),
// accessreview.go the RBAC decisions (SubjectAccessReview) on FleetGroup's
// resources, reviewlimits.go the rates that bound both reviews.
package query
