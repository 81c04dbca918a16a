"""Round trip of a Python RPC, and calls per second with many outstanding.

    python bindings/python/bench/rpc_latency.py [--bytes 8] [--iters 2000] [--warmup 200]
                                                [--outstanding 64]

Two ranks in one process (nexar.bootstrap_local(2), real QUIC over
loopback). Rank 1 serves an echo handler written in Python; rank 0 calls it.
Prints the median and minimum of blocking ``comm.rpc`` calls, in
microseconds, and the calls per second reached with --outstanding
``rpc(..., async_op=True)`` requests in flight at a time, waited in order.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections import deque

import nexar

ECHO = 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bytes", type=int, default=8)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--outstanding", type=int, default=64)
    a = p.parse_args()
    request = bytes(a.bytes)
    comms = nexar.bootstrap_local(2)
    try:
        comms[1].register_rpc(ECHO, lambda src, req: req)
        times = []
        for k in range(a.warmup + a.iters):
            t0 = time.perf_counter_ns()
            out = comms[0].rpc(1, ECHO, request)
            if k >= a.warmup:
                times.append((time.perf_counter_ns() - t0) / 1e3)
        assert out == request
        pending: deque = deque()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            if len(pending) == a.outstanding:
                assert pending.popleft().wait(60) == request
            pending.append(comms[0].rpc(1, ECHO, request, async_op=True))
        while pending:
            assert pending.popleft().wait(60) == request
        rate = a.iters / (time.perf_counter() - t0)
    finally:
        for c in comms:
            c.close()
    print(f"nexar {nexar.version()}: Python RPC echo of {a.bytes} bytes, 2 ranks in one "
          f"process, {a.iters} calls")
    print(f"blocking round trip: median {statistics.median(times):.1f} us, "
          f"min {min(times):.1f} us")
    print(f"{a.outstanding} outstanding: {rate:,.0f} calls/s")


if __name__ == "__main__":
    main()
