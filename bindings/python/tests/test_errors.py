"""Wrong arguments are refused before anything is sent; nexar's failures
become NexarError subclasses carrying status, rank and message."""
import asyncio

import numpy as np
import pytest

import nexar
from nexar import _support as st
from conftest import on_ranks


def test_type_errors_before_sending(world):
    c = world(2)[0]
    with pytest.raises(TypeError, match="all_reduce: buf must be a numpy array"):
        c.all_reduce([1.0, 2.0])
    with pytest.raises(TypeError, match="C-contiguous"):
        c.all_reduce(np.zeros((4, 4))[:, 1])
    with pytest.raises(TypeError, match="unsupported dtype complex128"):
        c.all_reduce(np.zeros(3, np.complex128))
    with pytest.raises(TypeError, match="unsupported dtype bool"):
        c.broadcast(np.zeros(3, bool))
    with pytest.raises(TypeError, match="unsupported dtype int16"):
        c.all_gather(np.zeros(3, np.int16))
    with pytest.raises(TypeError, match="writable"):
        c.all_reduce(b"abcd")
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        c.recv(ro, 1)
    with pytest.raises(TypeError, match="unsupported dtype >f4"):
        c.all_reduce(np.zeros(3, ">f4"))
    # nothing was sent: the peer's next collective matches rank 0's next one
    assert c.stats()["messages_sent"] == 0


def test_value_errors_before_sending(world):
    comms = world(2)
    c = comms[0]
    with pytest.raises(ValueError, match="not a multiple of the communicator size 2"):
        c.reduce_scatter(np.zeros(3))
    with pytest.raises(ValueError, match="not a multiple"):
        c.all_to_all(np.zeros(5, np.int32))
    with pytest.raises(ValueError, match="out holds 4 elements, 6 are needed"):
        c.all_gather(np.zeros(3), out=np.zeros(4))
    with pytest.raises(TypeError, match="out has dtype float32"):
        c.all_gather(np.zeros(3), out=np.zeros(6, np.float32))
    with pytest.raises(ValueError, match="op 9"):
        c.all_reduce(np.zeros(3), op=9)
    with pytest.raises(nexar.InvalidRankError) as ei:
        c.broadcast(np.zeros(3), root=5)
    assert isinstance(ei.value, ValueError)
    assert ei.value.status == st.ERR_INVALID_RANK and ei.value.comm_rank == 0
    assert "root 5" in ei.value.message
    with pytest.raises(ValueError):
        c.send(np.zeros(1), -1)
    assert c.stats()["messages_sent"] == 0
    # and the world still works
    on_ranks(comms, lambda x: x.all_reduce(np.ones(2)))


def test_timeout_names_operation_and_rank(world):
    comms = world(3, barrier_timeout=0.4)
    reqs = [comms[0].barrier(async_op=True), comms[1].barrier(async_op=True)]
    for i, req in enumerate(reqs):
        with pytest.raises(nexar.TimeoutError) as ei:
            req.wait(60)
        e = ei.value
        assert isinstance(e, TimeoutError)  # the builtin too
        assert isinstance(e, nexar.NexarError)
        assert e.status == st.ERR_TIMEOUT
        # rank 0 gathers the barrier and waits for the missing rank 2; rank 1
        # waits for rank 0's release, and its stall report names rank 2, which
        # never entered, as the culprit (rank 0 if no report came in time)
        assert e.rank == 2 or (i == 1 and e.rank == 0), f"blamed rank {e.rank}: {e}"
        assert e.comm_rank == i and e.op == "barrier"
        assert f"rank {e.rank}" in e.message and str(e).startswith(f"barrier on rank {i} failed")


def test_blocking_timeout(world):
    comms = world(2, collective_timeout=0.3)
    with pytest.raises(nexar.TimeoutError, match="all_reduce on rank 0"):
        comms[0].all_reduce(np.zeros(4))


def test_mismatch(world):
    comms = world(2)

    def body(c):
        if c.rank == 0:
            c.all_reduce(np.zeros(4))
        else:
            c.broadcast(np.zeros(4), root=0)

    with pytest.raises(nexar.MismatchError) as ei:
        on_ranks(comms, body)
    assert ei.value.status == st.ERR_MISMATCH and ei.value.message


def test_size_mismatch_on_recv(world):
    comms = world(2)
    comms[0].send(np.zeros(8), 1, tag=2, async_op=True)
    with pytest.raises(nexar.SizeMismatchError):
        comms[1].recv(np.zeros(4), 0, tag=2)


def test_closed_and_aborted(world):
    comms = world(2)
    pending = comms[0].barrier(async_op=True)
    comms[0].abort()
    with pytest.raises(nexar.AbortedError):
        pending.wait(60)
    with pytest.raises(nexar.AbortedError):
        comms[0].barrier()
    pending = comms[1].recv(np.zeros(2), 0, tag=9, async_op=True)
    comms[1].close()
    with pytest.raises((nexar.ClosedError, nexar.AbortedError, nexar.PeerFailedError)):
        pending.wait(60)
    with pytest.raises(nexar.ClosedError):
        comms[1].all_reduce(np.zeros(2))


def test_errors_in_asyncio(world):
    comms = world(2, collective_timeout=0.3)

    async def main():
        with pytest.raises(nexar.TimeoutError):
            await comms[0].all_reduce(np.zeros(2), async_op=True)

    asyncio.run(main())


def test_error_classes():
    e = nexar._support.make_error(st.ERR_PEER_FAILED, 3, "lost rank 3", "all_gather", 1)
    assert type(e) is nexar.PeerFailedError
    assert (e.status, e.rank, e.message, e.op, e.comm_rank) == (
        st.ERR_PEER_FAILED, 3, "lost rank 3", "all_gather", 1)
    assert str(e) == "all_gather on rank 1 failed (NEXAR_ERR_PEER_FAILED) [rank 3]: lost rank 3"
    import pickle
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is nexar.PeerFailedError and again.rank == 3
    assert issubclass(nexar.AuthError, nexar.NexarError)
    # one class per status, exported by the package
    assert sorted(st._BY_STATUS) == sorted(st._NAMES)
    for status, cls in st._BY_STATUS.items():
        assert getattr(nexar, cls.__name__) is cls and cls.__name__ in nexar.__all__
        assert type(st.make_error(status, -1, "", "op", -1)) is cls
