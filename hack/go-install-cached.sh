#!/usr/bin/env bash
# Usage: go-install-cached.sh NAME PACKAGE VERSION
# Builds a Go command from its module (no binary downloads on this machine) into a cache by
# version, once, and prints the cache directory. helm and kwok are built this way.
set -euo pipefail
name="$1" package="$2" version="$3"
cache="${KWOK_POOLS_CACHE:-$HOME/.cache/kwok-pools}/tools/$name-$version"
if [ ! -x "$cache/$name" ]; then
  echo "building $name $version from $package (once; cached in $cache; takes a few minutes)" >&2
  mkdir -p "$cache"
  GOTOOLCHAIN=local GOFLAGS=-mod=mod GOBIN="$cache" go install "$package@$version" >&2
fi
echo "$cache"
