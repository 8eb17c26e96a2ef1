#!/usr/bin/env bash
# Builds the control-plane binaries from the published Go modules in hack/kube and hack/etcd,
# caches them by version outside the work tree, and links them into bin/.
# Warm (cache present): seconds. Cold: many minutes on 2 cores; progress is printed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
cache_root="${KWOK_POOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kwok-pools}/controlplane"

modversion() { awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$1/go.mod"; }
kube_version="$(modversion "$root/hack/kube" k8s.io/kubernetes)"
etcd_version="$(modversion "$root/hack/etcd" go.etcd.io/etcd/server/v3)"
[ -n "$kube_version" ] && [ -n "$etcd_version" ] || { echo "cannot read versions from hack/*/go.mod" >&2; exit 1; }
go_version="$(go env GOVERSION)"
key() { cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-12; }
kube_dir="$cache_root/kube-$kube_version-$go_version-$(key "$root/hack/kube")"
etcd_dir="$cache_root/etcd-$etcd_version-$go_version-$(key "$root/hack/etcd")"

# go build -v prints one line per package compiled; show a count every 200 instead.
progress() {
  awk -v what="$1" '{n++; if (n % 200 == 0) {printf "  %s: %d packages compiled...\n", what, n; fflush()}}
                     END {printf "  %s: %d packages compiled\n", what, n}'
}

build() { # name dir moddir ldflags pkgs...
  local name="$1" dir="$2" moddir="$3" ldflags="$4"; shift 4
  if [ -f "$dir/.complete" ]; then echo "$name: cached in $dir"; return; fi
  echo "$name: building into $dir (cold build, this takes several minutes)..."
  local start=$SECONDS tmp="$dir.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  ( cd "$moddir" && go build -v -trimpath -ldflags "-s -w $ldflags" -o "$tmp/" "$@" 2>&1 ) | progress "$name"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "$name: go build failed" >&2; exit 1; }
  touch "$tmp/.complete"; rm -rf "$dir"; mv "$tmp" "$dir"
  echo "$name: built in $((SECONDS - start))s"
}

minor="${kube_version#v1.}"; minor="${minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
build "kubernetes $kube_version" "$kube_dir" "$root/hack/kube" "$kube_ldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
build "etcd $etcd_version" "$etcd_dir" "$root/hack/etcd" "" go.etcd.io/etcd/server/v3
[ -f "$etcd_dir/etcd" ] || mv "$etcd_dir/v3" "$etcd_dir/etcd" 2>/dev/null || mv "$etcd_dir/server" "$etcd_dir/etcd"

mkdir -p "$root/bin"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do ln -sfn "$kube_dir/$b" "$root/bin/$b"; done
ln -sfn "$etcd_dir/etcd" "$root/bin/etcd"
echo "control plane ready in bin/: kubernetes $kube_version, etcd $etcd_version"
