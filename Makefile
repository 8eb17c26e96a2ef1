# kwok-pools — see README.md. `make run` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Rust builds are shared between clones (and survive a fresh clone in CI).
export CARGO_TARGET_DIR ?= $(HOME)/.cache/kwok-pools/target
# The Go toolchain on the machine is used as is; never download another one implicitly.
export GOTOOLCHAIN ?= local

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
build: ## Build the operator and every test (debug).
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

# check-jsonschema (PyPI) validates the samples against the editor schemas.
VENV := $(HOME)/.cache/kwok-pools/venv
CHECK_JSONSCHEMA_VERSION := 0.39.0
.PHONY: schema-tools
schema-tools: ## Install check-jsonschema into a cached virtualenv.
	@if ! $(VENV)/bin/check-jsonschema --version 2>/dev/null | grep -q $(CHECK_JSONSCHEMA_VERSION); then \
	  echo "installing check-jsonschema $(CHECK_JSONSCHEMA_VERSION) into $(VENV)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/pip install --quiet check-jsonschema==$(CHECK_JSONSCHEMA_VERSION); \
	fi

.PHONY: lint
lint: ## cargo fmt --check and clippy -D warnings.
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

.PHONY: unit
unit: schema-tools ## Unit tests only (no cluster).
	cargo test --lib --bins --test crds --test schemas --test rbac --test dashboard

.PHONY: helm
helm: ## Build helm from its Go module into a cache (bin/helm).
	./hack/install-helm.sh

.PHONY: chart
chart: helm ## helm lint and helm template of charts/kwok-pools (the e2e tests also dry-run it on the API server).
	bin/helm lint --strict charts/kwok-pools
	bin/helm template kwok-pools charts/kwok-pools --namespace kwok-pools >/dev/null
	bin/helm template other charts/kwok-pools --namespace other --set replicas=3,webhook.certSource=secret,webhook.secretName=mine,leaderElection.enabled=false,simulator.shard.enabled=false >/dev/null
	@echo "chart ok"

.PHONY: test
test: controlplane build unit chart e2e ## Unit and end-to-end tests; builds what it needs first.

.PHONY: e2e
e2e: controlplane build helm ## End-to-end tests on a fresh local cluster (created, then deleted).
	@export KWOK_POOLS_HOME=$(E2E_HOME); \
	$(DEBUG_BIN) cluster delete --name $(E2E_CLUSTER) >/dev/null 2>&1 || true; \
	$(DEBUG_BIN) cluster create --name $(E2E_CLUSTER) --kubevirt \
	  --extra-arg kube-controller-manager=--node-monitor-grace-period=$(E2E_GRACE)s; \
	status=0; \
	KUBECONFIG=$(E2E_HOME)/clusters/$(E2E_CLUSTER)/kubeconfig E2E_NODE_GRACE_SECONDS=$(E2E_GRACE) \
	  E2E_LOG_DIR=$(E2E_HOME)/logs RUST_TEST_THREADS=$(E2E_THREADS) \
	  cargo test --test 'e2e_*' || status=$$?; \
	$(DEBUG_BIN) cluster delete --name $(E2E_CLUSTER) || true; \
	if [ $$status -ne 0 ]; then echo "end-to-end tests failed; operator logs are in $(E2E_HOME)/logs"; fi; \
	exit $$status

.PHONY: run
run: controlplane release ## Start (or reuse) the local cluster, apply the sample pool, run the operator.
	@if ! $(RELEASE_BIN) cluster kubeconfig --name $(RUN_CLUSTER) >/dev/null 2>&1; then \
	  $(RELEASE_BIN) cluster create --name $(RUN_CLUSTER) --kubevirt; \
	elif ! $(RELEASE_BIN) cluster list | grep -E "^$(RUN_CLUSTER) +running" >/dev/null; then \
	  echo "cluster $(RUN_CLUSTER) exists but is not running: starting it"; \
	  $(RELEASE_BIN) cluster start --name $(RUN_CLUSTER); \
	fi; \
	kubeconfig=$$($(RELEASE_BIN) cluster kubeconfig --name $(RUN_CLUSTER)); \
	KUBECONFIG=$$kubeconfig $(KUBECTL) apply --server-side -f crds/kwok-pools.yaml >/dev/null; \
	KUBECONFIG=$$kubeconfig $(KUBECTL) apply -f samples/nodepool.yaml; \
	echo; echo "In another shell:  export KUBECONFIG=$$kubeconfig"; \
	echo "                   $(KUBECTL) get nodes -o wide"; echo; \
	KUBECONFIG=$$kubeconfig exec $(RELEASE_BIN) run

.PHONY: clean-cluster
clean-cluster: ## Delete the `make run` cluster.
	$(DEBUG_BIN) cluster delete --name $(RUN_CLUSTER) || $(RELEASE_BIN) cluster delete --name $(RUN_CLUSTER)

.PHONY: bench
bench: controlplane ## Scale benchmarks on a fresh local cluster (release build); prints numbers.
	cargo bench --bench scale -- $(BENCH_ARGS)
