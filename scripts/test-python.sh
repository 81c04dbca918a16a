#!/usr/bin/env bash
# The Python binding, as a user installs it: a wheel of ./bindings/python
# (`pip wheel`, what `pip install ./bindings/python` builds) installed into a
# fresh virtual environment (Debian's python3 is externally managed, PEP 668),
# then its tests with pytest (every test bounded by pytest-timeout). Runs for
# python3 on PATH and, when it is another interpreter, /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3 python3-venv python3-dev

# Wheels built by this run only (a stale one must never be installed).
wheels="$PWD/build-python/wheels"
rm -rf "$wheels"

run_with() {
  local py="$1" name="$2"
  local venv="$PWD/build-python/venv-$name"
  echo "== python binding with $py ($("$py" --version 2>&1))"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$venv/bin/python" -m pip install -q --disable-pip-version-check pytest pytest-timeout numpy
  # bfloat16 is tested when ml_dtypes installs; the binding works without it.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check ml_dtypes ||
    echo "ml_dtypes did not install: bfloat16 tests skipped"
  # One wheel build per Python version: an interpreter of a version built
  # already installs that wheel (libnexar is not compiled a second time).
  local install=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index
                 --find-links "$wheels" --force-reinstall --no-deps nexar)
  if ! "${install[@]}" 2>/dev/null; then
    "$venv/bin/python" -m pip wheel --disable-pip-version-check --no-deps -w "$wheels" \
      "${wheel_build[@]}" -C build-dir="$PWD/build-wheel-$name" ./bindings/python
    "${install[@]}"
  fi
  # From the tests' directory, so that `import nexar` is the installed package.
  (cd bindings/python && timeout 900 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
     --timeout 120 tests)
}

# Through ccache when it is there, with the flags of scripts/build.sh's
# build/ (Release, warnings as errors) and a build directory as deep as it is,
# so that the library's objects come from build/ instead of compiling again.
# (ccache hashes the compiler's name: the wheel's build would pick g++, CMake's
# own default is c++.)
wheel_build=(-C cmake.define.NEXAR_WERROR=ON
             -C cmake.define.CMAKE_CXX_COMPILER="$(command -v "${CXX:-c++}")")
if command -v ccache >/dev/null; then
  wheel_build+=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
                -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
fi

first="$(command -v python3)"
run_with "$first" path
if [ -x /usr/bin/python3 ] && [ "$(realpath /usr/bin/python3)" != "$(realpath "$first")" ] &&
   [ "$(/usr/bin/python3 -c 'import sys; print(sys.prefix)')" != \
     "$("$first" -c 'import sys; print(sys.prefix)')" ]; then
  run_with /usr/bin/python3 system
fi
