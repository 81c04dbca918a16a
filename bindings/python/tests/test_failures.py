"""Failures: a rank that aborts is seen by the others (comm.failed, the
failure callback); revoke reaches every member; agree is uniform; shrink
gives the survivors a working communicator."""
import threading
import time

import numpy as np
import pytest

import nexar
from conftest import on_ranks


def wait_until(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.005)
    return cond()


def test_error_classes_for_the_new_statuses():
    assert nexar.RevokedError.status == -20
    assert nexar.ExcludedError.status == -21
    assert issubclass(nexar.RevokedError, nexar.NexarError)


def test_revoke_reaches_every_member_and_agree_still_works(world):
    comms = world(3)
    comms[0].revoke()
    for c in comms:
        assert wait_until(lambda c=c: c.revoked)
    with pytest.raises(nexar.RevokedError):
        comms[1].barrier()
    assert on_ranks(comms, lambda c: c.agree(0b11 << c.rank)) == [0] * 3
    assert on_ranks(comms, lambda c: c.agree(0b111)) == [0b111] * 3


def test_agree_and_shrink_after_a_rank_aborts(world):
    comms = world(4)
    seen = []
    lock = threading.Lock()

    def record(me):
        def cb(rank, cause):
            with lock:
                seen.append((me, rank, cause))
        return cb

    for c in comms:
        c.set_failure_callback(record(c.rank))
    comms[3].abort()
    survivors = comms[:3]
    for c in survivors:
        assert wait_until(lambda c=c: c.failed == [3]), c.failed
    assert wait_until(lambda: len(seen) == 3)
    assert sorted(seen) == [(0, 3, -6), (1, 3, -6), (2, 3, -6)]

    # After a peer's abort, operations fail naming it; agree and shrink work.
    with pytest.raises(nexar.AbortedError) as e:
        survivors[1].barrier()
    assert e.value.rank == 3

    # Not acknowledged yet: every survivor gets PeerFailedError.
    errors = on_ranks(survivors, lambda c: _agree_error(c, 0b111))
    assert all(isinstance(e, nexar.PeerFailedError) and e.rank == 3 for e in errors), errors
    for c in survivors:
        assert c.ack_failed() == 1
    flags = on_ranks(survivors, lambda c: c.agree(0b111 if c.rank else 0b101))
    assert flags == [0b101] * 3

    shrunk = on_ranks(survivors, lambda c: c.shrink())
    try:
        assert [s.size for s in shrunk] == [3, 3, 3]
        assert [s.rank for s in shrunk] == [0, 1, 2]
        out = on_ranks(shrunk, lambda s: s.all_reduce(np.full(8, s.rank + 1, np.int64)))
        for o in out:
            assert (o == 6).all(), o
    finally:
        for s in shrunk:
            s.close()


def _agree_error(c, flags):
    try:
        c.agree(flags)
    except nexar.NexarError as e:
        return e
    return None
