"""The flight recorder from Python: a communicator's dump, and every
communicator's, are JSON naming the operations that ran."""
import json
import threading

import numpy as np
import pytest

import nexar


def test_dump_lists_the_collectives_that_ran(world, tmp_path):
    comms = world(2)

    def run(c):
        for _ in range(2):
            c.all_reduce(np.ones(8, dtype=np.float64))

    ts = [threading.Thread(target=run, args=(c,)) for c in comms]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)

    path = tmp_path / "rank0.json"
    comms[0].flight_recorder_dump(str(path))
    doc = json.loads(path.read_text())
    assert doc["nexar_flight_recorder"] == 1
    (c,) = doc["communicators"]
    assert c["rank"] == 0 and c["size"] == 2 and c["last_completed"] == 2
    ops = c["operations"]
    assert [o["coll_seq"] for o in ops] == [1, 2]
    assert all(o["op"] == "allreduce" and o["dtype"] == "f64" and o["count"] == 8 and
               o["state"] == "completed" for o in ops)

    every = tmp_path / "all.json"
    nexar.flight_recorder_dump(path=str(every))
    assert len(json.loads(every.read_text())["communicators"]) == 2
    nexar.flight_recorder_dump(comms[1], str(tmp_path / "rank1.json"))
    assert json.loads((tmp_path / "rank1.json").read_text())["communicators"][0]["rank"] == 1


def test_dump_without_a_place_raises(world, monkeypatch):
    monkeypatch.delenv("NEXAR_FR_DUMP_DIR", raising=False)
    comms = world(1)
    with pytest.raises(nexar.InvalidArgumentError):
        comms[0].flight_recorder_dump()
