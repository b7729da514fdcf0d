#!/usr/bin/env bash
# Copies the generated manifests the Helm charts share with the kustomize
# bases into the charts' files/ (make generate runs it; make verify then fails
# when a copy is stale): the CRDs, the RBAC roles controller-gen writes from
# the +kubebuilder:rbac markers, and the spoke's webhook configurations. The
# charts' templates read these copies, so no rule, schema or webhook is
# written twice by hand. See deploy/charts/README.md.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

copy() { # copy DEST SRC...: DEST holds exactly SRC..., nothing stale
  local dest=$1
  shift
  rm -rf "$dest"
  mkdir -p "$dest"
  install -m 0644 "$@" "$dest"/
}

hub=deploy/charts/imperator-hub/files
copy "$hub/crds" deploy/hub/crd/*.yaml
copy "$hub/crds/ocm" deploy/hub/crd/ocm/*.yaml
copy "$hub/rbac" deploy/hub/rbac/role.yaml

spoke=deploy/charts/imperator-spoke/files
copy "$spoke/crds" deploy/spoke/crd/*.yaml
copy "$spoke/rbac" deploy/spoke/rbac/role.yaml
copy "$spoke/webhook" deploy/spoke/webhook/manifests.yaml
