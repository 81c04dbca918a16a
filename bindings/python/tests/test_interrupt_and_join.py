"""Ctrl-C during a blocking call, and nexar.init(...) joining a seed by keywords."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import nexar

# CALL blocks rank 0: rank 1 never takes part.
BLOCKED = r"""
import sys, time, numpy as np, nexar
comms = nexar.bootstrap_local(2, p2p_timeout=120, collective_timeout=120)
print("waiting", flush=True)
start = time.monotonic()
try:
    CALL
except KeyboardInterrupt:
    print(f"KeyboardInterrupt at {time.monotonic():.6f}", flush=True)
    print(f"KeyboardInterrupt after {time.monotonic() - start:.3f} s", flush=True)
    try:
        comms[0].barrier()
    except nexar.AbortedError as e:             # the communicator was aborted
        print("then:", type(e).__name__, flush=True)
    sys.exit(0)
print("returned", flush=True)
sys.exit(1)
"""


def interrupted(script: str, timeout: float):
    """Runs script, sends SIGINT 0.3 s after it printed "waiting" (inside its
    blocking call); returns its exit code, its output and when the signal was
    sent."""
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out, sent


@pytest.mark.parametrize("call", [
    "comms[0].recv(np.zeros(4, np.float32), 1)",
    "comms[0].all_reduce(np.ones(1 << 20, np.float32))",  # a large one, on shared memory
    "comms[0].barrier()",
])
def test_ctrl_c_interrupts_a_blocking_call_and_aborts_the_communicator(call):
    # Far below the call's own 120 s timeout: the signal ended it.
    code, out, sent = interrupted(BLOCKED.replace("CALL", call), timeout=30)
    assert code == 0, out
    assert "KeyboardInterrupt after" in out, out
    assert "then: AbortedError" in out, out
    # CLOCK_MONOTONIC is one clock for every process of the machine.
    raised_at = float(out.split("KeyboardInterrupt at ")[1].split()[0])
    assert raised_at - sent < 0.5, out


# A SIGINT handler of the program's own that does not raise: the blocking call
# is not aborted; it completes once rank 1 sends, and the handler has run.
OWN_HANDLER = r"""
import signal, sys, threading, time, numpy as np, nexar
seen = []
signal.signal(signal.SIGINT, lambda sig, frame: seen.append(time.monotonic()))
comms = nexar.bootstrap_local(2, p2p_timeout=120)
sender = threading.Timer(1.5, lambda: comms[1].send(np.arange(4, dtype=np.float32), 0))
sender.start()
print("waiting", flush=True)
buf = np.zeros(4, np.float32)
comms[0].recv(buf, 1)
sender.join()
print("received", buf.tolist(), "handler ran", len(seen), flush=True)
other = threading.Thread(target=comms[1].barrier)
other.start()
comms[0].barrier()  # not aborted
other.join()
print("then: barrier", flush=True)
"""


def test_a_sigint_handler_of_ones_own_runs_and_the_blocking_call_goes_on():
    code, out, _ = interrupted(OWN_HANDLER, timeout=60)
    assert code == 0, out
    assert "received [0.0, 1.0, 2.0, 3.0] handler ran 1" in out, out
    assert "then: barrier" in out, out


def test_init_joins_a_seed_by_keywords():
    seed = nexar.Seed(2, token="kw-token")
    comms = [None, None]
    errors = []

    def join(rank):
        try:
            comms[rank] = nexar.init(seed=seed.address, token="kw-token", rank=rank,
                                     world_size=2, listen="127.0.0.1:0", heartbeat_timeout=5,
                                     collective_timeout=30, spin=0)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors, errors
        assert [c.rank for c in comms] == [0, 1]
        bufs = [np.full(3, r + 1, np.int32) for r in range(2)]
        threads = [threading.Thread(target=comms[r].all_reduce, args=(bufs[r],)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [b.tolist() for b in bufs] == [[3, 3, 3]] * 2
    finally:
        for c in comms:
            if c is not None:
                c.close()
        seed.stop()


def test_init_keywords_are_checked():
    with pytest.raises(TypeError, match="unknown option bogus"):
        nexar.init(seed="127.0.0.1:1", bogus=1)
    with pytest.raises(ValueError, match="spin"):
        nexar.init(seed="127.0.0.1:1", spin=5)
