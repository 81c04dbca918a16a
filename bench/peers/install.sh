#!/usr/bin/env bash
# install.sh: installs what the peer benchmarks need (Debian 12): Open MPI and
# Gloo. Only missing packages are installed; prints one line.
set -euo pipefail
pkgs=(openmpi-bin libopenmpi-dev libgloo-dev)
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "peers/install.sh: already installed: ${pkgs[*]}"
  exit 0
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp "${TMPDIR:-/tmp}/peers-install.XXXXXX")
# Waits for another apt/dpkg to let go of the lock instead of failing.
if ! { "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q &&
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    "${missing[@]}"; } >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "peers/install.sh: apt-get failed installing ${missing[*]} (log $log)" >&2
  exit 1
fi
rm -f "$log"
echo "peers/install.sh: installed ${missing[*]}"
