"""nexar as a torch.distributed backend.

``import nexar.torch`` registers the backend ``"nexar"`` for CPU tensors::

    import torch.distributed as dist
    import nexar.torch  # noqa: F401 - registers "nexar"
    dist.init_process_group("nexar")      # under torchrun, nexar-run, Slurm, or with
                                           # init_method= / store= as for any backend

The group's rank 0 starts a nexar seed on an ephemeral port and publishes its
address and a fresh token through the store torch gives the backend; every
member joins it. ``timeout=`` bounds every nexar operation of the group.
``pg_options`` may be a dict of :func:`nexar.init` keywords (e.g.
``{"heartbeat_timeout": 2.0}``). Failures raise
``torch.distributed.DistBackendError`` with nexar's message, which names the
rank. Needs torch >= 2.15 (Python subclasses of torch's Backend).
``nexar.torch.hooks`` has DDP comm hooks on nexar's compressed allreduce.
"""
from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any, Dict, Optional

import numpy as np

import torch
import torch.distributed as dist

from ._backend import BackendBase, NexarBackend

__all__ = ["NexarBackend", "register", "init_process_group", "hooks"]

NAME = "nexar"


def _create(opts: Any, backend_options: Any = None) -> NexarBackend:
    """torch's extended creation call: opts carries the group's store, rank,
    size and timeout; backend_options is the user's pg_options."""
    options: Optional[Dict[str, Any]] = None
    if isinstance(backend_options, dict):
        options = dict(backend_options)
    elif backend_options is not None:
        raise TypeError("nexar: pg_options must be a dict of nexar.init keywords, not "
                        f"{type(backend_options).__name__}")
    timeout = getattr(opts, "timeout", None) or timedelta(minutes=30)
    return NexarBackend(opts.store, opts.group_rank, opts.group_size, timeout, options)


def _check_python_overrides() -> None:
    """torch must call a Python subclass's overrides (torch >= 2.15)."""

    class Probe(BackendBase):
        def getBackendName(self) -> str:  # noqa: N802 - torch's name
            return "nexar-probe"

    try:
        name = Probe(0, 1).name()
    except Exception as e:  # noqa: BLE001 - reported below with the cause
        name = repr(e)
    if name != "nexar-probe":
        raise ImportError(f"nexar.torch needs torch >= 2.15, whose Backend can be subclassed "
                          f"in Python; torch {torch.__version__} does not call the override "
                          f"(got {name!r})")


def register() -> None:
    """Registers "nexar" with torch.distributed (done on import; also the
    entry point torch 2.15 calls for the group torch.distributed.backends)."""
    if getattr(dist.Backend, NAME.upper(), None) is not None:  # registered already
        return
    _check_python_overrides()
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])


def init_process_group(backend: str = NAME, **kwargs: Any) -> None:
    """torch.distributed.init_process_group, also under ``nexar-run`` and
    ``python -m nexar.run``, which set NEXAR_SEED but not torch's MASTER_ADDR:
    the world the launcher forms tells every rank where rank 0's torch store
    (a TCPStore on an ephemeral port) listens. Elsewhere (torchrun, an
    ``init_method`` or ``store`` given) it is torch's own call."""
    if ("store" in kwargs or "init_method" in kwargs or os.environ.get("MASTER_ADDR")
            or not os.environ.get("NEXAR_SEED")):
        dist.init_process_group(backend, **kwargs)
        return
    import nexar

    timeout = kwargs.get("timeout") or timedelta(minutes=30)
    with nexar.init() as comm:
        rank, size = comm.rank, comm.size
        address = np.zeros(256, np.uint8)
        store = None
        if rank == 0:
            host = _store_host(os.environ["NEXAR_SEED"])
            store = dist.TCPStore(host, 0, size, is_master=True, timeout=timeout,
                                  wait_for_workers=False)
            text = f"{host}:{store.port}".encode()
            address[:len(text)] = np.frombuffer(text, np.uint8)
        comm.broadcast(address, 0)
        if rank != 0:
            host, port = bytes(address).rstrip(b"\0").decode().rsplit(":", 1)
            store = dist.TCPStore(host, int(port), size, is_master=False, timeout=timeout)
        comm.barrier()  # every rank has its store client before rank 0 goes on
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, **kwargs)


def _store_host(seed: str) -> str:
    """Where rank 0's store is reachable: loopback when the launcher's seed is
    (nexar-run's ranks share a host), else this host's address."""
    host = seed.rsplit(":", 1)[0].strip("[]")
    if host in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


register()

from . import hooks  # noqa: E402 - nexar.torch.hooks.topk_hook after `import nexar.torch`
