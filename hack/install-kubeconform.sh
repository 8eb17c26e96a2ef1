#!/usr/bin/env bash
# Builds kubeconform from its Go module into a cache by version and links it at
# bin/kubeconform (it validates the samples and the install manifests in `make test`).
set -euo pipefail
cd "$(dirname "$0")/.."
KUBECONFORM_VERSION="${KUBECONFORM_VERSION:-v0.8.0}"
cache="$(./hack/go-install-cached.sh kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION")"
mkdir -p bin
ln -sf "$cache/kubeconform" bin/kubeconform
bin/kubeconform -v
