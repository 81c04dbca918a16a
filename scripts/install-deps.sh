#!/usr/bin/env bash
# Installs what building and testing nexar needs (Debian 12), and the Debian
# packages named as arguments. Safe to re-run: it only calls apt-get when
# something is missing.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config clang-format
      libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev libev-dev libmimalloc-dev
      libgtest-dev iproute2 binutils valgrind "$@")
# valgrind: its header lets the buffer pool leave mimalloc for libc under
# valgrind (src/core/buffer_pool.cpp), and a test runs a worker under it.
# ipsec-mb's AES-GCM protects packets ~3x faster than GnuTLS's (x86-64 only;
# without it the build keeps GnuTLS: src/transport/packet_cipher.h).
[ "$(dpkg --print-architecture)" = amd64 ] && pkgs+=(libipsec-mb-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
