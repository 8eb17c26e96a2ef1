# kwok-pools — see README.md. `make run` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Rust builds are shared between clones (and survive a fresh clone in CI).
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kwok-pools/target
# The Go toolchain on the machine is used as is; never download another one implicitly.
export GOTOOLCHAIN ?= local
# The control plane binaries `kwok-pools cluster` runs (never looked up in the current directory).
export KWOK_POOLS_BIN_DIR ?= $(CURDIR)/bin

DEBUG_BIN   := $(CARGO_TARGET_DIR)/debug/kwok-pools
RELEASE_BIN := $(CARGO_TARGET_DIR)/release/kwok-pools
KUBECTL     := $(CURDIR)/bin/kubectl

# `make run`: the developer's cluster.
RUN_CLUSTER ?= kwok-pools
# `make test`: a throw-away cluster with its own state home, deleted after the run. Its
# controller manager declares nodes NotReady after 20 s without a lease renewal (default 50 s)
# so the heartbeat tests take seconds, not minutes.
E2E_HOME    ?= $(CURDIR)/.state/e2e
E2E_CLUSTER ?= e2e
E2E_GRACE   ?= 20
E2E_THREADS ?= 4

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl into bin/ (cached).
	./hack/build-controlplane.sh

.PHONY: build
build: ## Build the operator and every test (debug); old builds in the shared target directory are pruned first.
	./hack/prune-target.sh
	cargo build --all-targets

.PHONY: release
release: ## Build the optimised operator.
	cargo build --release --bin kwok-pools

.PHONY: crds
crds: ## Regenerate crds/ (CRDs and editor JSON schemas) from the Rust types.
	cargo run --quiet --bin kwok-pools -- crd > crds/kwok-pools.yaml
	cp crds/kwok-pools.yaml charts/kwok-pools/crds/kwok-pools.yaml
	@echo "wrote crds/kwok-pools.yaml (and the Helm chart's copy)"
	cargo run --quiet --bin kwok-pools -- schema --out crds/schemas

.PHONY: manifests
manifests: ## Regenerate the install's RBAC, webhook configurations and policies (config/, the chart) from the registered kinds.
	cargo run --quiet --bin kwok-pools -- generate --root .

# `make dist IMAGE=registry.example/kwok-pools:tag`: the one-file install for your image.
IMAGE ?= kwok-pools:$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
.PHONY: dist
dist: ## Write dist/install.yaml (CRDs and the whole operator) for IMAGE (default: the Dockerfile's tag).
	mkdir -p dist
	cargo run --quiet --bin kwok-pools -- dist --image $(IMAGE) > dist/install.yaml
	@echo "wrote dist/install.yaml for $(IMAGE): kubectl apply --server-side -f dist/install.yaml"

INSTALLED_BIN := $(HOME)/.cache/kwok-pools/bin
.PHONY: install
install: controlplane metrics-server ## Put kwok-pools on PATH (~/.cargo/bin) with its control plane (~/.cache/kwok-pools/bin).
	cargo install --locked --path . --bin kwok-pools
	mkdir -p $(INSTALLED_BIN)
	for b in bin/*; do ln -sfn "$$(readlink -f "$$b")" "$(INSTALLED_BIN)/$$(basename "$$b")"; done
	@echo "kwok-pools installed; \`kwok-pools cluster create\` runs the control plane in $(INSTALLED_BIN) (kubectl is there too)"
	@command -v kwok-pools >/dev/null || echo "add ~/.cargo/bin to PATH: export PATH=\"$$HOME/.cargo/bin:\$$PATH\""

# check-jsonschema (PyPI) validates the samples against the editor schemas.
VENV := $(HOME)/.cache/kwok-pools/venv
CHECK_JSONSCHEMA_VERSION := 0.39.0
.PHONY: schema-tools
schema-tools: ## Install check-jsonschema into a cached virtualenv.
	@if ! $(VENV)/bin/check-jsonschema --version 2>/dev/null | grep -q $(CHECK_JSONSCHEMA_VERSION); then \
	  echo "installing check-jsonschema $(CHECK_JSONSCHEMA_VERSION) into $(VENV)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/pip install --quiet check-jsonschema==$(CHECK_JSONSCHEMA_VERSION); \
	fi

.PHONY: fmt
fmt: ## rustfmt every Rust file (cargo fmt misses the kind directories the `kinds!` macro declares).
	./hack/fmt.sh

.PHONY: lint
lint: ## rustfmt --check on every Rust file and clippy -D warnings (with the test-only kind, so every target is linted).
	./hack/fmt.sh --check
	cargo clippy --workspace --all-targets --features test-kinds -- -D warnings

.PHONY: kubeconform
kubeconform: ## Build kubeconform from its Go module into a cache (bin/kubeconform; it validates the samples).
	./hack/install-kubeconform.sh

# Every test file that needs no cluster: all of tests/*.rs but the end-to-end ones (e2e_*) and
# the test-only kind's proof (it needs a cluster and a feature; `make e2e` runs it).
UNIT_TESTS := $(filter-out e2e_% kind_proof,$(basename $(notdir $(wildcard tests/*.rs))))

.PHONY: unit
unit: schema-tools kubeconform ## Unit tests only (no cluster): the crate's and every non-e2e test file.
	cargo test --lib --bins $(addprefix --test ,$(UNIT_TESTS))

# `make chaos`: the fault rounds of tests/e2e_chaos.rs at full size (`make test` runs them small).
CHAOS_NODES ?= 2000
CHAOS_ROUNDS ?= 3
.PHONY: chaos
chaos: controlplane build ## SIGKILL the operator mid-scale/roll, a second operator, kube-apiserver and etcd outages, on a cluster of its own.
	CHAOS_NODES=$(CHAOS_NODES) CHAOS_ROUNDS=$(CHAOS_ROUNDS) E2E_LOG_DIR=$(CURDIR)/.state/chaos-logs \
	  cargo test --test e2e_chaos -- --nocapture

# `make fuzz`: every fuzz and property target in tests/fuzz.rs for FUZZ_SECONDS each (3 s in `make unit`).
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz: ## Fuzz the admission handler, manifests, quantities/CIDRs, planner and IPAM for FUZZ_SECONDS each.
	FUZZ_SECONDS=$(FUZZ_SECONDS) cargo test --release --test fuzz -- --nocapture --test-threads 1

.PHONY: helm
helm: ## Build helm from its Go module into a cache (bin/helm).
	./hack/install-helm.sh

.PHONY: prometheus
prometheus: ## Link a Prometheus at bin/prometheus: the machine's, else built from its Go module (cached).
	./hack/install-prometheus.sh

.PHONY: metrics-server
metrics-server: ## Build the real metrics-server v0.8.0 from its Go module into a cache (bin/metrics-server).
	./hack/install-metrics-server.sh

.PHONY: chart
chart: helm ## helm lint and helm template of charts/kwok-pools (the e2e tests also dry-run it on the API server).
	bin/helm lint --strict charts/kwok-pools
	bin/helm template kwok-pools charts/kwok-pools --namespace kwok-pools >/dev/null
	bin/helm template other charts/kwok-pools --namespace other --set instance=other,replicas=3,webhook.certSource=secret,webhook.secretName=mine,leaderElection.enabled=false,simulator.shard.enabled=false >/dev/null
	@echo "chart ok"

.PHONY: test
test: controlplane build unit chart e2e ## Unit and end-to-end tests; builds what it needs first.

# The scale tests (thousands of nodes on a cluster of their own) run the optimised build, as
# users run it, after the shared cluster is gone: on 2 cores, three debug simulators renewing
# 6,000 node leases take a core the API server needs (6,000 nodes Ready in 500 s instead of 150).
E2E_SCALE_TESTS := e2e_shards e2e_devices_scale
E2E_TESTS := $(filter-out $(E2E_SCALE_TESTS),$(basename $(notdir $(wildcard tests/e2e_*.rs))))

.PHONY: e2e
e2e: controlplane build helm metrics-server prometheus kwok karpenter ## End-to-end tests on a fresh local cluster (created, then deleted), then the scale tests.
	@export KWOK_POOLS_HOME=$(E2E_HOME); \
	$(DEBUG_BIN) cluster delete --name $(E2E_CLUSTER) >/dev/null 2>&1 || true; \
	$(DEBUG_BIN) cluster create --name $(E2E_CLUSTER) --child-crds --metrics-server --storage-class \
	  --extra-arg kube-controller-manager=--node-monitor-grace-period=$(E2E_GRACE)s \
	  --extra-arg kube-controller-manager=--horizontal-pod-autoscaler-sync-period=5s; \
	status=0; \
	KUBECONFIG=$(E2E_HOME)/clusters/$(E2E_CLUSTER)/kubeconfig E2E_NODE_GRACE_SECONDS=$(E2E_GRACE) \
	  E2E_LOG_DIR=$(E2E_HOME)/logs RUST_TEST_THREADS=$(E2E_THREADS) \
	  cargo test --no-fail-fast $(addprefix --test ,$(E2E_TESTS)) || status=$$?; \
	echo "== the test-only kind (docs/adding-a-kind.md): cargo test --features test-kinds --test kind_proof"; \
	KUBECONFIG=$(E2E_HOME)/clusters/$(E2E_CLUSTER)/kubeconfig E2E_LOG_DIR=$(E2E_HOME)/logs \
	  cargo test --features test-kinds --test kind_proof || status=$$?; \
	cargo build --bin kwok-pools; \
	$(DEBUG_BIN) cluster delete --name $(E2E_CLUSTER) || true; \
	echo "== scale tests (release build, clusters of their own): $(E2E_SCALE_TESTS)"; \
	E2E_LOG_DIR=$(E2E_HOME)/logs cargo test --release $(addprefix --test ,$(E2E_SCALE_TESTS)) || status=$$?; \
	if [ $$status -ne 0 ]; then echo "end-to-end tests failed; operator logs are in $(E2E_HOME)/logs"; fi; \
	exit $$status

.PHONY: run
run: controlplane metrics-server release ## Start (or reuse) the local cluster, apply the sample pool, run the operator.
	@if ! $(RELEASE_BIN) cluster kubeconfig --name $(RUN_CLUSTER) >/dev/null 2>&1; then \
	  $(RELEASE_BIN) cluster create --name $(RUN_CLUSTER) --child-crds --metrics-server --storage-class; \
	elif ! $(RELEASE_BIN) cluster list | grep -E "^$(RUN_CLUSTER) +running" >/dev/null; then \
	  echo "cluster $(RUN_CLUSTER) exists but is not running: starting it"; \
	  $(RELEASE_BIN) cluster start --name $(RUN_CLUSTER); \
	fi; \
	kubeconfig=$$($(RELEASE_BIN) cluster kubeconfig --name $(RUN_CLUSTER)); \
	KUBECONFIG=$$kubeconfig $(KUBECTL) apply --server-side -f crds/kwok-pools.yaml >/dev/null; \
	KUBECONFIG=$$kubeconfig $(KUBECTL) apply -f samples/nodepool.yaml; \
	echo; echo "In another shell:  export KUBECONFIG=$$kubeconfig"; \
	echo "                   $(KUBECTL) get nodes -o wide"; echo; \
	pki=$$(dirname $$kubeconfig)/pki; \
	KUBECONFIG=$$kubeconfig exec $(RELEASE_BIN) run --webhook-client-ca $$pki/webhook-client-ca.crt \
	  --kubelet-serving-ca-cert $$pki/ca.crt --kubelet-serving-ca-key $$pki/ca.key --kubelet-client-ca $$pki/ca.crt

.PHONY: clean-cluster
clean-cluster: ## Delete the `make run` cluster.
	$(DEBUG_BIN) cluster delete --name $(RUN_CLUSTER) || $(RELEASE_BIN) cluster delete --name $(RUN_CLUSTER)

.PHONY: bench
bench: controlplane ## Scale benchmarks on a fresh local cluster (release build); prints numbers.
	cargo bench --bench scale -- $(BENCH_ARGS)

.PHONY: karpenter
karpenter: ## Build Karpenter's kwok provider v1.15.0 and its CRDs from its Go module into a cache (bin/karpenter-kwok).
	./hack/install-karpenter.sh

.PHONY: kwok
kwok: ## Build kwok v0.8.0 and its stages from its Go module into a cache (bin/kwok, for bench-compare).
	./hack/install-kwok.sh

MATPLOTLIB_VERSION := 3.10.8
.PHONY: plot-tools
plot-tools: ## Install matplotlib into the cached virtualenv (the bench-compare plots).
	@if ! $(VENV)/bin/python -c "import matplotlib" 2>/dev/null; then \
	  echo "installing matplotlib $(MATPLOTLIB_VERSION) into $(VENV)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/pip install --quiet matplotlib==$(MATPLOTLIB_VERSION); \
	fi

.PHONY: bench-compare
bench-compare: controlplane kwok plot-tools ## kwok-pools vs kwok vs a bare writer at the kubelet's and kwokctl's heartbeat, medians of 3 runs; bench/results/<regime>/.
	cargo bench --bench compare -- --regime kubelet $(COMPARE_ARGS)
	cargo bench --bench compare -- --regime kwokctl $(COMPARE_ARGS)
