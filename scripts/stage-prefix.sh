# Sourced by the bindings' test scripts (test-go.sh, test-rust.sh): builds
# libnexar (fast when build/ is up to date), installs it into build/prefix and
# exports PKG_CONFIG_PATH and LD_LIBRARY_PATH so that pkg-config and the loader
# find that copy. Run from the repository's root.
echo "== libnexar (build/prefix)"
scripts/build.sh build
cmake --install build --prefix "$PWD/build/prefix" >/dev/null
nexar_pc="$(find "$PWD/build/prefix" -name nexar.pc -path '*/pkgconfig/*' -print -quit)"
nexar_lib="$(find "$PWD/build/prefix" -name 'libnexar.so.0' -print -quit)"
if [ -z "$nexar_pc" ] || [ -z "$nexar_lib" ]; then
  echo "stage-prefix: nexar.pc or libnexar.so.0 missing under build/prefix" >&2
  exit 1
fi
export PKG_CONFIG_PATH="$(dirname "$nexar_pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$(dirname "$nexar_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
