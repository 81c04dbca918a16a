#!/usr/bin/env bash
# The Python binding, as a user installs it: `pip install ./bindings/python`
# into a fresh virtual environment (Debian's python3 is externally managed,
# PEP 668), then its tests with pytest (every test bounded by pytest-timeout).
# Runs for python3 on PATH and, when it is another interpreter, /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3 python3-venv python3-dev

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
  "$venv/bin/python" -m pip install --disable-pip-version-check \
    -C build-dir="$PWD/build-python/wheel-$name" ./bindings/python
  # From the tests' directory, so that `import nexar` is the installed package.
  (cd bindings/python && timeout 900 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
     --timeout 120 tests)
}

first="$(command -v python3)"
run_with "$first" path
if [ -x /usr/bin/python3 ] && [ "$(realpath /usr/bin/python3)" != "$(realpath "$first")" ] &&
   [ "$(/usr/bin/python3 -c 'import sys; print(sys.prefix)')" != \
     "$("$first" -c 'import sys; print(sys.prefix)')" ]; then
  run_with /usr/bin/python3 system
fi
