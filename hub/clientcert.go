package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/ctlconfig"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
)

// runClientCert issues a person's (or automation's) client certificate from
// the hub CA and prints an imperatorctl configuration file that holds it:
//
//	hub client-cert --name alice --role admin --hub-address hub.example.com:9443 > ~/.imperator/config
//
// and revokes one by serial (printed when it is issued):
//
//	hub client-cert revoke [--reason TEXT] SERIAL
func runClientCert(args []string) error {
	if len(args) > 0 && args[0] == "revoke" {
		return runRevokeClientCert(args[1:])
	}
	fs, cfg := adminFlags("client-cert")
	name := fs.String("name", "", "Name of the person or automation (the certificate's common name).")
	role := fs.String("role", "viewer", "viewer (read-only queries), holder (also fleet holds) or admin (also bootstrap tokens).")
	hubAddress := fs.String("hub-address", "", "host:port at which imperatorctl reaches the hub.")
	validity := fs.Duration("validity", query.DefaultClientCertValidity, fmt.Sprintf("Lifetime of the certificate, at most %s.", query.MaxClientCertValidity))
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	if msgs := validation.IsDNS1123Subdomain(*name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--name %q: %v", *name, msgs))
	}
	organization := map[string]string{"viewer": query.ViewerOrganization, "holder": query.HolderOrganization, "admin": query.AdminOrganization}[*role]
	if organization == "" {
		errs = append(errs, fmt.Errorf("--role %q: want viewer, holder or admin", *role))
	}
	if *hubAddress == "" {
		errs = append(errs, errors.New("--hub-address: required"))
	}
	if *validity <= 0 || *validity > query.MaxClientCertValidity {
		errs = append(errs, fmt.Errorf("--validity %s: must be positive and at most %s (the hub refuses longer-lived certificates)", *validity, query.MaxClientCertValidity))
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
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		return fmt.Errorf("reading the issued certificate: %w", err)
	}
	out, err := yaml.Marshal(ctlconfig.Config{
		CurrentContext: *name,
		Contexts: []ctlconfig.Context{{
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
	fmt.Fprintf(os.Stderr, "Issued a %s certificate for %s, serial %s, valid until %s (revoke it with: hub client-cert revoke %s); the imperatorctl configuration follows.\n",
		*role, *name, identity.SerialOf(cert), cert.NotAfter.Format(time.RFC3339), identity.SerialOf(cert))
	_, err = os.Stdout.Write(out)
	return err
}

// runRevokeClientCert adds a certificate's serial to the hub's revocation
// list; every hub replica refuses it within --revocations-refresh.
func runRevokeClientCert(args []string) error {
	fs, cfg := adminFlags("client-cert revoke")
	reason := fs.String("reason", "", "Why the certificate is revoked, kept with the entry.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: hub client-cert revoke [--reason TEXT] SERIAL")
	}
	serial := strings.ToLower(strings.TrimPrefix(strings.ReplaceAll(fs.Arg(0), ":", ""), "0x"))
	if !registry.ValidSerial(serial) {
		return fmt.Errorf("SERIAL %q: want the certificate's serial number in hex, as hub client-cert printed it (openssl x509 -serial also works)", fs.Arg(0))
	}
	c, err := adminClient(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := registry.Revoke(ctx, c, cfg.Namespace, serial, *reason, time.Now()); err != nil {
		return err
	}
	fmt.Println("revoked", serial)
	return nil
}
