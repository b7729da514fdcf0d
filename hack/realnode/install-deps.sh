#!/usr/bin/env bash
# Installs what the harness's real node runs besides the kubelet (which
# hack/k8s-bin.sh builds): containerd, runc and the CNI plugins, from Debian's
# packages, when one of them is missing. Idempotent; needs root and apt-get.
# Neither containerd's nor any other service is enabled or started: the
# harness (test/util/realnode) starts its own containerd per node.
#
#   hack/realnode/install-deps.sh          install what is missing
#   hack/realnode/install-deps.sh check    exit 1 (and say what) when something is missing
set -euo pipefail

log() { printf 'realnode-deps: %s\n' "$*" >&2; }

# The binaries the harness needs, each with the Debian package that ships it.
declare -A need=(
  [/usr/bin/containerd]=containerd
  [/usr/bin/ctr]=containerd
  [/usr/sbin/runc]=runc
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [/usr/lib/cni/host-local]=containernetworking-plugins
  [/usr/lib/cni/loopback]=containernetworking-plugins
  [/usr/lib/cni/portmap]=containernetworking-plugins
)

missing=()
for bin in "${!need[@]}"; do
  [ -x "$bin" ] || missing+=("${need[$bin]}")
done
# Unique package names, in a stable order.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sed '/^$/d' | sort -u)

case "${1:-install}" in
  check)
    if [ ${#missing[@]} -gt 0 ]; then log "missing: ${missing[*]}"; exit 1; fi
    exit 0 ;;
  install) ;;
  *) echo "usage: $0 [install|check]" >&2; exit 2 ;;
esac

if [ ${#missing[@]} -eq 0 ]; then
  log "containerd, runc and the CNI plugins are installed"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "installing ${missing[*]} needs root"
  exit 1
fi
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101 keeps dpkg from starting the packaged containerd service.
policy=/usr/sbin/policy-rc.d
created_policy=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
fi
trap '[ -z "$created_policy" ] || rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
log "installed ${missing[*]} in $((SECONDS - start))s"
