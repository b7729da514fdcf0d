#!/usr/bin/env bash
# Copies the manifests the Helm charts share with the kustomize bases into
# the charts' files/ (make generate runs it; make verify then fails when a
# copy is stale): the CRDs, the RBAC roles controller-gen writes from the
# +kubebuilder:rbac markers (and the dispatcher's hand-written role.yaml), the spoke's webhook configurations and its
# admission policies (deploy/spoke/policy), and the Prometheus Operator's
# PodMonitor and PrometheusRule of deploy/monitoring. The charts' templates read these
# copies, so no rule, schema, webhook or policy is written twice by hand. See
# deploy/charts/README.md.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

copy() { # copy DEST SRC...: DEST holds exactly SRC..., nothing stale; no SRC, no DEST
  local dest=$1
  shift
  rm -rf "$dest"
  [ $# -gt 0 ] || return 0
  mkdir -p "$dest"
  install -m 0644 "$@" "$dest"/
}
shopt -s nullglob

hub=deploy/charts/imperator-hub/files
copy "$hub/crds" deploy/hub/crd/*.yaml
copy "$hub/crds/ocm" deploy/hub/crd/ocm/*.yaml
copy "$hub/rbac" deploy/hub/rbac/*.yaml
copy "$hub/monitoring" deploy/monitoring/podmonitor.yaml deploy/monitoring/prometheusrule.yaml

spoke=deploy/charts/imperator-spoke/files
copy "$spoke/crds" deploy/spoke/crd/*.yaml
copy "$spoke/monitoring" deploy/monitoring/podmonitor.yaml deploy/monitoring/prometheusrule.yaml
copy "$spoke/provisioningrequest" deploy/spoke/provisioningrequest/autoscaling.x-k8s.io_*.yaml
copy "$spoke/rbac" deploy/spoke/rbac/role.yaml
copy "$spoke/webhook" deploy/spoke/webhook/manifests.yaml
copy "$spoke/policy" deploy/spoke/policy/*.yaml
copy "$spoke/policy/injection" deploy/spoke/policy/injection/guest-*.yaml

dispatcher=deploy/charts/imperator-dispatcher/files
copy "$dispatcher/rbac" deploy/dispatcher/role.yaml
