#!/usr/bin/env bash
# Regenerates every generated file of the repository (make generate):
#   - api/v1alpha1/zz_generated.deepcopy.go                  (controller-gen object)
#   - deploy/spoke/crd, deploy/hub/crd                       (controller-gen crd)
#   - deploy/hub/crd/ocm                                     (copied from open-cluster-management.io/api)
#   - deploy/spoke/rbac, deploy/hub/rbac                     (controller-gen rbac from +kubebuilder:rbac markers)
#   - deploy/spoke/webhook                                   (spoke/internal/webhook/install/gen, from the webhook packages)
#   - proto/**/*.pb.go                                       (buf with protoc-gen-go and protoc-gen-go-grpc)
# It is idempotent: a second run changes nothing. TOOLS_DIR is the directory
# hack/tools.sh built the generators into.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
: "${TOOLS_DIR:=$(hack/tools.sh)}"
export PATH="$TOOLS_DIR:$PATH"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Deepcopy and CRDs. The API package holds both spoke and hub kinds; each CRD
# goes to the side that installs it.
controller-gen object paths=./api/...
controller-gen crd paths=./api/... output:crd:artifacts:config="$tmp/crd"
spoke_crds=(machines machinenodepools capacityholds)
rm -rf deploy/spoke/crd deploy/hub/crd/*.yaml
mkdir -p deploy/spoke/crd deploy/hub/crd
for plural in "${spoke_crds[@]}"; do
  mv "$tmp/crd/imperator.tenzen-y.io_$plural.yaml" deploy/spoke/crd/
done
# Every other kind of the API is the hub's.
mv "$tmp"/crd/*.yaml deploy/hub/crd/ 2>/dev/null || true

# OCM's cluster registry and placement-score CRDs, from the pinned module.
ocm=$(go list -m -f '{{.Dir}}' open-cluster-management.io/api)
mkdir -p deploy/hub/crd/ocm
rm -f deploy/hub/crd/ocm/*.yaml
install -m 0644 "$ocm"/cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml deploy/hub/crd/ocm/
install -m 0644 "$ocm"/cluster/v1alpha1/0000_05_clusters.open-cluster-management.io_addonplacementscores.crd.yaml deploy/hub/crd/ocm/

# RBAC and webhook manifests from the markers of each binary's packages.
for side in spoke hub; do
  if grep -rqs '+kubebuilder:rbac' "$side"; then
    controller-gen rbac:roleName="imperator-$side" paths="./$side/..." output:rbac:artifacts:config="deploy/$side/rbac"
  fi
done
# The spoke's webhook configurations are built in code (two namespace
# selectors and exclusions markers cannot express): rendered by a generator.
mkdir -p deploy/spoke/webhook
go run ./spoke/internal/webhook/install/gen > "$tmp/webhook.yaml"
mv "$tmp/webhook.yaml" deploy/spoke/webhook/manifests.yaml

# Protobuf Go code, offline with the pinned local plugins.
if [ -f proto/buf.gen.yaml ]; then
  (cd proto && buf generate)
fi

gofmt -w api proto 2>/dev/null || true
