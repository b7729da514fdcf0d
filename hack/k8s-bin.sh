#!/usr/bin/env bash
# Builds the control-plane binaries the test harness runs as local processes:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (from
# k8s.io/kubernetes via hack/k8s-bin), etcd (hack/etcd) and kwok; and the
# kubelet and kube-proxy of the harness's real node (test/util/realnode).
#
# Output goes to a versioned cache outside the clone, printed at the end:
#   ${IMPERATOR_CACHE:-$HOME/.cache/imperator}/k8s-<version>/
# Each binary carries a version stamp next to it; a second run rebuilds nothing.
#
#   hack/k8s-bin.sh          build what is missing
#   hack/k8s-bin.sh dir      print the cache directory
#   hack/k8s-bin.sh regen    rewrite hack/k8s-bin/go.mod's replace block from
#                            k8s.io/kubernetes's own go.mod (after a version bump)
set -euo pipefail

K8S_VERSION=v1.36.3
STAGING_VERSION=v0.36.3
ETCD_VERSION=v3.6.10
KWOK_VERSION=v0.8.0

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${IMPERATOR_CACHE:-$HOME/.cache/imperator}
dir="$cache/k8s-$K8S_VERSION"

log() { printf 'k8s-bin: %s\n' "$*" >&2; }

# fresh NAME VERSION: true when DIR/NAME exists and was built at VERSION.
fresh() { [ -x "$dir/$1" ] && [ "$(cat "$dir/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { printf '%s\n' "$2" >"$dir/.$1.version"; }

regen() {
  local mod
  mod=$(cd "$root/hack/k8s-bin" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  local tmp
  tmp=$(mktemp)
  awk '/^replace \(/{exit} {print}' "$root/hack/k8s-bin/go.mod" >"$tmp"
  {
    echo 'replace ('
    grep -E '^\s+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$mod" | awk -v v="$STAGING_VERSION" '{print "\t" $1 " => " $1 " " v}'
    echo ')'
  } >>"$tmp"
  mv "$tmp" "$root/hack/k8s-bin/go.mod"
  (cd "$root/hack/k8s-bin" && go mod tidy)
  # tidy sees no import of the kubelet or kube-proxy and drops what only they
  # need (hnslib, otelrestful, k8s.io/cri-streaming; netlink, netns, ipvs,
  # knftables); their packages bring them back.
  (cd "$root/hack/k8s-bin" && go get "k8s.io/kubernetes/pkg/kubelet@$K8S_VERSION" "k8s.io/kubernetes/pkg/kubelet/server@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-proxy@$K8S_VERSION")
  log "regenerated hack/k8s-bin/go.mod for k8s.io/kubernetes $K8S_VERSION"
}

build_kube() {
  local ldflags="-s -w"
  local v="k8s.io/component-base/version"
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ldflags+=" -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitVersion=$K8S_VERSION -X $v.gitTreeState=clean"
  ldflags+=" -X $v.buildDate=1970-01-01T00:00:00Z"
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
    if fresh "$cmd" "$K8S_VERSION"; then continue; fi
    log "building $cmd $K8S_VERSION"
    (cd "$root/hack/k8s-bin" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/$cmd" "k8s.io/kubernetes/cmd/$cmd")
    stamp "$cmd" "$K8S_VERSION"
    built+=("$cmd")
  done
}

build_etcd() {
  fresh etcd "$ETCD_VERSION" && return
  log "building etcd $ETCD_VERSION"
  (cd "$root/hack/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/etcd" go.etcd.io/etcd/server/v3)
  stamp etcd "$ETCD_VERSION"
  built+=(etcd)
}

build_kwok() {
  fresh kwok "$KWOK_VERSION" && return
  log "building kwok $KWOK_VERSION"
  GOBIN="$dir" CGO_ENABLED=0 GOFLAGS=-trimpath go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  stamp kwok "$KWOK_VERSION"
  built+=(kwok)
}

case "${1:-build}" in
  dir) echo "$dir"; exit 0 ;;
  regen) regen; exit 0 ;;
  build) ;;
  *) echo "usage: $0 [build|dir|regen]" >&2; exit 2 ;;
esac

mkdir -p "$dir"
built=()
start=$SECONDS
build_etcd
build_kwok
build_kube
if [ ${#built[@]} -eq 0 ]; then
  log "up to date in $dir"
else
  log "built ${built[*]} in $((SECONDS - start))s into $dir"
fi
