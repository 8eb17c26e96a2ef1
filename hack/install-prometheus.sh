#!/usr/bin/env bash
# Links a Prometheus at bin/prometheus for the end-to-end test that scrapes the operator with
# it: the machine's own (Debian's `prometheus` package) when there is one, else Prometheus
# built from its Go module into a cache by version (a few minutes, once).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin
if [ -z "${PROMETHEUS_FROM_SOURCE:-}" ] && found="$(command -v prometheus)"; then
  ln -sf "$found" bin/prometheus
else
  # The Go module's v0.3xx tags are Prometheus 3.x releases.
  PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
  cache="$(./hack/go-install-cached.sh prometheus github.com/prometheus/prometheus/cmd/prometheus "$PROMETHEUS_VERSION")"
  ln -sf "$cache/prometheus" bin/prometheus
fi
bin/prometheus --version 2>&1 | head -1
