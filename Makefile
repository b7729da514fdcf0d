# Imperator Federation. `make help` lists the targets.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

GO        ?= go
GOFLAGS   ?=
# HOSTED=1: `make up` and `make e2e` serve spoke-b with a hosted agent in the
# hub cluster (spoke --clusters-from=kubeconfig-secrets) instead of one inside.
HOSTED    ?=
BIN       := $(CURDIR)/bin
TOOLS_DIR  = $(shell hack/tools.sh dir)
K8S_BIN    = $(shell hack/k8s-bin.sh dir)
# Packages with unit tests (pure logic, run with -race) and the suites that
# start real control planes (envtest or the harness): every package in an
# `integration` directory, test/integration/ for cross-cutting ones and
# <package>/integration/ beside the internal package a suite exercises.
UNIT_PKGS        = $(shell $(GO) list ./... | grep -v -e /integration -e /test/e2e -e /test/fault -e /test/util/realnode -e /test/install)
INTEGRATION_PKGS = $(shell $(GO) list ./... | grep /integration)

# The version and commit every binary reports (imperatorctl version), from
# git; GOFLAGS=-buildvcs=false or a source tarball would leave Go none.
VERSION         ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT          ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_LDFLAGS  = -X github.com/imperator-federation/imperator/internal/version.version=$(VERSION) \
                   -X github.com/imperator-federation/imperator/internal/version.commit=$(COMMIT)

export IMPERATOR_K8S_BIN = $(K8S_BIN)
export KUBEBUILDER_ASSETS = $(K8S_BIN)

.PHONY: help
help: ## List the targets.
	@awk -F':.*## ' '/^[a-z0-9-]+:.*## /{printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Every tool is found through hack/tools.sh, which builds what the cache lacks:
# suites call it through test/util/repo.Tool, so no target needs `make tools`
# first.
.PHONY: tools
tools: ## Build the pinned code generators and test tools into the cache.
	@hack/tools.sh >/dev/null

.PHONY: k8s-bin
k8s-bin: ## Build kube-apiserver, controller-manager, scheduler, kubectl, kubelet, kube-proxy, etcd and kwok into the cache.
	@hack/k8s-bin.sh

.PHONY: generate
generate: tools ## Generate deepcopy, CRDs, RBAC, webhook manifests and protobuf code.
	@TOOLS_DIR=$(TOOLS_DIR) hack/generate.sh
	@deploy/charts/sync.sh

.PHONY: fmt-check
fmt-check: ## Fail when gofmt would change a tracked Go file (seconds; CI runs it first).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

.PHONY: lint
lint: ## Run golangci-lint (pinned, built into the tool cache) with .golangci.yml; CI runs it after fmt-check.
	@lint=$$(hack/tools.sh path golangci-lint) && "$$lint" run ./...

.PHONY: verify
verify: fmt-check generate ## Fail when `make generate` or gofmt would change a tracked file.
	@git diff --exit-code --stat -- . || { echo "make generate left a diff: run it and commit the result"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all)" || { git status --porcelain; echo "make generate created untracked files"; exit 1; }

# The binaries: hub, spoke (the agent) and imperatorctl.
BINARIES = $(foreach d,hub spoke cmd/imperatorctl dispatcher,$(if $(wildcard $(d)/main.go),./$(d)))

.PHONY: build
build: ## Build bin/hub, bin/spoke, bin/imperatorctl and bin/dispatcher.
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ $(BINARIES)

# Container images of the binaries, built without Docker (hack/images.sh):
# OCI layouts and docker tarballs under bin/images, reproducible, tested.
PLATFORMS      ?= linux/amd64 linux/arm64
IMAGE_REGISTRY ?= ghcr.io/imperator-federation
IMAGE_TAG      ?=

.PHONY: images
images: ## Build and test the hub and spoke images without Docker: bin/images (PLATFORMS, IMAGE_REGISTRY, IMAGE_TAG).
	PLATFORMS="$(PLATFORMS)" IMAGE_REGISTRY="$(IMAGE_REGISTRY)" IMAGE_TAG="$(IMAGE_TAG)" hack/images.sh

# A release (hack/release.sh), under bin/release/$(VERSION): the images as
# `make images` builds them tagged VERSION, the charts packaged with
# version/appVersion, imperatorctl for linux/darwin x amd64/arm64, the
# CHANGELOG entry and SHA256SUMS. `make push` publishes it with
# go-containerregistry (no Docker): REGISTRY/hub:VERSION, REGISTRY/spoke:VERSION
# and oci://REGISTRY/charts/imperator-{hub,spoke}; PLAIN_HTTP=1 for an HTTP registry.
REGISTRY   ?=
PLAIN_HTTP ?=

.PHONY: release
release: ## Build release VERSION=vX.Y.Z[-pre] into bin/release/VERSION: images, charts, imperatorctl binaries, CHANGELOG entry, SHA256SUMS (PLATFORMS, IMAGE_REGISTRY).
	PLATFORMS="$(PLATFORMS)" IMAGE_REGISTRY="$(IMAGE_REGISTRY)" hack/release.sh "$(VERSION)"

.PHONY: push
push: ## Push release VERSION's images and charts to REGISTRY=host/path with go-containerregistry (PLAIN_HTTP=1: no TLS).
	REGISTRY="$(REGISTRY)" PLAIN_HTTP="$(PLAIN_HTTP)" hack/release.sh push "$(VERSION)"

.PHONY: bench
bench: k8s-bin ## Every benchmark, then one table: metric, figure, goal, pass/fail (bench/results.json; BENCH_FULL=1 adds 10,000 spokes).
	$(GO) run ./hack/bench

.PHONY: bench-smoke
bench-smoke: k8s-bin ## Every benchmark once at its smallest size, so that none rots (CI).
	$(GO) run ./hack/bench -smoke

.PHONY: e2e
e2e: k8s-bin build ## The multi-cluster journeys against a fleet started for the run (or E2E_FLEET=.fleet/fleet.json); HOSTED=1: spoke-b served by a hosted agent; HUB_REPLICAS=2: two hub replicas, spoke-b on the second; E2E_FOCUS: only the journeys it matches (ginkgo focus).
	@hack/tools.sh path kueue >/dev/null # journeys 11 and 12's Kueue manager: built once per version into the tool cache, not inside a spec's timeout
	E2E_HOSTED=$(HOSTED) E2E_HUB_REPLICAS=$(HUB_REPLICAS) E2E_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 30m -v ./test/e2e/ $(if $(E2E_FOCUS),-ginkgo.focus '$(E2E_FOCUS)')

.PHONY: e2e-hosted
e2e-hosted: ## The same journeys with spoke-b served by a hosted agent in the hub cluster (make e2e HOSTED=1).
	@$(MAKE) --no-print-directory e2e HOSTED=1

.PHONY: fault
fault: k8s-bin build ## The fault suite: faults injected for real into a local fleet; prints each fault's time to detect and to recover.
	E2E_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 30m -v ./test/fault/ 2>&1 | tee $(BIN)/fault.log

.PHONY: soak
SOAK_SECONDS ?= 300
soak: k8s-bin build ## The seeded soak: random work and overlapping faults on a fleet of its own, invariants checked throughout (SOAK_SECONDS=300, SOAK_SEED replays a run, SOAK_FAULTS, SOAK_SHRINK=1: docs/soak.md).
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_SEED=$(SOAK_SEED) SOAK_SHRINK=$(SOAK_SHRINK) $(if $(SOAK_FAULTS),SOAK_FAULTS='$(SOAK_FAULTS)') E2E_BIN_DIR=$(BIN) \
		$(GO) test -count=1 -v -run '^TestSoak$$' -timeout $(if $(filter 1,$(SOAK_SHRINK)),0,$$(( $(SOAK_SECONDS) + 1200 ))s) ./test/soak/ 2>&1 | tee $(BIN)/soak.log

.PHONY: realnode
realnode: k8s-bin ## One real node (containerd, runc, bridge CNI, kubelet) runs a pod and leaves nothing on the host (root; installs the Debian packages it needs).
	hack/realnode/install-deps.sh
	$(GO) test -count=1 -timeout 10m -v ./test/util/realnode/

# The install journey (test/install): images built twice (the second, a
# rebuilt tag for helm upgrade) for this machine's platform, imported into a
# real node's containerd, and the charts installed, upgraded and uninstalled
# with the README's commands. Root; installs the Debian packages it needs.
INSTALL_IMAGES = $(BIN)/install-images
INSTALL_ARCH   = $(shell $(GO) env GOARCH)

.PHONY: e2e-install
e2e-install: k8s-bin build ## Install journey: our images as pods on a real node from the Helm charts; upgrade to a rebuilt tag, uninstall (root).
	hack/realnode/install-deps.sh
	IMAGES_OUT=$(INSTALL_IMAGES)/1 PLATFORMS=linux/$(INSTALL_ARCH) IMAGE_TAG=$(VERSION)-install-1 hack/images.sh
	IMAGES_OUT=$(INSTALL_IMAGES)/2 PLATFORMS=linux/$(INSTALL_ARCH) IMAGE_TAG=$(VERSION)-install-2 hack/images.sh
	INSTALL_IMAGES=$(INSTALL_IMAGES)/1 INSTALL_UPGRADE_IMAGES=$(INSTALL_IMAGES)/2 E2E_BIN_DIR=$(BIN) \
	  $(GO) test -count=1 -timeout 20m -v ./test/install/

.PHONY: e2e-kind
e2e-kind: ## The e2e journeys on kind clusters with the built images (needs Docker and kind; not run in CI).
	@hack/kind/e2e.sh

.PHONY: e2e-kind-down
e2e-kind-down: ## Delete the kind clusters of e2e-kind.
	@hack/kind/e2e.sh down

.PHONY: up
up: k8s-bin build ## Start the local fleet in the background: hub + 2 spoke clusters with GPU nodes, the hub and an agent per spoke (HOSTED=1: spoke-b's agent is hosted in the hub cluster; HUB_REPLICAS=2: two hub replicas, the spokes spread over them).
	$(GO) build -o $(BIN)/fleet ./hack/fleet
	@HOSTED=$(HOSTED) HUB_REPLICAS=$(HUB_REPLICAS) hack/fleet.sh up

.PHONY: demo
demo: up ## The main job: a local hub + 2 spokes with sample GPU Machines and a guest workload, queried with imperatorctl.
	@hack/demo.sh

.PHONY: down
down: ## Stop the local fleet and every process it started.
	@hack/fleet.sh down

.PHONY: vet
vet: ## Run go vet on every package.
	$(GO) vet ./...

.PHONY: test
test: k8s-bin vet ## Vet, unit tests with -race, integration suites against real control planes, the alerting rules and dashboard.
	$(GO) test -race -count=1 -skip '^TestSoak$$' $(UNIT_PKGS) # the soak is make soak's, also with SOAK_SECONDS exported
	$(GO) test -count=1 -timeout 30m $(INTEGRATION_PKGS)
	cd deploy/monitoring && $(GO) test -count=1 ./... # alerts and dashboard: a module of its own (prometheus/prometheus)

.PHONY: fresh-cache-check
fresh-cache-check: ## Run TARGETS (default: test) with an empty tool cache, as on a new machine (control plane linked in).
	@hack/fresh-cache-check.sh $(or $(TARGETS),test)

.PHONY: clean
clean: ## Remove build output (the tool and binary caches stay).
	rm -rf $(BIN) .fleet
