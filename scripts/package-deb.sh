#!/usr/bin/env bash
# Builds the Debian packages into build-deb/ (libnexar0, libnexar-dev,
# nexar-tools; see packaging/debian.cmake): a RelWithDebInfo build for
# /usr without the tests, then cpack, which strips the files and takes the
# dependencies from dpkg-shlibdeps. Prints the packages' paths.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh dpkg-dev file
cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DNEXAR_BUILD_TESTS=OFF >/dev/null
ninja -C build-deb >/dev/null
rm -f build-deb/*.deb
(cd build-deb && cpack -G DEB >/dev/null)
ls "$PWD"/build-deb/*.deb
