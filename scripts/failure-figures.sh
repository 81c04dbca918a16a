#!/usr/bin/env bash
# Failure figures (docs/failures.md): how fast failures are known, on this
# host. Each case starts a real nexar-seed and 4 failure workers
# (tests/cluster/failure_worker.c: allreduces with checked results; on a
# failure each survivor revokes, shrinks and goes on) and measures, by the
# workers' wall clocks:
#   kill9-shm    kill -9 of rank 2 -> every survivor's PEER_FAILED (same-host path)
#   kill9-quic   the same with NEXAR_SHM=off (heartbeats over QUIC only)
#   sigstop      SIGSTOP of rank 2 -> every survivor's PEER_FAILED
#   revoke       rank 0 revokes while the others wait in an allreduce ->
#                every other rank's NEXAR_ERR_REVOKED
#   shrink       shrink at each survivor (3 of 4 after a kill, all 4 after a
#                revoke): from the call to its return
#   bulk         10 allreduces of 64 MiB over QUIC (NEXAR_SHM=off) with a
#                heartbeat timeout of 2 s: no rank may be declared failed
#   kill9-hosts  kill -9 of rank 2 of 4 ranks on 4 separate hosts (network
#                namespaces on one bridge, made here; needs root: skipped
#                otherwise, as kill -9 must reach the worker itself)
#                -> every survivor's PEER_FAILED naming rank 2
#   kill9-8, revoke-8   the kill9-shm and revoke cases with 8 ranks: the
#                shrink that follows, timed from the moment the last
#                survivor knows of the failure to the last shrink's return
# Heartbeats: interval 1 s, timeout $HB_TIMEOUT (default 3) s.
#   scripts/failure-figures.sh [repeats (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3 iproute2
[ -f build/build.ninja ] || scripts/build.sh build
ninja -C build nexar-seed nexar-failure-worker >/dev/null
python3 - "${1:-3}" "${HB_TIMEOUT:-3}" <<'PY'
import os, re, signal, subprocess, sys, tempfile, time

repeats, hb_timeout = int(sys.argv[1]), sys.argv[2]
seed_bin = "build/tools/seed/nexar-seed"
worker_bin = "build/tests/cluster/nexar-failure-worker"
token = "failure-figures-token-0123456789abcdef"


def wait_for(path, text, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return True
        time.sleep(0.01)
    return False


def times(out, event):
    """rank -> wall-clock microseconds of the worker's AT line for event."""
    return {int(r): int(us) for r, us in re.findall(rf"AT rank=(\d+) event={event} us=(\d+)", out)}


class Hosts:
    """n "hosts": network namespaces, each with an eth0 veth whose peer sits
    on a bridge in a hub namespace; deleted by close()."""

    def __init__(self, n):
        self.prefix = f"nxf{os.getpid()}"
        self.made = []
        try:
            self.add("hub")
            self.ip("-n", self.ns("hub"), "link", "add", "br0", "type", "bridge")
            self.ip("-n", self.ns("hub"), "link", "set", "br0", "up")
            for i in range(n):
                h = self.add(f"h{i}")
                self.ip("-n", h, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}",
                        "netns", self.ns("hub"))
                self.ip("-n", h, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
                self.ip("-n", h, "link", "set", "eth0", "up")
                self.ip("-n", h, "link", "set", "lo", "up")
                self.ip("-n", self.ns("hub"), "link", "set", f"p{i}", "master", "br0")
                self.ip("-n", self.ns("hub"), "link", "set", f"p{i}", "up")
        except BaseException:
            self.close()
            raise

    def ns(self, name):
        return f"{self.prefix}-{name}"

    @staticmethod
    def addr(i):
        return f"10.79.0.{i + 1}"

    def ip(self, *args):
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def add(self, name):
        self.ip("netns", "add", self.ns(name))
        self.made.append(self.ns(name))
        return self.ns(name)

    def on(self, i):
        """Prefix that runs a command on host i (ip netns exec execs it: the
        process started is the command itself)."""
        return ["ip", "netns", "exec", self.ns(f"h{i}")]

    def close(self):
        for n in reversed(self.made):
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        self.made = []


def run_case(name, extra_env, victim, action, n=4, hosts=None):
    """Starts a seed and n workers (on hosts, when given: the seed and rank i
    on host i), runs action(procs) once every worker runs; returns (start
    microseconds of the event, outputs by rank)."""
    d = tempfile.mkdtemp(prefix="nexar-figures-")
    tok = os.path.join(d, "token")
    with open(tok, "w") as f:
        f.write(token + "\n")
    os.chmod(tok, 0o600)
    seed_out = os.path.join(d, "seed.out")
    procs = []
    seed_cmd = [seed_bin, "--world-size", str(n), "--token-file", tok]
    if hosts:
        seed_cmd = hosts.on(0) + seed_cmd + ["--listen", Hosts.addr(0) + ":29600"]
    with open(seed_out, "w") as so:
        seed = subprocess.Popen(seed_cmd, stdout=so, stderr=subprocess.STDOUT)
    try:
        if not wait_for(seed_out, "listening on ", 20):
            raise SystemExit(f"{name}: the seed did not start")
        addr = re.search(r"listening on (\S+)", open(seed_out).read())[1]
        outs = []
        for r in range(n):
            env = dict(os.environ, NEXAR_SEED=addr, NEXAR_CLUSTER_TOKEN=token, NEXAR_RANK=str(r),
                       NEXAR_HEARTBEAT_INTERVAL_SECS="1", NEXAR_HEARTBEAT_TIMEOUT_SECS=hb_timeout)
            env.update(extra_env)
            outs.append(os.path.join(d, f"rank{r}.out"))
            with open(outs[-1], "w") as o:
                procs.append(subprocess.Popen((hosts.on(r) if hosts else []) + [worker_bin],
                                              env=env, stdout=o, stderr=subprocess.STDOUT))
        for r in range(n):
            if not wait_for(outs[r], "RUNNING rank=", 60):
                raise SystemExit(f"{name}: rank {r} did not start:\n" + open(outs[r]).read())
        t0 = action(procs)
        for r, p in enumerate(procs):
            if r != victim:
                p.wait(timeout=300)
        if victim is not None and procs[victim].poll() is None:
            procs[victim].send_signal(signal.SIGCONT)
            procs[victim].wait(timeout=60)
        return t0, [open(o, errors="replace").read() for o in outs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        seed.kill()
        seed.wait()


def now_us():
    return time.time_ns() // 1000


def signal_rank(sig):
    def act(procs):
        t = now_us()
        procs[2].send_signal(sig)
        return t
    return act


def median_max(vals):
    vals = sorted(vals)
    return f"{vals[len(vals) // 2] / 1000:9.1f} {vals[-1] / 1000:9.1f}"


revoke_env = {"FAILURE_WORKER_REVOKE_AFTER": "20"}
# name, environment, victim, action, ranks, on separate hosts
cases = [
    ("kill9-shm", {}, 2, signal_rank(signal.SIGKILL), 4, False),
    ("kill9-quic", {"NEXAR_SHM": "off"}, 2, signal_rank(signal.SIGKILL), 4, False),
    ("sigstop", {}, 2, signal_rank(signal.SIGSTOP), 4, False),
    ("revoke", revoke_env, None, lambda procs: None, 4, False),
    ("kill9-hosts", {}, 2, signal_rank(signal.SIGKILL), 4, True),
    ("kill9-8", {}, 2, signal_rank(signal.SIGKILL), 8, False),
    ("revoke-8", revoke_env, None, lambda procs: None, 8, False),
]
hosts = None
if os.geteuid() == 0:
    hosts = Hosts(4)
else:
    print("kill9-hosts: skipped (network namespaces, and kill -9 of a worker in one, need root)")
    cases = [c for c in cases if not c[5]]
rows = {}
shrinks = {}  # case -> each survivor's shrink call, microseconds
settled = {}  # case -> from the last survivor knowing to the last shrink's return
problems = []
try:
    for rep in range(repeats):
        for name, env, victim, action, n, on_hosts in cases:
            t0, outs = run_case(name, env, victim, action, n, hosts if on_hosts else None)
            survivors = [r for r in range(n) if r != victim]
            known = {}
            if t0 is None:  # revoke: rank 0's own clock says when
                t0 = times(outs[0], "revoke").get(0)
                survivors = list(range(1, n))
                known[0] = t0
            failed = {}
            for r in survivors:
                got = times(outs[r], "failed")
                want = "status=-20" if victim is None else f"status=-5 failed_rank={victim}"
                if r not in got or f"FAILED rank={r} {want}" not in outs[r]:
                    problems.append(f"{name}: rank {r} did not report {want}:\n{outs[r][-2000:]}")
                    continue
                failed[r] = got[r]
            if t0 is None or len(failed) != len(survivors):
                continue
            rows.setdefault(name, []).append(max(failed.values()) - t0)
            known.update(failed)
            ends = []
            for r in range(n):
                start, end = times(outs[r], "shrink-start").get(r), times(outs[r], "shrunk").get(r)
                if start and end and "SHRUNK" in outs[r]:
                    shrinks.setdefault(name, []).append(end - start)
                    ends.append(end)
            if len(ends) == len(known):
                settled.setdefault(name, []).append(max(ends) - max(known.values()))
finally:
    if hosts:
        hosts.close()

print(f"heartbeat interval 1 s, timeout {hb_timeout} s; {repeats} run(s) per case; "
      "times in ms until the last survivor knows")
print(f"{'case':<12} {'median':>9} {'max':>9}  runs")
for name, vals in rows.items():
    print(f"{name:<12} {median_max(vals)}  " + " ".join(f"{v / 1000:.1f}" for v in sorted(vals)))
print("shrink, in ms: each survivor's call (median, max), and from the moment the last survivor")
print("knows of the failure to the last shrink's return (median, max)")
for name, vals in shrinks.items():
    n = next(c[4] for c in cases if c[0] == name)
    ranks = n - 1 if name.startswith(("kill9", "sigstop")) else n
    line = f"{'shrink(' + name + ')':<20} {median_max(vals)}"
    if name in settled:
        line += f"   known->shrunk {median_max(settled[name])}"
    print(f"{line}  ({len(vals)} shrinks, {ranks} ranks)")
# Heartbeats under bulk traffic: no false failure.
bulk_env = {"NEXAR_SHM": "off", "NEXAR_HEARTBEAT_TIMEOUT_SECS": "2",
            "FAILURE_WORKER_COUNT": str(8 << 20), "FAILURE_WORKER_ROUNDS": "10"}
start = time.time()
_, outs = run_case("bulk", bulk_env, None, lambda procs: None)
done = sum(f"DONE rank={r} rounds=10" in outs[r] for r in range(4))
print(f"bulk: 10 allreduces of 64 MiB over QUIC, heartbeat timeout 2 s: {done} of 4 ranks "
      f"finished without a failure in {time.time() - start:.1f} s")
if done != 4:
    problems.append("bulk: " + " | ".join(o[-500:] for o in outs))
for p in problems:
    print("PROBLEM:", p)
sys.exit(1 if problems else 0)
PY
