"""The torch.distributed backend "nexar": a Python subclass of torch's C++
Backend whose operations run on a nexar communicator. Every operation returns
at once a Work made from a torch Future, which nexar's dispatch thread
completes (with the output tensors, or a DistBackendError naming the rank)."""
from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

import nexar

from . import _rendezvous
from ._tensors import (Staged, as_array, check_cpu, flat_of, reduction, same_dtype,
                       unflatten_into)

_c10d = torch._C._distributed_c10d
BackendBase = getattr(dist, "BackendBase", _c10d.Backend)
DistBackendError = getattr(dist, "DistBackendError", RuntimeError)

# Under TORCH_DISTRIBUTED_DEBUG=DETAIL torch keeps only the C++ object of a
# backend: the Python one (and its overrides) must stay alive here until
# shutdown().
_live: "set[NexarBackend]" = set()
_live_lock = threading.Lock()


# monitored_barrier's messages: a tag above what torch's callers use.
_MONITOR_TAG = 0xFFFFFF01


class _Work(_c10d.Work):
    """A Work over a torch Future. Not _create_work_from_future: the Work that
    makes discards the future's error in wait(), and a failed collective must
    raise. wait() raises the operation's DistBackendError."""

    def __init__(self, fut: Any):
        super().__init__()
        self._fut = fut

    def wait(self, timeout: Any = None) -> bool:
        self._fut.wait()  # raises the operation's error
        return True

    def get_future(self) -> Any:
        return self._fut

    def is_completed(self) -> bool:
        return self._fut.done()


class NexarBackend(BackendBase):
    """One rank's member of one process group, on its own nexar communicator."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta,
                 options: Optional[Dict[str, Any]] = None):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        self._timeout = timeout
        self._comm, self._seed = _rendezvous.join(store, rank, size, timeout, options)
        self._seq = 0
        with _live_lock:
            _live.add(self)

    # ---- What torch reads as properties: left to the base class, reading one
    # from a Python subclass recurses forever (batch_isend_irecv reads
    # supports_coalescing). -----------------------------------------------------------

    @property
    def supports_splitting(self) -> bool:
        return False

    @property
    def supports_coalescing(self) -> bool:
        return False

    @property
    def supports_shrinking(self) -> bool:
        return False

    @property
    def supports_reconfigure(self) -> bool:
        return False

    @property
    def supports_window(self) -> bool:
        return False

    @property
    def _supports_time_estimate(self) -> bool:
        return False

    @property
    def options(self) -> Any:
        return None

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "nexar"

    def name(self) -> str:
        return "nexar"

    def _set_sequence_number_for_group(self) -> None:
        pass

    def _get_sequence_number_for_group(self) -> int:
        return self._seq

    @property
    def comm(self) -> "nexar.Communicator":
        """The nexar communicator under this group (e.g. for its stats)."""
        return self._comm

    # ---- Running one nexar operation as a torch Work ---------------------------------

    def _error(self, what: str, exc: BaseException) -> BaseException:
        if isinstance(exc, nexar.NexarError):  # already names the operation and the ranks
            return DistBackendError(f"nexar: {exc}")
        return DistBackendError(f"nexar {what} on rank {self._rank}: {exc}")

    def _issue(self, what: str, start: Callable[[bool], Any], finish: Callable[[], None],
               outputs: List[torch.Tensor], opts: Any = None) -> Any:
        """Starts a nexar operation, start(async_op); the Work completes with
        outputs once it has and finish() (copies back, divides, ...) has run on
        nexar's dispatch thread. A call torch waits for at once (opts.asyncOp
        false: async_op=False in torch) runs here instead, as nexar's blocking
        call, and returns its Work completed: no thread hand-off."""
        if not getattr(opts, "asyncOp", True):
            return self._run_here(what, start, finish, outputs)
        self._seq += 1
        fut = torch.futures.Future()
        try:
            req = start(True)
        except nexar.NexarError as e:
            raise self._error(what, e) from e

        def done(r: "nexar.Request") -> None:
            try:
                r.wait(0)
                finish()
            except BaseException as e:  # noqa: BLE001 - delivered to the waiter
                fut.set_exception(self._error(what, e))
                return
            fut.set_result(outputs)

        req.add_done_callback(done)
        return _Work(fut)

    def _run_here(self, what: str, start: Callable[[bool], Any], finish: Callable[[], None],
                  outputs: List[torch.Tensor]) -> Any:
        self._seq += 1
        fut = torch.futures.Future()
        try:
            start(False)  # Ctrl-C raises KeyboardInterrupt here (docs/python.md)
            finish()
        except Exception as e:  # noqa: BLE001 - delivered by wait(), as from the dispatch thread
            fut.set_exception(self._error(what, e))
        else:
            fut.set_result(outputs)
        return _Work(fut)

    def _reduction(self, what: str, op: Any, dtypes: Sequence[torch.dtype]):
        return reduction(what, self._rank, op, dtypes, self._size)

    # ---- Collectives -------------------------------------------------------------

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        check_cpu("all_reduce", self._rank, tensors)
        red = self._reduction("all_reduce", _op(opts), [t.dtype for t in tensors])
        if len(tensors) != 1:
            return self.allreduce_coalesced(tensors, opts)
        t = tensors[0]
        staged = Staged(t)
        red.before(staged.work)
        arr = as_array(staged.work, reduce=True)

        def finish() -> None:
            red.after(staged.work)
            staged.finish()

        return self._issue("all_reduce",
                           lambda a: self._comm.all_reduce(arr, red.for_dtype(t.dtype),
                                                           async_op=a),
                           finish, tensors, opts)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        check_cpu("all_reduce_coalesced", self._rank, tensors)
        dt = same_dtype("all_reduce_coalesced", self._rank, tensors)
        red = self._reduction("all_reduce_coalesced", _op(opts), [dt])
        flat = flat_of(tensors)
        red.before(flat)
        arr = as_array(flat, reduce=True)

        def finish() -> None:
            red.after(flat)
            unflatten_into(flat, tensors)

        return self._issue("all_reduce_coalesced",
                           lambda a: self._comm.all_reduce(arr, red.for_dtype(dt), async_op=a),
                           finish, tensors, opts)

    def allreduce_compressed(self, tensor: torch.Tensor, compressor: "nexar.Compressor") -> Any:
        """In place: the SUM over ranks of each rank's compressed tensor (see
        nexar.Compressor); a Work like the collectives'. The comm hooks of
        nexar.torch.hooks call it; torch itself does not."""
        what = "all_reduce_compressed"
        check_cpu(what, self._rank, [tensor])
        if not tensor.is_contiguous():
            raise ValueError(f"nexar {what} on rank {self._rank}: the tensor must be "
                             "contiguous")
        arr = as_array(tensor, reduce=True)
        return self._issue(what,
                           lambda a: self._comm.all_reduce_compressed(arr, compressor,
                                                                      async_op=a),
                           lambda: None, [tensor])

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        check_cpu("broadcast", self._rank, tensors)
        root = _root(opts)
        t = _single("broadcast", self._rank, tensors)
        staged = Staged(t)
        arr = as_array(staged.work, reduce=False)
        return self._issue("broadcast", lambda a: self._comm.broadcast(arr, root, async_op=a),
                           staged.finish, tensors, opts)

    def reduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        check_cpu("reduce", self._rank, tensors)
        t = _single("reduce", self._rank, tensors)
        red = self._reduction("reduce", _op(opts), [t.dtype])
        root = _root(opts)
        staged = Staged(t)
        work = staged.work
        # nexar reduces in place on the root and leaves the others' buffers
        # alone: a non-root contribution scaled for PREMUL_SUM is a copy.
        contribution = work.clone() if red.premul is not None and self._rank != root else work
        red.before(contribution)
        arr = as_array(contribution, reduce=True)

        def finish() -> None:
            if self._rank == root:
                red.after(work)
                staged.finish()

        return self._issue("reduce",
                           lambda a: self._comm.reduce(arr, red.for_dtype(t.dtype), root,
                                                       async_op=a),
                           finish, tensors, opts)

    def allgather(self, output_tensors: List[List[torch.Tensor]],
                  input_tensors: List[torch.Tensor], opts: Any = None) -> Any:
        t = _single("all_gather", self._rank, input_tensors)
        outs = _single("all_gather", self._rank, output_tensors)
        check_cpu("all_gather", self._rank, [t, *outs])
        _check_list("all_gather", self._rank, outs, self._size, t)
        src = as_array(t.contiguous(), reduce=False)
        flat = torch.empty(t.numel() * self._size, dtype=t.dtype)
        dst = as_array(flat, reduce=False)
        return self._issue("all_gather",
                           lambda a: self._comm.all_gather(src, out=dst, async_op=a),
                           lambda: unflatten_into(flat, outs), output_tensors, opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any = None) -> Any:
        check_cpu("all_gather_into_tensor", self._rank, [output, input])
        _check_numel("all_gather_into_tensor", self._rank, output, input.numel() * self._size)
        _check_dtype("all_gather_into_tensor", self._rank, output, input)
        src = as_array(input.contiguous(), reduce=False)
        staged = Staged(output, copy_in=False)
        dst = as_array(staged.work, reduce=False)
        return self._issue("all_gather_into_tensor",
                           lambda a: self._comm.all_gather(src, out=dst, async_op=a),
                           staged.finish, [output], opts)

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs: List[torch.Tensor],
                                        inputs: List[torch.Tensor], opts: Any = None) -> Any:
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    def reduce_scatter(self, output_tensors: List[torch.Tensor],
                       input_tensors: List[List[torch.Tensor]], opts: Any = None) -> Any:
        out = _single("reduce_scatter", self._rank, output_tensors)
        ins = _single("reduce_scatter", self._rank, input_tensors)
        check_cpu("reduce_scatter", self._rank, [out, *ins])
        _check_list("reduce_scatter", self._rank, ins, self._size, out)
        red = self._reduction("reduce_scatter", _op(opts), [out.dtype])
        flat = flat_of(ins)
        return self._reduce_scatter_flat("reduce_scatter", red, flat, out, opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any = None) -> Any:
        check_cpu("reduce_scatter_tensor", self._rank, [output, input])
        _check_numel("reduce_scatter_tensor", self._rank, input, output.numel() * self._size)
        _check_dtype("reduce_scatter_tensor", self._rank, output, input)
        red = self._reduction("reduce_scatter_tensor", _op(opts), [output.dtype])
        flat = input.detach().contiguous()  # nexar only reads it
        if red.premul is not None and flat.data_ptr() == input.data_ptr():
            flat = flat.clone()  # scaled here; the caller's input stays as it was
        return self._reduce_scatter_flat("reduce_scatter_tensor", red, flat, output, opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs: List[torch.Tensor],
                                        inputs: List[torch.Tensor], opts: Any = None) -> Any:
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _chain(works, outputs)

    def _reduce_scatter_flat(self, what: str, red, flat: torch.Tensor,
                             out: torch.Tensor, opts: Any) -> Any:
        red.before(flat)
        src = as_array(flat, reduce=True)
        staged = Staged(out, copy_in=False)
        dst = as_array(staged.work, reduce=True)
        op = red.for_dtype(out.dtype)

        def finish() -> None:
            red.after(staged.work)
            staged.finish()

        return self._issue(what,
                           lambda a: self._comm.reduce_scatter(src, op, out=dst, async_op=a),
                           finish, [out], opts)

    def alltoall(self, output_tensors: List[torch.Tensor],
                 input_tensors: List[torch.Tensor], opts: Any = None) -> Any:
        check_cpu("all_to_all", self._rank, [*output_tensors, *input_tensors])
        if len(input_tensors) != self._size or len(output_tensors) != self._size:
            raise ValueError(f"nexar all_to_all on rank {self._rank}: {self._size} input and "
                             "output tensors are needed, one per rank")
        in_sizes = [t.numel() for t in input_tensors]
        out_sizes = [t.numel() for t in output_tensors]
        flat_in = flat_of(input_tensors).to(output_tensors[0].dtype)
        flat_out = torch.empty(sum(out_sizes), dtype=output_tensors[0].dtype)
        return self._alltoallv("all_to_all", flat_out, flat_in, out_sizes, in_sizes,
                               lambda: unflatten_into(flat_out, output_tensors),
                               output_tensors, opts)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,
                          output_split_sizes: List[int], input_split_sizes: List[int],
                          opts: Any = None) -> Any:
        what = "all_to_all_single"
        check_cpu(what, self._rank, [output, input])
        _check_dtype(what, self._rank, output, input)
        row_in = input[0].numel() if input.dim() > 0 and input.shape[0] else 1
        row_out = output[0].numel() if output.dim() > 0 and output.shape[0] else 1
        if not input_split_sizes:
            _check_numel(what, self._rank, output, input.numel())
            if input.numel() % self._size:
                raise ValueError(f"nexar {what} on rank {self._rank}: {input.numel()} "
                                 f"elements do not split evenly over {self._size} ranks")
            in_sizes = [input.numel() // self._size] * self._size
        else:
            in_sizes = [s * row_in for s in input_split_sizes]
        if not output_split_sizes:
            out_sizes = [output.numel() // self._size] * self._size
        else:
            out_sizes = [s * row_out for s in output_split_sizes]
        if sum(in_sizes) != input.numel() or sum(out_sizes) != output.numel():
            raise ValueError(f"nexar {what} on rank {self._rank}: the split sizes do not add "
                             "up to the tensors' first dimension")
        staged = Staged(output, copy_in=False)
        return self._alltoallv(what, staged.work.reshape(-1), input.detach().contiguous(),
                               out_sizes, in_sizes, staged.finish, [output], opts)

    alltoall_base = all_to_all_single

    def _alltoallv(self, what: str, flat_out: torch.Tensor, flat_in: torch.Tensor,
                   out_sizes: List[int], in_sizes: List[int], finish: Callable[[], None],
                   outputs: List[torch.Tensor], opts: Any) -> Any:
        """nexar's all_to_all moves equal blocks: unequal ones travel padded to
        the largest block of any rank (agreed with one small all_reduce)."""
        local = np.array([max(in_sizes + out_sizes + [0])], dtype=np.int64)
        equal = len(set(in_sizes)) == 1 and in_sizes == out_sizes
        try:
            if equal:
                local = np.array([in_sizes[0]], dtype=np.int64)
                lo, hi = local.copy(), local.copy()
                self._comm.all_reduce(lo, nexar.MIN)
                self._comm.all_reduce(hi, nexar.MAX)
                equal = int(lo[0]) == int(hi[0])
            else:
                self._comm.all_reduce(local, nexar.MAX)
        except nexar.NexarError as e:
            raise self._error(what, e) from e
        if equal:
            src = as_array(flat_in.reshape(-1), reduce=False)
            dst = as_array(flat_out.reshape(-1), reduce=False)
            return self._issue(what, lambda a: self._comm.all_to_all(src, out=dst, async_op=a),
                               finish, outputs, opts)
        block = int(max(local[0], *in_sizes, *out_sizes))
        padded_in = torch.zeros(self._size, block, dtype=flat_in.dtype)
        offset = 0
        for j, n in enumerate(in_sizes):
            padded_in[j, :n] = flat_in.reshape(-1)[offset:offset + n]
            offset += n
        padded_out = torch.empty(self._size, block, dtype=flat_out.dtype)
        src = as_array(padded_in, reduce=False)
        dst = as_array(padded_out, reduce=False)

        def unpad() -> None:
            out = flat_out.reshape(-1)
            at = 0
            for j, n in enumerate(out_sizes):
                out[at:at + n] = padded_out[j, :n]
                at += n
            finish()

        return self._issue(what, lambda a: self._comm.all_to_all(src, out=dst, async_op=a),
                           unpad, outputs, opts)

    def gather(self, output_tensors: List[List[torch.Tensor]],
               input_tensors: List[torch.Tensor], opts: Any = None) -> Any:
        root = _root(opts)
        t = _single("gather", self._rank, input_tensors)
        check_cpu("gather", self._rank, [t])
        src = as_array(t.contiguous(), reduce=False)
        if self._rank != root:
            return self._issue("gather", lambda a: self._comm.gather(src, root, async_op=a),
                               lambda: None, [], opts)
        outs = _single("gather", self._rank, output_tensors)
        check_cpu("gather", self._rank, outs)
        _check_list("gather", self._rank, outs, self._size, t)
        flat = torch.empty(t.numel() * self._size, dtype=t.dtype)
        dst = as_array(flat, reduce=False)
        return self._issue("gather", lambda a: self._comm.gather(src, root, out=dst, async_op=a),
                           lambda: unflatten_into(flat, outs), output_tensors, opts)

    def scatter(self, output_tensors: List[torch.Tensor],
                input_tensors: List[List[torch.Tensor]], opts: Any = None) -> Any:
        root = _root(opts)
        out = _single("scatter", self._rank, output_tensors)
        check_cpu("scatter", self._rank, [out])
        src = None
        if self._rank == root:
            ins = _single("scatter", self._rank, input_tensors)
            check_cpu("scatter", self._rank, ins)
            _check_list("scatter", self._rank, ins, self._size, out)
            src = as_array(flat_of(ins).to(out.dtype), reduce=False)
        staged = Staged(out, copy_in=False)
        dst = as_array(staged.work, reduce=False)
        return self._issue("scatter",
                           lambda a: self._comm.scatter(src, root, out=dst, async_op=a),
                           staged.finish, output_tensors, opts)

    def barrier(self, opts: Any = None) -> Any:
        return self._issue("barrier", lambda a: self._comm.barrier(async_op=a), lambda: None, [],
                           opts)

    def monitored_barrier(self, opts: Any = None, wait_all_ranks: bool = False) -> None:
        """Every rank checks in with rank 0, which names the ranks that did not
        within the timeout (all of them with wait_all_ranks), then lets them go."""
        timeout = getattr(opts, "timeout", opts)
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else \
            self._timeout.total_seconds()
        token = np.zeros(1, np.uint8)
        what = "monitored_barrier"
        try:
            if self._rank != 0:
                self._comm.send(token, 0, _MONITOR_TAG, async_op=True).wait(secs)
                try:
                    self._comm.recv(token, 0, _MONITOR_TAG, async_op=True).wait(secs)
                except TimeoutError:
                    raise DistBackendError(f"nexar {what} on rank {self._rank}: rank 0 did not "
                                           f"release the barrier within {secs:g} s") from None
                return
            pending = {r: self._comm.recv(np.zeros(1, np.uint8), r, _MONITOR_TAG, async_op=True)
                       for r in range(1, self._size)}
            deadline = time.monotonic() + secs
            late = []
            for r, req in pending.items():
                try:
                    req.wait(max(deadline - time.monotonic(), 0.0))
                except TimeoutError:
                    late.append(r)
                    if not wait_all_ranks:
                        break
            if late:
                names = ", ".join(f"rank {r}" for r in late)
                raise DistBackendError(f"nexar {what} on rank 0: {names} did not reach the "
                                       f"barrier within {secs:g} s")
            for req in [self._comm.send(token, r, _MONITOR_TAG, async_op=True)
                        for r in range(1, self._size)]:
                req.wait(secs)
        except nexar.NexarError as e:
            raise self._error(what, e) from e

    # ---- Point to point: return at once (batch_isend_irecv posts sends first) --------

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int) -> Any:
        t = _single("send", self._rank, tensors)
        check_cpu("send", self._rank, [t])
        src = as_array(t.contiguous(), reduce=False)
        return self._issue("send", lambda a: self._comm.send(src, dst, _tag(tag), async_op=a),
                           lambda: None, tensors)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int) -> Any:
        t = _single("recv", self._rank, tensors)
        check_cpu("recv", self._rank, [t])
        staged = Staged(t, copy_in=False)
        dst = as_array(staged.work, reduce=False)
        return self._issue("recv", lambda a: self._comm.recv(dst, src, _tag(tag), async_op=a),
                           staged.finish, tensors)

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int) -> Any:
        raise ValueError(f"nexar recv on rank {self._rank}: receiving from any source is not "
                         "supported; name the source rank")

    # ---- Lifecycle ----------------------------------------------------------------

    def shutdown(self) -> None:
        comm, seed = self._comm, self._seed
        self._seed = None
        if comm is not None:
            comm.close()
        if seed is not None:
            seed.stop()
        with _live_lock:
            _live.discard(self)

    def abort(self) -> None:
        self._comm.abort()
        self.shutdown()


# ---- Argument checks (the same on every rank, before anything is issued) ----------

def _op(opts: Any) -> Any:
    return getattr(opts, "reduceOp", dist.ReduceOp.SUM) if opts is not None else dist.ReduceOp.SUM


def _root(opts: Any) -> int:
    return int(getattr(opts, "rootRank", 0)) if opts is not None else 0


def _tag(tag: int) -> int:
    if tag < 0 or tag > 0xFFFFFFFF:
        raise ValueError(f"nexar: tag {tag} must be in 0..2**32-1")
    return int(tag)


def _single(what: str, rank: int, items: Sequence[Any]) -> Any:
    if len(items) != 1:
        raise ValueError(f"nexar {what} on rank {rank}: one tensor (list) per call is "
                         f"supported, {len(items)} were given")
    return items[0]


def _check_list(what: str, rank: int, ts: Sequence[torch.Tensor], size: int,
                like: torch.Tensor) -> None:
    if len(ts) != size:
        raise ValueError(f"nexar {what} on rank {rank}: {size} tensors are needed (one per "
                         f"rank), {len(ts)} were given")
    for t in ts:
        _check_numel(what, rank, t, like.numel())
        _check_dtype(what, rank, t, like)


def _check_numel(what: str, rank: int, t: torch.Tensor, n: int) -> None:
    if t.numel() != n:
        raise ValueError(f"nexar {what} on rank {rank}: a tensor of {t.numel()} elements "
                         f"where {n} are needed")


def _check_dtype(what: str, rank: int, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"nexar {what} on rank {rank}: dtypes {a.dtype} and {b.dtype} differ")


def _chain(works: List[Any], outputs: List[torch.Tensor]) -> Any:
    def gathered(f: Any) -> List[torch.Tensor]:
        for each in f.value():
            each.wait()  # raises the first failure
        return outputs

    return _Work(torch.futures.collect_all([w.get_future() for w in works]).then(gathered))
