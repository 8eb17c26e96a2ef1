#!/usr/bin/env bash
# Builds helm from its Go module into a cache by version (no binary downloads on this machine)
# and links it at bin/helm. Repeat runs reuse the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
cache="${KWOK_POOLS_CACHE:-$HOME/.cache/kwok-pools}/tools/helm-$HELM_VERSION"
if [ ! -x "$cache/helm" ]; then
  echo "building helm $HELM_VERSION from helm.sh/helm/v3 (once; cached in $cache; takes a few minutes)"
  mkdir -p "$cache"
  GOTOOLCHAIN=local GOFLAGS=-mod=mod GOBIN="$cache" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
fi
mkdir -p bin
ln -sf "$cache/helm" bin/helm
bin/helm version --short
