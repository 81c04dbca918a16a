#!/usr/bin/env bash
# The Rust binding (bindings/rust): installs cargo, rustc and pkg-config when
# missing, builds libnexar into build/ (fast when up to date), installs it
# into build/prefix, then runs `cargo test` for the workspace (libnexar-sys
# and libnexar) against that prefix, found through pkg-config. The crates have
# no dependencies, so nothing is downloaded (--offline). Cargo's output goes to
# build/rust-target: the source tree stays clean.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh cargo rustc pkg-config

echo "== libnexar (scripts/build.sh build)"
scripts/build.sh build
prefix="$PWD/build/prefix"
cmake --install build --prefix "$prefix" >/dev/null
pc="$(find "$prefix" -name nexar.pc -print -quit)"
lib="$(find "$prefix" -name 'libnexar.so.0' -print -quit)"
if [ -z "$pc" ] || [ -z "$lib" ]; then
  echo "test-rust.sh: nexar.pc or libnexar.so.0 missing under $prefix" >&2
  exit 1
fi

export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CARGO_TARGET_DIR="$PWD/build/rust-target"
export CARGO_NET_OFFLINE=true

echo "== rust binding ($(cargo --version), $(rustc --version))"
cd bindings/rust
timeout 900 cargo test --offline --workspace
