// Package hosted is the agent's hosted mode: one agent, running in a
// management cluster, serves many member clusters that it reaches through
// kubeconfigs kept in labelled Secrets of one namespace of the management
// cluster. Provider is the multicluster-runtime provider of those members: a
// Secret added starts a member (its own cache, client and controllers'
// engagement), a Secret removed or unlabelled stops it, a changed kubeconfig
// restarts it — without restarting the agent. Each member keeps its own
// identity at the hub (a reporter per member) and its own webhook
// registration (Webhooks), see Serve.
//
// A member is served only once it holds its cluster's identity (the UID of
// its kube-system namespace): a second Secret reaching a cluster served
// already is refused (identity.go). Its webhooks answer only its own API
// server, which authenticates with a client certificate the agent issues to
// the member (ClientCA, the member's client Secret).
//
// Members are isolated from each other: each has its own cache and clients,
// is brought up in a goroutine of its own (a member whose API server does
// not answer never holds up the others' start), and every request to a
// member's API server is bounded by a timeout, so that a slow member holds a
// controller worker for at most that long.
package hosted
