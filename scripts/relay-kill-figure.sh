#!/usr/bin/env bash
# Relay-healing figure (docs/relay.md): a relay rank killed during a stream
# of sends through it, and the time until the stream flows again over the
# new route. Each run starts a real nexar-seed and 6 relay-stream workers
# (tests/cluster/relay_stream_worker.c) on a ring: rank 0 sends 200 numbered
# 96 KiB messages to rank 2, one every 25 ms, through rank 1. Once rank 2 has
# 40, rank 1 gets kill -9. The survivors find the death by the heartbeat
# timeout, route round it (0 -> 5 -> 4 -> 3 -> 2), and rank 0 sends again
# what failed.
#
# Measured by CLOCK_MONOTONIC (one host): from the kill to the first message
# that reached rank 2 after the stall (messages already past rank 1 at the
# kill may still land in the first milliseconds; the first arrival after a
# gap of more than 0.5 s is the first over the new route). Each run also
# checks that rank 2 got every message, in order, none twice beyond the
# sends that rank 0 retried after a failure.
#   scripts/relay-kill-figure.sh [repeats (default 3)]
# Heartbeats: interval 1 s, timeout $HB_TIMEOUT (default 3) s.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3
[ -f build/build.ninja ] || scripts/build.sh build
ninja -C build nexar-seed nexar-relay-stream-worker >/dev/null
python3 - "${1:-3}" "${HB_TIMEOUT:-3}" <<'PY'
import os, re, signal, statistics, subprocess, sys, tempfile, time

repeats, hb_timeout = int(sys.argv[1]), sys.argv[2]
seed_bin = "build/tools/seed/nexar-seed"
worker_bin = "build/tests/cluster/nexar-relay-stream-worker"
token = "relay-kill-figure-token-0123456789abcdef"
world = 6
stall_gap_ns = 500_000_000


def wait_for(path, text, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return True
        time.sleep(0.005)
    return False


def one_run(tmp):
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    procs = []
    seed_out = os.path.join(tmp, "seed.out")
    seed = subprocess.Popen([seed_bin, "--world-size", str(world), "--token-file", token_file],
                            stdout=open(seed_out, "w"), stderr=subprocess.STDOUT)
    procs.append(seed)
    try:
        if not wait_for(seed_out, "listening on ", 20):
            raise RuntimeError("the seed did not start: " + open(seed_out).read())
        addr = re.search(r"listening on (\S+)", open(seed_out).read()).group(1)
        outs, workers = [], []
        for r in range(world):
            env = dict(os.environ, NEXAR_SEED=addr, NEXAR_CLUSTER_TOKEN=token,
                       NEXAR_RANK=str(r), NEXAR_WORLD_SIZE=str(world), NEXAR_TOPOLOGY="ring",
                       NEXAR_SHM="off", NEXAR_HEARTBEAT_INTERVAL_SECS="1",
                       NEXAR_HEARTBEAT_TIMEOUT_SECS=hb_timeout, RELAY_STREAM_TIMES="1")
            outs.append(os.path.join(tmp, f"rank{r}.out"))
            workers.append(subprocess.Popen([worker_bin], env=env, stdout=open(outs[r], "w"),
                                            stderr=subprocess.STDOUT))
        procs += workers
        if not wait_for(outs[2], "PROGRESS received=40", 90):
            raise RuntimeError("rank 2 did not get 40 messages: " + open(outs[2]).read())
        killed_ns = time.monotonic_ns()
        workers[1].send_signal(signal.SIGKILL)
        for r in (0, 2, 3, 4, 5):
            if workers[r].wait(timeout=120) != 0:
                raise RuntimeError(f"rank {r} failed: " + open(outs[r]).read())
        got = open(outs[2]).read()
        done = re.search(r"STREAM_DONE received=(\d+) duplicates=(\d+) out_of_order=(\d+)", got)
        retried = len(re.findall(r"^SEND_FAILED", open(outs[0]).read(), re.M))
        if not done or done.group(1) != "200" or done.group(3) != "0" or int(done.group(2)) > retried:
            raise RuntimeError("stream incomplete or out of order: " + got[-2000:])
        arrivals = [int(t) for t in re.findall(r"^ARRIVED seq=\d+ t_ns=(\d+)", got, re.M)]
        prev, healed = None, None
        for t in arrivals:
            if t > killed_ns and prev is not None and t - prev > stall_gap_ns:
                healed = t
                break
            prev = t
        if healed is None:  # no stall at all: the first arrival after the kill
            healed = next(t for t in arrivals if t > killed_ns)
        return (healed - killed_ns) / 1e9, retried, int(done.group(2))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


results = []
for i in range(repeats):
    with tempfile.TemporaryDirectory() as tmp:
        secs, retried, dups = one_run(tmp)
    results.append(secs)
    print(f"run {i + 1}: new route in use {secs:.3f} s after the kill "
          f"(sends retried {retried}, duplicates {dups}, lost 0, out of order 0)", flush=True)
print(f"median {statistics.median(results):.3f} s over {repeats} runs; heartbeat interval 1 s, "
      f"timeout {hb_timeout} s; goal: within {float(hb_timeout) + 1:.0f} s")
with open("/proc/loadavg") as f:
    print("load average:", " ".join(f.read().split()[:3]))
PY
