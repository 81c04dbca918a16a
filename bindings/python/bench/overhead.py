"""Time per small allreduce through the Python binding, timed the way
`nexar-bench allreduce --ranks 2 --sizes 8 --iters 200` times the C ABI.

    python bindings/python/bench/overhead.py [--ranks 2] [--bytes 8] [--iters 200] [--warmup 20]

One in-process world (nexar.bootstrap_local) per mode. Every iteration is a
barrier, then one timed all_reduce of --bytes of float32 on every rank; an
iteration's time is its slowest rank's (as in nexar-bench). Prints the median
and the minimum over the iterations, in microseconds, for:

  blocking  comm.all_reduce(buf), one thread per rank
  request   comm.all_reduce(buf, async_op=True).wait(), one thread per rank
  asyncio   both ranks on one event loop: await asyncio.gather(...) of their
            requests (one time for all ranks)
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from typing import Callable, List

import numpy as np

import nexar


def threaded(comms, iters: int, warmup: int, nbytes: int,
             call: Callable[[nexar.Communicator, np.ndarray], object]) -> List[float]:
    times = [[0.0] * iters for _ in comms]

    def rank(i: int) -> None:
        c = comms[i]
        buf = np.ones(max(nbytes // 4, 1), np.float32)
        for k in range(warmup + iters):
            c.barrier()
            t0 = time.perf_counter_ns()
            call(c, buf)
            if k >= warmup:
                times[i][k - warmup] = (time.perf_counter_ns() - t0) / 1e3

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [max(col) for col in zip(*times)]


def with_asyncio(comms, iters: int, warmup: int, nbytes: int) -> List[float]:
    bufs = [np.ones(max(nbytes // 4, 1), np.float32) for _ in comms]

    async def main() -> List[float]:
        out = []
        for k in range(warmup + iters):
            await asyncio.gather(*[c.barrier(async_op=True) for c in comms])
            t0 = time.perf_counter_ns()
            await asyncio.gather(*[c.all_reduce(b, async_op=True) for c, b in zip(comms, bufs)])
            if k >= warmup:
                out.append((time.perf_counter_ns() - t0) / 1e3)
        return out

    return asyncio.run(main())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--bytes", type=int, default=8)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    modes = {
        "blocking": lambda comms: threaded(comms, a.iters, a.warmup, a.bytes,
                                           lambda c, b: c.all_reduce(b)),
        "request": lambda comms: threaded(comms, a.iters, a.warmup, a.bytes,
                                          lambda c, b: c.all_reduce(b, async_op=True).wait()),
        "asyncio": lambda comms: with_asyncio(comms, a.iters, a.warmup, a.bytes),
    }
    print(f"nexar {nexar.version()}: all_reduce of {a.bytes} bytes (float32 sum), "
          f"{a.ranks} ranks in one process, {a.iters} iterations; us per iteration "
          f"(slowest rank)")
    print(f"{'mode':10} {'median':>8} {'min':>8}")
    for name, run in modes.items():
        comms = nexar.bootstrap_local(a.ranks)
        try:
            t = run(comms)
        finally:
            for c in comms:
                c.close()
        print(f"{name:10} {statistics.median(t):8.1f} {min(t):8.1f}")


if __name__ == "__main__":
    main()
