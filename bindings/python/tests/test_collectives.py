"""Every method, every dtype, on in-process worlds (one thread per rank)."""
import numpy as np
import pytest

import nexar
from conftest import on_ranks
from exercise import dtypes, exercise, exercise_split


@pytest.mark.parametrize("dt", dtypes(), ids=str)
def test_every_method_every_dtype(world, dt):
    comms = world(3)
    on_ranks(comms, lambda c: exercise(c, dt))


@pytest.mark.parametrize("n", [1, 2, 4])
def test_world_sizes(world, n):
    comms = world(n)
    assert [c.rank for c in comms] == list(range(n))
    assert all(c.size == n for c in comms)
    on_ranks(comms, lambda c: exercise(c, np.float32))


def test_split(world):
    comms = world(4)
    on_ranks(comms, exercise_split)


def test_other_buffer_kinds(world):
    comms = world(2)

    def body(c):
        # bytearray: uint8, in place
        b = bytearray([c.rank + 1] * 5)
        assert c.all_reduce(b) is b
        assert list(b) == [3] * 5
        # memoryview of an int32 array
        a = np.full(3, c.rank + 1, np.int32)
        m = memoryview(a)
        c.all_reduce(m, op=nexar.MAX)
        assert list(a) == [2, 2, 2]
        # all_gather of a read-only bytes object gives a uint8 array
        g = c.all_gather(bytes([c.rank, 9]))
        assert g.dtype == np.uint8 and g.tolist() == [[0, 9], [1, 9]]
        # recv into a bytearray
        if c.rank == 0:
            c.send(b"hello", 1, tag=3)
        else:
            buf = bytearray(5)
            c.recv(buf, 0, tag=3)
            assert bytes(buf) == b"hello"
        # empty arrays complete
        e = np.zeros(0, np.float64)
        assert c.all_reduce(e) is e
        return True

    assert on_ranks(comms, body) == [True, True]


def test_context_manager_closes(world):
    comms = world(1)
    with comms[0] as c:
        c.barrier()
    assert c.closed
    with pytest.raises(nexar.ClosedError) as ei:
        c.barrier()
    assert ei.value.status == nexar._support.ERR_CLOSED
    assert "barrier" in str(ei.value)


def test_ring_topology(world):
    comms = world(5, topology="ring")
    # Two neighbours each; everything else is relayed, and still exact.
    assert [c.stats()["connections"] for c in comms] == [2] * 5
    on_ranks(comms, lambda c: exercise(c, np.float32))
    comms[2].register_rpc(1, lambda src, req: bytes([src]) + req)
    forwarded = comms[1].stats()["relay_bytes_forwarded"] + comms[4].stats()["relay_bytes_forwarded"]
    assert comms[0].rpc(2, 1, b"relayed") == b"\x00relayed"  # 0 and 2 are not neighbours
    assert comms[0].stats()["relay_bytes_sent"] > 0
    assert (comms[1].stats()["relay_bytes_forwarded"] + comms[4].stats()["relay_bytes_forwarded"]
            > forwarded), "no rank between 0 and 2 forwarded the call"
    assert [c.stats()["connections"] for c in world(4, topology="full")] == [3] * 4
    with pytest.raises(ValueError, match="topology"):
        world(2, topology="star")


def test_sparse_topologies(world):
    # Hypercube on 8: three links each; k_regular:4 on 6: four each.
    comms = world(8, topology="hypercube")
    assert [c.stats()["connections"] for c in comms] == [3] * 8
    on_ranks(comms, lambda c: exercise(c, np.float32))
    assert sum(c.stats()["relay_bytes_sent"] for c in comms) > 0
    comms = world(6, topology="k_regular:4")
    assert [c.stats()["connections"] for c in comms] == [4] * 6
    on_ranks(comms, lambda c: exercise(c, np.int64))
    # A custom graph: a path 0-1-2-3; 0 reaches 3 through 1 and 2.
    comms = world(4, topology=[(0, 1), (1, 2), (2, 3)])
    assert [c.stats()["connections"] for c in comms] == [1, 2, 2, 1]
    on_ranks(comms, lambda c: exercise(c, np.float64))
    assert comms[1].stats()["relay_bytes_forwarded"] > 0
    with pytest.raises(nexar.InvalidArgumentError, match="not connected"):
        world(4, topology=[(0, 1), (2, 3)])
    for bad in ("k_regular:", "k_regular:x", [(0, 1, 2)], 7):
        with pytest.raises(ValueError, match="topology"):
            world(4, topology=bad)


def test_stats_count_bytes_sealed_and_opened_in_place(world):
    comms = world(2, shm="off")  # every byte over QUIC
    out = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: sealed from its buffer
    got = np.zeros_like(out)
    before = comms[0].stats()

    def body(c):
        if c.rank == 0:
            c.send(out, 1, tag=3)
        else:
            c.recv(got, 0, tag=3)

    on_ranks(comms, body)
    np.testing.assert_array_equal(got, out)
    after = comms[0].stats()
    assert {"bytes_sealed_in_place", "bytes_opened_in_place"} <= after.keys()
    if after["packets_fast_aead"] > 0:  # ipsec-mb in use (CI installs it)
        assert after["bytes_sealed_in_place"] - before["bytes_sealed_in_place"] > out.nbytes // 2


def test_same_host_ranks_share_memory_with_identical_results(world):
    data = [np.random.default_rng(r).standard_normal(300001).astype(np.float32) * 10.0 ** (r - 2)
            for r in range(4)]
    results = {}
    for mode in ("auto", "off"):
        comms = world(4, shm=mode)
        outs = [d.copy() for d in data]
        on_ranks(comms, lambda c: c.all_reduce(outs[c.rank]))  # in place
        stats = comms[0].stats()
        assert stats["shm_pairs"] == (3 if mode == "auto" else 0)
        # The allreduce read the peers' shared memory: no bytes over QUIC.
        assert stats["shm_collectives"] == (1 if mode == "auto" else 0)
        assert (stats["bytes_sent"] < data[0].nbytes) == (mode == "auto")
        results[mode] = outs
    for r in range(4):
        assert results["auto"][r].tobytes() == results["off"][r].tobytes()
    with pytest.raises(ValueError, match="shm"):
        world(2, shm="sometimes")
