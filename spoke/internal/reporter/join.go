package reporter

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/internal/identity"
	federationv1 "github.com/imperator-federation/imperator/proto/imperator/federation/v1"
)

// joinTimeout bounds the Join and Renew calls.
const joinTimeout = 30 * time.Second

// errNoToken means the agent has no usable certificate and no token to join.
var errNoToken = errors.New("no usable hub client certificate in the credentials Secret and no bootstrap token (--join-token-file or $IMPERATOR_JOIN_TOKEN)")

// join exchanges the bootstrap token and the pending CSR for a certificate
// and stores both in the credentials Secret, or keeps them for the saver
// when the write fails (keep). Unlike a renewal, a join never goes ahead
// with a key it could not store: the token is spent on the key sent, and an
// agent restarted without it could not join again.
func (cr *hubCredentials) join(ctx context.Context, key client.ObjectKey) (*credential, error) {
	token, err := cr.opts.Token()
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errNoToken
	}
	csrPEM, keyPEM, err := cr.pendingRequest(ctx, key)
	if err != nil {
		return nil, err
	}
	conn, err := cr.dial(nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	callCtx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	resp, err := federationv1.NewFederationClient(conn).Join(callCtx, &federationv1.JoinRequest{
		ClusterName:  cr.opts.Hub.ClusterName,
		Token:        token,
		Csr:          csrPEM,
		AgentVersion: cr.opts.AgentVersion,
	})
	if err != nil {
		return nil, fmt.Errorf("joining the hub at %s: %w", cr.opts.Hub.Address, err)
	}
	cred, err := newCredential(resp.GetCertificate(), keyPEM, resp.GetCa(), time.Now())
	if err != nil {
		return nil, err
	}
	cr.keep(ctx, key, cred)
	cr.log.Info("Joined the hub", "hub", cr.opts.Hub.Address, "notAfter", cred.cert.Leaf.NotAfter)
	return cred, nil
}

// dial returns a connection to the hub, with cert as client certificate
// (none for Join).
func (cr *hubCredentials) dial(cert *tls.Certificate) (*grpc.ClientConn, error) {
	tlsConfig, err := cr.clientTLS(cert)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(cr.opts.Hub.Address,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig)),
		grpc.WithKeepaliveParams(clientKeepalive),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxSendMsgBytes)),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to the hub at %s: %w", cr.opts.Hub.Address, err)
	}
	return conn, nil
}

// clientTLS is the TLS configuration of a connection to the hub with cert
// as client certificate (none for Join). Every handshake tells which CA
// signs the hub's serving certificate: when it is a newer CA than the one of
// the certificate in use, the renewer renews into it (carenewal.go).
func (cr *hubCredentials) clientTLS(cert *tls.Certificate) (*tls.Config, error) {
	tlsConfig, err := identity.ClientTLS(cr.trustBundle(), cert, cr.serverName)
	if err != nil {
		return nil, err
	}
	tlsConfig.VerifyConnection = cr.observeServing
	return tlsConfig, nil
}

// trustBundle is what the hub is verified with: the CA bundle of
// --hub-ca-file and the one the hub handed out with the certificate in use.
// During a hub CA rotation the hub hands out both CAs at the first renewal
// after it staged the next one, so that the agent keeps trusting the hub
// once the next CA signs its serving certificate, whatever --hub-ca-file
// holds. The hub's bundle came over a connection verified with the file's,
// and is ignored when it does not parse.
func (cr *hubCredentials) trustBundle() []byte {
	cur := cr.currentCredential()
	if cur == nil || len(cur.caPEM) == 0 || bytes.Equal(cur.caPEM, cr.caPEM) {
		return cr.caPEM
	}
	if _, err := identity.TrustPool(cur.caPEM); err != nil {
		return cr.caPEM
	}
	bundle := slices.Clone(cr.caPEM)
	if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
		bundle = append(bundle, '\n')
	}
	return append(bundle, cur.caPEM...)
}
