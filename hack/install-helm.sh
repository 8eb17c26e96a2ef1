#!/usr/bin/env bash
# Builds helm from its Go module into a cache by version and links it at bin/helm. Repeat
# runs reuse the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
cache="$(./hack/go-install-cached.sh helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION")"
mkdir -p bin
ln -sf "$cache/helm" bin/helm
bin/helm version --short
