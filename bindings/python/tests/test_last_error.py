"""A blocking call's error names the rank that failed it, from the call's own
record (nexar_last_error), not from the communicator's background error."""
import threading
import time

import numpy as np
import pytest

import nexar
from nexar import _support as st


def test_blocking_recv_names_the_peer_that_aborted(world):
    comms = world(4)
    # Rank 0's first background error names rank 3, closed first.
    comms[3].close()
    deadline = time.monotonic() + 10
    while comms[0].async_error() is None:
        assert time.monotonic() < deadline, "rank 0 never heard of rank 3"
        time.sleep(0.005)
    assert comms[0].async_error().rank == 3

    def abort_rank_2():
        time.sleep(0.3)
        comms[2].abort()

    t = threading.Thread(target=abort_rank_2)
    t.start()
    try:
        with pytest.raises(nexar.AbortedError) as ei:
            comms[0].recv(np.zeros(2), 2, tag=1)
    finally:
        t.join(60)
    e = ei.value
    assert e.status == st.ERR_ABORTED
    assert e.rank == 2, f"blamed rank {e.rank}: {e}"
    assert e.op == "recv" and e.comm_rank == 0 and e.message


def test_refused_call_names_no_rank(world):
    comms = world(2)
    comms[0].abort()
    with pytest.raises(nexar.AbortedError) as ei:
        comms[0].recv(np.zeros(2), 1, tag=1)
    assert ei.value.rank is None and ei.value.message
