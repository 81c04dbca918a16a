"""Elastic membership (docs/elastic.md): a world formed through an elastic
seed admits a joiner with comm.grow(); old ranks keep their numbers, the
joiner gets the next one, and collectives include it at once."""
import threading
import time

import numpy as np

import nexar
from conftest import on_ranks


def test_grow_admits_a_joiner(monkeypatch):
    monkeypatch.setenv("NEXAR_SEED_ELASTIC", "1")
    seed = nexar.Seed(2, token="py-elastic", formation_timeout=30)
    try:
        monkeypatch.setenv("NEXAR_SEED", seed.address)
        monkeypatch.setenv("NEXAR_CLUSTER_TOKEN", "py-elastic")
        monkeypatch.setenv("NEXAR_ELASTIC", "1")
        for name in ("NEXAR_RANK", "NEXAR_WORLD_SIZE"):
            monkeypatch.delenv(name, raising=False)
        # Ranks in arrival order; sorted by rank below.
        members = on_ranks([None, None], lambda _: nexar.init())
        members.sort(key=lambda c: c.rank)
        assert [c.rank for c in members] == [0, 1]
        assert members[0].pending_joins() == 0

        joined = {}
        monkeypatch.delenv("NEXAR_ELASTIC")
        joiner = threading.Thread(target=lambda: joined.update(comm=nexar.init(elastic=True)))
        joiner.start()
        deadline = time.monotonic() + 60
        while min(c.pending_joins() for c in members) < 1:
            assert time.monotonic() < deadline, "the joiner never showed up as pending"
            time.sleep(0.01)
        grown = on_ranks(members, lambda c: c.grow(1))
        joiner.join(60)
        assert not joiner.is_alive()
        world = grown + [joined["comm"]]
        assert [(c.rank, c.size) for c in world] == [(0, 3), (1, 3), (2, 3)]

        def total(c):
            v = np.array([c.rank + 1.0])
            c.all_reduce(v)
            return float(v[0])

        assert on_ranks(world, total) == [6.0, 6.0, 6.0]
        for c in world + members:
            c.close()
    finally:
        seed.stop()
