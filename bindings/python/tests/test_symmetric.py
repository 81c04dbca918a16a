import gc

import numpy as np
import pytest

import nexar
from conftest import on_ranks


def test_mem_alloc_carries_collectives(world):
    """A large broadcast and an allreduce out of symmetric memory are exact
    between same-host ranks (where the bytes travel by reference)."""
    comms = world(2)
    n = 1 << 18  # 1 MiB of float32
    expected = (np.arange(n) % 1000).astype(np.float32) + 0.5

    def body(c):
        buf = c.mem_alloc(n, np.float32)
        assert buf.shape == (n,) and buf.dtype == np.float32
        buf[:] = expected if c.rank == 1 else 0
        c.broadcast(buf, root=1)
        assert np.array_equal(buf, expected)
        c.all_reduce(buf)
        assert np.array_equal(buf, 2 * expected)
        del buf
        gc.collect()  # the array's last reference frees the memory
        return True

    assert on_ranks(comms, body) == [True, True]


def test_mem_alloc_refuses_zero(world):
    (c,) = world(1)
    with pytest.raises(ValueError):
        c.mem_alloc(0)
