package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/hub/internal/query"
)

// imperatorctlConfig is the imperatorctl configuration file (see
// cmd/imperatorctl/internal/cli.Config), with every credential inline.
type imperatorctlConfig struct {
	CurrentContext string                `json:"current-context"`
	Contexts       []imperatorctlContext `json:"contexts"`
}

type imperatorctlContext struct {
	Name                     string `json:"name"`
	Hub                      string `json:"hub"`
	CertificateAuthorityData string `json:"certificate-authority-data"`
	ClientCertificateData    string `json:"client-certificate-data"`
	ClientKeyData            string `json:"client-key-data"`
}

// runClientCert issues a person's (or automation's) client certificate from
// the hub CA and prints an imperatorctl configuration file that holds it:
//
//	hub client-cert --name alice --role admin --hub-address hub.example.com:9443 > ~/.imperator/config
func runClientCert(args []string) error {
	fs, cfg := adminFlags("client-cert")
	name := fs.String("name", "", "Name of the person or automation (the certificate's common name).")
	role := fs.String("role", "viewer", "viewer (read-only queries) or admin (also bootstrap tokens).")
	hubAddress := fs.String("hub-address", "", "host:port at which imperatorctl reaches the hub.")
	validity := fs.Duration("validity", 90*24*time.Hour, "Lifetime of the certificate.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(*name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--name %q: %v", *name, msgs))
	}
	organization := map[string]string{"viewer": query.ViewerOrganization, "admin": query.AdminOrganization}[*role]
	if organization == "" {
		errs = append(errs, fmt.Errorf("--role %q: want viewer or admin", *role))
	}
	if *hubAddress == "" {
		errs = append(errs, errors.New("--hub-address: required"))
	}
	if *validity <= 0 {
		errs = append(errs, fmt.Errorf("--validity %s: must be positive", *validity))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	ca, err := loadCA(cfg)
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := ca.IssueClient(*name, []string{organization}, *validity)
	if err != nil {
		return fmt.Errorf("issuing the client certificate of %s: %w", *name, err)
	}
	out, err := yaml.Marshal(imperatorctlConfig{
		CurrentContext: *name,
		Contexts: []imperatorctlContext{{
			Name:                     *name,
			Hub:                      *hubAddress,
			CertificateAuthorityData: string(ca.CertPEM),
			ClientCertificateData:    string(certPEM),
			ClientKeyData:            string(keyPEM),
		}},
	})
	if err != nil {
		return fmt.Errorf("encoding the imperatorctl configuration: %w", err)
	}
	fmt.Fprintf(os.Stderr, "Issued a %s certificate for %s, valid until %s; the imperatorctl configuration follows.\n",
		*role, *name, time.Now().Add(*validity).Format(time.RFC3339))
	_, err = os.Stdout.Write(out)
	return err
}
