"""Requests: asyncio, several outstanding, buffers kept alive, GIL released."""
import asyncio
import gc
import threading
import weakref

import numpy as np

import nexar
from conftest import on_ranks


def test_asyncio_several_outstanding(world):
    comms = world(3)

    async def main():
        bufs = [[np.full(1000, c.rank + i, np.float64) for i in range(5)] for c in comms]
        reqs = [c.all_reduce(bufs[c.rank][i], async_op=True) for i in range(5) for c in comms]
        gathers = [c.all_gather(np.array([c.rank], np.int32), async_op=True) for c in comms]
        p2p = [comms[0].send(np.arange(3.0), 1, tag=1, async_op=True),
               comms[1].recv(np.zeros(3), 0, tag=1, async_op=True)]
        barriers = [c.barrier(async_op=True) for c in comms]
        results = await asyncio.gather(*reqs)
        gathered = await asyncio.gather(*gathers)
        sent, received = await asyncio.gather(*p2p)
        assert await asyncio.gather(*barriers) == [None] * 3
        return bufs, results, gathered, sent, received

    bufs, results, gathered, sent, received = asyncio.run(asyncio.wait_for(main(), 60))
    for i in range(5):
        want = np.full(1000, sum(r + i for r in range(3)), np.float64)
        for r in range(3):
            np.testing.assert_array_equal(bufs[r][i], want)
    for r, res in enumerate(results):
        assert res is bufs[r % 3][r // 3]  # await returns the buffer
    for g in gathered:
        assert g.tolist() == [[0], [1], [2]]
    assert sent is None
    np.testing.assert_array_equal(received, np.arange(3.0))


def test_wait_done_and_callbacks(world):
    comms = world(2)
    seen = []
    event = threading.Event()
    r0 = comms[0].barrier(async_op=True)
    r0.add_done_callback(lambda req: (seen.append((req, threading.current_thread().name)),
                                      event.set()))
    assert not r0.done()  # rank 1 has not entered yet
    r1 = comms[1].barrier(async_op=True)
    assert r0.wait(60) is None and r1.wait(60) is None
    assert r0.done() and r1.done()
    assert event.wait(30)
    assert seen == [(r0, "nexar-dispatch")]  # Python callbacks run on the dispatch thread
    late = []
    r0.add_done_callback(late.append)  # already complete: at once
    assert late == [r0]


def test_wait_timeout_then_complete(world):
    comms = world(2)
    req = comms[0].barrier(async_op=True)
    try:
        req.wait(0.05)
        raise AssertionError("wait returned while rank 1 had not entered the barrier")
    except TimeoutError as e:
        assert not isinstance(e, nexar.NexarError)  # the operation is still running
        assert "barrier" in str(e)
    comms[1].barrier()
    assert req.wait(60) is None


def test_buffers_kept_alive_by_pending_requests(world):
    comms = world(2)
    n = 1 << 16
    finalized = []
    # rank 0 starts and drops every reference to its buffer and its request
    buf = np.full(n, 3.0)
    weakref.finalize(buf, finalized.append, "buf")
    comms[0].all_reduce(buf, async_op=True)
    out = np.zeros((2, 4))
    weakref.finalize(out, finalized.append, "out")
    req_g = comms[0].all_gather(np.full(4, 1.5), out=out, async_op=True)
    del buf, out
    gc.collect()
    assert finalized == [], "a pending request's buffer was freed"
    # rank 1 joins; its own results prove rank 0's dropped buffer took part
    other = np.full(n, 4.0)
    comms[1].all_reduce(other)
    np.testing.assert_array_equal(other, np.full(n, 7.0))
    g = comms[1].all_gather(np.full(4, 2.5))
    np.testing.assert_array_equal(g, [[1.5] * 4, [2.5] * 4])
    np.testing.assert_array_equal(req_g.wait(60), [[1.5] * 4, [2.5] * 4])
    del req_g
    # once complete, the references go (the dispatch thread releases them)
    nexar._nexar._flush(10)
    gc.collect()
    assert sorted(finalized) == ["buf", "out"], finalized


def test_gil_released_during_blocking_collective(world):
    comms = world(2)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    def rank0(c):
        t = threading.Thread(target=ticker)
        t.start()
        try:
            before = len(ticks)
            c.barrier()  # blocks until rank 1 arrives, which waits for ticks first
            return len(ticks) - before
        finally:
            stop.set()
            t.join()

    def rank1(c):
        # enters the barrier only after the ticker made progress while rank 0
        # was blocked in it, which needs the GIL to be free
        while len(ticks) < 20:
            threading.Event().wait(0.001)
        c.barrier()
        return None

    made = on_ranks(comms, lambda c: rank0(c) if c.rank == 0 else rank1(c))
    assert made[0] >= 1


def test_async_split(world):
    comms = world(2)
    reqs = [c.split(0, key=1 - c.rank, async_op=True) for c in comms]
    subs = [r.wait(60) for r in reqs]
    assert sorted(s.rank for s in subs) == [0, 1]
    assert subs[0].rank == 1  # key reversed the order
    # closed at exit like every other communicator
    assert all(s in nexar._support._live for s in subs)
    on_ranks(subs, lambda s: s.barrier())
    for s in subs:
        s.close()
