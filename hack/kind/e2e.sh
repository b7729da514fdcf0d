#!/usr/bin/env bash
# The kind path of the e2e suite, for machines with Docker (CI runs the
# process-based fleet of `make e2e` instead; this path is not run in CI).
#
#   hack/kind/e2e.sh        create (or reuse) the kind fleet, deploy Imperator, run test/e2e against it
#   hack/kind/e2e.sh up     create (or reuse) the kind fleet and deploy Imperator, without the tests
#   hack/kind/e2e.sh down   delete the kind clusters and .fleet-kind/
#
# The fleet: three kind clusters on the docker network "kind" —
# imperator-hub, imperator-spoke-a and imperator-spoke-b (hack/kind/*.yaml).
# The hub (deploy/hub, image built by `make images`) serves gRPC on NodePort
# 30443: the spokes' agents (deploy/spoke) dial the hub node's IP on the kind
# network, the host dials 127.0.0.1:30443 (extraPortMappings). kwok runs in
# each spoke cluster and simulates the GPU nodes of hack/kind/nodes/, the same
# nodes the process-based fleet starts with. Everything generated (kustomize
# overlays with the hub address, CA and join tokens, kubeconfigs, the
# imperatorctl configuration, fleet.json, logs) goes to .fleet-kind/, which
# ignores itself in git. Running it again reuses what exists.
#
# Needs docker (with a running engine), kind, kubectl and Go. Environment:
#   IMAGE_REGISTRY  image repository prefix (default ghcr.io/imperator-federation)
#   IMAGE_TAG       tag of the images built and loaded (default e2e)
#   KIND_NODE_IMAGE kindest/node image for the clusters (default: kind's own)
#   KWOK_VERSION    kwok release installed in the spokes (default v0.8.0, as hack/k8s-bin.sh)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here="$root/hack/kind"
dir="$root/.fleet-kind"

IMAGE_REGISTRY=${IMAGE_REGISTRY:-ghcr.io/imperator-federation}
IMAGE_TAG=${IMAGE_TAG:-e2e}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
# kind puts its nodes on this docker network (kind's own override variable).
KIND_NETWORK=${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}

namespace=imperator-system
spokes=(spoke-a spoke-b)
# The hub Service's NodePort; hack/kind/hub.yaml maps it to the same port on
# 127.0.0.1 of the host.
hub_node_port=30443
hub_host_address=127.0.0.1:$hub_node_port
kwok_base=https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION
# Keeps pods off the kwok nodes (labelled type=kwok), which run no containers.
not_on_kwok='{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"type","operator":"NotIn","values":["kwok"]}]}]}}}}}}}'

log() { printf '==> %s\n' "$*"; }
die() {
  printf 'hack/kind/e2e.sh: %s\n' "$*" >&2
  exit 1
}

kind_name() { printf 'imperator-%s' "$1"; } # hub | spoke-a | spoke-b
context() { printf 'kind-%s' "$(kind_name "$1")"; }
k() { # k CLUSTER kubectl-args...
  local cluster=$1
  shift
  "$kubectl" --context "$(context "$cluster")" "$@"
}

check_tools() {
  command -v docker >/dev/null 2>&1 ||
    die "docker is not installed. The kind path needs Docker (https://docs.docker.com/engine/install/); without it use \`make e2e\`, which needs only Go."
  docker info >/dev/null 2>&1 ||
    die "docker is installed but its engine is not reachable (\`docker info\` fails): start Docker, or use \`make e2e\`."
  command -v kind >/dev/null 2>&1 ||
    die "kind is not installed: \`go install sigs.k8s.io/kind@latest\` or see https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
  command -v go >/dev/null 2>&1 || die "go is not installed (needed to build bin/ and run the suite)."
  if command -v kubectl >/dev/null 2>&1; then
    kubectl=$(command -v kubectl)
  elif [ -x "$("$root/hack/k8s-bin.sh" dir)/kubectl" ]; then
    kubectl="$("$root/hack/k8s-bin.sh" dir)/kubectl"
  else
    die "kubectl is not installed: install it (>= 1.27) or run \`make k8s-bin\`, which builds one into the cache."
  fi
}

cluster_exists() {
  local clusters
  clusters=$(kind get clusters 2>/dev/null)
  grep -qx "$(kind_name "$1")" <<<"$clusters"
}

create_cluster() { # create_cluster hub|spoke-a|spoke-b
  local name=$1
  if cluster_exists "$name"; then
    log "kind cluster $(kind_name "$name") exists, reusing it"
    return
  fi
  log "creating kind cluster $(kind_name "$name")"
  local args=(create cluster --name "$(kind_name "$name")" --config "$here/$name.yaml" --wait 120s)
  if [ -n "$KIND_NODE_IMAGE" ]; then
    args+=(--image "$KIND_NODE_IMAGE")
  fi
  kind "${args[@]}"
}

# node_ip prints the IP of a cluster's control-plane node on the kind network.
node_ip() {
  local ip
  ip=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$KIND_NETWORK\"}}{{.IPAddress}}{{end}}" "$(kind_name "$1")-control-plane")
  [ -n "$ip" ] || die "$(kind_name "$1")-control-plane has no address on the docker network $KIND_NETWORK"
  printf '%s' "$ip"
}

build() {
  log "building bin/ and the images $IMAGE_REGISTRY/{hub,spoke}:$IMAGE_TAG"
  make -C "$root" build
  # The images are built without Docker (docker tarballs for this machine's
  # architecture only); kind loads the tarballs into its nodes.
  local platform
  platform="linux/$(go env GOARCH)"
  make -C "$root" images PLATFORMS="$platform" IMAGE_REGISTRY="$IMAGE_REGISTRY" IMAGE_TAG="$IMAGE_TAG"
  kind load image-archive "$root/bin/images/hub-${platform//\//-}.tar" --name "$(kind_name hub)"
  local spoke
  for spoke in "${spokes[@]}"; do
    kind load image-archive "$root/bin/images/spoke-${platform//\//-}.tar" --name "$(kind_name "$spoke")"
  done
}

# apply renders a kustomization with the pinned kustomize (the same one the
# overlays were checked with) and applies it.
apply() { # apply CLUSTER KUSTOMIZATION_DIR
  "$kustomize" build "$2" | k "$1" apply -f -
}

write_hub_overlay() { # write_hub_overlay HUB_NODE_IP
  local out=$dir/overlays/hub
  mkdir -p "$out"
  cat >"$out/kustomization.yaml" <<EOF
# Generated by hack/kind/e2e.sh: deploy/hub with the image of \`make images\`,
# gRPC on NodePort $hub_node_port and a serving certificate for the hub node's
# IP on the kind network ($1) and 127.0.0.1 (the host's port mapping).
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../../deploy/hub
images:
- name: ghcr.io/imperator-federation/hub
  newName: $IMAGE_REGISTRY/hub
  newTag: $IMAGE_TAG
patches:
- target:
    kind: Service
    name: imperator-hub
  patch: |-
    - op: add
      path: /spec/type
      value: NodePort
    - op: add
      path: /spec/ports/0/nodePort
      value: $hub_node_port
- target:
    kind: Deployment
    name: imperator-hub
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --serving-hosts=$1,localhost,127.0.0.1,imperator-hub.$namespace.svc,imperator-hub.$namespace.svc.cluster.local
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --grace-period=15s
EOF
}

write_spoke_overlay() { # write_spoke_overlay SPOKE HUB_ADDRESS (hub-ca.crt and join-token already in place)
  local out=$dir/overlays/$1
  mkdir -p "$out"
  cat >"$out/kustomization.yaml" <<EOF
# Generated by hack/kind/e2e.sh: deploy/spoke joined to the kind hub at $2 as
# cluster $1, with the image of \`make images\`, kept off the kwok nodes.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../../../deploy/spoke
images:
- name: ghcr.io/imperator-federation/spoke
  newName: $IMAGE_REGISTRY/spoke
  newTag: $IMAGE_TAG
configMapGenerator:
- name: imperator-hub
  namespace: $namespace
  behavior: merge
  literals:
  - address=$2
  - clusterName=$1
secretGenerator:
- name: imperator-hub-join
  namespace: $namespace
  files:
  - ca.crt=hub-ca.crt
  - token=join-token
patches:
- target:
    kind: Deployment
    name: imperator-spoke
  patch: |-
    - op: add
      path: /spec/template/spec/affinity/nodeAffinity
      value:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - key: type
              operator: NotIn
              values: ["kwok"]
EOF
}

hub_cli() { k hub -n "$namespace" exec deploy/imperator-hub -- /hub "$@" --namespace="$namespace"; }

deploy_hub() {
  local ip=$1
  log "deploying the hub (gRPC at $ip:$hub_node_port on the kind network, $hub_host_address from the host)"
  write_hub_overlay "$ip"
  apply hub "$dir/overlays/hub"
  k hub -n "$namespace" rollout status deploy/imperator-hub --timeout=5m
  hub_cli ca >"$dir/hub-ca.crt"
  hub_cli client-cert --name e2e-admin --role admin --hub-address "$hub_host_address" >"$dir/imperatorctl.yaml"
}

install_kwok() { # install_kwok SPOKE
  local spoke=$1
  log "installing kwok $KWOK_VERSION and the GPU nodes of $spoke"
  k "$spoke" apply -f "$kwok_base/kwok.yaml"
  k "$spoke" wait --for=condition=Established --timeout=60s crd/stages.kwok.x-k8s.io
  k "$spoke" apply -f "$kwok_base/stage-fast.yaml"
  # Nothing that needs a real kubelet may land on a kwok node: kwok itself and
  # the DaemonSets (kindnet, kube-proxy) stay on the kind node.
  k "$spoke" -n kube-system patch deployment kwok-controller --type=strategic -p "$not_on_kwok"
  local ds
  for ds in $(k "$spoke" -n kube-system get daemonsets -o name); do
    k "$spoke" -n kube-system patch "$ds" --type=strategic -p "$not_on_kwok"
  done
  k "$spoke" -n kube-system rollout status deployment/kwok-controller --timeout=3m
  k "$spoke" apply -f "$here/nodes/$spoke.yaml"
  k "$spoke" wait node -l type=kwok --for=condition=Ready --timeout=2m
}

deploy_spoke() { # deploy_spoke SPOKE HUB_ADDRESS
  local spoke=$1 out=$dir/overlays/$1
  log "deploying the agent of $spoke (hub $2)"
  mkdir -p "$out"
  cp "$dir/hub-ca.crt" "$out/hub-ca.crt"
  # A join token is used once; a spoke that joined keeps its client
  # certificate in Secret imperator-hub-credentials, so a rerun keeps the old
  # token and the agent's pods are not rolled for nothing.
  if [ -s "$out/join-token" ] && k "$spoke" -n "$namespace" get secret imperator-hub-credentials >/dev/null 2>&1; then
    log "$spoke has joined before, keeping its join token"
  else
    hub_cli token create --cluster "$spoke" --ttl 1h >"$out/join-token"
  fi
  write_spoke_overlay "$spoke" "$2"
  apply "$spoke" "$out"
  k "$spoke" -n "$namespace" rollout status deploy/imperator-spoke --timeout=5m
}

wait_available() {
  log "waiting for imperatorctl clusters to list ${spokes[*]} Available"
  local spoke out
  for _ in $(seq 1 90); do
    out=$(IMPERATOR_CONFIG="$dir/imperatorctl.yaml" "$root/bin/imperatorctl" clusters 2>&1 || true)
    local missing=0
    for spoke in "${spokes[@]}"; do
      awk -v n="$spoke" '$1 == n && $2 == "Available" { found = 1 } END { exit !found }' <<<"$out" || missing=1
    done
    if [ "$missing" = 0 ]; then
      printf '%s\n' "$out"
      return
    fi
    sleep 2
  done
  printf '%s\n' "$out" >&2
  die "the spokes did not become Available within 3 minutes; logs: kubectl --context $(context spoke-a) -n $namespace logs deploy/imperator-spoke"
}

# write_fleet writes .fleet-kind/fleet.json (test/util/fleet.Description)
# with a kubeconfig per cluster from kind.
write_fleet() {
  local name entries=() server
  for name in hub "${spokes[@]}"; do
    mkdir -p "$dir/$name"
    kind get kubeconfig --name "$(kind_name "$name")" >"$dir/$name/kubeconfig"
    server=$("$kubectl" --kubeconfig "$dir/$name/kubeconfig" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
    entries+=("{\"name\": \"$name\", \"kubeconfig\": \"$dir/$name/kubeconfig\", \"apiServer\": \"$server\"}")
  done
  local spoke_list
  spoke_list=$(printf ',\n    %s' "${entries[@]:1}")
  cat >"$dir/fleet.json" <<EOF
{
  "hub": ${entries[0]},
  "spokes": [${spoke_list#,}
  ],
  "hubAddress": "$hub_host_address",
  "hubCAFile": "$dir/hub-ca.crt",
  "imperatorctlConfig": "$dir/imperatorctl.yaml"
}
EOF
}

# collect_logs writes the Imperator and kwok logs of every cluster next to its
# kubeconfig, where the suite points at on failure.
collect_logs() {
  local name
  k hub -n "$namespace" logs deploy/imperator-hub --tail=-1 >"$dir/hub/imperator-hub.log" 2>&1 || true
  for name in "${spokes[@]}"; do
    k "$name" -n "$namespace" logs -l app.kubernetes.io/name=imperator-spoke --tail=-1 --prefix >"$dir/$name/imperator-spoke.log" 2>&1 || true
    k "$name" -n kube-system logs deploy/kwok-controller --tail=-1 >"$dir/$name/kwok.log" 2>&1 || true
  done
}

up() {
  check_tools
  kustomize=$("$root/hack/tools.sh" path kustomize)
  mkdir -p "$dir"
  printf '*\n' >"$dir/.gitignore"
  local name
  for name in hub "${spokes[@]}"; do
    create_cluster "$name"
  done
  build
  local ip
  ip=$(node_ip hub)
  deploy_hub "$ip"
  for name in "${spokes[@]}"; do
    install_kwok "$name"
    deploy_spoke "$name" "$ip:$hub_node_port"
  done
  write_fleet
  wait_available
  cat <<MSG
The kind fleet is up (not the CI fleet: CI runs \`make e2e\` on local processes).
  description:  $dir/fleet.json
  spoke-a:      kubectl --context $(context spoke-a) get nodes
  hub cluster:  kubectl --context $(context hub) -n $namespace get pods
  imperatorctl: export IMPERATOR_CONFIG=$dir/imperatorctl.yaml; bin/imperatorctl clusters
  delete:       make e2e-kind-down
MSG
}

# reset_journeys deletes what the journeys of an earlier run left on a
# reused fleet (they apply these samples and keep them), so that every run
# starts from the fleet `up` builds.
reset_journeys() {
  local samples=$root/deploy/spoke/samples
  k spoke-a delete --ignore-not-found --wait=true --timeout=3m -f "$samples/guest-deployment.yaml" -f "$samples/general-machine.yaml"
  k spoke-b delete --ignore-not-found --wait=true --timeout=3m -f "$samples/hopper-machine.yaml"
}

e2e() {
  up
  reset_journeys
  log "running test/e2e against $dir/fleet.json (journeys 6 and 7 stop processes and are skipped on an attached fleet)"
  local rc=0
  (cd "$root" && E2E_FLEET="$dir/fleet.json" E2E_BIN_DIR="$root/bin" go test ./test/e2e/ -count=1 -timeout 30m -v) || rc=$?
  collect_logs
  if [ "$rc" != 0 ]; then
    echo "e2e failed; the hub, agent and kwok logs are in $dir/*/*.log" >&2
  fi
  return "$rc"
}

down() {
  local name
  if command -v kind >/dev/null 2>&1; then
    for name in hub "${spokes[@]}"; do
      if cluster_exists "$name"; then
        kind delete cluster --name "$(kind_name "$name")"
      fi
    done
  else
    log "kind is not installed: there are no kind clusters to delete"
  fi
  rm -rf "$dir"
  log "the kind fleet is deleted"
}

case "${1:-e2e}" in
e2e) e2e ;;
up) up ;;
down) down ;;
*) die "usage: hack/kind/e2e.sh [e2e|up|down]" ;;
esac
