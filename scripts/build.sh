#!/usr/bin/env bash
# Configures and builds into build/ (or $1), passing extra CMake arguments;
# warnings are errors here (NEXAR_WERROR), as in CI. The build type is
# Release (-O3, the one packagers pick) unless BUILD_TYPE names another, so
# that the tests run against the optimised library and its warnings.
# With ccache installed, every compile goes through it, so that another build
# directory with the same flags reuses the objects: scripts/package-deb.sh's
# build-deb/ compiles next to nothing after build/. base_dir makes the paths
# on a command line relative to its build directory, and hash_dir off lets two
# directories share an object (its debug info then names the directory that
# compiled it first; the packages are stripped).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"; shift || true
launcher=()
if command -v ccache >/dev/null; then
  cache="env;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;ccache"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER="$cache" -DCMAKE_CXX_COMPILER_LAUNCHER="$cache")
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DNEXAR_WERROR=ON "${launcher[@]}" "$@" >/dev/null
ninja -C "$dir"
