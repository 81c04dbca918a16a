#!/usr/bin/env bash
# run_gloo.sh N OUTDIR ARGS...: starts N gloo_bench processes (ranks 0..N-1)
# with a fresh FileStore directory, the way nexar-bench does; rank 0's rows go
# to stdout. Exits non-zero if any rank did.
set -u
if [ $# -lt 2 ]; then
  echo "usage: run_gloo.sh N OUTDIR --lib gloo|gloo-hd --op OP --sizes LIST ..." >&2
  exit 2
fi
n=$1 outdir=$2
shift 2
store=$(mktemp -d "${TMPDIR:-/tmp}/gloo-store.XXXXXX")
pids=()
trap 'rm -rf "$store"' EXIT
trap 'kill "${pids[@]}" 2>/dev/null; exit 143' INT TERM
for ((r = 0; r < n; r++)); do
  if [ "$r" -eq 0 ]; then
    "$outdir/gloo_bench" --rank "$r" --world "$n" --store "$store" "$@" &
  else
    "$outdir/gloo_bench" --rank "$r" --world "$n" --store "$store" "$@" >/dev/null &
  fi
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || rc=$?
done
exit "$rc"
