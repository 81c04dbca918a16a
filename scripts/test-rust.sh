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

. scripts/stage-prefix.sh
export CARGO_TARGET_DIR="$PWD/build/rust-target"
export CARGO_NET_OFFLINE=true

echo "== rust binding ($(cargo --version), $(rustc --version))"
cd bindings/rust
timeout 900 cargo test --offline --workspace
