"""Run under python -m nexar.run: data-parallel logistic regression; rank 0
writes the weights to argv[1]."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import nexar  # noqa: E402
from logreg import dataset, train  # noqa: E402

with nexar.init() as comm:
    X, y = dataset()
    shard = slice(comm.rank, None, comm.size)  # every size-th example
    w = train(X[shard], y[shard], allreduce=lambda g: comm.all_reduce(g, op=nexar.SUM))
    every = comm.all_gather(w)
    assert (every == w).all(), "ranks disagree on the weights"
    if comm.rank == 0:
        np.save(sys.argv[1], w)
    print(f"rank {comm.rank}: trained on {len(y[shard])} of {len(y)} examples")
    # Leave together: a rank that closes while a peer still sends to it fails
    # that peer's operation (docs/python.md, "Ending a job").
    comm.barrier()
