#!/usr/bin/env bash
# Measures, for issue 5's rows, the time nexar cannot go below while every
# byte still takes its copies and its AES-GCM passes (docs/performance.md,
# "The floor of the byte passes"): tools/bench/nexar_bench_floor.py runs one
# side-by-side nexar-bench with Gloo and Open MPI, then perf record of nexar
# alone on each row, and prints the table. Installs what is missing (build
# deps, linux-perf, the peers) and builds first. Environment: OPS, RANKS,
# SIZES override the rows, OUT the directory (default build/pass-floor).
# Extra arguments go to every nexar-bench run (e.g. --iters 20). perf record
# -a needs root or kernel.perf_event_paranoid <= -1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh linux-perf
bench/peers/install.sh
scripts/build.sh build >/dev/null
out=${OUT:-build/pass-floor}
python3 tools/bench/nexar_bench_floor.py --ops "${OPS:-allreduce,broadcast}" \
  --ranks "${RANKS:-2,4}" --sizes "${SIZES:-256K,4M,64M}" --out "$out" \
  --json "$out/floors.json" -- "$@"
