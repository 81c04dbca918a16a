#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test
# (ctest), the fuzz harnesses and the soak (scripts/fuzz.sh, soak.sh; the
# lossy network, scripts/lossy.sh, with NEXAR_TEST_LOSSY=1), the Python, Go and Rust bindings' tests
# (scripts/test-python.sh, test-go.sh, test-rust.sh), the PyTorch backend
# (test-torch.sh) and the Debian packages
# (test-deb.sh), then builds again with AddressSanitizer +
# UndefinedBehaviorSanitizer and runs the tests once more under them, then
# with ThreadSanitizer. Each stage prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage_start=$SECONDS
stage() {
  [ "$stage_start" = "$start" ] || echo "   (took $((SECONDS - stage_start)) s; $((SECONDS - start)) s in all)"
  stage_start=$SECONDS
  echo "== $*"
}
# ctest in build dir $1 with per-test timeout $2, excluding regex $3: two
# tests at a time (most wait on their processes, not on a core), except the
# load-sensitive ones (valgrind's run, the handshake flood, a frozen rank's
# timing, the all-pairs sweeps of 4 to 8 in-process ranks, the benchmark
# tool's), which run alone after.
serial='^valgrind\.|StalledHandshakesAreCapped|FrozenRankWoken|AllPairsAllSizes|^bench\.'
run_ctest() {
  local dir="$1" timeout="$2" exclude="$3"
  (cd "$dir" && ctest --output-on-failure -j2 --timeout "$timeout" -E "$serial|$exclude" &&
     ctest --output-on-failure -j1 --timeout "$timeout" -R "$serial" -E "$exclude")
}
# ccache: the packages' build reuses the release build's objects (build.sh).
scripts/install-deps.sh ccache
# The peers of nexar-bench's --compare test (Open MPI, Gloo) and matplotlib
# for its plot; ctest cannot install packages.
bench/peers/install.sh
bench/install-plot-deps.sh

stage "format check"
git ls-files '*.c' '*.cpp' '*.h' | xargs clang-format --dry-run --Werror

stage "release build (warnings as errors) and tests"
scripts/build.sh build
run_ctest build 900 '^$'

# Coverage-guided fuzzing of every decoder of network bytes (clang libFuzzer,
# ASan + UBSan), 20 s each, and a 2-minute soak of 4 processes through a
# seed whose resources must stay flat (docs/testing.md).
stage "fuzzing (scripts/fuzz.sh 20)"
scripts/fuzz.sh 20
stage "soak (scripts/soak.sh 2)"
scripts/soak.sh 2
# 3 cycles of kill -9, shrink, join and grow in an elastic world of 4, every
# result checked, fds and threads flat (a few seconds; 20 cycles on request).
stage "elastic soak (scripts/elastic-soak.sh 3)"
scripts/elastic-soak.sh 3
# 4 hosts (network namespaces) with lossy and rate-limited links, a link
# down for 2 s and one down past the heartbeat timeout (docs/testing.md):
# about 4 minutes, so on request only.
if [ "${NEXAR_TEST_LOSSY:-0}" = "1" ]; then
  stage "lossy network (scripts/lossy.sh 10 16M)"
  scripts/lossy.sh 10 16M
fi

stage "python binding (pip install ./bindings/python, pytest)"
scripts/test-python.sh

stage "pytorch backend"
scripts/test-torch.sh

stage "go binding (go test against the installed libnexar)"
scripts/test-go.sh

stage "rust binding (cargo test against the installed libnexar)"
scripts/test-rust.sh

stage "debian packages (build, apt install, build and run a program against them)"
scripts/test-deb.sh

if [ "${NEXAR_SKIP_SANITIZERS:-0}" != "1" ]; then
  # Line tables are all a sanitizer's report needs (file, line, function);
  # full debug info makes these builds a third slower.
  line_tables=(-DCMAKE_C_FLAGS_DEBUG=-g1 -DCMAKE_CXX_FLAGS_DEBUG=-g1)
  stage "ASan + UBSan build and tests"
  BUILD_TYPE=Debug scripts/build.sh build-asan -DNEXAR_SANITIZE=address,undefined \
    -DCMAKE_CXX_FLAGS="-O1 -fno-sanitize-recover=undefined" "${line_tables[@]}"
  # Every test but the million-message flatness checks (a measure of memory,
  # not of its safety, and the slowest tests under ASan).
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" \
    run_ctest build-asan 1800 'MillionSmallMessagesStayFlat'

  # ThreadSanitizer for the engine: every test but the exhaustive sweeps, the
  # single-threaded checks of long arithmetic, a training run's convergence,
  # the million-message flatness check, the tool checks and the suites'
  # QUIC-only reruns (TSan runs 5-15x slower; those add coverage of
  # arithmetic or memory, not of threads, and already ran above).
  stage "TSan build and tests"
  BUILD_TYPE=Debug scripts/build.sh build-tsan -DNEXAR_SANITIZE=thread -DCMAKE_CXX_FLAGS="-O1" \
    "${line_tables[@]}"
  heavy='EveryDtypeAndOpOnEveryAlgorithm|AllPairsAllSizes|ForcedAlgorithms|SegmentsOfEveryBlock'
  heavy+='|SurvivesRandomInput|CountsOnEveryWorldSize|SixtyFourRanks|/N13|^bench\.|^quic\.'
  heavy+='|LongVectorsMatchTheReference|LongTensorsKeepTheReferencePositions'
  heavy+='|EveryTopologyEveryWorldUpTo70|MillionSmallMessagesStayFlat|EveryRootEveryWorld'
  heavy+='|EqualsOneAllreducePerTensorForEveryDtypeAndOp|TopkWithErrorFeedbackReachesTheDenseLoss'
  # A deadline, not a race: 64 MiB allreduces against a 2 s heartbeat
  # timeout, which TSan's slowdown on 2 cores can miss (checked above).
  heavy+='|BulkTransfersDoNotDelayHeartbeats'
  TSAN_OPTIONS="halt_on_error=1" run_ctest build-tsan 900 "$heavy"
fi
stage "done"
