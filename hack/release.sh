#!/usr/bin/env bash
# Builds a release of Imperator Federation (make release VERSION=v0.1.0) and
# pushes it (make push VERSION=v0.1.0 REGISTRY=registry.example.com/imperator).
# No Docker, no crane: images come from hack/images.sh, the push from
# hack/image/push (go-containerregistry), helm from hack/tools.sh.
#
#   hack/release.sh VERSION [STEP...]   build the release (every step by default)
#   hack/release.sh push VERSION        push the built release to $REGISTRY
#
# Steps, output under RELEASE_OUT (default bin/release/VERSION):
#   images        images/hub, images/spoke, images/dispatcher: OCI layouts (one multi-platform
#                 index each) and images/NAME-OS-ARCH.tar docker tarballs,
#                 exactly as `make images` builds and tests them, tagged VERSION
#                 and with VERSION in the binaries
#   charts        charts/imperator-hub-X.Y.Z.tgz, charts/imperator-spoke-X.Y.Z.tgz,
#                 charts/imperator-dispatcher-X.Y.Z.tgz:
#                 version X.Y.Z, appVersion VERSION (the images' tag, which
#                 image.tag defaults to), image.repository under IMAGE_REGISTRY
#   imperatorctl  imperatorctl-OS-ARCH for CTL_PLATFORMS (static, -trimpath)
#   changelog     CHANGELOG.md: the VERSION's entry of the repository's CHANGELOG.md
#   checksums     SHA256SUMS of every file above (the layouts are content-addressed)
#   appversion    sets appVersion: VERSION in the repository's charts
#                 (deploy/charts/*/Chart.yaml; CHART_SOURCES=DIR for another
#                 copy), so that a chart installed from the repository pulls
#                 the released images: commit it with the release
#
# Each step first removes what an earlier run of it left in RELEASE_OUT, and
# SHA256SUMS lists only the files the steps write (CHANGELOG.md, charts/*.tgz,
# imperatorctl-*, images/*.tar), so a reused bin/release/VERSION never ships
# a stale file (another platform's imperatorctl, an old chart) with checksums.
#
#   VERSION=vX.Y.Z[-pre]                         semver, required
#   PLATFORMS="linux/amd64 linux/arm64"          platforms of the images
#   CTL_PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
#   IMAGE_REGISTRY=ghcr.io/imperator-federation  where the charts' images are pulled from
#   REGISTRY=host/path                           push: images at REGISTRY/hub:VERSION,
#                                                REGISTRY/spoke:VERSION and REGISTRY/dispatcher:VERSION, charts at
#                                                oci://REGISTRY/charts/NAME, version X.Y.Z
#   PLAIN_HTTP=1                                 push: the registry speaks HTTP, not HTTPS
#   OVERWRITE=1                                  push: replace tags of VERSION the registry has
#                                                (refused otherwise: a release is published once)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module=github.com/imperator-federation/imperator
charts=(imperator-hub imperator-spoke imperator-dispatcher)

die() { echo "release: $*" >&2; exit 1; }

# A Docker tag allows no "+", so no build metadata; a chart version is the
# same without the "v".
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'
check_version() {
  [ -n "$1" ] || die "VERSION is required: make release VERSION=v0.1.0"
  [[ $1 =~ $semver ]] || die "VERSION=$1 is not a semantic version vX.Y.Z or vX.Y.Z-PRE (e.g. v0.1.0, v0.2.0-rc.1)"
}

push() {
  local version=$1 out
  check_version "$version"
  [ -n "${REGISTRY:-}" ] || die "REGISTRY is required: make push VERSION=$version REGISTRY=registry.example.com/imperator"
  out=${RELEASE_OUT:-$root/bin/release/$version}
  [ -d "$out/images" ] && [ -d "$out/charts" ] || die "$out has no images/ or charts/: run make release VERSION=$version first"
  local args=(-registry "$REGISTRY" -version "$version")
  for name in hub spoke dispatcher; do args+=(-image "$name=$out/images/$name"); done
  for chart in "${charts[@]}"; do args+=(-chart "$out/charts/$chart-${version#v}.tgz"); done
  [ -z "${PLAIN_HTTP:-}" ] || args+=(-plain-http)
  [ -z "${OVERWRITE:-}" ] || args+=(-overwrite)
  (cd "$root/hack/image" && go run ./push "${args[@]}")
}

step_images() {
  rm -rf "$out/images"
  IMAGES_OUT=$out/images IMAGE_TAG=$version IMAGE_REGISTRY=$registry "$root/hack/images.sh"
  # What the release ships: the layouts and the tarballs, not the builder.
  rm -rf "$out/images/build" "$out/images/.image-builder"
}

step_charts() ( # a subshell: its EXIT trap removes the working copy
  local helm work
  helm=$("$root/hack/tools.sh" path helm)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  rm -rf "$out/charts"
  mkdir -p "$out/charts"
  for chart in "${charts[@]}"; do
    cp -R "$root/deploy/charts/$chart" "$work/"
    local values="$work/$chart/values.yaml" name=${chart#imperator-}
    # The one repository line of image: (the chart's own image, not others).
    grep -q "^  repository: ghcr.io/imperator-federation/$name\$" "$values" ||
      die "deploy/charts/$chart/values.yaml: no line 'repository: ghcr.io/imperator-federation/$name' under image:"
    sed -i "s|^  repository: ghcr.io/imperator-federation/$name\$|  repository: $registry/$name|" "$values"
    HELM_CONFIG_HOME=$work HELM_CACHE_HOME=$work HELM_DATA_HOME=$work \
      "$helm" package "$work/$chart" --version "${version#v}" --app-version "$version" --destination "$out/charts" >/dev/null
    echo "release: charts/$chart-${version#v}.tgz (appVersion $version)" >&2
  done
)

step_imperatorctl() {
  local commit platform os arch
  commit=$(git -C "$root" rev-parse HEAD)
  rm -f "$out"/imperatorctl-*
  for platform in ${CTL_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}; do
    os=${platform%%/*} arch=${platform#*/}
    (cd "$root" && GOOS=$os GOARCH=$arch CGO_ENABLED=0 go build -trimpath -o "$out/imperatorctl-$os-$arch" \
      -ldflags "-s -w -buildid= -X $module/internal/version.version=$version -X $module/internal/version.commit=$commit" \
      ./cmd/imperatorctl)
    echo "release: imperatorctl-$os-$arch" >&2
  done
}

step_changelog() {
  rm -f "$out/CHANGELOG.md"
  # Keep a Changelog: "## [0.1.0] - 2026-11-27" up to the next "## [".
  awk -v want="## [${version#v}]" '
    index($0, want) == 1 { on = 1; print; next }
    on && /^## \[/ { exit }
    on { print }' "$root/CHANGELOG.md" >"$out/CHANGELOG.md"
  [ -s "$out/CHANGELOG.md" ] ||
    die "CHANGELOG.md has no entry for ${version#v}: add a '## [${version#v}] - $(date -u +%F)' section (Keep a Changelog)"
}

step_appversion() {
  local dir=${CHART_SOURCES:-$root/deploy/charts} chart file
  for chart in "${charts[@]}"; do
    file=$dir/$chart/Chart.yaml
    grep -q '^appVersion: ' "$file" || die "$file has no appVersion line"
    sed -i "s|^appVersion: .*|appVersion: \"$version\"|" "$file"
    echo "release: $file appVersion $version (commit it with the release)" >&2
  done
}

step_checksums() {
  # Only what the steps write: any other file of a reused directory is not
  # part of the release.
  (cd "$out" && rm -f SHA256SUMS && find . -maxdepth 2 -type f \( -path ./CHANGELOG.md -o -path './charts/*.tgz' \
    -o -path './imperatorctl-*' -o -path './images/*.tar' \) -printf '%P\n' |
    LC_ALL=C sort | xargs -r sha256sum >SHA256SUMS)
  [ -s "$out/SHA256SUMS" ] || die "$out holds nothing to check-sum: run the other steps first"
  echo "release: SHA256SUMS" >&2
}

if [ "${1:-}" = push ]; then
  push "${2:-}"
  exit
fi

version=${1:-}
check_version "$version"
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(changelog images charts imperatorctl checksums appversion)
registry=${IMAGE_REGISTRY:-ghcr.io/imperator-federation}
# A repository prefix: host[:port] and lower-case path parts, nothing a
# chart's values (or sed) would read otherwise.
[[ $registry =~ ^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$ ]] ||
  die "IMAGE_REGISTRY=$registry is not a repository prefix host[:port]/path (lower case, e.g. ghcr.io/imperator-federation)"
out=${RELEASE_OUT:-$root/bin/release/$version}
mkdir -p "$out"
for step in "${steps[@]}"; do
  case $step in
    images | charts | imperatorctl | changelog | checksums | appversion) "step_$step" ;;
    *) die "unknown step $step: want images, charts, imperatorctl, changelog, checksums or appversion" ;;
  esac
done
echo "release: $version in $out" >&2
