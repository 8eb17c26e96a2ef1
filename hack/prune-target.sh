#!/usr/bin/env bash
# Keeps the shared Rust target directory from growing without bound: every feature set and
# dependency change leaves another copy of each test binary (hundreds of MB each) behind.
# Removes all but the newest build of each binary, and incremental state older than a day.
set -euo pipefail
target="${CARGO_TARGET_DIR:-$HOME/.cache/kwok-pools/target}"
for profile in debug release; do
  deps="$target/$profile/deps"
  [ -d "$deps" ] || continue
  # Executables and rlibs are named <crate>-<16 hex>; group by crate, newest first.
  find "$deps" -maxdepth 1 -type f -regextype posix-extended -regex '.*/[a-z0-9_]+-[0-9a-f]{16}' -printf '%T@ %p\n' \
    | sort -rn | awk '{ n = $2; sub(/-[0-9a-f]{16}$/, "", n); if (seen[n]++) print $2 }' \
    | while read -r old; do rm -f "$old" "$old.d"; done
  find "$target/$profile/incremental" -mindepth 1 -maxdepth 1 -mtime +1 -exec rm -rf {} + 2>/dev/null || true
done
