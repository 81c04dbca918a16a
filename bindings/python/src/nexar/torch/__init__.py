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
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

from ._backend import BackendBase, NexarBackend

__all__ = ["NexarBackend", "register"]

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


register()
