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

BLOCKED = r"""
import sys, time, numpy as np, nexar
comms = nexar.bootstrap_local(2, p2p_timeout=120)
print("waiting", flush=True)
start = time.monotonic()
try:
    comms[0].recv(np.zeros(4, np.float32), 1)   # rank 1 never sends
except KeyboardInterrupt:
    print(f"KeyboardInterrupt after {time.monotonic() - start:.3f} s", flush=True)
    try:
        comms[0].barrier()
    except nexar.AbortedError as e:             # the communicator was aborted
        print("then:", type(e).__name__, flush=True)
    sys.exit(0)
print("returned", flush=True)
sys.exit(1)
"""


def test_ctrl_c_interrupts_a_blocking_call_and_aborts_the_communicator():
    p = subprocess.Popen([sys.executable, "-c", BLOCKED], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
        time.sleep(0.3)  # inside recv
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        # Far below the receive's own 120 s timeout: the signal ended it.
        out, _ = p.communicate(timeout=30)
        print(f"interrupted {time.monotonic() - sent:.3f} s after SIGINT")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out
    assert "KeyboardInterrupt after" in out, out
    assert "then: AbortedError" in out, out


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
