#!/usr/bin/env bash
# Builds kwok (the comparison in `make bench-compare`) from its Go module into a cache by
# version, and writes its stages (fast node/pod stages and the lease heartbeat, as kwokctl
# configures them) from the same module beside it. Links bin/kwok and bin/kwok-stages.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
cache="$(./hack/go-install-cached.sh kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION")"
if [ ! -s "$cache/stages.yaml" ]; then
  src="$(GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
  if [ -z "$src" ] || [ ! -d "$src/kustomize/stage" ]; then
    echo "could not find kwok's stages in the Go module cache (go mod download sigs.k8s.io/kwok@$KWOK_VERSION)" >&2
    exit 1
  fi
  # kwokctl's default stages: kustomize/stage/fast = node/fast + node/heartbeat-with-lease + pod/fast.
  tmp="$cache/stages.yaml.tmp"
  : > "$tmp"
  for f in "$src"/kustomize/stage/node/fast/*.yaml "$src"/kustomize/stage/node/heartbeat-with-lease/*.yaml "$src"/kustomize/stage/pod/fast/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    printf -- '---\n' >> "$tmp"
    cat "$f" >> "$tmp"
  done
  mv "$tmp" "$cache/stages.yaml"
fi
mkdir -p bin
# How kwokctl runs kwok-controller and the controller manager, for the same version, at the
# kubelet's heartbeat (factor 1) and at its own default (factor 5): bench-compare starts kwok
# with exactly these flags (its own paths and ports swapped in).
ctl="$(./hack/go-install-cached.sh kwokctl sigs.k8s.io/kwok/cmd/kwokctl "$KWOK_VERSION")"
for regime in kubelet:1 kwokctl:5; do
  name="${regime%%:*}"
  out="$cache/kwokctl-dry-run-$name.txt"
  if [ ! -s "$out" ]; then
    wd="$(mktemp -d)"
    KWOK_WORKDIR="$wd" "$ctl/kwokctl" create cluster --name cmp --runtime binary --dry-run \
      --heartbeat-factor "${regime##*:}" > "$out.tmp" 2>/dev/null
    rm -rf "$wd"
    grep -q ' kwok-controller ' "$out.tmp" || { echo "kwokctl --dry-run printed no kwok-controller command (see $out.tmp)" >&2; exit 1; }
    mv "$out.tmp" "$out"
  fi
  ln -sf "$out" "bin/kwokctl-dry-run-$name.txt"
done
ln -sf "$cache/kwok" bin/kwok
ln -sf "$cache/stages.yaml" bin/kwok-stages.yaml
bin/kwok --version 2>/dev/null || bin/kwok --help | head -1
