// Package certs gives the agent's webhook server its serving certificate and
// keeps it fresh. The CA and serving certificate live in one Secret in the
// agent's namespace, shared by every replica: the first replica to start
// creates it, the others read it; any replica renews it when a third of its
// lifetime is left. The webhook server takes the certificate from memory
// (Rotator.GetCertificate), so a renewal needs neither files nor a restart.
// The CA bundle goes into the agent's webhook configurations through
// Options.Bundles: package install, which builds those configurations, reads
// and patches them (install.CABundles); this package only rotates.
//
// Renewing the serving certificate with the same CA changes nothing the API
// server trusts. Renewing the CA is a rollover with an overlap, because the
// replicas pick up the Secret one by one (each every CheckInterval) and both
// webhooks fail closed:
//
//  1. introduce: a new CA is stored as next-ca.crt and added to the bundle;
//     every replica keeps serving the old leaf, which the bundle still trusts.
//  2. promote: once Overlap has passed and both webhook configurations carry
//     the new CA, it becomes ca.crt and signs a new leaf; the old CA moves to
//     previous-ca.crt and stays in the bundle, so replicas still serving the
//     old leaf are trusted.
//  3. retire: Overlap after the promotion — by then every replica has re-read
//     the Secret and serves the new leaf — the old CA leaves the bundle.
//
// Overlap is twice CheckInterval, so one failed refresh of a replica is
// tolerated. A replica that cannot read the Secret for longer keeps serving
// what it has; the API server refuses it once its CA is retired (the same as
// when its leaf expires), and the replica recovers at its next successful
// check. A CA that has already expired (an agent down for longer than its
// lifetime) is replaced at once: nothing trusts its leaves anyway.
//
// github.com/open-policy-agent/cert-controller's rotator was evaluated for
// this and not used: it replaces the bundle with only the new CA (the very
// outage this rollover avoids), updates whole webhook configurations found
// through a cluster-wide cache (list/watch/update on every webhook
// configuration instead of get/patch on two by name), serves from files, and
// its v0.16.0 pins controller-runtime v0.23 and k8s.io v0.35.
package certs
