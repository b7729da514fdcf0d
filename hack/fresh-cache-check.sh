#!/usr/bin/env bash
# Runs make targets as a new machine would: with IMPERATOR_CACHE pointing at a
# new, empty directory. Only the control-plane binaries are carried over (a
# link to the already-built k8s-<version> directory, built first if missing),
# so the check takes minutes rather than the half hour of a control-plane
# build, yet catches every tool a target uses without building it.
#
#   hack/fresh-cache-check.sh [TARGET...]     default: test
#
# Run it for `make test` whenever the Makefile, hack/ or the way a suite
# finds a tool changes. It fails when a target fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
[ $# -gt 0 ] || set -- test

# Nothing from the caller's environment may point at a warm cache.
unset IMPERATOR_K8S_BIN KUBEBUILDER_ASSETS IMPERATOR_BIN_DIR TOOLS_DIR

k8s=$(hack/k8s-bin.sh dir)
hack/k8s-bin.sh
fresh=$(mktemp -d "${TMPDIR:-/tmp}/imperator-fresh-cache.XXXXXX")
trap 'rm -rf "$fresh"' EXIT
ln -s "$k8s" "$fresh/$(basename "$k8s")"
echo "fresh-cache-check: IMPERATOR_CACHE=$fresh (control plane linked from $k8s)"

export IMPERATOR_CACHE=$fresh
for target in "$@"; do
  start=$SECONDS
  if ! make "$target"; then
    echo "fresh-cache-check: make $target FAILED with an empty cache after $((SECONDS - start))s" >&2
    exit 1
  fi
  echo "fresh-cache-check: make $target passed with an empty cache in $((SECONDS - start))s"
done
echo "fresh-cache-check: the cache held afterwards:"
# A target that builds no tool leaves no tools-* (ls then fails, not the check).
ls -1 "$fresh" "$fresh"/tools-* 2>/dev/null | sed 's/^/  /' || true
