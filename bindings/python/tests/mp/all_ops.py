"""Run under python -m nexar.run: every method and dtype across processes."""
import asyncio
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import nexar  # noqa: E402
from exercise import dtypes, exercise, exercise_split  # noqa: E402

with nexar.init() as comm:
    assert comm.rank == int(os.environ["NEXAR_RANK"])
    assert comm.size == int(os.environ["NEXAR_WORLD_SIZE"])
    for dt in dtypes():
        exercise(comm, dt)
    exercise_split(comm)

    async def several():
        bufs = [np.full(64, comm.rank + i, np.float32) for i in range(4)]
        await asyncio.gather(*[comm.all_reduce(b, async_op=True) for b in bufs])
        return bufs

    for i, b in enumerate(asyncio.run(several())):
        assert (b == sum(r + i for r in range(comm.size))).all()
    print(f"rank {comm.rank}: every method and {len(dtypes())} dtypes ok")
    # Leave together: a rank that closes while a peer still sends to it fails
    # that peer's operation (docs/python.md, "Ending a job").
    comm.barrier()
