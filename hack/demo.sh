#!/usr/bin/env bash
# The main job of `make demo`, run after `make up`: applies the contract's example
# general-machine to spoke-a and an H100 machine to spoke-b, starts a team's
# guest Deployment on spoke-a, and shows through imperatorctl what the hub
# now knows: the clusters, their usage, where two more compute-xlarge units
# fit in one cluster, and a fleet hold booking two of them ahead of a job.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
dir="$root/.fleet"
kubectl="$(hack/k8s-bin.sh dir)/kubectl"
export IMPERATOR_CONFIG="$dir/imperatorctl.yaml"
ctl="$root/bin/imperatorctl"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
on() { local cluster=$1; shift; "$kubectl" --kubeconfig "$dir/$cluster/kubeconfig" "$@"; }

# until SECONDS CMD...: retry CMD every half second until it succeeds.
until_ok() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "demo: timed out waiting for: $*" >&2
      "$@" || true
      return 1
    fi
    sleep 0.5
  done
}

step "Machines: the contract's general-machine (docs/contract.md) on spoke-a, an H100 machine on spoke-b"
on spoke-a apply -f deploy/spoke/samples/general-machine.yaml
on spoke-b apply -f deploy/spoke/samples/hopper-machine.yaml
until_ok 60 on spoke-a wait --for=condition=Ready machine/general-machine --timeout=1s
until_ok 60 on spoke-b wait --for=condition=Ready machine/hopper-machine --timeout=1s
on spoke-a get machines,machinenodepools
on spoke-a get pods -n imperator-system -o wide

step "A team's guest Deployment on spoke-a: one compute-xlarge, three labels"
on spoke-a apply -f deploy/spoke/samples/guest-deployment.yaml
until_ok 60 on spoke-a wait --for=condition=Available deployment/guest-deployment -n team-a --timeout=1s
on spoke-a get pods -n team-a -o wide
# The hub shows the guest once the spoke has reported it.
used() { "$ctl" usage --cluster spoke-a -o json | grep -q '"used": *1'; }
until_ok 30 used

step "imperatorctl version"
"$ctl" version
step "imperatorctl clusters"
"$ctl" clusters
step "imperatorctl usage"
"$ctl" usage
step "imperatorctl capacity compute-xlarge --count 2 --same-cluster"
"$ctl" capacity compute-xlarge --count 2 --same-cluster
step "imperatorctl hold create train-demo compute-xlarge --count 2 --same-cluster --ttl 15m (book the units ahead of a job)"
"$ctl" hold create train-demo compute-xlarge --count 2 --same-cluster --ttl 15m
step "imperatorctl usage (HELD: the booked units, out of FREE for everyone else)"
"$ctl" usage
step "imperatorctl hold release train-demo"
"$ctl" hold release train-demo
step "imperatorctl token list (the tokens the spokes joined with; hub token list shows the same)"
"$ctl" token list

# name and metricsURL of the hub and each spoke, from .fleet/fleet.json.
metrics_urls() {
  grep -o '"\(name\|metricsURL\)": *"[^"]*"' "$dir/fleet.json" | sed 's/.*: *"\(.*\)"$/\1/' | paste -d' ' - -
}
step "Metrics endpoints (Prometheus text format; alerts and dashboard: deploy/monitoring, docs/observe.md)"
metrics_urls | while read -r name url; do printf '  %-8s %s\n' "$name" "$url"; done
if command -v curl >/dev/null; then
  hub_metrics=$(metrics_urls | awk 'NR==1 {print $2}')
  curl -fsS "$hub_metrics" | grep -E '^imperator_hub_cluster_(state|units)\{' | grep -E 'state="(Available|used|free)"' || true
fi

cat <<MSG

The fleet keeps running. Explore it:
  export IMPERATOR_CONFIG=$dir/imperatorctl.yaml
  bin/imperatorctl machines -o wide
  bin/imperatorctl usage --watch
  source <(bin/imperatorctl completion bash)     # or zsh, fish; bin/imperatorctl --help lists every command
  bin/imperatorctl capacity --gpu 8 --gpu-product NVIDIA-H100-80GB-HBM3 --count 1
  $kubectl --kubeconfig $dir/spoke-a/kubeconfig scale deployment/guest-deployment -n team-a --replicas=3
  $kubectl --kubeconfig $dir/hub/kubeconfig get managedclusters,clusterinventories,addonplacementscores -A
  curl -s $(metrics_urls | awk 'NR==1 {print $2}') | grep ^imperator_hub_     # the hub's metrics
Stop it with: make down
MSG
