#!/usr/bin/env bash
# Soak: 4 processes formed through a real seed (nexar-run) run mixed traffic
# for the given minutes (default 10): every collective, p2p of many sizes and
# tags, RPC, split and destroy of sub-communicators, every result checked
# (tests/soak/soak_worker.c). Each rank reports its RSS, open fds, threads and
# QUIC streams every few seconds; after the warm-up (a quarter of the run, at
# least 30 s) none may grow: fds, threads, streams and connections not at
# all, tag match state (what is in flight) must keep draining to its floor,
# anonymous RSS (heap, stacks: not the same-host rings, whose pages are
# touched lazily up to the segment's fixed size) in the second half after the
# warm-up not beyond 5 % + 8 MiB above its peak before (the buffer pool fills
# lazily up to its bounds, a large buffer's pages at a time; a leak keeps
# growing). Fails on a wrong result, a failed rank or any
# growth, and prints each rank's figures (heap_kb: glibc malloc in use).
#   scripts/soak.sh [minutes] [sample seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-10}"
every="${2:-}"
scripts/install-deps.sh python3
[ -f build/build.ninja ] || scripts/build.sh build
ninja -C build nexar-run nexar-soak-worker >/dev/null
seconds=$(python3 -c "print(int(float('$minutes') * 60))")
[ -n "$every" ] || every=$(python3 -c "print(max(5, min(30, $seconds // 60)))")
mkdir -p build/soak
log="build/soak/soak-$(date -u +%Y%m%dT%H%M%SZ).log"
echo "soak: 4 ranks for ${seconds} s, a sample every ${every} s; log: $log"
rc=0
# Bounded: the run, plus formation, the last round and the ranks' exit.
timeout --kill-after=10 $((seconds + 300)) build/tools/run/nexar-run -n 4 -- \
  build/tests/soak/nexar-soak-worker --seconds "$seconds" --sample-seconds "$every" \
  >"$log" 2>&1 || rc=$?
grep -E 'SOAK_FAILED|nexar-run: (failed|rank)' "$log" || true
python3 - "$log" "$seconds" "$rc" <<'PY'
import re, sys
log, seconds, rc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
warm = max(30.0, seconds / 4)
samples, done, failed = {}, {}, []
for line in open(log, errors="replace"):
    if "SOAK_FAILED" in line:
        failed.append(line.strip())
    m = re.search(r"SOAK_DONE rank=(\d+) rounds=(\d+)", line)
    if m:
        done[int(m[1])] = int(m[2])
    m = re.search(r"SAMPLE (.*)", line)
    if m:
        f = dict(kv.split("=") for kv in m[1].split())
        samples.setdefault(int(f["rank"]), []).append({k: float(v) for k, v in f.items()})
problems = list(failed)
if rc != 0:
    problems.append(f"nexar-run exited with status {rc}")
if sorted(done) != [0, 1, 2, 3]:
    problems.append(f"ranks that finished: {sorted(done)} (expected 0-3)")
elif len(set(done.values())) != 1:
    problems.append(f"ranks ran different numbers of rounds: {done}")
print(f"{'rank':>4} {'rounds':>7} {'anon_kb: 1st half':>18} {'2nd half':>9} {'rss':>7} {'shmem':>6} "
      f"{'fds':>7} {'threads':>7} {'streams':>9} {'conns':>5} {'heap_kb':>15}")
for rank in sorted(samples):
    s = samples[rank]
    after = [x for x in s if x["t"] >= warm]
    if len(after) < 4:
        problems.append(f"rank {rank}: too few samples after the {warm:.0f} s warm-up")
        continue
    # RSS: the buffer pool fills lazily, up to its bounds, so RSS may step up
    # now and then; a leak keeps going. The second half after the warm-up
    # may not exceed everything before it by more than 5 %.
    # Anonymous memory only: shared ring pages count in RSS once touched and
    # fill up to the segment's fixed size, which is not a leak.
    mem = "anon_kb" if "anon_kb" in s[0] else "rss_kb"
    mid = (warm + after[-1]["t"]) / 2
    first = [x[mem] for x in s if x["t"] < mid]
    second = [x[mem] for x in after if x["t"] >= mid]
    base, last = after[0], after[-1]
    print(f"{rank:>4} {int(last['rounds']):>7} {int(max(first)):>18} {int(max(second)):>9} "
          f"{int(last['rss_kb']):>7} {int(last.get('shmem_kb', 0)):>6} {int(base['fds']):>3}>{int(last['fds']):<3} "
          f"{int(base['threads']):>3}>{int(last['threads']):<3} "
          f"{int(base['streams']):>4}>{int(last['streams']):<4} {int(last['conns']):>5} "
          f"{int(base.get('heap_kb', -1)):>7}>{int(last.get('heap_kb', -1)):<7}")
    # A leak keeps growing; the pool filling lazily steps up by at most one
    # large pool buffer's pages (8 MiB) at a time.
    if max(second) > max(first) * 1.05 + 8192:
        problems.append(f"rank {rank}: {mem[:-3]} RSS grew to {int(max(second))} kB in the second half "
                        f"after the warm-up, more than 5 % + 8 MiB above {int(max(first))} kB before")
    # Tag match state is what is in flight when the sample is taken: it may
    # not stay up (its floor may not rise), a leak of it would.
    floor = [x["pending_tags"] for x in after if x["t"] < mid]
    if floor and min(x["pending_tags"] for x in after if x["t"] >= mid) > min(floor):
        problems.append(f"rank {rank}: tag match state never drained below "
                        f"{int(min(x['pending_tags'] for x in after if x['t'] >= mid))} "
                        f"in the second half after the warm-up")
    for key in ("fds", "threads", "streams", "conns"):
        grown = [x for x in after if x[key] > base[key]]
        if grown:
            problems.append(f"rank {rank}: {key} grew from {int(base[key])} to "
                            f"{int(grown[-1][key])} after the warm-up (at {grown[0]['t']:.0f} s)")
for p in problems:
    print("soak: FAILED:", p)
print("soak: ok" if not problems else f"soak: {len(problems)} problem(s); log: {log}")
sys.exit(1 if problems else 0)
PY
