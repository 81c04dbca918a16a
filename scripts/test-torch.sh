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
# (pip rebuilds a local directory every time; its build directory is reused,
# and torch is downloaded only when the environment lacks it).
"${pip[@]}" pytest pytest-timeout
"${pip[@]}" -C build-dir="$PWD/build/torch-wheel" "./bindings/python[torch]"

# From the tests' directory, so that `import nexar` is the installed package.
(cd bindings/python && timeout 600 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
   --timeout 300 tests_torch)
