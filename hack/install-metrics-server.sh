#!/usr/bin/env bash
# Builds the real metrics-server from its Go module into a cache by version and links it at
# bin/metrics-server (`kwok-pools cluster create --metrics-server` runs it). Repeat runs reuse
# the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
METRICS_SERVER_VERSION="${METRICS_SERVER_VERSION:-v0.8.0}"
cache="$(./hack/go-install-cached.sh metrics-server sigs.k8s.io/metrics-server/cmd/metrics-server "$METRICS_SERVER_VERSION")"
mkdir -p bin
ln -sf "$cache/metrics-server" bin/metrics-server
echo "bin/metrics-server: $METRICS_SERVER_VERSION"
