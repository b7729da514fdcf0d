package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/imperator-federation/imperator/hub/internal/query"
	"github.com/imperator-federation/imperator/hub/internal/registry"
	"github.com/imperator-federation/imperator/internal/ctlconfig"
	"github.com/imperator-federation/imperator/internal/identity"
	"github.com/imperator-federation/imperator/internal/pki"
)

// clientCertCommand issues a person's (or automation's) client certificate
// from the hub CA and prints an imperatorctl configuration file that holds it:
//
//	hub client-cert --name alice --role admin --hub-address hub.example.com:9443 > ~/.imperator/config
//
// and revokes one by serial (printed when it is issued):
//
//	hub client-cert revoke [--reason TEXT] SERIAL
func clientCertCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "client-cert --name NAME --role viewer|holder|admin --hub-address HOST:PORT",
		Short: "Issue a client certificate and print an imperatorctl configuration holding it",
		Args:  cobra.NoArgs,
	}
	cfg := adminFlags(cmd.Flags())
	fs := cmd.Flags()
	name := fs.String("name", "", "Name of the person or automation (the certificate's common name).")
	role := fs.String("role", "viewer", "viewer (read-only queries), holder (also fleet holds) or admin (also bootstrap tokens).")
	hubAddress := fs.String("hub-address", "", "host:port at which imperatorctl reaches the hub.")
	validity := fs.Duration("validity", query.DefaultClientCertValidity, fmt.Sprintf("Lifetime of the certificate, at most %s.", query.MaxClientCertValidity))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
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
			return &failure{code: exitUsage, err: err}
		}

		ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
		defer cancel()
		trust, err := loadTrust(ctx, cfg)
		if err != nil {
			return failed(err)
		}
		certPEM, keyPEM, err := trust.Current.IssueClient(*name, []string{organization}, *validity)
		if err != nil {
			return failed(fmt.Errorf("issuing the client certificate of %s: %w", *name, err))
		}
		cert, err := pki.ParseCertificate(certPEM)
		if err != nil {
			return failed(fmt.Errorf("reading the issued certificate: %w", err))
		}
		out, err := yaml.Marshal(ctlconfig.Config{
			CurrentContext: *name,
			Contexts: []ctlconfig.Context{{
				Name: *name,
				Hub:  *hubAddress,
				// The bundle: during a rotation, both CAs.
				CertificateAuthorityData: string(trust.Bundle()),
				ClientCertificateData:    string(certPEM),
				ClientKeyData:            string(keyPEM),
			}},
		})
		if err != nil {
			return failed(fmt.Errorf("encoding the imperatorctl configuration: %w", err))
		}
		_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "Issued a %s certificate for %s, serial %s, valid until %s (revoke it with: hub client-cert revoke %s); the imperatorctl configuration follows.\n",
			*role, *name, identity.SerialOf(cert), cert.NotAfter.Format(time.RFC3339), identity.SerialOf(cert))
		_, err = cmd.OutOrStdout().Write(out)
		return failed(err)
	}
	cmd.AddCommand(revokeClientCertCommand())
	return cmd
}

// revokeClientCertCommand adds a certificate's serial to the hub's
// revocation list; every hub replica refuses it within --revocations-refresh.
func revokeClientCertCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke [--reason TEXT] SERIAL",
		Short: "Revoke a client certificate on every hub replica",
	}
	cfg := adminFlags(cmd.Flags())
	reason := cmd.Flags().String("reason", "", "Why the certificate is revoked, kept with the entry.")
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError("usage: hub client-cert revoke [--reason TEXT] SERIAL")
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		serial := strings.ToLower(strings.TrimPrefix(strings.ReplaceAll(args[0], ":", ""), "0x"))
		if !registry.ValidSerial(serial) {
			return usageError("SERIAL %q: want the certificate's serial number in hex, as hub client-cert printed it (openssl x509 -serial also works)", args[0])
		}
		c, err := adminClient(cfg)
		if err != nil {
			return failed(err)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), adminTimeout)
		defer cancel()
		if err := registry.Revoke(ctx, c, cfg.Namespace, serial, *reason, time.Now()); err != nil {
			return failed(err)
		}
		_, err = fmt.Fprintln(cmd.OutOrStdout(), "revoked", serial)
		return failed(err)
	}
	return cmd
}
