#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test
# (ctest), the fuzz harnesses and the soak (scripts/fuzz.sh, soak.sh; the
# lossy network, scripts/lossy.sh, with NEXAR_TEST_LOSSY=1), the Python, Go and Rust bindings' tests
# (scripts/test-python.sh, test-go.sh, test-rust.sh), the PyTorch backend
# (test-torch.sh) and the Debian packages
# (test-deb.sh), then builds again with AddressSanitizer +
# UndefinedBehaviorSanitizer and runs the tests once more under them, then
# with ThreadSanitizer. A Release build checks the build type packagers pick.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: the packages' build reuses the release build's objects (build.sh).
scripts/install-deps.sh ccache
# The peers of nexar-bench's --compare test (Open MPI, Gloo) and matplotlib
# for its plot; ctest cannot install packages.
bench/peers/install.sh
bench/install-plot-deps.sh
jobs=$(nproc)

echo "== format check"
git ls-files '*.c' '*.cpp' '*.h' | xargs clang-format --dry-run --Werror

echo "== release build and tests"
scripts/build.sh build
(cd build && ctest --output-on-failure -j1 --timeout 900)

# Coverage-guided fuzzing of every decoder of network bytes (clang libFuzzer,
# ASan + UBSan), 20 s each, and a 2-minute soak of 4 processes through a
# seed whose resources must stay flat (docs/testing.md).
echo "== fuzzing (scripts/fuzz.sh 20)"
scripts/fuzz.sh 20
echo "== soak (scripts/soak.sh 2)"
scripts/soak.sh 2
# 3 cycles of kill -9, shrink, join and grow in an elastic world of 4, every
# result checked, fds and threads flat (a few seconds; 20 cycles on request).
echo "== elastic soak (scripts/elastic-soak.sh 3)"
scripts/elastic-soak.sh 3
# 4 hosts (network namespaces) with lossy and rate-limited links, a link
# down for 2 s and one down past the heartbeat timeout (docs/testing.md):
# about 4 minutes, so on request only.
if [ "${NEXAR_TEST_LOSSY:-0}" = "1" ]; then
  echo "== lossy network (scripts/lossy.sh 10 16M)"
  scripts/lossy.sh 10 16M
fi

echo "== Release build (the build type packagers pick), warnings as errors"
BUILD_TYPE=Release scripts/build.sh build-release -DNEXAR_BUILD_TESTS=OFF

echo "== python binding (pip install ./bindings/python, pytest)"
scripts/test-python.sh

echo "== pytorch backend"; scripts/test-torch.sh

echo "== go binding (go test against the installed libnexar)"
scripts/test-go.sh

echo "== rust binding (cargo test against the installed libnexar)"
scripts/test-rust.sh

echo "== debian packages (build, apt install, build and run a program against them)"
scripts/test-deb.sh

if [ "${NEXAR_SKIP_SANITIZERS:-0}" != "1" ]; then
  echo "== ASan + UBSan build and tests"
  BUILD_TYPE=Debug scripts/build.sh build-asan -DNEXAR_SANITIZE=address,undefined \
    -DCMAKE_CXX_FLAGS="-O1 -fno-sanitize-recover=undefined"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     LSAN_OPTIONS="suppressions=$PWD/../tests/lsan.supp" \
     ctest --output-on-failure -j1 --timeout 1800)

  # ThreadSanitizer for the engine: every test but the exhaustive sweeps, the
  # tool checks and the suites' QUIC-only reruns (TSan runs 5-15x slower; the
  # sweeps add coverage of arithmetic, not of threads, and already ran above).
  echo "== TSan build and tests"
  BUILD_TYPE=Debug scripts/build.sh build-tsan -DNEXAR_SANITIZE=thread -DCMAKE_CXX_FLAGS="-O1"
  heavy='EveryDtypeAndOpOnEveryAlgorithm|AllPairsAllSizes|ForcedAlgorithms|SegmentsOfEveryBlock'
  heavy+='|SurvivesRandomInput|CountsOnEveryWorldSize|SixtyFourRanks|/N13|^bench\.|^quic\.'
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1" \
     ctest --output-on-failure -j1 --timeout 900 -E "$heavy")
fi
