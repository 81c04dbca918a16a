#!/usr/bin/env bash
# build.sh OUTDIR: builds OUTDIR/mpi_bench and OUTDIR/gloo_bench. Skips the
# build when the sources (and this script) hash to what OUTDIR/.peers-stamp
# records. Prints one line.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: build.sh OUTDIR" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
common=$(cd "$here/../common" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
stamp="$out/.peers-stamp"
sources=("$here/build.sh" "$here/peer_runner.h" "$here/mpi_bench.cc" "$here/gloo_bench.cc"
  "$common/bench_measure.h" "$common/bench_cli.h")
hash=$( (cat "${sources[@]}" && mpicxx --showme:version 2>&1 && g++ --version | head -n1) |
  sha256sum | cut -d' ' -f1)
if [ -x "$out/mpi_bench" ] && [ -x "$out/gloo_bench" ] && [ -f "$stamp" ] &&
  [ "$(cat "$stamp")" = "$hash" ]; then
  echo "peers/build.sh: up to date in $out"
  exit 0
fi
for tool in mpicxx g++; do
  if ! command -v "$tool" >/dev/null; then
    echo "peers/build.sh: $tool not found; run bench/peers/install.sh" >&2
    exit 1
  fi
done
rm -f "$stamp"
flags=(-O2 -std=c++17 -Wall -Wextra -Werror -I"$common")
mpicxx "${flags[@]}" -o "$out/mpi_bench.tmp" "$here/mpi_bench.cc"
g++ "${flags[@]}" -pthread -o "$out/gloo_bench.tmp" "$here/gloo_bench.cc" -lgloo
mv -f "$out/mpi_bench.tmp" "$out/mpi_bench"
mv -f "$out/gloo_bench.tmp" "$out/gloo_bench"
echo "$hash" >"$stamp"
echo "peers/build.sh: built mpi_bench and gloo_bench in $out"
