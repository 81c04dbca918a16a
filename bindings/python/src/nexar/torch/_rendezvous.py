"""Forming a group's nexar communicator through the store torch hands the
backend: the group's rank 0 starts a seed on an ephemeral port with a fresh
token and publishes both; every member then joins it. MASTER_PORT (torch's
own store) is never bound."""
from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from typing import Any, Dict, Optional, Tuple

import nexar

_KEY_SEED = "nexar/seed"
_KEY_TOKEN = "nexar/token"


def _seed_host() -> Tuple[str, str]:
    """(listen host, advertised host) of the seed rank 0 starts."""
    advertise = os.environ.get("NEXAR_SEED_HOST") or os.environ.get("MASTER_ADDR") or ""
    if advertise in ("", "localhost", "127.0.0.1", "::1"):
        return "127.0.0.1", "127.0.0.1"
    try:  # a host name resolved here, so that workers need not resolve it
        advertise = socket.gethostbyname(advertise)
    except OSError:
        pass
    return "0.0.0.0", advertise


def timeout_options(timeout: timedelta) -> Dict[str, float]:
    """torch's timeout= as nexar's: every operation and the formation."""
    secs = max(timeout.total_seconds(), 0.001)
    return {"collective_timeout": secs, "barrier_timeout": secs, "p2p_timeout": secs,
            "connect_timeout": secs}


def join(store: Any, rank: int, size: int, timeout: timedelta,
         options: Optional[Dict[str, Any]] = None) -> Tuple["nexar.Communicator",
                                                            Optional["nexar.Seed"]]:
    """This member's communicator of the group (and the seed, on rank 0)."""
    seed = None
    if rank == 0:
        listen, advertise = _seed_host()
        token = secrets.token_hex(16)
        seed = nexar.Seed(size, listen=f"{listen}:0", token=token,
                          formation_timeout=timeout.total_seconds())
        port = seed.address.rsplit(":", 1)[1]
        store.set(_KEY_TOKEN, token)
        store.set(_KEY_SEED, f"{advertise}:{port}")
    else:
        store.wait([_KEY_SEED, _KEY_TOKEN], timeout)
    address = store.get(_KEY_SEED).decode()
    token = store.get(_KEY_TOKEN).decode()
    opts: Dict[str, Any] = timeout_options(timeout)
    opts.update(options or {})
    comm = nexar.init(seed=address, token=token, rank=rank, world_size=size, **opts)
    return comm, seed
