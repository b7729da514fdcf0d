package identity

// TokenCallerProtocol is the ALPN protocol a client that calls the hub with
// a bearer token (imperatorctl --kubeconfig, automation with a
// ServiceAccount token) offers besides h2 in its TLS ClientHello. The hub
// still negotiates h2: the offer only tells its listener which budget of
// connections without a client certificate the connection counts against,
// so that people's and automation's token calls and joining spokes do not
// take each other's slots. It grants nothing: a token is decided by the
// hub's TokenReview and SubjectAccessReview, whichever budget it came in.
const TokenCallerProtocol = "imperator.tenzen-y.io/token-caller"
