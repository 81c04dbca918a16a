import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import nexar  # noqa: E402


def on_ranks(comms, fn, timeout=90.0):
    """Runs fn(comm) on one thread per rank (blocking calls need one); returns
    the results in rank order and re-raises the first exception."""
    results = [None] * len(comms)
    errors = [None] * len(comms)

    def body(i):
        try:
            results[i] = fn(comms[i])
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,), name=f"rank{i}")
               for i in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), f"{t.name} did not finish within {timeout} s"
    for e in errors:
        if e is not None:
            raise e
    return results


@pytest.fixture
def world():
    """world(n, **options): an in-process world, closed after the test."""
    made = []

    def make(n, **options):
        comms = nexar.bootstrap_local(n, **options)
        made.extend(comms)
        return comms

    yield make
    for c in made:
        c.close()
