#!/usr/bin/env bash
# Collectives across hosts (docs/same-host.md): a 64 MiB u64 allreduce on 2
# hosts x 2 ranks (network namespaces on one bridge, made here; needs root),
# flat (NEXAR_ALLREDUCE_ALGO=ring: every byte over QUIC) against the default
# hierarchical path (reduce-scatter and allgather on each host, one shard
# per rank across). Each run starts a real nexar-seed and 4
# tests/cluster/hosts_worker.c processes (ranks 0 and 2 on one host, 1 and 3
# on the other) doing K timed allreduces between barriers; a round's time is
# its slowest rank's. Prints the median of every run's rounds, and uptime.
#   scripts/hosts-figures.sh [rounds per run (default 5)] [runs (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3 iproute2
[ -f build/build.ninja ] || scripts/build.sh build
ninja -C build nexar-seed nexar-hosts-worker >/dev/null
python3 - "${1:-5}" "${2:-3}" <<'PY'
import os, re, statistics, subprocess, sys, tempfile, time

rounds, runs = int(sys.argv[1]), int(sys.argv[2])
seed_bin = "build/tools/seed/nexar-seed"
worker_bin = "build/tests/cluster/nexar-hosts-worker"
token = "hosts-figures-token-0123456789abcdef"
count = 8 << 20  # u64: 64 MiB
prefix = f"nxh{os.getpid()}"
made = []


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


def ns(name):
    return f"{prefix}-{name}"


def addr(i):
    return f"10.81.0.{i + 1}"


def make_hosts(n):
    ip("netns", "add", ns("hub"))
    made.append(ns("hub"))
    ip("-n", ns("hub"), "link", "add", "br0", "type", "bridge")
    ip("-n", ns("hub"), "link", "set", "br0", "up")
    for i in range(n):
        h = ns(f"h{i}")
        ip("netns", "add", h)
        made.append(h)
        ip("-n", h, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns",
           ns("hub"))
        ip("-n", h, "addr", "add", f"{addr(i)}/24", "dev", "eth0")
        ip("-n", h, "link", "set", "eth0", "up")
        ip("-n", h, "link", "set", "lo", "up")
        ip("-n", ns("hub"), "link", "set", f"p{i}", "master", "br0")
        ip("-n", ns("hub"), "link", "set", f"p{i}", "up")


def on(i):
    return ["ip", "netns", "exec", ns(f"h{i}")]


def run(extra_env):
    """One run: the rounds' times in ms (each its slowest rank's)."""
    d = tempfile.mkdtemp(prefix="nexar-hosts-")
    tok = os.path.join(d, "token")
    with open(tok, "w") as f:
        f.write(token + "\n")
    os.chmod(tok, 0o600)
    seed_addr = addr(0) + ":29700"
    with open(os.path.join(d, "seed.out"), "w") as so:
        seed = subprocess.Popen(on(0) + [seed_bin, "--world-size", "4", "--token-file", tok,
                                         "--listen", seed_addr], stdout=so,
                                stderr=subprocess.STDOUT)
    procs, outs = [], []
    try:
        time.sleep(0.3)
        for r in range(4):
            env = dict(os.environ, NEXAR_SEED=seed_addr, NEXAR_CLUSTER_TOKEN=token,
                       NEXAR_RANK=str(r), HOSTS_WORKER_COUNT=str(count),
                       HOSTS_WORKER_BENCH=str(rounds), **extra_env)
            outs.append(os.path.join(d, f"rank{r}.out"))
            with open(outs[-1], "w") as o:
                procs.append(subprocess.Popen(on(r % 2) + [worker_bin], env=env, stdout=o,
                                              stderr=subprocess.STDOUT))
        for p in procs:
            p.wait(timeout=600)
        per_rank = []
        for path in outs:
            text = open(path).read()
            t = [int(x) / 1000 for x in re.findall(r"TIME rank=\d+ us=(\d+)", text)]
            if len(t) != rounds:
                raise SystemExit(f"{path}: {len(t)} of {rounds} rounds:\n{text[-2000:]}")
            per_rank.append(t)
        return [max(r[k] for r in per_rank) for k in range(rounds)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        seed.kill()
        seed.wait()


try:
    make_hosts(2)
    cases = [("flat ring (NEXAR_ALLREDUCE_ALGO=ring)", {"NEXAR_ALLREDUCE_ALGO": "ring"}),
             ("hierarchical (default)", {})]
    print(f"64 MiB u64 allreduce, 2 hosts x 2 ranks, {rounds} rounds x {runs} runs")
    for name, env in cases:
        meds = [statistics.median(run(env)) for _ in range(runs)]
        ms = statistics.median(meds)
        print(f"  {name:40s} median {ms:8.1f} ms  (runs: {', '.join(f'{m:.1f}' for m in meds)})"
              f"  busbw {2 * 3 / 4 * 64 * 1.048576 / ms:.2f} GB/s")
    print("  " + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
finally:
    for n in reversed(made):
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
PY
