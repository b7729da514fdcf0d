package hubtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/imperator-federation/imperator/hub/internal/config"
	"github.com/imperator-federation/imperator/hub/internal/hubca"
	"github.com/imperator-federation/imperator/hub/internal/query"
)

// Roles of ClientCertificate, as hub client-cert --role names them.
var roleOrganizations = map[string]string{
	"viewer": query.ViewerOrganization,
	"holder": query.HolderOrganization,
	"admin":  query.AdminOrganization,
}

// ClientCertificate issues a query-API client certificate of the hub CA
// (created when missing) for name with role viewer, holder or admin, valid
// for an hour, as hub client-cert does.
func ClientCertificate(ctx context.Context, c client.Client, namespace, name, role string) (tls.Certificate, error) {
	org, ok := roleOrganizations[role]
	if !ok {
		return tls.Certificate{}, fmt.Errorf("role %q: want viewer, holder or admin", role)
	}
	ca, err := hubca.LoadOrCreate(ctx, c, namespace, config.Default().CASecret)
	if err != nil {
		return tls.Certificate{}, err
	}
	certPEM, keyPEM, err := ca.IssueClient(name, []string{org}, time.Hour)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}
