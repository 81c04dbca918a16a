#!/usr/bin/env bash
# Runs the comparison of docs/benchmarks.md (nexar, its QUIC-only and
# spinning variants, Open MPI over shared memory and TCP, Gloo; 2 and 4
# ranks; every op) and rewrites
# docs/bench/results.md, the JSON and the plot from this run. Installs
# what is missing (build deps, the peers' packages, matplotlib) and builds
# first. Environment: RANKS, SIZES, OPS, COMPARE override the defaults; extra
# arguments go to nexar-bench (for example --iters 20 for a quicker, noisier
# run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
bench/peers/install.sh
bench/install-plot-deps.sh
scripts/build.sh build >/dev/null
ops=${OPS:-all} ranks=${RANKS:-2,4} sizes=${SIZES:-8,4K,256K,4M,64M}
compare=${COMPARE:-nexar-quic,nexar-spin,openmpi-shm,openmpi,gloo}
mkdir -p docs/bench
args=("$ops" --ranks "$ranks" --sizes "$sizes" --compare "$compare"
      --json docs/bench/latest.json --plot docs/bench/latest.png "$@")
status=0
load=$(cut -d' ' -f1-3 /proc/loadavg)
build/bench/nexar-bench "${args[@]}" || status=$?
python3 bench/nexar_bench_report.py docs/bench/latest.json docs/bench/results.md \
  --command "nexar-bench ${args[*]}" \
  --note "Load average (1, 5, 15 min) when the run started: $load (other work on the machine makes the figures noisier)."
exit "$status"
