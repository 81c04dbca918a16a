"""Run under python -m nexar.run: rank 0 keeps a sum that the other ranks add
to by RPC; every rank answers "who are you" for every other."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import nexar  # noqa: E402

ADD, WHO = 1, 2

with nexar.init() as comm:
    total = np.zeros(1000, np.float64)

    def add(src, request):
        total[:] += np.frombuffer(request, np.float64)
        return np.float64(total.sum()).tobytes()

    comm.register_rpc(WHO, lambda src, request: f"rank {comm.rank} answers {src}".encode())
    if comm.rank == 0:
        comm.register_rpc(ADD, add)
    comm.barrier()  # every handler is registered before anyone calls
    if comm.rank != 0:
        for i in range(10):
            comm.rpc(0, ADD, np.full(1000, comm.rank + i, np.float64))
    for r in range(comm.size):
        assert comm.rpc(r, WHO) == f"rank {r} answers {comm.rank}".encode()
    comm.barrier()  # every addition is in
    if comm.rank == 0:
        expected = sum(r + i for r in range(1, comm.size) for i in range(10))
        assert (total == expected).all(), (total[:3], expected)
    print(f"rank {comm.rank}: rpc ok")
    comm.barrier()
