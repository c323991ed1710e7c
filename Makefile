# gpupool build, test and demo entry points. `make help` lists them.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO ?= go
comma := ,
TOOLS_MOD := hack/tools/go.mod
TOOLS_BIN := $(CURDIR)/hack/tools/bin
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen
GOLANGCI_LINT := $(TOOLS_BIN)/golangci-lint
CRD_REF_DOCS := $(TOOLS_BIN)/crd-ref-docs

# The control plane is built from Go modules into a cache outside the checkout, so fresh clones
# on one machine share it. KUBEBUILDER_ASSETS points envtest at it.
CONTROL_PLANE_DIR := $(shell hack/control-plane.sh --print-dir)
export KUBEBUILDER_ASSETS := $(CONTROL_PLANE_DIR)
# What the tests need: envtest runs etcd and kube-apiserver, test/localcluster the whole
# control plane and kwok (which also gets its kwok-stages.yaml); test/helm runs docs/install.md's
# commands with kubectl (and the demo needs it).
TEST_COMPONENTS := etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl

GOTEST_FLAGS ?= -count=1 -timeout=30m

# go-nvml's header marks NVML calls deprecated that its own cgo wrappers call, so compiling it (for
# the agent and gpusim) printed 29 -Wdeprecated-declarations warnings, about 150 lines, from C
# code that is not ours. Only that warning is silenced.
CGO_CFLAGS ?= -O2 -g
export CGO_CFLAGS += -Wno-deprecated-declarations

# `make images`: OCI layouts, binaries, TAG and DIGESTS go to IMAGES_DIR (see hack/images).
# AGENT_BASE names an OCI layout whose linux/<arch> image replaces the agent's Debian base.
IMAGES_DIR ?= $(CURDIR)/_output/images
IMAGE_ARCHS ?= amd64,arm64
AGENT_BASE ?=

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

DEMO_ARGS = --bin-dir=$(CONTROL_PLANE_DIR) --manager=$(TOOLS_BIN)/manager --gpusim=$(TOOLS_BIN)/gpusim --plugin=$(TOOLS_BIN)/gpupoolctl

##@ Everyday

.PHONY: demo
demo: build control-plane ## Run gpupool end to end on a simulated GPU cluster, then clean up (under a minute once built).
	$(GO) run ./hack/demo $(DEMO_ARGS) $(DEMO_FLAGS)

.PHONY: demo-up
demo-up: build control-plane ## Like demo, but keep the cluster up for exploration until Ctrl-C or `make demo-down`.
	$(GO) run ./hack/demo $(DEMO_ARGS) --keep $(DEMO_FLAGS)

.PHONY: demo-down
demo-down: ## Stop a cluster left up by `make demo-up` (from another terminal).
	@pid=$$(cat $${TMPDIR:-/tmp}/gpupool-demo.pid 2>/dev/null) && kill -TERM $$pid && echo "stopping the demo (pid $$pid)" \
		|| echo "no demo is running"

.PHONY: test
test: generate manifests test-assets ## Run unit, envtest and local-cluster tests (builds the control plane once).
	$(GO) test $(GOTEST_FLAGS) ./...
	hack/images/prereqs.sh --optional $$($(GO) env GOHOSTARCH) && cd hack/images && $(GO) test $(GOTEST_FLAGS) ./...
	cd test/helm && $(GO) test $(GOTEST_FLAGS) ./...
	cd test/monitoring && $(GO) test $(GOTEST_FLAGS) ./...

##@ Development

.PHONY: build
build: ## Build every binary into bin/ under the tools folder.
	$(GO) build -o $(TOOLS_BIN)/ ./cmd/...

.PHONY: images
images: ## Build the manager and agent OCI images (linux/amd64, linux/arm64) into _output/images/.
	AGENT_BASE=$(AGENT_BASE) hack/images/prereqs.sh $(subst $(comma), ,$(IMAGE_ARCHS))
	$(GO) -C hack/images run . build -root=$(CURDIR) -out=$(abspath $(IMAGES_DIR)) -arch=$(IMAGE_ARCHS) \
		$(if $(AGENT_BASE),-agent-base=$(abspath $(AGENT_BASE))) $(IMAGES_FLAGS)

.PHONY: run
run: manifests ## Run the manager against the cluster in $KUBECONFIG.
	$(GO) run ./cmd/manager --metrics-bind-address=:8080 --metrics-secure=false --leader-elect=false

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: dashboard
dashboard: ## Regenerate the Grafana dashboard JSON (config/grafana and the chart's copy) from test/monitoring.
	cd test/monitoring && $(GO) generate ./...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from markers (and copy them into the Helm chart); copy the chart's alert rules to config/prometheus.
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	rm -f charts/gpupool/crds/*.yaml && cp config/crd/bases/*.yaml charts/gpupool/crds/ && cp config/rbac/role.yaml charts/gpupool/files/role.yaml
	cp charts/gpupool/files/prometheus-rules.yaml config/prometheus/alerts.yaml

.PHONY: reference
reference: $(CRD_REF_DOCS) ## Regenerate docs/reference (API fields, conditions and Events, metrics, CLI) from the code.
	CRD_REF_DOCS=$(CRD_REF_DOCS) GO=$(GO) hack/reference/generate.sh

.PHONY: verify
verify: generate manifests $(CRD_REF_DOCS) ## Regenerate everything and fail on any difference from git (docs/reference included).
	$(GO) mod tidy
	cd hack/tools && $(GO) mod tidy
	cd test/helm && $(GO) mod tidy
	cd test/monitoring && $(GO) mod tidy
	cd hack/images && $(GO) mod tidy
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	cd hack/images && $(GO) vet ./...
	cd test/helm && $(GO) vet ./...
	cd test/monitoring && $(GO) vet ./...
	@git diff --exit-code || { echo "make verify: the files above differ after regeneration; run make generate manifests, go mod tidy and commit" >&2; exit 1; }
	CRD_REF_DOCS=$(CRD_REF_DOCS) GO=$(GO) hack/reference/generate.sh --check

.PHONY: lint
lint: $(GOLANGCI_LINT) ## go vet and golangci-lint, over the product and the image, Helm and monitoring modules; proves the import rules bite and keeps NVIDIA's names in internal/nvidia.
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	GOLANGCI_LINT=$(GOLANGCI_LINT) hack/lint-rules.sh
	cd hack/images && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...
	cd test/helm && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...
	cd test/monitoring && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...

.PHONY: control-plane
control-plane: ## Build etcd, kube-apiserver, scheduler, controller-manager, kubectl and kwok into the cache.
	hack/control-plane.sh

.PHONY: test-assets
test-assets: ## Build only the control-plane binaries the tests need.
	hack/control-plane.sh $(TEST_COMPONENTS)

$(CONTROLLER_GEN): $(TOOLS_MOD)
	$(GO) build -modfile=$(TOOLS_MOD) -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): $(TOOLS_MOD)
	$(GO) build -modfile=$(TOOLS_MOD) -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(CRD_REF_DOCS): $(TOOLS_MOD)
	$(GO) build -modfile=$(TOOLS_MOD) -o $@ github.com/elastic/crd-ref-docs

##@ Benchmarks

.PHONY: bench-heartbeat
bench-heartbeat: test-assets ## Measure the agents' heartbeat (status rewrites vs Lease) at 1,000 nodes against a real API server; writes docs/benchmarks/heartbeat.md.
	$(GO) run ./test/bench/heartbeat/cmd/hbbench -write docs/benchmarks/heartbeat.md $(BENCH_FLAGS)

.PHONY: bench-scale
bench-scale: test-assets ## Measure the manager at 1,000 and 5,000 nodes against a bare-cache baseline on a real API server; writes docs/benchmarks/scale.md.
	$(GO) run ./test/bench/scale/cmd/scalebench -write docs/benchmarks/scale.md $(BENCH_FLAGS)

.PHONY: bench-fragmentation
bench-fragmentation: ## Replay the Alibaba GPU trace (../shared) against gpupool and baselines; writes docs/benchmarks/fragmentation.md and docs/benchmarks/fragmentation/*.svg (BENCH_FLAGS='-lists all' for every pod list).
	$(GO) run ./test/bench/fragmentation/cmd/fragbench -write docs/benchmarks/fragmentation.md $(BENCH_FLAGS)
