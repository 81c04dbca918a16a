#!/usr/bin/env bash
# Builds the Debian packages into build-deb/ (libnexar0, libnexar-dev,
# nexar-tools; see packaging/debian.cmake): a Release build for
# /usr without the tests, then cpack, which strips the files and takes the
# dependencies from dpkg-shlibdeps. libnexar0 is then rebuilt without the
# postinst and postrm CPack adds to run ldconfig: its ldconfig trigger
# (packaging/debian/triggers) does that, as Debian policy asks. Prints the
# packages' paths.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh dpkg-dev file
scripts/build.sh build-deb -DCMAKE_INSTALL_PREFIX=/usr \
  -DNEXAR_BUILD_TESTS=OFF >/dev/null
rm -f build-deb/*.deb
(cd build-deb && cpack -G DEB >/dev/null)
lib_deb="$(ls "$PWD"/build-deb/libnexar0_*.deb)"
tree="$PWD/build-deb/libnexar0-tree"
rm -rf "$tree"
dpkg-deb -R "$lib_deb" "$tree"
grep -qx 'activate-noawait ldconfig' "$tree/DEBIAN/triggers" 2>/dev/null ||
  { echo "package-deb: libnexar0 has no ldconfig trigger (packaging/debian.cmake)" >&2; exit 1; }
rm -f "$tree/DEBIAN/postinst" "$tree/DEBIAN/postrm"
dpkg-deb --root-owner-group -b "$tree" "$lib_deb" >/dev/null
rm -rf "$tree"
ls "$PWD"/build-deb/*.deb
