#!/usr/bin/env bash
# Builds the hub, spoke and dispatcher container images without a Docker daemon and
# tests them (make images). For each platform in PLATFORMS the binaries are
# built static (CGO_ENABLED=0, -trimpath, no build ID); hack/image assembles
# them into OCI images on an empty base (non-root user 65532, CA bundle, no
# shell), stamped with the commit time so that the same commit gives the same
# digests. It builds every image twice and fails when the digests differ.
#
# Output, under IMAGES_OUT (default bin/images):
#   hub/, spoke/, dispatcher/    OCI image layouts, one multi-platform index each
#                                push: crane push --index bin/images/hub REF
#                                      (or skopeo copy --all oci:bin/images/hub docker://REF)
#   hub-linux-amd64.tar, ...     one docker tarball per platform: docker load -i FILE
#
#   PLATFORMS="linux/amd64 linux/arm64"  platforms to build (default)
#   IMAGE_TAG=v0.1.0                     version label and tarball tag (default: git describe)
#   IMAGE_REGISTRY=ghcr.io/...           repository prefix of the tarball tag
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Absolute: the builder runs from hack/image, where a relative path would land.
out=$(realpath -m "${IMAGES_OUT:-$root/bin/images}")
platforms=${PLATFORMS:-linux/amd64 linux/arm64}
registry=${IMAGE_REGISTRY:-ghcr.io/imperator-federation}
names=(hub spoke dispatcher)
revision=$(git -C "$root" rev-parse HEAD)
created=$(git -C "$root" log -1 --format=%ct)
version=${IMAGE_TAG:-$(git -C "$root" describe --tags --always --dirty)}

mkdir -p "$out"
(cd "$root/hack/image" && go build -o "$out/.image-builder" .)

declare -A binaries
for platform in $platforms; do
  os=${platform%%/*} arch=${platform#*/}
  dir="$out/build/${os}_${arch}"
  mkdir -p "$dir"
  echo "images: building ${names[*]} for $platform" >&2
  (cd "$root" && GOOS=$os GOARCH=$arch CGO_ENABLED=0 \
    go build -trimpath -o "$dir/" -ldflags "-s -w -buildid= \
      -X github.com/imperator-federation/imperator/internal/version.version=$version \
      -X github.com/imperator-federation/imperator/internal/version.commit=$revision" "${names[@]/#/./}")
  for name in "${names[@]}"; do
    binaries[$name]+=" -binary $platform=$dir/$name"
  done
done

for name in "${names[@]}"; do
  # shellcheck disable=SC2086 # the -binary flags are meant to split
  args=(-name "$name" -description "Imperator Federation $name" -revision "$revision"
        -created "$created" -version "$version" -repository "$registry" ${binaries[$name]})
  first=$("$out/.image-builder" "${args[@]}" -out "$out")
  again=$("$out/.image-builder" "${args[@]}" -out "$out/.again")
  if [ "$first" != "$again" ]; then
    printf 'images: %s is not reproducible:\n  %s\n  %s\n' "$name" "$first" "$again" >&2
    exit 1
  fi
  echo "images: $first"
done
rm -rf "$out/.again"

cd "$root/hack/image"
IMAGES_DIR=$out IMAGES="${names[*]}" IMAGES_REVISION=$revision go test -count=1 ./...
