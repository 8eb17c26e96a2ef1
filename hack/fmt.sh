#!/usr/bin/env bash
# rustfmt on every Rust file of the repository, `--check` to only report. `cargo fmt` alone
# misses modules declared by a macro (the kind directories under src/kinds/, declared by the
# `kinds!` registration): rustfmt follows only `mod` items it can see. Each file is given to
# rustfmt here, so nothing is left out whoever declares it.
set -euo pipefail
cd "$(dirname "$0")/.."
check=()
if [ "${1:-}" = "--check" ]; then check=(--check); fi
mapfile -t files < <(find src tests benches -name '*.rs' -not -path '*/target/*' 2>/dev/null | sort)
if ! rustfmt --edition 2024 "${check[@]}" "${files[@]}"; then
  echo "files above are not formatted: run \`make fmt\` (or ./hack/fmt.sh)" >&2
  exit 1
fi
if ((${#check[@]})); then echo "rustfmt: ${#files[@]} files formatted"; else echo "rustfmt: ${#files[@]} files reformatted where needed"; fi
