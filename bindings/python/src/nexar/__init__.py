"""nexar: distributed communication over encrypted QUIC.

Collectives and point-to-point messages between the ranks of a
:class:`Communicator`, on numpy arrays and any writable C-contiguous buffer::

    import numpy as np, nexar
    comm = nexar.init()                  # under python -m nexar.run, torchrun, Slurm, Open MPI...
    x = np.ones(4, np.float32)
    comm.all_reduce(x, op=nexar.SUM)     # in place; blocking calls release the GIL
    req = comm.all_gather(x, async_op=True)
    out = req.wait()                     # or: out = await req

A Python binding over libnexar's C ABI. nexar's log lines go to the logging
logger ``"nexar"`` (which lines exist is set by NEXAR_LOG_LEVEL: error, warn,
info, debug, trace; default warn). See docs/python.md.
"""
from __future__ import annotations

import asyncio
import atexit
import enum
import os
import sys
import threading
import weakref
from typing import Any, Callable, List, Optional

from . import _nexar, _support
from ._nexar import Communicator, Compressor, Request, Seed
from ._support import (AbortedError, AuthError, ClosedError, InternalError, InvalidArgumentError,
                       InvalidRankError, MismatchError, NexarError, NexarIOError, NotFoundError,
                       OutOfMemoryError, PeerFailedError, ProtocolError, RpcFailedError,
                       RpcNotRegisteredError, SizeMismatchError, TimeoutError, TLSError,
                       UnsupportedError, WouldDeadlockError, RevokedError, ExcludedError)

__all__ = [
    "init", "bootstrap_local", "version", "Communicator", "Compressor", "Request", "Op",
    "SUM", "PROD", "MIN", "MAX",
    "NexarError", "InvalidArgumentError", "InvalidRankError", "SizeMismatchError",
    "TimeoutError", "PeerFailedError", "AbortedError", "ClosedError", "MismatchError",
    "TLSError", "AuthError", "ProtocolError", "OutOfMemoryError", "NexarIOError",
    "UnsupportedError", "NotFoundError", "WouldDeadlockError", "InternalError",
    "RpcNotRegisteredError", "RpcFailedError", "RevokedError", "ExcludedError",
    "flight_recorder_dump",
]
__version__ = "0.1.0"


class Op(enum.IntEnum):
    """Reduction operators (NEXAR_OP_*)."""
    SUM = _nexar.SUM
    PROD = _nexar.PROD
    MIN = _nexar.MIN
    MAX = _nexar.MAX


SUM, PROD, MIN, MAX = Op.SUM, Op.PROD, Op.MIN, Op.MAX


def version() -> str:
    """The version of the libnexar this package loaded."""
    return _nexar.version()


# ---- Communicators (every one is closed at exit: _support.track) ------------------

_from_env: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


def flight_recorder_dump(comm: "Communicator | None" = None, path: "str | None" = None) -> None:
    """Write the flight recorder as JSON: comm's recent operations, or those of
    every communicator of this process when comm is None, to path (None: into
    NEXAR_FR_DUMP_DIR as nexar-fr-HOST-PID.json). ``nexar-fr`` merges the
    dumps of all ranks and prints where they diverge."""
    if comm is None:
        _nexar._flight_recorder_dump_all(path)
    else:
        comm.flight_recorder_dump(path)


def bootstrap_local(world_size: int, **options: Any) -> List[Communicator]:
    """``world_size`` communicators in this process, joined by real QUIC over loopback.

    ``comms[i].rank == i``. Each rank has its own engine, so blocking calls
    need one thread per rank (they release the GIL), or use ``async_op=True``.
    Options, in seconds: collective_timeout, barrier_timeout, p2p_timeout,
    connect_timeout, heartbeat_interval, heartbeat_timeout, rpc_timeout; and
    ``topology="full"`` (every pair connected), ``"ring"`` (each rank
    connected to its two neighbours, the rest relayed), ``"k_regular:K"``,
    ``"hypercube"``, or a list of ``(rank, rank)`` links such as
    ``[(0, 1), (1, 2)]`` (a custom graph; it must be connected), see
    docs/relay.md; ``shm="auto"``
    (ranks of one host share memory), ``"off"`` (every byte over QUIC) or
    ``"require"``, and ``shm_max_bytes``. Defaults come from the NEXAR_*
    environment, see docs/configuration.md.
    """
    return _nexar.bootstrap_local(world_size, **options)


def init(elastic: Optional[bool] = None, **options: Any) -> Communicator:
    """Join a world: the one the environment describes, or the seed named by keywords.

    Without keywords (nexar_comm_init_from_env), recognized in this order:
    NEXAR_SEED with NEXAR_RANK and NEXAR_WORLD_SIZE (``python -m nexar.run``,
    ``nexar-run``), torchrun / env:// (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT), Open MPI, PMI, Slurm.

    With keywords (nexar_comm_join): ``seed="host:port"`` of a running seed
    (e.g. :class:`Seed`), ``token`` (the cluster token), ``rank`` (-1: the seed
    assigns one), ``world_size``, ``listen`` and ``advertise`` ("host:port" of
    this worker), ``interface`` (NCCL syntax, e.g. "eth0" or "^docker"),
    ``spin`` (seconds to busy-poll before sleeping), and every option of
    :func:`bootstrap_local` (timeouts, topology, shm). Unset ones come from
    the NEXAR_* environment.

    ``elastic=True`` (as NEXAR_ELASTIC=1) keeps the connection to an elastic
    seed, for ``comm.pending_joins()`` and ``comm.grow()``, and lets this
    process join a running world: it then waits until the members admit it
    (docs/elastic.md).

    An unhandled exception in this process then aborts the communicator, so
    that the other ranks fail at once instead of waiting for their timeouts.
    """
    if elastic is None:
        comm = _nexar.init(**options)
    else:
        previous = os.environ.get("NEXAR_ELASTIC")
        os.environ["NEXAR_ELASTIC"] = "1" if elastic else "0"
        try:
            comm = _nexar.init(**options)
        finally:
            if previous is None:
                del os.environ["NEXAR_ELASTIC"]
            else:
                os.environ["NEXAR_ELASTIC"] = previous
    _from_env.add(comm)
    _install_excepthook()
    return comm


_hook_lock = threading.Lock()
_hook_installed = False


def _report_failure_to_launcher() -> None:
    """Tells nexar-run that this rank fails first: the ranks that lose it may
    exit before it does, and the launcher names the rank that reported."""
    fd = os.environ.get("NEXAR_RUN_FAILURE_FD")
    if not fd:
        return
    try:
        os.write(int(fd), f"{os.getpid()}\n".encode())
    except (ValueError, OSError):  # not under nexar-run after all
        pass


def _install_excepthook() -> None:
    global _hook_installed
    with _hook_lock:
        if _hook_installed:
            return
        _hook_installed = True
        previous = sys.excepthook

        under_launcher = os.environ.get("NEXAR_RUN_LAUNCHER") == "python"

        def hook(tp, value, tb):
            _report_failure_to_launcher()
            if under_launcher:
                # python -m nexar.run stops the other ranks as soon as this
                # process ends: end now, before closing the communicator makes
                # the others fail too and blurs which rank failed first.
                previous(tp, value, tb)
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:  # noqa: BLE001 - exiting anyway
                        pass
                os._exit(1)
            for comm in list(_from_env):
                try:
                    comm.abort()  # the peers fail at once instead of at their timeouts
                except Exception:  # noqa: BLE001 - never hide the original exception
                    pass
            previous(tp, value, tb)

        sys.excepthook = hook


# ---- Request: waiting from asyncio -------------------------------------------------

def _set_done(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


def _request_await(self: Request):
    if not self.done():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def wake() -> None:  # the nexar-dispatch thread
            try:
                loop.call_soon_threadsafe(_set_done, fut)
            except RuntimeError:  # the loop was closed meanwhile
                pass

        self._on_done(wake)
        yield from fut.__await__()
    return self.wait(0)


def _request_add_done_callback(self: Request, fn: Callable[[Request], Any]) -> None:
    """Call fn(request) once the operation has completed, on nexar's Python
    dispatch thread (never on nexar's own threads); at once if it already has."""
    self._on_done(lambda: fn(self))


Request.__await__ = _request_await  # type: ignore[attr-defined]
Request.add_done_callback = _request_add_done_callback  # type: ignore[attr-defined]
Request.result = Request.wait  # type: ignore[attr-defined]


# ---- The dispatch thread: completions and log lines reach Python here ----------------

def _start_dispatcher() -> threading.Thread:
    t = threading.Thread(target=_nexar._dispatch_loop, name="nexar-dispatch", daemon=True)
    t.start()
    return t


_dispatcher = _start_dispatcher()
_nexar._install_log_sink()


def _after_fork_in_child() -> None:
    # The parent's dispatch thread did not come along: the communicators this
    # child makes get a dispatcher and a thread of their own. (Those it
    # inherited refuse to work here, and closing them only lets them go.)
    global _dispatcher
    _nexar._dispatch_after_fork_in_child()
    _dispatcher = _start_dispatcher()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _shutdown() -> None:
    for comm in list(_support._live):
        try:
            comm.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
    _nexar._flush(2.0)
    _nexar._remove_log_sink()
    _nexar._dispatch_stop()
    _dispatcher.join(5.0)


atexit.register(_shutdown)
