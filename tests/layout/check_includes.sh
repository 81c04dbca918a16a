#!/usr/bin/env bash
# The rooms of src/ form layers, each including only the ones below it
# (docs/design.md, "The layout"): core, engine, transport, client (the hub),
# then collective, rpc and cluster, then capi. Fails listing every include
# that points up.
set -euo pipefail
src="${1:?usage: check_includes.sh SRC_DIR}"
layer() {
  case "$1" in
    core) echo 0 ;; engine) echo 1 ;; transport) echo 2 ;; client) echo 3 ;;
    collective | rpc | cluster) echo 4 ;; capi) echo 5 ;; *) echo -1 ;;
  esac
}
bad=0
while IFS=: read -r file _ line; do
  room=${file#"$src"/}; room=${room%%/*}
  target=$(sed -E 's/^#include "([a-z_]+)\/.*/\1/' <<<"$line")
  from=$(layer "$room"); to=$(layer "$target")
  if [ "$from" -ge 0 ] && [ "$to" -gt "$from" ]; then
    echo "upward include: $file ($room) includes $target: $line"
    bad=1
  fi
done < <(grep -rnE '^#include "[a-z_]+/' "$src")
[ "$bad" -eq 0 ] && echo "every include in $src points down or sideways"
exit "$bad"
