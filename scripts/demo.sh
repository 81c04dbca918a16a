#!/usr/bin/env bash
# The main demo: installs what is missing, builds, and runs 4 ranks exchanging
# messages over encrypted QUIC, with a readable summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build >/dev/null
exec build/examples/nexar-ring-demo "${@:-4}"
