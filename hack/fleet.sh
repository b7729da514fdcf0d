#!/usr/bin/env bash
# Starts and stops the local fleet of `make up` / `make down` / `make demo`:
# bin/fleet (hack/fleet) runs in the background, supervises every process of
# the fleet and writes .fleet/fleet.json when ready; its pid is in .fleet/fleet.pid.
#
#   hack/fleet.sh up       start (no-op when already running), wait until ready;
#                          with HOSTED=1 spoke-b has no agent inside: one hosted
#                          agent in the hub cluster serves it (docs/hosted.md)
#                          with HUB_REPLICAS=2 two hub replicas serve the fleet,
#                          the spokes spread over them (spoke-b on the second)
#   hack/fleet.sh down     stop everything the fleet started
#   hack/fleet.sh status   exit 0 when the fleet is running
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="$root/.fleet"
pidfile="$dir/fleet.pid"

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

usage() {
  cat <<MSG
The fleet is up: a hub cluster and spokes ($(cd "$dir" && ls -d spoke-* 2>/dev/null | tr '\n' ' ')) on this machine.
  description:  $dir/fleet.json
  spoke-a:      export KUBECONFIG=$dir/spoke-a/kubeconfig
  hub cluster:  export KUBECONFIG=$dir/hub/kubeconfig
  kubectl:      $(hack/k8s-bin.sh dir)/kubectl
  imperatorctl: export IMPERATOR_CONFIG=$dir/imperatorctl.yaml; bin/imperatorctl clusters
  logs:         $dir/fleet.log, $dir/*/*.log$( [ -d "$dir/hosted-agent" ] && printf '\n  hosted:       spoke-b is served by the hosted agent in the hub cluster (namespace imperator-hosted)')
  stop:         make down
MSG
}

up() {
  if running; then
    echo "fleet: already running (pid $(cat "$pidfile"))"
    usage
    return
  fi
  # A fleet starts from scratch: the data of a previous one is removed.
  rm -rf "$dir"
  mkdir -p "$dir"
  export IMPERATOR_K8S_BIN=${IMPERATOR_K8S_BIN:-$(hack/k8s-bin.sh dir)}
  hosted=()
  if [ -n "${HOSTED:-}" ] && [ "${HOSTED}" != 0 ]; then
    hosted=(--hosted spoke-b)
  fi
  nohup "$root/bin/fleet" --dir "$dir" --bin "$root/bin" --hub-replicas "${HUB_REPLICAS:-1}" "${hosted[@]}" >"$dir/fleet.log" 2>&1 &
  echo $! >"$pidfile"
  echo "fleet: starting (pid $!), log in $dir/fleet.log"
  for _ in $(seq 1 600); do
    if [ -f "$dir/fleet.json" ]; then
      usage
      return
    fi
    if ! running; then
      echo "fleet: failed to start:" >&2
      tail -n 40 "$dir/fleet.log" >&2
      rm -f "$pidfile"
      exit 1
    fi
    sleep 0.5
  done
  echo "fleet: not ready after 5 minutes, see $dir/fleet.log" >&2
  down
  exit 1
}

down() {
  if ! running; then
    echo "fleet: not running"
    rm -f "$pidfile"
    return
  fi
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "fleet: still running after 60s, killing it" >&2
    kill -KILL "$pid" || true
  fi
  rm -f "$pidfile" "$dir/fleet.json"
  echo "fleet: stopped"
}

cd "$root"
case "${1:-}" in
  up) up ;;
  down) down ;;
  status) running ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
