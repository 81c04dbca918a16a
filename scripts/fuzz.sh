#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder of bytes from the network
# (tests/fuzz/): builds each harness with clang's libFuzzer under
# AddressSanitizer + UndefinedBehaviorSanitizer into build-fuzz/, then runs
# each for the given seconds (default 30), or for a number of executions
# (the long run), a harness per core at a time.
#   scripts/fuzz.sh [seconds | --runs N] [harness...]
# Inputs found that add coverage are kept in build-fuzz/corpus/<harness>/ (a
# later run goes on from them); the seed corpora in tests/fuzz/corpus/ are
# only read. An input that crashes a harness is written to
# build-fuzz/crashes/<harness>/ and the script fails; copied to
# tests/fuzz/regressions/<harness>/, ctest replays it in every build.
set -euo pipefail
cd "$(dirname "$0")/.."
# How long each harness runs: libFuzzer's -max_total_time or -runs.
if [ "${1:-}" = "--runs" ]; then
  budget=(-runs="$2"); shift 2
else
  budget=(-max_total_time="${1:-30}"); shift || true
fi
scripts/install-deps.sh clang libclang-rt-14-dev llvm python3
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  harnesses=(control_codec join_messages frame_header relay_frame stream_frame_scan
             receive_framer rpc_frames shm_ring)
fi

# The library comes from the release build (build/, gcc, as scripts/build.sh
# makes it); the decoders are compiled again here with clang, with
# libFuzzer's coverage and the sanitizers, and linked ahead of it, so that
# the harnesses use them. (clang 14 cannot build the whole library:
# coroutines with coverage and UBSan, a CPU feature name.)
[ -f build/build.ninja ] || scripts/build.sh build
ninja -C build nexar_core tests/fuzz/fuzz_replay_control_codec >/dev/null
dir=build-fuzz
mkdir -p "$dir/obj"
cc=(clang++)
command -v ccache >/dev/null && cc=(env CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 ccache clang++)
# Defines and include paths as the library was compiled with (its headers
# depend on them), from its compile database.
read -r -a defs < <(python3 - build/compile_commands.json <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"].endswith("src/transport/codec.cpp"):
        args = shlex.split(e["command"])
        out = [a for i, a in enumerate(args)
               if (a.startswith(("-D", "-I")) and a != "-DNDEBUG")
               or a == "-isystem" or (i > 0 and args[i - 1] == "-isystem")]
        print(" ".join(out))
        break
PY
)
# What the library links with, from the replay harness's link line.
read -r -a libs < <(ninja -C build -t commands tests/fuzz/fuzz_replay_control_codec | tail -1 |
  sed -e 's/.*libnexar_core\.a//' -e 's/&&.*//')
san=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
flags=(-std=c++20 -O1 -g -Wall -Wextra "${san[@]}" "${defs[@]}" -Itests/fuzz)
decoders=(transport/codec transport/frame transport/stream_frame_scan transport/receive_framer
          transport/socket_address transport/tls_credentials cluster/join core/log
          transport/shm_channel transport/shm_segment)
# Compiles and runs go a core each: at most $lanes jobs at a time. A failed
# job is written down, and all_lanes_done fails the script for it.
lanes=$(nproc)
failures="$dir/failed-jobs"
rm -f "$failures"
in_lane() {
  while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do wait -n; done
  { "$@" || echo "failed: $*" >>"$failures"; } &
}
all_lanes_done() {
  wait
  if [ -s "$failures" ]; then cat "$failures"; exit 1; fi
}
objs=()
for d in "${decoders[@]}"; do
  o="$dir/obj/${d//\//_}.o"
  in_lane "${cc[@]}" "${flags[@]}" -fsanitize=fuzzer-no-link -c "src/$d.cpp" -o "$o"
  objs+=("$o")
done
for h in "${harnesses[@]}"; do
  in_lane "${cc[@]}" "${flags[@]}" -fsanitize=fuzzer -c "tests/fuzz/$h.cpp" -o "$dir/obj/fuzz_$h.o"
done
all_lanes_done
for h in "${harnesses[@]}"; do
  in_lane clang++ "${san[@]}" -fsanitize=fuzzer "$dir/obj/fuzz_$h.o" "${objs[@]}" \
    build/libnexar_core.a "${libs[@]}" -lpthread -o "$dir/fuzz_$h"
done
all_lanes_done

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# One harness's run; its result goes to $dir/result-<harness>.
fuzz_one() {
  local h="$1" work="$dir/corpus/$1" crashes="$dir/crashes/$1" log="$dir/fuzz-$1.log"
  local result=ok
  mkdir -p "$work" "$crashes"
  if ! "$dir/fuzz_$h" "${budget[@]}" -max_len=8192 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" \
      "$work" "tests/fuzz/corpus/$h" >"$log" 2>&1; then
    result="FAILED: $(ls "$crashes" | head -3 | tr '\n' ' ')(log: $log)"
  fi
  echo "$result" >"$dir/result-$h"
}
for h in "${harnesses[@]}"; do in_lane fuzz_one "$h"; done
all_lanes_done
failed=()
printf '%-20s %14s %8s  %s\n' harness executions corpus result
for h in "${harnesses[@]}"; do
  result=$(cat "$dir/result-$h")
  [ "$result" = ok ] || failed+=("$h")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz-$h.log" | tail -1)
  printf '%-20s %14s %8s  %s\n' "$h" "${execs:-?}" "$(ls "$dir/corpus/$h" | wc -l)" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  for h in "${failed[@]}"; do
    echo "== $h"
    grep -E -A30 'ERROR|fuzz invariant|runtime error|deadly signal' "$dir/fuzz-$h.log" | head -60
  done
  exit 1
fi
