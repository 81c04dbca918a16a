"""DDP comm hooks on nexar's compressed allreduce (TopK or RandomK with error
feedback)::

    import nexar.torch.hooks as hooks
    state = hooks.CompressionState(ratio=0.01)        # the default group
    ddp_model.register_comm_hook(state, hooks.topk_hook)   # or hooks.randomk_hook

Each gradient bucket gets its own compressor, which keeps what was not sent
(the error-feedback residual) for the bucket's next step. The bucket's
gradients become the mean over ranks of what every rank sent, zero where no
rank sent an element. The group must be a "nexar" one; torch's own hooks
(``default_hooks.fp16_compress_hook``, ``bf16_compress_hook``) work on it too.
"""
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist

import nexar

from ._backend import NexarBackend
from ._tensors import as_array

__all__ = ["CompressionState", "topk_hook", "randomk_hook"]

# What nexar's compressor takes.
_COMPRESSIBLE = {torch.float32, torch.float64, torch.float16, torch.bfloat16}


class CompressionState:
    """The state of :func:`topk_hook` and :func:`randomk_hook`: the group,
    the fraction of each bucket sent per step (k = max(1, floor(ratio *
    elements))) and RandomK's seed (the same on every rank), and one
    compressor with its residual per gradient bucket."""

    def __init__(self, process_group: Optional[Any] = None, ratio: float = 0.01,
                 seed: int = 0):
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"CompressionState: ratio must be in (0, 1], not {ratio}")
        self.process_group = process_group
        self.ratio = float(ratio)
        self.seed = int(seed)
        # (kind, bucket index) -> (elements, dtype, compressor); replaced when
        # DDP rebuilds its buckets after the first step (every rank does so
        # alike, so the compressors stay the same on every rank).
        self._compressors: Dict[Tuple[str, int], Tuple[int, Any, "nexar.Compressor"]] = {}

    def reset(self) -> None:
        """Drops every residual (e.g. after loading a checkpoint)."""
        for _, _, z in self._compressors.values():
            z.reset()

    def _group(self) -> Any:
        return self.process_group if self.process_group is not None else dist.group.WORLD

    def _backend(self) -> NexarBackend:
        group = self._group()
        backend = group._get_backend(torch.device("cpu"))
        # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every backend in a checking one.
        backend = getattr(backend, "wrapped_pg", backend)
        if not isinstance(backend, NexarBackend):
            raise TypeError("nexar compressed comm hook: the process group's CPU backend is "
                            f"{backend.name() if hasattr(backend, 'name') else backend!r}, "
                            "not \"nexar\" (pass a nexar group as process_group)")
        return backend

    def _compressor(self, kind: str, bucket: dist.GradBucket,
                    buf: torch.Tensor) -> "nexar.Compressor":
        key = (kind, bucket.index())
        have = self._compressors.get(key)
        if have is not None and have[0] == buf.numel() and have[1] == buf.dtype:
            return have[2]
        z = nexar.Compressor(kind, ratio=self.ratio, count=buf.numel(),
                             dtype=as_array(buf, reduce=True).dtype,
                             seed=self.seed + bucket.index())
        self._compressors[key] = (buf.numel(), buf.dtype, z)
        return z


# Annotated as torch's register_comm_hook checks (hence no postponed annotations here).
def topk_hook(state: CompressionState,
              bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Sends each bucket's largest magnitudes (gradient plus residual)."""
    return _compressed_hook("topk", state, bucket)


def randomk_hook(state: CompressionState,
                 bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Sends positions drawn from state.seed, new ones every step."""
    return _compressed_hook("randomk", state, bucket)


def _compressed_hook(kind: str, state: CompressionState,
                     bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    if buf.dtype not in _COMPRESSIBLE:
        raise TypeError(f"nexar {kind}_hook: gradients of dtype {buf.dtype} cannot be "
                        "compressed (float32, float64, float16, bfloat16 can)")
    backend = state._backend()
    z = state._compressor(kind, bucket, buf)
    size = state._group().size()
    work = backend.allreduce_compressed(buf, z)

    def mean(fut: torch.futures.Future) -> torch.Tensor:
        return fut.value()[0].div_(size)

    return work.get_future().then(mean)
