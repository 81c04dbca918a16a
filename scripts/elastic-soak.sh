#!/usr/bin/env bash
# Elastic soak: an elastic world of 4 processes formed through a real elastic
# seed (nexar-seed --elastic) runs exact collectives without pause
# (tests/soak/elastic_soak_worker.c) while, for the given number of cycles
# (default 20), one member is killed with SIGKILL (the process at rank 3, then
# rank 2, in turn), the survivors shrink to 3, a new process joins and the
# world grows back to 4. Ranks 0 and 1 and the seed live through every cycle:
# their anonymous RSS (RssAnon), open fds and threads are sampled once the
# world is back to 4 each cycle. After the warm-up (a quarter of the cycles,
# at least 1) fds and threads may not grow at all, and anonymous RSS in the
# second half not beyond 5 % + 8 MiB above its peak before. Fails on a wrong
# result, a survivor blaming another rank than the killed one, a world that
# does not come back within 60 s, or any growth; prints each cycle's times
# (kill -> 3 ranks again, -> 4 ranks again) and the sampled figures.
#   scripts/elastic-soak.sh [cycles]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3
[ -f build/build.ninja ] || scripts/build.sh build
ninja -C build nexar-seed nexar-elastic-soak-worker >/dev/null
python3 - "${1:-20}" <<'PY'
import os, re, signal, subprocess, sys, tempfile, time

cycles = int(sys.argv[1])
seed_bin = "build/tools/seed/nexar-seed"
worker_bin = "build/tests/soak/nexar-elastic-soak-worker"
token = "elastic-soak-token-0123456789abcdef"
d = tempfile.mkdtemp(prefix="nexar-elastic-soak-")
stop = os.path.join(d, "stop")
tok = os.path.join(d, "token")
with open(tok, "w") as f:
    f.write(token + "\n")
os.chmod(tok, 0o600)
problems = []


def fail(why):
    raise SystemExit(f"elastic-soak: FAILED: {why}\n(logs in {d})")


def read(path):
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def wait_for(pred, seconds, what):
    end = time.time() + seconds
    while time.time() < end:
        if pred():
            return
        time.sleep(0.01)
    fail(f"{what} within {seconds} s")


class Proc:
    def __init__(self, name, cmd, env):
        self.name, self.out = name, os.path.join(d, name + ".out")
        with open(self.out, "w") as o:
            self.p = subprocess.Popen(cmd, env=env, stdout=o, stderr=subprocess.STDOUT)

    def text(self):
        return read(self.out)

    def comms(self):
        """Each communicator it checked exactly: (rank, size)."""
        return [(int(r), int(n)) for r, n in re.findall(r"COMM rank=(\d+) size=(\d+)", self.text())]


def sample(pid):
    status = read(f"/proc/{pid}/status")
    field = lambda k: int(re.search(rf"^{k}:\s+(\d+)", status, re.M)[1])
    return {"anon_kb": field("RssAnon"), "threads": field("Threads"),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


seed_out = os.path.join(d, "seed.out")
with open(seed_out, "w") as so:
    seed = subprocess.Popen([seed_bin, "--world-size", "4", "--token-file", tok, "--elastic"],
                            stdout=so, stderr=subprocess.STDOUT)
procs = []
try:
    wait_for(lambda: "listening on " in read(seed_out), 20, "the seed did not start")
    addr = re.search(r"listening on (\S+)", read(seed_out))[1]
    base_env = dict(os.environ, NEXAR_SEED=addr, NEXAR_CLUSTER_TOKEN=token, NEXAR_ELASTIC="1",
                    NEXAR_JOIN_TIMEOUT_SECS="60", NEXAR_HEARTBEAT_INTERVAL_SECS="1",
                    NEXAR_HEARTBEAT_TIMEOUT_SECS="3")
    live = {}  # name -> Proc
    for r in range(4):
        live[f"m{r}"] = Proc(f"m{r}", [worker_bin, stop], dict(base_env, NEXAR_RANK=str(r)))
    procs = list(live.values())

    def world_of(size, seen):
        """Every live process checked a communicator of `size` after the
        `seen[name]` it had checked before."""
        def ok():
            for name, p in live.items():
                if "ERROR" in p.text():
                    fail(f"{name}: {p.text()[-1500:]}")
                c = p.comms()
                if len(c) <= seen.get(name, 0) or c[-1][1] != size:
                    return False
            return True
        return ok

    wait_for(world_of(4, {}), 60, "the world of 4 did not form")
    watched = ["m0", "m1"]
    samples = {n: [] for n in watched + ["seed"]}
    print(f"elastic soak: {cycles} cycles of kill -9, shrink to 3, join, grow to 4; logs in {d}")
    print(f"{'cycle':>5} {'victim':>6} {'->3 ms':>8} {'->4 ms':>8}  "
          + "  ".join(f"{n + ' anon/fds/thr':>20}" for n in samples))
    for c in range(1, cycles + 1):
        victim_rank = 3 if c % 2 else 2
        victim = next(n for n, p in live.items() if p.comms()[-1][0] == victim_rank)
        seen = {n: len(p.comms()) for n, p in live.items()}
        t0 = time.time()
        live[victim].p.send_signal(signal.SIGKILL)
        live[victim].p.wait(timeout=10)
        del live[victim]
        wait_for(world_of(3, seen), 60, f"cycle {c}: the survivors did not shrink to 3")
        t3 = time.time()
        for n, p in live.items():
            blamed = re.findall(r"FAILED rank=\d+ status=-5 failed_rank=(-?\d+)", p.text())
            if blamed and blamed[-1] != str(victim_rank):
                problems.append(f"cycle {c}: {n} blamed rank {blamed[-1]}, not {victim_rank}")
        seen = {n: len(p.comms()) for n, p in live.items()}
        joiner = f"j{c}"
        live[joiner] = Proc(joiner, [worker_bin, stop], base_env)
        procs.append(live[joiner])
        wait_for(world_of(4, seen), 60, f"cycle {c}: the world did not grow back to 4")
        t4 = time.time()
        pids = {n: live[n].p.pid for n in watched}
        pids["seed"] = seed.pid
        row = []
        for n, pid in pids.items():
            s = sample(pid)
            samples[n].append(s)
            row.append(f"{s['anon_kb']:>10}/{s['fds']:>3}/{s['threads']:>3}")
        print(f"{c:>5} {victim_rank:>6} {(t3 - t0) * 1e3:8.0f} {(t4 - t0) * 1e3:8.0f}  "
              + "  ".join(f"{x:>20}" for x in row), flush=True)
    open(stop, "w").close()
    for n, p in live.items():
        try:
            code = p.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fail(f"{n} did not stop: {p.text()[-1500:]}")
        if code != 0 or "STOPPED rank=" not in p.text():
            problems.append(f"{n} exited with {code}: {p.text()[-1500:]}")
finally:
    for p in procs:
        if p.p.poll() is None:
            p.p.kill()
            p.p.wait()
    seed.kill()
    seed.wait()

warm = max(1, cycles // 4)
for n, s in samples.items():
    after = s[warm:]
    if not after:
        continue
    base = after[0]
    for key in ("fds", "threads"):
        grown = [x[key] for x in after if x[key] > base[key]]
        if grown:
            problems.append(f"{n}: {key} grew from {base[key]} to {max(grown)} after the warm-up")
    if len(after) >= 4:
        mid = len(s) - len(after) // 2
        before, second = max(x["anon_kb"] for x in s[:mid]), max(x["anon_kb"] for x in s[mid:])
        if second > before * 1.05 + 8192:
            problems.append(f"{n}: anonymous RSS grew to {second} kB in the second half after the "
                            f"warm-up, more than 5 % + 8 MiB above {before} kB before")
for p in problems:
    print("elastic-soak: FAILED:", p)
print("elastic-soak: ok" if not problems else f"elastic-soak: {len(problems)} problem(s); logs in {d}")
sys.exit(1 if problems else 0)
PY
