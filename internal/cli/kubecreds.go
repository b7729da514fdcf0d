package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
)

// kubeCredentials sends, with every call to the hub, the bearer token the
// user of a kubeconfig context presents to the hub cluster's API server:
// a static token, a token file (re-read as client-go does) or what an exec
// plugin (OIDC, cloud IAM) returns, through client-go's own transport
// wrappers, so that imperatorctl authenticates exactly as kubectl does. The
// hub checks the token with a TokenReview against that API server.
type kubeCredentials struct {
	// wrapped is client-go's round tripper chain of the kubeconfig's user
	// around capture, which records the Authorization header instead of
	// sending anything.
	wrapped http.RoundTripper
	host    string
}

// newKubeCredentials loads context (the current one when empty) of the
// kubeconfig at path.
func newKubeCredentials(path, context string) (*kubeCredentials, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if cfg.Username != "" || cfg.Password != "" {
		return nil, fmt.Errorf("kubeconfig %s: the user authenticates with a password; the hub takes bearer tokens (a token, a token file or an exec plugin)", path)
	}
	if imp := cfg.Impersonate; imp.UserName != "" || imp.UID != "" || len(imp.Groups) > 0 || len(imp.Extra) > 0 {
		// The hub reviews the token, whose user is not the impersonated
		// one: the calls would carry the rights the kubeconfig gives up.
		return nil, fmt.Errorf("kubeconfig %s: the user impersonates %q (as, as-groups, as-uid, as-user-extra); the hub takes the token's own identity and no impersonation: use a context without it", path, imp.UserName)
	}
	tc, err := cfg.TransportConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	wrapped, err := transport.HTTPWrappersForConfig(tc, captureAuthorization{})
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	host := cfg.Host
	if host == "" {
		host = "https://kubernetes.invalid"
	}
	return &kubeCredentials{wrapped: wrapped, host: strings.TrimSuffix(host, "/")}, nil
}

type capturedKey struct{}

// captureAuthorization is the innermost round tripper: it stores the
// request's Authorization header where the request's context says and
// answers 200 without sending anything.
type captureAuthorization struct{}

func (captureAuthorization) RoundTrip(req *http.Request) (*http.Response, error) {
	if slot, ok := req.Context().Value(capturedKey{}).(*capturedHeader); ok {
		slot.set(req.Header.Get("Authorization"))
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

type capturedHeader struct {
	mu    sync.Mutex
	value string
}

func (c *capturedHeader) set(v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.value = v
}

func (c *capturedHeader) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value
}

var errNoBearerToken = errors.New("the kubeconfig's user presents no bearer token (a client certificate is not accepted by the hub): use a token, a token file or an exec plugin that returns a token")

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (k *kubeCredentials) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	slot := &capturedHeader{}
	req, err := http.NewRequestWithContext(context.WithValue(ctx, capturedKey{}, slot), http.MethodGet, k.host+"/version", nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.wrapped.RoundTrip(req)
	if err != nil {
		// Unauthenticated, not the Unavailable gRPC makes of other
		// errors: the hub is not the one missing.
		return nil, status.Errorf(codes.Unauthenticated, "getting the kubeconfig's credentials: %v", err)
	}
	_ = resp.Body.Close()
	header := slot.get()
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return nil, status.Error(codes.Unauthenticated, errNoBearerToken.Error())
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: a
// token never travels in the clear.
func (*kubeCredentials) RequireTransportSecurity() bool { return true }

var _ credentials.PerRPCCredentials = (*kubeCredentials)(nil)
