#!/usr/bin/env bash
# Proves that the glue tests can fail: breaks each behaviour once (a one-line change), runs
# the unit tests, and expects a failure. Restores every file afterwards. Usage: hack/break-glue.sh
set -uo pipefail
cd "$(dirname "$0")/.."
mutations=(
  "src/kinds/nodepool/kind.rs|taints.push(fake_taint());|let _ = fake_taint();|drop the fake taint"
  "src/pool/reconcile.rs|add_pending(&mut observed, pending, &pool.name_any(), hash);|let _ = pending;|ignore pending creates"
  "src/pool/controller.rs|let r = with_ns(ObjectRef::new(pool));|let r = with_ns(ObjectRef::new(\"nobody\"));|a child event wakes the wrong pool"
  "src/informer/mod.rs|this.send(Change::Deleted(obj));|let _ = obj;|a re-list stops reporting deletions"
  "src/kinds/nodepool/kind.rs|spec.pod_cidr = current.pod_cidr.clone();|let _ = &current.pod_cidr;|podCIDR not kept on an in-place update"
  "src/pool/reconcile.rs|ctx.metrics.reconcile_failed(&kind, \"child_write\");|let _ = &kind;|child-write failures not counted"
)
failed=0
for m in "${mutations[@]}"; do
  IFS='|' read -r file from to what <<<"$m"
  cp "$file" "$file.orig"
  if python3 - "$file" "$from" "$to" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if old not in text:
    sys.exit(f"{path}: the line to break is not there any more: {old}")
open(path, "w").write(text.replace(old, new, 1))
PY
  then :; else mv "$file.orig" "$file"; failed=1; continue; fi
  if cargo test --lib --quiet >/tmp/break-glue.log 2>&1; then
    echo "NOT CAUGHT: $what ($file)"; failed=1
  else
    echo "caught:     $what"
  fi
  mv "$file.orig" "$file"
done
exit $failed
