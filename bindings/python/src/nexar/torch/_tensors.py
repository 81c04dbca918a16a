"""Tensors as the numpy arrays nexar's binding takes, and torch's reduce ops
as nexar's: which dtypes reduce how, checked before anything is issued."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from .. import _nexar

try:  # numpy has no bfloat16: ml_dtypes' one moves and reduces it natively
    import ml_dtypes as _ml_dtypes
    _BF16: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - the [torch] extra installs it
    _BF16 = None

# What nexar reduces natively (bool is reduced as uint8, see _BOOL_OPS).
_REDUCIBLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.int32, torch.int64, torch.uint8, torch.bool}
_FLOATING = {torch.float32, torch.float64, torch.float16, torch.bfloat16}

_NEXAR_OP = {
    dist.ReduceOp.SUM: _nexar.SUM,
    dist.ReduceOp.PRODUCT: _nexar.PROD,
    dist.ReduceOp.MIN: _nexar.MIN,
    dist.ReduceOp.MAX: _nexar.MAX,
    dist.ReduceOp.AVG: _nexar.SUM,  # then divided by the group's size
}
# bool as gloo reduces it: SUM and MAX are a logical or, PRODUCT and MIN an and.
_BOOL_OPS = {_nexar.SUM: _nexar.MAX, _nexar.PROD: _nexar.MIN, _nexar.MIN: _nexar.MIN,
             _nexar.MAX: _nexar.MAX}


class Reduction:
    """A torch reduce op lowered onto nexar: the op nexar runs, and what is
    done to the result afterwards (AVG: divide by the group's size)."""

    def __init__(self, nexar_op: int, divide_by: int = 1, premul: Optional[float] = None):
        self.nexar_op = nexar_op
        self.divide_by = divide_by
        self.premul = premul

    def for_dtype(self, dtype: torch.dtype) -> int:
        return _BOOL_OPS[self.nexar_op] if dtype == torch.bool else self.nexar_op

    def before(self, t: torch.Tensor) -> None:
        """Applied to the contribution before the reduction (PREMUL_SUM)."""
        if self.premul is not None:
            t.mul_(self.premul)

    def after(self, t: torch.Tensor) -> None:
        if self.divide_by != 1:
            t.div_(self.divide_by)


def premul_factor(op) -> Optional[float]:
    """The factor of a PREMUL_SUM op made by torch (a Python scalar), or None."""
    for name in ("_factor", "factor"):
        f = getattr(op, name, None)
        if isinstance(f, (int, float)):
            return float(f)
    return None


def reduction(what: str, rank: int, op, dtypes: Sequence[torch.dtype], size: int) -> Reduction:
    """Checks op and dtypes (identically on every rank, before anything is
    issued) and lowers op onto nexar."""
    for dt in dtypes:
        if dt not in _REDUCIBLE:
            raise TypeError(f"nexar {what} on rank {rank}: dtype {dt} cannot be reduced; "
                            f"supported: {', '.join(sorted(str(d) for d in _REDUCIBLE))}")
        if dt == torch.bfloat16 and _BF16 is None:
            raise TypeError(f"nexar {what} on rank {rank}: bfloat16 needs ml_dtypes "
                            "(pip install 'nexar[torch]')")
    kind = op.op if isinstance(op, dist.ReduceOp) and hasattr(op, "op") else op
    try:
        if kind == dist.ReduceOp.PREMUL_SUM:
            factor = premul_factor(op)
            if factor is None:
                raise ValueError(f"nexar {what} on rank {rank}: PREMUL_SUM with a tensor "
                                 "factor is not supported (use a Python scalar factor)")
            _floating_only(what, rank, "PREMUL_SUM", dtypes)
            return Reduction(_nexar.SUM, premul=factor)
    except AttributeError:  # a torch without PREMUL_SUM
        pass
    for torch_op, nexar_op in _NEXAR_OP.items():
        if kind == torch_op:
            if torch_op == dist.ReduceOp.AVG:
                _floating_only(what, rank, "AVG", dtypes)
                return Reduction(nexar_op, divide_by=size)
            return Reduction(nexar_op)
    raise ValueError(f"nexar {what} on rank {rank}: reduce op {op} is not supported "
                     "(SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM are)")


def _floating_only(what: str, rank: int, name: str, dtypes: Sequence[torch.dtype]) -> None:
    for dt in dtypes:
        if dt not in _FLOATING:
            raise TypeError(f"nexar {what} on rank {rank}: {name} needs a floating dtype, "
                            f"not {dt}")


def check_cpu(what: str, rank: int, tensors: Sequence[torch.Tensor]) -> None:
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"nexar {what} on rank {rank}: expected a torch.Tensor, "
                            f"not {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"nexar {what} on rank {rank}: the tensor is on device "
                             f"{t.device}; the nexar backend takes CPU tensors only "
                             "(use backend=\"cpu:nexar,cuda:nccl\" for GPU tensors)")
        if t.is_sparse:
            raise ValueError(f"nexar {what} on rank {rank}: sparse tensors are not supported")


def as_array(t: torch.Tensor, reduce: bool) -> np.ndarray:
    """A zero-copy numpy view of a contiguous CPU tensor. For reductions the
    element type is kept (bool as uint8, bfloat16 as ml_dtypes'); for moving
    data any dtype is viewed as bytes."""
    flat = t.detach().reshape(-1)
    dt = t.dtype
    if dt == torch.bool:
        return flat.view(torch.uint8).numpy()
    if dt == torch.bfloat16:
        if reduce:
            return flat.view(torch.int16).numpy().view(_BF16)
        return flat.view(torch.uint8).numpy()
    if reduce:
        return flat.numpy()
    if t.element_size() == 1 or dt in _FLOATING or dt in (torch.int32, torch.int64):
        return flat.numpy()
    return flat.view(torch.uint8).numpy()


class Staged:
    """A tensor as nexar may write it: itself when contiguous, else a
    contiguous copy that is copied back once the operation has completed."""

    def __init__(self, t: torch.Tensor, copy_in: bool = True):
        self.tensor = t
        if t.is_contiguous():
            self.work = t
        elif copy_in:
            self.work = t.contiguous()
        else:
            self.work = torch.empty(t.shape, dtype=t.dtype)

    def finish(self) -> None:
        if self.work is not self.tensor:
            self.tensor.copy_(self.work)


def flat_of(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One contiguous 1-D tensor holding the tensors one after the other."""
    return torch.cat([t.detach().reshape(-1) for t in tensors]) if tensors else torch.empty(0)


def unflatten_into(flat: torch.Tensor, outputs: Sequence[torch.Tensor]) -> None:
    offset = 0
    for t in outputs:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view(t.shape))
        offset += n


def same_dtype(what: str, rank: int, tensors: Sequence[torch.Tensor]) -> torch.dtype:
    dts = {t.dtype for t in tensors}
    if len(dts) > 1:
        raise TypeError(f"nexar {what} on rank {rank}: tensors of different dtypes "
                        f"{sorted(str(d) for d in dts)}")
    return tensors[0].dtype


Finisher = Callable[[], None]
Pair = Tuple[torch.Tensor, np.ndarray]
_ = List  # typing re-export for the backend
