"""RPC from Python: register_rpc and rpc on in-process worlds (real QUIC)."""
import asyncio
import gc
import threading
import weakref

import numpy as np
import pytest

import nexar


def reverse_and_tag(src, request):
    return request[::-1] + bytes([src])


def test_call_another_rank_and_this_one(world):
    comms = world(2)
    comms[1].register_rpc(7, reverse_and_tag)
    comms[0].register_rpc(7, lambda src, req: b"rank 0 got " + req)
    served = comms[1].stats()["rpc_requests_served"]
    assert comms[0].rpc(1, 7, b"abc") == b"cba\x00"
    assert comms[1].stats()["rpc_requests_served"] == served + 1
    assert comms[1].rpc(1, 7, b"xyz") == b"zyx\x01"  # served locally
    assert comms[1].rpc(0, 7, bytearray(b"hi")) == b"rank 0 got hi"
    big = np.arange(1 << 18, dtype=np.float32)  # 1 MiB each way
    out = comms[0].rpc(1, 7, big)
    assert out[:-1] == big.tobytes()[::-1] and out[-1] == 0


def test_handler_results_bytes_like_or_none(world):
    comms = world(2)
    comms[1].register_rpc(1, lambda src, req: np.full(3, 2.5, np.float64))
    comms[1].register_rpc(2, lambda src, req: None)
    comms[1].register_rpc(3, lambda src, req: memoryview(b"view"))
    assert np.frombuffer(comms[0].rpc(1, 1), np.float64).tolist() == [2.5, 2.5, 2.5]
    assert comms[0].rpc(1, 2, b"ignored") == b""
    assert comms[0].rpc(1, 3) == b"view"


def test_unregistered_and_replaced(world):
    comms = world(2)
    with pytest.raises(nexar.RpcNotRegisteredError) as e:
        comms[0].rpc(1, 5, b"x")
    assert e.value.status == -18 and "no handler" in str(e.value)
    comms[1].register_rpc(5, lambda src, req: b"first")
    assert comms[0].rpc(1, 5) == b"first"
    comms[1].register_rpc(5, lambda src, req: b"second")
    assert comms[0].rpc(1, 5) == b"second"
    comms[1].register_rpc(5, None)
    with pytest.raises(nexar.RpcNotRegisteredError):
        comms[0].rpc(1, 5)


def test_a_failing_handler_fails_the_call_with_its_exception(world):
    comms = world(2)

    def bad(src, req):
        raise ValueError(f"cannot serve {req!r}")

    comms[1].register_rpc(9, bad)
    comms[1].register_rpc(10, lambda src, req: 42)
    with pytest.raises(nexar.RpcFailedError) as e:
        comms[0].rpc(1, 9, b"q")
    assert "ValueError: cannot serve b'q'" in e.value.message
    assert e.value.op == "rpc" and e.value.comm_rank == 0
    with pytest.raises(nexar.RpcFailedError) as e:
        comms[0].rpc(1, 10)
    assert "returned int, not bytes" in e.value.message
    comms[1].register_rpc(11, lambda src, req: b"ok")
    assert comms[0].rpc(1, 11) == b"ok"  # the rank still serves


def test_a_handler_cannot_block_on_nexar(world):
    comms = world(2)
    seen = {}

    def blocks(src, req):
        try:
            comms[1].barrier()
        except nexar.WouldDeadlockError as e:
            seen["blocking"] = e
        r = comms[1].rpc(1, 13, async_op=True)  # an operation may start...
        try:
            r.wait()  # ...but not be waited for here
        except nexar.WouldDeadlockError as e:
            seen["wait"] = e
        return b"done"

    comms[1].register_rpc(12, blocks)
    comms[1].register_rpc(13, lambda src, req: b"inner")
    assert comms[0].rpc(1, 12) == b"done"
    assert "blocking" in seen and "wait" in seen, seen
    assert "inside an RPC handler" in str(seen["wait"])


def test_asynchronous_calls(world):
    comms = world(3)
    for c in comms:
        c.register_rpc(4, lambda src, req, me=c.rank: bytes([me, src]) + req)
    reqs = [comms[0].rpc(t, 4, b"q", async_op=True) for t in range(3)]
    assert [r.wait(30) for r in reqs] == [bytes([t, 0]) + b"q" for t in range(3)]

    async def many():
        return await asyncio.gather(*[comms[2].rpc(t % 3, 4, bytes([t]), async_op=True)
                                      for t in range(30)])

    assert asyncio.run(many()) == [bytes([t % 3, 2, t]) for t in range(30)]
    failing = comms[0].rpc(1, 99, async_op=True)
    with pytest.raises(nexar.RpcNotRegisteredError):
        failing.wait(30)


def test_request_buffer_kept_alive_by_a_pending_call(world):
    comms = world(2)
    gate = threading.Event()

    def slow(src, req):
        gate.wait(10)
        return req

    comms[1].register_rpc(6, slow)
    req = comms[0].rpc(1, 6, np.full(1 << 16, 7, np.uint8), async_op=True)
    gc.collect()
    gate.set()
    assert req.wait(30) == bytes([7]) * (1 << 16)


def test_handlers_are_released_when_replaced_or_closed(world):
    comms = world(2)

    class Handler:
        def __call__(self, src, req):
            return b"h"

    h1, h2 = Handler(), Handler()
    r1, r2 = weakref.ref(h1), weakref.ref(h2)
    comms[1].register_rpc(8, h1)
    comms[1].register_rpc(8, h2)
    del h1, h2
    gc.collect()
    assert r1() is None, "the replaced handler is still referenced"
    assert comms[0].rpc(1, 8) == b"h"
    comms[1].close()
    gc.collect()
    assert r2() is None, "a closed communicator still references its handler"
    with pytest.raises(nexar.ClosedError):
        comms[1].register_rpc(8, Handler())


def test_argument_checks(world):
    comms = world(2)
    with pytest.raises(TypeError, match="callable"):
        comms[0].register_rpc(1, "not a function")
    with pytest.raises(ValueError, match="fn_id"):
        comms[0].register_rpc(-1, reverse_and_tag)
    with pytest.raises(nexar.InvalidRankError):
        comms[0].rpc(2, 1)
    with pytest.raises(TypeError):
        comms[0].rpc(1, 1, "a str is not bytes")


def test_rpc_timeout_option(world):
    comms = world(2, rpc_timeout=0.5)
    gate = threading.Event()
    comms[1].register_rpc(3, lambda src, req: gate.wait(5) and b"late")
    try:
        with pytest.raises(nexar.TimeoutError):
            comms[0].rpc(1, 3)
    finally:
        gate.set()
