// Package kueue runs Kueue's own, unmodified manager (sigs.k8s.io/kueue
// v0.17.0, built into the tool cache by hack/tools.sh from hack/tools/kueue)
// as a local process against a cluster of the harness or the fleet, for the
// suites that prove the spoke agent works with Kueue. It installs Kueue's
// CRDs from the module Kueue was built from, writes Kueue's configuration
// (config.kueue.x-k8s.io/v1beta2: no leader election, everything on
// loopback, only the batch/job integration) and stops the process on Stop.
//
// Webhooks: Kueue's webhook server runs (on loopback, with a certificate of
// its own) but its webhook configurations are not registered in the API
// server. They only default and validate Kueue's objects and suspend Jobs
// created with a queue name; the journeys create their Jobs suspended
// themselves and write complete Kueue objects, and an API server that
// calls no Kueue webhook cannot be blocked by a Kueue that is down.
//
// Kueue v0.17.0 without its internal certificate management reads its
// metrics certificate from the hard-coded /etc/kueue/metrics/certs. The
// process runs in a private mount namespace (unshare -m) where /etc is an
// overlay of the host's /etc with that directory added: the host's /etc is
// never touched.
package kueue
