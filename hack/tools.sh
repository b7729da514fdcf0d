#!/usr/bin/env bash
# Builds the pinned developer tools of hack/tools (controller-gen, protoc-gen-go,
# protoc-gen-go-grpc, ginkgo, kustomize) and hack/tools/buf (buf) into a cache
# directory outside the clone, keyed by the hash of their go.mod/go.sum, and
# prints that directory. A second run builds nothing.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${IMPERATOR_CACHE:-$HOME/.cache/imperator}
key=$(cat "$root"/hack/tools/go.mod "$root"/hack/tools/go.sum "$root"/hack/tools/buf/go.mod "$root"/hack/tools/buf/go.sum | sha256sum | cut -c1-12)
dir="$cache/tools-$key"

if [ "${1:-}" = dir ]; then echo "$dir"; exit 0; fi

build() { # build MODULE_DIR NAME PACKAGE
  [ -x "$dir/$2" ] && return
  printf 'tools: building %s\n' "$2" >&2
  (cd "$1" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/$2" "$3")
}

mkdir -p "$dir"
build "$root/hack/tools" controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
build "$root/hack/tools" protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
build "$root/hack/tools" protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
build "$root/hack/tools" ginkgo github.com/onsi/ginkgo/v2/ginkgo
build "$root/hack/tools" kustomize sigs.k8s.io/kustomize/kustomize/v5
build "$root/hack/tools/buf" buf github.com/bufbuild/buf/cmd/buf
echo "$dir"
