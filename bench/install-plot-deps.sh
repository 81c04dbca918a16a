#!/usr/bin/env bash
# Installs what `nexar-bench --plot` needs: matplotlib for Python 3, from
# Debian (python3-matplotlib), when no python3 on PATH imports it already.
# Safe to re-run: it calls apt-get only when something is missing.
set -euo pipefail
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null; then exit 0; fi
done
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing: python3-matplotlib"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  python3 python3-matplotlib
