"""An elastic data-parallel training loop (the Python twin of
elastic_training.c): it survives kill -9 of any rank but rank 0 by shrinking,
and grows back when a replacement process joins.

    nexar-run -n 4 --elastic --max-restarts 3 -- python3 elastic_training.py [STEPS]

Each step sums integer "gradients" over a fixed global batch split across the
ranks there are, so the final checksum equals an uninterrupted run's. Before
each step the ranks agree (all_reduce MIN) on how many joiners wait; when some
do, they grow, and rank 0 broadcasts the model and the step number to everyone,
joiners included. See docs/elastic.md.
"""
import sys
import time

import numpy as np

import nexar

PARAMS, BATCH = 256, 64


def sample_gradients(step: int, samples: range, w: np.ndarray) -> np.ndarray:
    k = np.arange(PARAMS, dtype=np.int64)
    g = np.zeros(PARAMS, np.int64)
    for i in samples:
        x = (step * 131 + i * 31 + k * 7) % 97 - 48
        g += x - np.trunc(w / 64).astype(np.int64)  # C's division truncates
    return g


def main(steps: int = 300, step_ms: float = 10) -> None:
    comm = nexar.init(elastic=True)
    state = np.zeros(1 + PARAMS, np.int64)  # [step, w...]: what rank 0 hands out
    comm.broadcast(state, 0)  # a joiner learns the model here
    failures = (nexar.PeerFailedError, nexar.RevokedError, nexar.AbortedError)
    while state[0] < steps:
        try:
            waiting = np.array([comm.pending_joins()], np.uint32)
            comm.all_reduce(waiting, op=nexar.MIN)
            if waiting[0] > 0:
                grown = comm.grow(int(waiting[0]))
                comm.close()
                comm = grown
                print(f"grown to {comm.size} ranks at step {state[0]}")
                comm.broadcast(state, 0)
                continue
            w = state[1:]
            grad = sample_gradients(int(state[0]), range(comm.rank, BATCH, comm.size), w)
            comm.all_reduce(grad)
            w += np.trunc(grad / BATCH).astype(np.int64)
            state[0] += 1
            time.sleep(step_ms / 1000)
        except failures as e:
            print(f"step {state[0]} failed: {e}", file=sys.stderr)
            comm.revoke()
            survivors = comm.shrink()
            comm.close()
            comm = survivors
            print(f"shrunk to {comm.size} ranks (now rank {comm.rank})")
            comm.broadcast(state, 0)
    if comm.rank == 0:
        checksum = 0
        for v in state[1:]:
            checksum = (checksum * 1000003 + int(v)) % (1 << 64)
        print(f"final step={state[0]} ranks={comm.size} checksum={checksum:016x}")
    comm.close()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
