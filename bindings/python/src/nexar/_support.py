"""Errors and the helpers the native module calls (imported by it lazily)."""
from __future__ import annotations

import builtins
import weakref
from typing import Optional

# Status codes of include/nexar.h (their values never change).
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_INVALID_RANK = -2
ERR_SIZE_MISMATCH = -3
ERR_TIMEOUT = -4
ERR_PEER_FAILED = -5
ERR_ABORTED = -6
ERR_CLOSED = -7
ERR_MISMATCH = -8
ERR_TLS = -9
ERR_AUTH = -10
ERR_PROTOCOL = -11
ERR_NO_MEMORY = -12
ERR_IO = -13
ERR_UNSUPPORTED = -14
ERR_NOT_FOUND = -15
ERR_WOULD_DEADLOCK = -16
ERR_INTERNAL = -17
ERR_RPC_NOT_REGISTERED = -18
ERR_RPC_FAILED = -19
ERR_REVOKED = -20
ERR_EXCLUDED = -21

_NAMES = {
    ERR_INVALID_ARGUMENT: "NEXAR_ERR_INVALID_ARGUMENT",
    ERR_INVALID_RANK: "NEXAR_ERR_INVALID_RANK",
    ERR_SIZE_MISMATCH: "NEXAR_ERR_SIZE_MISMATCH",
    ERR_TIMEOUT: "NEXAR_ERR_TIMEOUT",
    ERR_PEER_FAILED: "NEXAR_ERR_PEER_FAILED",
    ERR_ABORTED: "NEXAR_ERR_ABORTED",
    ERR_CLOSED: "NEXAR_ERR_CLOSED",
    ERR_MISMATCH: "NEXAR_ERR_MISMATCH",
    ERR_TLS: "NEXAR_ERR_TLS",
    ERR_AUTH: "NEXAR_ERR_AUTH",
    ERR_PROTOCOL: "NEXAR_ERR_PROTOCOL",
    ERR_NO_MEMORY: "NEXAR_ERR_NO_MEMORY",
    ERR_IO: "NEXAR_ERR_IO",
    ERR_UNSUPPORTED: "NEXAR_ERR_UNSUPPORTED",
    ERR_NOT_FOUND: "NEXAR_ERR_NOT_FOUND",
    ERR_WOULD_DEADLOCK: "NEXAR_ERR_WOULD_DEADLOCK",
    ERR_INTERNAL: "NEXAR_ERR_INTERNAL",
    ERR_RPC_NOT_REGISTERED: "NEXAR_ERR_RPC_NOT_REGISTERED",
    ERR_RPC_FAILED: "NEXAR_ERR_RPC_FAILED",
    ERR_REVOKED: "NEXAR_ERR_REVOKED",
    ERR_EXCLUDED: "NEXAR_ERR_EXCLUDED",
}


class NexarError(Exception):
    """A nexar operation failed.

    Attributes: ``status`` (the NEXAR_ERR_* value, negative), ``rank`` (the
    rank that failed or did not answer, None when unknown), ``message``
    (nexar's own words), ``op`` (the operation) and ``comm_rank`` (the rank
    that raised it, None outside a communicator).
    """

    status: int = ERR_INTERNAL

    def __init__(self, message: str, status: Optional[int] = None,
                 rank: Optional[int] = None, op: str = "",
                 comm_rank: Optional[int] = None) -> None:
        self.message = message
        if status is not None:
            self.status = status
        self.rank = rank
        self.op = op
        self.comm_rank = comm_rank
        super().__init__(self._describe())

    @property
    def status_name(self) -> str:
        return _NAMES.get(self.status, f"status {self.status}")

    def _describe(self) -> str:
        where = f"{self.op} on rank {self.comm_rank}" if self.comm_rank is not None \
            else (self.op or "nexar")
        blame = f" [rank {self.rank}]" if self.rank is not None else ""
        return f"{where} failed ({self.status_name}){blame}: {self.message}"

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.status, self.rank, self.op,
                           self.comm_rank))


def _rebuild(cls, message, status, rank, op, comm_rank):
    return cls(message, status, rank, op, comm_rank)


class InvalidArgumentError(NexarError, ValueError):
    status = ERR_INVALID_ARGUMENT


class InvalidRankError(NexarError, ValueError):
    status = ERR_INVALID_RANK


class SizeMismatchError(NexarError, ValueError):
    status = ERR_SIZE_MISMATCH


class TimeoutError(NexarError, builtins.TimeoutError):  # noqa: A001 - nexar.TimeoutError
    status = ERR_TIMEOUT


class PeerFailedError(NexarError):
    status = ERR_PEER_FAILED


class AbortedError(NexarError):
    status = ERR_ABORTED


class ClosedError(NexarError):
    status = ERR_CLOSED


class MismatchError(NexarError):
    status = ERR_MISMATCH


class TLSError(NexarError):
    status = ERR_TLS


class AuthError(NexarError):
    status = ERR_AUTH


class ProtocolError(NexarError):
    status = ERR_PROTOCOL


class OutOfMemoryError(NexarError, MemoryError):
    status = ERR_NO_MEMORY


class NexarIOError(NexarError):
    status = ERR_IO


class UnsupportedError(NexarError):
    status = ERR_UNSUPPORTED


class NotFoundError(NexarError):
    status = ERR_NOT_FOUND


class WouldDeadlockError(NexarError):
    status = ERR_WOULD_DEADLOCK


class InternalError(NexarError):
    status = ERR_INTERNAL


class RpcNotRegisteredError(NexarError):
    """The target rank serves no handler for that fn_id."""
    status = ERR_RPC_NOT_REGISTERED


class RpcFailedError(NexarError):
    """The target's handler failed; the message names its exception or status."""
    status = ERR_RPC_FAILED


class RevokedError(NexarError):
    """The communicator was revoked (here or by a peer): shrink it to go on."""
    status = ERR_REVOKED


class ExcludedError(NexarError):
    """The other ranks declared this process failed and went on without it."""
    status = ERR_EXCLUDED


# One subclass per status, each declared above.
_BY_STATUS = {cls.status: cls for cls in NexarError.__subclasses__()}


def make_error(status: int, failed_rank: int, message: str, op: str,
               comm_rank: int) -> NexarError:
    """The exception for a failed operation (called by the native module)."""
    cls = _BY_STATUS.get(status, NexarError)
    return cls(message or _NAMES.get(status, "unknown failure"), status,
               None if failed_rank < 0 else failed_rank, op,
               None if comm_rank < 0 else comm_rank)


# Every Communicator the native module makes (init, bootstrap_local, split,
# blocking or not), closed at exit by nexar/__init__.py if still open.
_live: "weakref.WeakSet" = weakref.WeakSet()


def track(comm) -> None:
    """Called by the native module for each new Communicator."""
    _live.add(comm)
