#!/usr/bin/env bash
# Builds the pinned developer tools of hack/tools (controller-gen, protoc-gen-go,
# protoc-gen-go-grpc, ginkgo, kustomize), hack/tools/buf (buf),
# hack/tools/helm (helm) and hack/tools/golangci-lint (golangci-lint) into a
# cache directory outside the clone, keyed by the hash of their go.mod/go.sum.
# A tool already in the cache is not built again. Kueue's manager
# (hack/tools/kueue, run by the Kueue journey) has a cache directory of its
# own, keyed by its own go.mod/go.sum: its cold build takes minutes, so a
# change to the other tools does not rebuild it, nor it them.
#
# This script is the one way anything finds a tool: make targets and test
# suites (test/util/repo.Tool) ask it, and it builds what is missing, so a
# machine with an empty cache needs no earlier `make tools`.
#
#   hack/tools.sh            build every tool, print the directory
#   hack/tools.sh dir        print the directory (builds nothing)
#   hack/tools.sh path NAME  build NAME if missing, print its path
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${IMPERATOR_CACHE:-$HOME/.cache/imperator}
key=$(cat "$root"/hack/tools/go.mod "$root"/hack/tools/go.sum "$root"/hack/tools/buf/go.mod "$root"/hack/tools/buf/go.sum \
  "$root"/hack/tools/helm/go.mod "$root"/hack/tools/helm/go.sum \
  "$root"/hack/tools/golangci-lint/go.mod "$root"/hack/tools/golangci-lint/go.sum | sha256sum | cut -c1-12)
dir="$cache/tools-$key"
kueuekey=$(cat "$root"/hack/tools/kueue/go.mod "$root"/hack/tools/kueue/go.sum | sha256sum | cut -c1-12)
kueuedir="$cache/kueue-$kueuekey"

# The tools: name, module directory, package.
tools=(
  "controller-gen     hack/tools     sigs.k8s.io/controller-tools/cmd/controller-gen"
  "protoc-gen-go      hack/tools     google.golang.org/protobuf/cmd/protoc-gen-go"
  "protoc-gen-go-grpc hack/tools     google.golang.org/grpc/cmd/protoc-gen-go-grpc"
  "ginkgo             hack/tools     github.com/onsi/ginkgo/v2/ginkgo"
  "kustomize          hack/tools     sigs.k8s.io/kustomize/kustomize/v5"
  "buf                hack/tools/buf github.com/bufbuild/buf/cmd/buf"
  "helm               hack/tools/helm helm.sh/helm/v3/cmd/helm"
  "golangci-lint      hack/tools/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
  "kueue              hack/tools/kueue sigs.k8s.io/kueue/cmd/kueue"
)

tooldir() { # tooldir NAME: the cache directory NAME lives in
  if [ "$1" = kueue ]; then echo "$kueuedir"; else echo "$dir"; fi
}

build() { # build NAME: build the tool unless it is in the cache
  local name moddir pkg
  for t in "${tools[@]}"; do
    read -r name moddir pkg <<<"$t"
    [ "$name" = "$1" ] || continue
    local out
    out=$(tooldir "$name")
    [ -x "$out/$name" ] && return
    mkdir -p "$out"
    printf 'tools: building %s\n' "$name" >&2
    # Built to a temporary name and moved, so that two builds racing (two
    # suites at once) never leave a half-written binary behind.
    (cd "$root/$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/.$name.$$" "$pkg")
    mv -f "$out/.$name.$$" "$out/$name"
    return
  done
  echo "tools: unknown tool $1" >&2
  return 2
}

case "${1:-all}" in
  dir) echo "$dir" ;;
  path)
    [ $# -eq 2 ] || { echo "usage: $0 path NAME" >&2; exit 2; }
    build "$2"
    echo "$(tooldir "$2")/$2"
    ;;
  all)
    # Kueue is left out: only its journey needs it, and asks for it by name.
    for t in "${tools[@]}"; do [ "${t%% *}" = kueue ] || build "${t%% *}"; done
    echo "$dir"
    ;;
  *) echo "usage: $0 [dir | path NAME]" >&2; exit 2 ;;
esac
