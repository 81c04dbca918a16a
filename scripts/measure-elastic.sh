#!/usr/bin/env bash
# Elastic membership figures (docs/elastic.md), on this machine:
#  1. grow of a 4-rank world by 1 joiner once it is pending: each member's
#     nexar_comm_grow time and the seed's own count, per trial;
#  2. kill -9 of rank 2 of 4 under nexar-run --elastic --max-restarts 3 with
#     the elastic example: from the kill to training with 4 ranks again.
#   scripts/measure-elastic.sh [BUILD_DIR] [TRIALS]
set -euo pipefail
b="$(cd "${1:-build}" && pwd)"; trials="${2:-3}"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
for t in $(seq "$trials"); do
  "$b/tools/seed/nexar-seed" --world-size 4 --elastic > "$dir/seed.out" 2>&1 &
  seed=$!
  until grep -q "listening on" "$dir/seed.out"; do sleep 0.05; done
  addr="$(grep -o 'listening on [0-9.:]*' "$dir/seed.out" | awk '{print $3}')"
  pids=()
  for r in 0 1 2 3; do
    NEXAR_SEED=$addr NEXAR_ELASTIC=1 NEXAR_RANK=$r \
      "$b/tests/cluster/nexar-elastic-worker" "check,pending:1,grow:1,check" > "$dir/m$r.out" 2>&1 &
    pids+=($!)
  done
  until grep -q "CHECK" "$dir/m0.out"; do sleep 0.05; done
  NEXAR_SEED=$addr NEXAR_ELASTIC=1 "$b/tests/cluster/nexar-elastic-worker" check > "$dir/j.out" 2>&1
  wait "${pids[@]}"
  echo "grow 4+1, trial $t: members $(grep -ho 'ms=[0-9.]*' "$dir"/m?.out | tr '\n' ' ')" \
       "seed: $(grep -o 'in [0-9.]* ms' "$dir/seed.out")"
  kill "$seed"; wait "$seed" || true
done

out="$dir/run.out"
NEXAR_HEARTBEAT_INTERVAL_SECS=1 NEXAR_HEARTBEAT_TIMEOUT_SECS=5 \
  "$b/tools/run/nexar-run" -n 4 --elastic --max-restarts 3 -- \
  "$b/examples/nexar-elastic-training" 1000 10 > "$out" 2>&1 &
run=$!
until grep -q "step 100 with 4" "$out"; do sleep 0.05; done
victim="$(grep -o '\[r2\] rank 2 of 4, pid [0-9]*' "$out" | awk '{print $NF}')"
start=$(date +%s.%N)
kill -9 "$victim"
until grep -q "grown to 4 ranks" "$out"; do sleep 0.01; done
back=$(date +%s.%N)
wait "$run"
echo "kill -9 of rank 2 of 4 -> training with 4 ranks again: $(echo "$back - $start" | bc) s" \
     "(heartbeat_timeout 5 s); $(grep -o 'final step=.*' "$out")"
