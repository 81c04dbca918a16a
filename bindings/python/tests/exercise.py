"""Every Communicator method on one rank, checked against numpy. Used by the
in-process tests (one thread per rank) and by the multi-process worker."""
from __future__ import annotations

import numpy as np

import nexar

INT_KINDS = "iu"


def dtypes():
    out = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64,
           np.uint8, np.uint32, np.uint64]
    try:
        import ml_dtypes
        out.append(ml_dtypes.bfloat16)
    except ImportError:
        pass
    return [np.dtype(d) for d in out]


def rank_data(rank: int, k: int, dt) -> np.ndarray:
    """Rank r's input: i + r + 1 for i in 0..k-1 (small integers, exact in every dtype)."""
    return (np.arange(k) + rank + 1).astype(dt)


def expected(n: int, k: int, dt, how) -> np.ndarray:
    wide = np.int64 if np.dtype(dt).kind in INT_KINDS else np.float64
    stack = np.stack([rank_data(r, k, wide) for r in range(n)])
    return how(stack).astype(dt)


def check(got, want, what: str) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), \
        f"{what}: {got!r} != {want!r}"


def exercise(comm: nexar.Communicator, dt) -> None:
    dt = np.dtype(dt)
    n, r, k = comm.size, comm.rank, 4
    name = f"rank {r} {dt}"

    # all_reduce with every op (in place, returns the buffer)
    for op, how in ((nexar.SUM, lambda s: s.sum(0)), (nexar.PROD, lambda s: s.prod(0)),
                    (nexar.MIN, lambda s: s.min(0)), (nexar.MAX, lambda s: s.max(0))):
        buf = rank_data(r, k, dt)
        assert comm.all_reduce(buf, op=op) is buf
        check(buf, expected(n, k, dt, how), f"{name} all_reduce {op.name}")

    # broadcast from the last rank
    buf = rank_data(r, k, dt)
    comm.broadcast(buf, root=n - 1)
    check(buf, rank_data(n - 1, k, dt), f"{name} broadcast")

    # reduce to root 0; other ranks keep their data
    buf = rank_data(r, k, dt)
    comm.reduce(buf, op=nexar.SUM, root=0)
    want = expected(n, k, dt, lambda s: s.sum(0)) if r == 0 else rank_data(r, k, dt)
    check(buf, want, f"{name} reduce")

    # all_gather: (size, *shape)
    mine = rank_data(r, k, dt).reshape(2, 2)
    out = comm.all_gather(mine)
    check(out, np.stack([rank_data(q, k, dt).reshape(2, 2) for q in range(n)]),
          f"{name} all_gather")
    into = np.zeros((n, 2, 2), dt)
    assert comm.all_gather(mine, out=into) is into
    check(into, out, f"{name} all_gather out=")

    # reduce_scatter: block `rank` of the sum
    whole = np.stack([rank_data(r * 10 + b, 3, dt) for b in range(n)])  # (n, 3)
    blk = comm.reduce_scatter(whole, op=nexar.SUM)
    wide = np.int64 if dt.kind in INT_KINDS else np.float64
    want = sum(rank_data(q * 10 + r, 3, wide) for q in range(n)).astype(dt)
    check(blk, want, f"{name} reduce_scatter")

    # all_to_all: block j to rank j
    send = np.stack([np.full(2, r * n + j) for j in range(n)]).astype(dt)
    got = comm.all_to_all(send)
    check(got, np.stack([np.full(2, i * n + r) for i in range(n)]).astype(dt),
          f"{name} all_to_all")

    # gather on root 1 % n, None elsewhere
    root = 1 % n
    g = comm.gather(rank_data(r, k, dt), root=root)
    if r == root:
        check(g, np.stack([rank_data(q, k, dt) for q in range(n)]), f"{name} gather")
    else:
        assert g is None, f"{name} gather returned {g!r} off the root"

    # scatter from root 0: block `rank`
    src = np.stack([rank_data(j, k, dt) for j in range(n)]) if r == 0 \
        else np.zeros((n, k), dt)
    check(comm.scatter(src, root=0), rank_data(r, k, dt), f"{name} scatter")

    # scan / exscan (SUM)
    buf = rank_data(r, k, dt)
    comm.scan(buf, op=nexar.SUM)
    check(buf, sum(rank_data(q, k, wide) for q in range(r + 1)).astype(dt), f"{name} scan")
    buf = rank_data(r, k, dt)
    comm.exscan(buf, op=nexar.SUM)
    want = rank_data(r, k, dt) if r == 0 else \
        sum(rank_data(q, k, wide) for q in range(r)).astype(dt)
    check(buf, want, f"{name} exscan")

    comm.barrier()

    # send/recv around a ring (the send is asynchronous so every rank can receive)
    if n > 1:
        req = comm.send(rank_data(r, k, dt), (r + 1) % n, tag=7, async_op=True)
        buf = np.zeros(k, dt)
        assert comm.recv(buf, (r - 1) % n, tag=7) is buf
        assert req.wait(60) is None
        check(buf, rank_data((r - 1) % n, k, dt), f"{name} recv")


def exercise_split(comm: nexar.Communicator) -> None:
    n, r = comm.size, comm.rank
    with comm.split(r % 2, key=n - r) as sub:   # reversed order inside each color
        members = [q for q in range(n) if q % 2 == r % 2]
        assert sub.size == len(members)
        assert sub.rank == len(members) - 1 - members.index(r)
        buf = np.array([r], np.int64)
        sub.all_reduce(buf)
        assert buf[0] == sum(members), (buf, members)
