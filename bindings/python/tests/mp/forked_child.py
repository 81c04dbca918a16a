"""Rank 0 forks a child. The child tries its parent's communicator (refused),
makes a world of its own (bootstrap_local) whose asynchronous calls complete
through callbacks and asyncio, then ends normally (sys.exit: atexit handlers
run, nexar's among them). The parent waits for it (bounded) and every rank
goes on with an all_reduce."""
import asyncio
import os
import sys
import threading
import time

import numpy as np

import nexar


def child(comm) -> None:
    try:
        comm.all_reduce(np.ones(4, dtype=np.float32))
        print("child: all_reduce ran", flush=True)
    except nexar.ClosedError as e:
        print(f"child: ClosedError: {e}", flush=True)
    own = nexar.bootstrap_local(2)
    a, b = np.ones(4, np.float32), np.full(4, 2, np.float32)
    called = threading.Event()
    first = own[0].all_reduce(a, async_op=True)
    first.add_done_callback(lambda r: called.set())
    own[1].all_reduce(b, async_op=True).wait(10)
    first.wait(10)
    print(f"child: own world's all_reduce {a.tolist()}, callback "
          f"{'ran' if called.wait(10) else 'never ran'}", flush=True)

    async def both():
        x, y = np.ones(2, np.float32), np.ones(2, np.float32)
        await asyncio.wait_for(asyncio.gather(own[0].all_reduce(x, async_op=True),
                                              own[1].all_reduce(y, async_op=True)), 10)
        return x.tolist()

    print(f"child: awaited {asyncio.run(both())}", flush=True)
    sys.exit(0)  # closes its own world at exit; lets the inherited one go


comm = nexar.init()
comm.all_reduce(np.ones(4, dtype=np.float32))
if comm.rank == 0:
    pid = os.fork()
    if pid == 0:
        child(comm)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print(f"child exited with {os.waitstatus_to_exitcode(status)}", flush=True)
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        print("child stuck", flush=True)
b = np.full(4, comm.rank + 1, dtype=np.float32)
comm.all_reduce(b)
assert b.tolist() == [3.0] * 4, b
print(f"rank {comm.rank}: all_reduce after the fork ok", flush=True)
comm.barrier()
comm.close()
