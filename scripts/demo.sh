#!/usr/bin/env bash
# The main demo: installs what is missing, builds, and runs 4 processes
# (through the nexar-run launcher and its embedded seed) doing real
# collectives over encrypted QUIC, with a readable summary from rank 0.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build >/dev/null
exec build/tools/run/nexar-run -n "${1:-4}" -- build/examples/nexar-collectives-demo
