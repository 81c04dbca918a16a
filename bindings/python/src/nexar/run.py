"""Run a program as N local processes that form one nexar world.

    python -m nexar.run -n 4 script.py [args...]
    python -m nexar.run -n 4 -m package.module [args...]
    python -m nexar.run -n 4 -- program [args...]
    python -m nexar.run -n 4 --bind-to core script.py   # rank i on core i

Like the C++ ``nexar-run``, over the seed API of this package: it starts a
seed on 127.0.0.1 with a fresh random cluster token and gives each rank
NEXAR_SEED, NEXAR_RANK, NEXAR_WORLD_SIZE, NEXAR_CLUSTER_TOKEN,
NEXAR_LOCAL_RANK and NEXAR_LOCAL_WORLD_SIZE (the program calls
``nexar.init()``). Every line a rank prints is prefixed with ``[rN]``. When a
rank exits non-zero (an unhandled exception) or is killed, the others get
SIGTERM, then SIGKILL after the grace period, and the launcher exits with that
rank's status, naming it. ``--bind-to core`` (or ``hwthread``) pins local rank
i to the i-th core (hardware thread) this launcher may use, wrapping round
when ranks outnumber them, as ``nexar-run --bind-to`` does. Exit status: 0
when every rank exited 0; the first failing rank's status (128 + signal when
killed); 1 when the world did not form; 2 on a usage error (including a
listen address or formation timeout the seed refuses).
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import IO, List, Optional, Sequence

from . import _nexar
from ._support import NexarError

_out_lock = threading.Lock()


def _say(text: str) -> None:
    with _out_lock:
        sys.stderr.write(f"nexar.run: {text}\n")
        sys.stderr.flush()


def _pump(rank: int, src: IO[bytes], dst: IO[str]) -> None:
    """Copies a rank's output line by line, prefixed with its rank."""
    for raw in iter(src.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        with _out_lock:
            dst.write(f"[r{rank}] {line}\n")
            dst.flush()
    src.close()


_exits_lock = threading.Lock()
_exits: List[tuple] = []  # (rank, returncode) in the order the ranks ended


def _await_exit(rank: int, proc: subprocess.Popen) -> None:
    code = proc.wait()
    with _exits_lock:
        _exits.append((rank, code))


def _describe(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {-code} ({name})"
    return f"exited with status {code}"


def _command(args: Sequence[str]) -> List[str]:
    if not args:
        raise SystemExit("nexar.run: no program given (a script.py, -m module, or -- program)")
    if args[0] == "--":
        args = args[1:]
        if not args:
            raise SystemExit("nexar.run: no program after --")
        return list(args)
    if args[0] == "-m" or args[0].endswith(".py"):
        return [sys.executable, *args]
    return list(args)


def _core_of(cpu: int) -> tuple:
    """(package, core) of a CPU from sysfs; the CPU alone when sysfs says nothing."""
    base = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
    try:
        with open(base + "physical_package_id") as p, open(base + "core_id") as c:
            return (int(p.read()), int(c.read()))
    except (OSError, ValueError):
        return (-1, cpu)


def binding_slots(how: str) -> List[set]:
    """The CPU sets ranks are pinned to, in turn: one per core (its allowed
    hardware threads together) or per hardware thread; [] for "none"."""
    if how == "none":
        return []
    allowed = sorted(os.sched_getaffinity(0))
    if how == "hwthread":
        return [{c} for c in allowed]
    cores: dict = {}
    for c in allowed:
        cores.setdefault(_core_of(c), set()).add(c)
    return [cores[k] for k in sorted(cores)]


def _cpus(s: set) -> str:
    return ",".join(str(c) for c in sorted(s))


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m nexar.run",
        description="Run a program as N local processes forming one nexar world.")
    p.add_argument("-n", "--np", type=int, required=True, help="number of ranks (1..1024)")
    p.add_argument("--grace", type=float, default=5.0,
                   help="after a failure, SIGKILL ranks still running after this many seconds")
    p.add_argument("--formation-timeout", type=float, default=60.0,
                   help="give up when the world has not formed after this many seconds")
    p.add_argument("--listen", default="127.0.0.1:0", help="the seed's address")
    p.add_argument("--bind-to", choices=("none", "core", "hwthread"), default="none",
                   help="pin local rank i to the i-th core or hardware thread this launcher "
                        "may use (wrapping); none leaves placement to the scheduler")
    p.add_argument("program", nargs=argparse.REMAINDER,
                   help="script.py [args], -m module [args], or -- program [args]")
    ns = p.parse_args(argv)
    if not 1 <= ns.np <= 1024:
        p.error(f"-n {ns.np} is not in 1..1024")
    return ns


def main(argv: Optional[Sequence[str]] = None) -> int:
    ns = _parse(sys.argv[1:] if argv is None else argv)
    try:
        cmd = _command(ns.program)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    n = ns.np
    token = secrets.token_hex(32)
    try:
        seed: Optional[_nexar.Seed] = _nexar.Seed(n, ns.listen, token, ns.formation_timeout)
    except NexarError as e:
        # A listen address or a formation timeout the seed refuses: a usage error.
        _say(f"cannot start the seed: {e}")
        return 2
    address = seed.address

    slots = binding_slots(ns.bind_to)
    if slots:
        where = ", ".join(f"local rank {r} on CPU {_cpus(slots[r % len(slots)])}"
                          for r in range(min(n, 8)))
        unit = "cores" if ns.bind_to == "core" else "hardware threads"
        _say(f"binding: {where}{', ...' if n > 8 else ''}"
             + (f" ({n} ranks on {len(slots)} {unit})" if n > len(slots) else ""))
    own_cpus = os.sched_getaffinity(0)

    procs: List[subprocess.Popen] = []
    pumps: List[threading.Thread] = []
    for r in range(n):
        env = dict(os.environ)
        env.update(NEXAR_SEED=address, NEXAR_RANK=str(r), NEXAR_WORLD_SIZE=str(n),
                   NEXAR_CLUSTER_TOKEN=token, NEXAR_LOCAL_RANK=str(r),
                   NEXAR_LOCAL_WORLD_SIZE=str(n), NEXAR_RUN_LAUNCHER="python")
        env.pop("NEXAR_CLUSTER_TOKEN_FILE", None)
        try:
            # A child starts with the mask of the thread that forks it: this
            # one, pinned for the moment (preexec_fn is unsafe with threads).
            if slots:
                os.sched_setaffinity(0, slots[r % len(slots)])
            try:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE,
                                        stdin=None if r == 0 else subprocess.DEVNULL,
                                        start_new_session=True)
            finally:
                if slots:
                    os.sched_setaffinity(0, own_cpus)
        except OSError as e:
            _say(f"cannot run {cmd[0]}: {e}")
            for p in procs:
                _signal_group(p, signal.SIGKILL)
            seed.stop()
            return 127
        procs.append(proc)
        # One waiter per rank records exits in the order they happen, so the
        # rank that failed first is named, not the ones that failed because of it.
        threading.Thread(target=_await_exit, args=(r, proc), daemon=True).start()
        for src, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            t = threading.Thread(target=_pump, args=(r, src, dst), daemon=True)
            t.start()
            pumps.append(t)

    interrupted: List[int] = []

    def on_signal(signum, _frame):
        interrupted.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    started = time.monotonic()
    failed_rank, failed_code = -1, 0
    formation_failed = False
    stop_at: Optional[float] = None
    killed = False
    stopped_others = 0
    try:
        while True:
            with _exits_lock:
                exited = len(_exits)
            running = [p for p in procs if p.returncode is None]
            # The first rank to fail stops the others.
            if failed_rank < 0 and stop_at is None:
                with _exits_lock:
                    bad = [(r, code) for r, code in _exits if code != 0]
                if bad:
                    failed_rank, failed_code = bad[0]
                    stopped_others = sum(1 for p in procs if p.returncode is None)
                    _say(f"rank {failed_rank} (pid {procs[failed_rank].pid}) "
                         f"{_describe(failed_code)}; stopping the other rank(s) still running "
                         f"({stopped_others})")
            if interrupted and stop_at is None:
                _say(f"interrupted ({signal.Signals(interrupted[0]).name}); stopping the ranks")
            if (failed_rank >= 0 or interrupted) and stop_at is None:
                for p in running:
                    _signal_group(p, signal.SIGTERM)
                stop_at = time.monotonic() + ns.grace
            if stop_at is not None and not killed and time.monotonic() >= stop_at:
                for p in running:
                    _signal_group(p, signal.SIGKILL)
                killed = True
            # The seed is not on the data path: stop it once formation ended.
            if seed is not None:
                ended, status, message = seed.wait(0)
                if ended:
                    if status == 0:
                        _say(f"cluster formed: {n} ranks in {time.monotonic() - started:.1f} s")
                    else:
                        formation_failed = True
                        _say(f"the world did not form: {message}")
                    seed.stop()
                    seed = None
            if exited == len(procs):
                break
            time.sleep(0.05)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if seed is not None:
            seed.stop()
    for t in pumps:
        t.join(5.0)
    if failed_rank >= 0:
        _say(f"failed: rank {failed_rank} {_describe(failed_code)}"
             f" (its output above, lines [r{failed_rank}]); "
             f"{stopped_others} other rank(s) were still running and stopped")
        return failed_code if failed_code > 0 else 128 - failed_code
    if interrupted:
        return 128 + interrupted[0]
    if formation_failed:
        return 1
    return 0


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    sys.exit(main())
