#!/usr/bin/env bash
# Builds Karpenter's kwok cloud provider (the `kwok/` command of the sigs.k8s.io/karpenter Go
# module: Karpenter itself, creating Nodes as a cloud would) into a cache by version, with the
# CRDs it needs from the same module (karpenter.sh NodePool, NodeClaim, NodeOverlay,
# CapacityBuffer; karpenter.kwok.sh KWOKNodeClass). Links bin/karpenter-kwok and
# bin/karpenter-crds/. The module asks for a newer Go than this machine's: the toolchain it
# names comes from the Go module proxy (GOTOOLCHAIN).
set -euo pipefail
cd "$(dirname "$0")/.."
KARPENTER_VERSION="${KARPENTER_VERSION:-v1.15.0}"
KARPENTER_GO="${KARPENTER_GO:-go1.26.9}"
cache="${KWOK_POOLS_CACHE:-$HOME/.cache/kwok-pools}/tools/karpenter-$KARPENTER_VERSION"
if [ ! -x "$cache/kwok" ]; then
  echo "building Karpenter's kwok provider $KARPENTER_VERSION with $KARPENTER_GO (once; cached in $cache; takes a few minutes)" >&2
  mkdir -p "$cache"
  GOTOOLCHAIN="$KARPENTER_GO" GOFLAGS=-mod=mod GOBIN="$cache" \
    go install -ldflags "-X sigs.k8s.io/karpenter/pkg/operator.Version=$KARPENTER_VERSION" \
    "sigs.k8s.io/karpenter/kwok@$KARPENTER_VERSION" >&2
fi
if [ ! -s "$cache/crds/done" ]; then
  src="$(GOTOOLCHAIN="$KARPENTER_GO" GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/karpenter@$KARPENTER_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  if [ -z "$src" ] || [ ! -d "$src/kwok/charts/crds" ]; then
    echo "could not find Karpenter's CRDs in the Go module cache (go mod download sigs.k8s.io/karpenter@$KARPENTER_VERSION)" >&2
    exit 1
  fi
  rm -rf "$cache/crds" && mkdir -p "$cache/crds"
  # The chart's copies (with the kwok provider's label exceptions), as Karpenter's `make apply`.
  cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml "$cache/crds/"
  echo "$KARPENTER_VERSION" > "$cache/crds/done"
fi
# kwok as Karpenter's own hack/install-kwok.sh configures it (for `make bench
# BENCH_ARGS=karpenter`, beside kwok-pools): kwok's in-cluster KwokConfiguration with one
# partition (manageNodesWithLabelSelector kwok-partition=a), and the stages it applies —
# kwok's stage-fast set, with Karpenter's hack/kwok/stages winning by name — given to kwok in
# its config file rather than as Stage objects (enableCRDs dropped: the same stages).
kwok_src="$(GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@v0.8.0" 2>/dev/null | sed -n 's/.*"Dir": "\(.*\)",/\1/p' || true)"
if [ ! -s "$cache/kwok-config.yaml" ] && [ -n "$kwok_src" ]; then
  src="$(GOTOOLCHAIN="$KARPENTER_GO" GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/karpenter@$KARPENTER_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  tmp="$cache/kwok-config.yaml.tmp"
  sed -e "s|manageNodesWithLabelSelector: ''|manageNodesWithLabelSelector: 'kwok-partition=a'|" \
      -e '/enableCRDs:/,$d' "$kwok_src/kustomize/kwok/kwok.yaml" > "$tmp"
  ours=" $(sed -n 's/^  name: //p' "$src"/hack/kwok/stages/*.yaml | tr '\n' ' ')"
  for f in "$kwok_src"/kustomize/stage/node/fast/*.yaml "$kwok_src"/kustomize/stage/node/heartbeat-with-lease/*.yaml \
           "$kwok_src"/kustomize/stage/pod/fast/*.yaml "$src"/hack/kwok/stages/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    name="$(sed -n 's/^  name: //p' "$f" | head -1)"
    case "$f" in "$kwok_src"/*) case "$ours" in *" $name "*) continue ;; esac ;; esac
    printf -- '---\n' >> "$tmp"
    cat "$f" >> "$tmp"
  done
  mv "$tmp" "$cache/kwok-config.yaml"
fi
mkdir -p bin
[ -s "$cache/kwok-config.yaml" ] && ln -sfn "$cache/kwok-config.yaml" bin/karpenter-kwok-config.yaml
ln -sfn "$cache/kwok" bin/karpenter-kwok
ln -sfn "$cache/crds" bin/karpenter-crds
echo "Karpenter $KARPENTER_VERSION (kwok provider): bin/karpenter-kwok, CRDs in bin/karpenter-crds/"
