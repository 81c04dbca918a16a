#!/usr/bin/env bash
# The PyTorch backend ("nexar" for torch.distributed): the binding installed
# with its [torch] extra (torch from PyPI, about 5 GB, so into one virtual
# environment, build/torch-venv, made once and reused), then the tests in
# bindings/python/tests_torch (real processes, each compared with "gloo").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3 python3-venv python3-dev

venv="$PWD/build/torch-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
# The binding from this checkout with its [torch] extra, as a user installs it
# ("./bindings/python[torch]"; torch is downloaded only when the environment
# lacks it). The wheel scripts/test-python.sh built just before is reused
# when nothing it is made of changed since (libnexar takes minutes to build).
"${pip[@]}" pytest pytest-timeout
tag="cp$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
wheel="$(ls build-python/wheels/nexar-*-"$tag"-*.whl 2>/dev/null | head -n1 || true)"
if [ -n "$wheel" ] && [ -z "$(find bindings/python src include CMakeLists.txt -type f \
       -newer "$wheel" -not -path '*/__pycache__/*' -not -path 'bindings/python/tests*' \
       -not -path 'bindings/python/build/*' | head -n1)" ]; then
  "${pip[@]}" --force-reinstall --no-deps "$wheel"
  "${pip[@]}" "$wheel[torch]"
else
  # Built through ccache when it is there, as scripts/build.sh builds.
  build=(-C build-dir="$PWD/build/wheel-build")
  if command -v ccache >/dev/null; then
    build+=(-C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
            -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  fi
  # A local directory of an installed version: --force-reinstall rebuilds it;
  # the second install (no-op build) resolves the extra.
  "${pip[@]}" --force-reinstall --no-deps "${build[@]}" ./bindings/python
  "${pip[@]}" "${build[@]}" "./bindings/python[torch]"
fi

# From the tests' directory, so that `import nexar` is the installed package.
(cd bindings/python && timeout 600 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
   --timeout 300 tests_torch)
