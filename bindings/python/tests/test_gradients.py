"""all_reduce_bucketed and all_reduce_compressed with nexar.Compressor, on
in-process worlds (one thread per rank)."""
import asyncio

import numpy as np
import pytest

import nexar
from conftest import on_ranks


def test_bucketed_equals_one_all_reduce_per_array(world):
    comms = world(3)
    rng = np.random.default_rng(1)
    sizes = [0, 5, 70000, 3, 300001, 17]

    def body(c):
        mine = [np.arange(n, dtype=np.int64) * (c.rank + 1) for n in sizes]
        ref = [a.copy() for a in mine]
        for a in ref:
            c.all_reduce(a)
        out = c.all_reduce_bucketed(mine, bucket_bytes=1 << 20)
        assert out is mine
        for a, b in zip(mine, ref):
            np.testing.assert_array_equal(a, b)
        # 2-D float arrays, MAX, the async form.
        f = [rng.standard_normal((64, 33)).astype(np.float32) + c.rank for _ in range(4)]
        fref = [a.copy() for a in f]
        for a in fref:
            c.all_reduce(a, op=nexar.MAX)
        req = c.all_reduce_bucketed(f, op=nexar.MAX, bucket_bytes=4000, async_op=True)
        assert req.wait(60) is f
        for a, b in zip(f, fref):
            np.testing.assert_array_equal(a, b)
        return True

    assert on_ranks(comms, body) == [True] * 3


def test_bucketed_rejects_mixed_dtypes(world):
    (c,) = world(1)
    with pytest.raises(TypeError, match="same dtype"):
        c.all_reduce_bucketed([np.zeros(3, np.float32), np.zeros(3, np.float64)])


def test_bucketed_awaitable(world):
    comms = world(2)

    def body(c):
        xs = [np.full(10, c.rank + 1.0), np.full(3, 2.0)]

        async def go():
            return await c.all_reduce_bucketed(xs, async_op=True)

        asyncio.run(go())
        return [x.tolist() for x in xs]

    assert on_ranks(comms, body) == [[[3.0] * 10, [4.0] * 3]] * 2


def topk_positions(v, k):
    order = sorted(range(len(v)), key=lambda i: (-abs(float(v[i])), i))
    return sorted(order[:k])


def test_topk_sums_each_ranks_largest(world):
    comms = world(3)
    n, k = 2000, 20
    inputs = [np.random.default_rng(r).standard_normal(n).astype(np.float32) for r in range(3)]

    def body(c):
        z = nexar.Compressor("topk", ratio=0.01, count=n, dtype=np.float32)
        assert (z.kind, z.count) == ("topk", n)
        buf = inputs[c.rank].copy()
        assert c.all_reduce_compressed(buf, z) is buf
        return buf

    got = on_ranks(comms, body)
    expect = np.zeros(n, np.float32)
    for r in range(3):
        for i in topk_positions(inputs[r], k):
            expect[i] += inputs[r][i]
    for g in got:
        np.testing.assert_array_equal(g, expect)


def test_randomk_same_positions_on_every_rank_async_and_out(world):
    comms = world(2)
    n = 1000

    def body(c):
        z = nexar.Compressor("randomk", ratio=0.05, count=n, seed=9)
        x = np.full(n, c.rank + 1.0, np.float32)
        out = np.empty_like(x)
        req = c.all_reduce_compressed(x, z, out=out, async_op=True)
        assert req.wait(60) is out
        np.testing.assert_array_equal(x, np.full(n, c.rank + 1.0, np.float32))  # not written
        return out

    a, b = on_ranks(comms, body)
    np.testing.assert_array_equal(a, b)
    kept = np.flatnonzero(a)
    assert len(kept) == 50
    assert np.all(a[kept] == 3.0)


def test_mismatched_compressors_raise_mismatch(world):
    comms = world(2)

    def body(c):
        z = nexar.Compressor("topk", ratio=0.01 * (c.rank + 1), count=500)
        with pytest.raises(nexar.MismatchError):
            c.all_reduce_compressed(np.ones(500, np.float32), z)
        return True

    assert on_ranks(comms, body) == [True, True]


def test_compressor_arguments():
    with pytest.raises(ValueError, match="topk"):
        nexar.Compressor("sparse", count=10)
    with pytest.raises(nexar.InvalidArgumentError):
        nexar.Compressor("topk", ratio=2.0, count=10)
    with pytest.raises(nexar.InvalidArgumentError, match="f32, f64, f16 or bf16"):
        nexar.Compressor("topk", count=10, dtype=np.int32)
    z = nexar.Compressor("randomk", count=10, dtype=np.float64)
    z.reset()
