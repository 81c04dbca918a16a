"""One rank of a torch test: python worker.py SCENARIO[+SCENARIO...] RANK SIZE STORE_PATH.

Every scenario runs the same calls on a "gloo" group and a "nexar" group of the
same processes and compares the results; a difference raises (exit status 1)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from datetime import timedelta

import torch
import torch.distributed as dist

import nexar.torch  # noqa: F401 - registers "nexar"

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32,
          torch.int64, torch.uint8, torch.bool]
FLOATING = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]


def data(dtype: torch.dtype, n: int, salt: int) -> torch.Tensor:
    """The same values on every run; different on every rank and call."""
    g = torch.Generator().manual_seed(1000 * dist.get_rank() + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype in FLOATING:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
    lo = 0 if dtype == torch.uint8 else -3
    return torch.randint(lo, 4, (n,), generator=g, dtype=torch.int64).to(dtype)


def same(what: str, got, want) -> None:
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want), f"{what}: {len(got)} results, want {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            same(f"{what}[{i}]", g, w)
        return
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    if got.dtype in FLOATING:
        torch.testing.assert_close(got, want, rtol=1e-6 if got.dtype in (torch.float32, torch.float64)
                                   else 1e-2, atol=0, msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(got, want), f"{what}: {got} != {want}"


def both(what: str, nexar_group, gloo_group, fn) -> None:
    """fn(group, async_op) -> result tensors, on nexar (sync and async) and gloo."""
    want = fn(gloo_group, False)
    same(what + " sync", fn(nexar_group, False), want)
    same(what + " async", fn(nexar_group, True), want)


def run(work, async_op: bool) -> None:
    if async_op:
        fut = work.get_future()
        work.wait()
        assert fut.done(), "the Work's future is not done after wait()"


def scenario_ops() -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    nx = dist.new_group(backend="nexar")
    gl = dist.new_group(backend="gloo")
    salt = 0
    for dt in DTYPES:
        for op in OPS:
            salt += 1

            def all_reduce(g, a, dt=dt, op=op, salt=salt):
                t = data(dt, 37, salt)
                run(dist.all_reduce(t, op=op, group=g, async_op=a), a)
                return t

            both(f"all_reduce {dt} {op}", nx, gl, all_reduce)

            def reduce(g, a, dt=dt, op=op, salt=salt):
                t = data(dt, 5, salt)
                run(dist.reduce(t, dst=1, op=op, group=g, async_op=a), a)
                return t if rank == 1 else torch.zeros(0, dtype=dt)

            both(f"reduce {dt} {op}", nx, gl, reduce)

            def reduce_scatter(g, a, dt=dt, op=op, salt=salt):
                ins = [data(dt, 6, salt + 100 * i) for i in range(size)]
                out = torch.empty(6, dtype=dt)
                run(dist.reduce_scatter(out, ins, op=op, group=g, async_op=a), a)
                return out

            both(f"reduce_scatter {dt} {op}", nx, gl, reduce_scatter)

            def reduce_scatter_tensor(g, a, dt=dt, op=op, salt=salt):
                src = data(dt, 4 * size, salt)
                out = torch.empty(4, dtype=dt)
                run(dist.reduce_scatter_tensor(out, src, op=op, group=g, async_op=a), a)
                return [out, src]  # the input stays the caller's

            both(f"reduce_scatter_tensor {dt} {op}", nx, gl, reduce_scatter_tensor)

        salt += 1
        moves(nx, gl, dt, salt)
        if dt in FLOATING:
            averages(nx, gl, dt, salt)
    coalesced_and_strided(nx, gl)
    point_to_point(nx, gl)
    unsupported(nx)
    print("ops OK", flush=True)


def averages(nx, gl, dt, salt) -> None:
    """AVG as SUM / size (gloo's SUM is the reference) and PREMUL_SUM."""
    size = dist.get_world_size()
    t = data(dt, 9, salt)
    ref = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.AVG, group=nx)
    dist.all_reduce(ref, op=dist.ReduceOp.SUM, group=gl)
    same(f"all_reduce AVG {dt}", t, ref / size)
    src = data(dt, 2 * size, salt)
    out, ref_out = torch.empty(2, dtype=dt), torch.empty(2, dtype=dt)
    dist.reduce_scatter_tensor(out, src, op=dist.ReduceOp.AVG, group=nx)
    dist.reduce_scatter_tensor(ref_out, src.clone(), op=dist.ReduceOp.SUM, group=gl)
    same(f"reduce_scatter_tensor AVG {dt}", out, ref_out / size)
    premul = getattr(dist, "_make_nccl_premul_sum", None)
    if premul is not None:
        t = data(dt, 9, salt)
        ref = t.clone() * 0.5
        dist.all_reduce(t, op=premul(0.5), group=nx)
        dist.all_reduce(ref, op=dist.ReduceOp.SUM, group=gl)
        same(f"all_reduce PREMUL_SUM {dt}", t, ref)


def moves(nx, gl, dt, salt) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()

    def broadcast(g, a):
        t = data(dt, 11, salt)
        run(dist.broadcast(t, src=1, group=g, async_op=a), a)
        return t

    def all_gather(g, a):
        outs = [torch.empty(3, 2, dtype=dt) for _ in range(size)]
        run(dist.all_gather(outs, data(dt, 6, salt).view(3, 2), group=g, async_op=a), a)
        return outs

    def all_gather_into_tensor(g, a):
        out = torch.empty(size * 5, dtype=dt)
        run(dist.all_gather_into_tensor(out, data(dt, 5, salt), group=g, async_op=a), a)
        return out

    def all_to_all(g, a):
        ins = [data(dt, 2, salt + j) for j in range(size)]  # gloo takes equal blocks only
        outs = [torch.empty(2, dtype=dt) for _ in range(size)]
        run(dist.all_to_all(outs, ins, group=g, async_op=a), a)
        return outs

    def all_to_all_single_equal(g, a):
        out = torch.empty(3 * size, 2, dtype=dt)
        run(dist.all_to_all_single(out, data(dt, 6 * size, salt).view(3 * size, 2), group=g,
                                   async_op=a), a)
        return out

    def all_to_all_single_unequal(g, a):
        in_splits = [1 + rank + j for j in range(size)]  # rows rank sends to j
        out_splits = [1 + j + rank for j in range(size)]  # rows j sends to rank
        src = data(dt, 3 * sum(in_splits), salt).view(-1, 3)
        out = torch.empty(sum(out_splits), 3, dtype=dt)
        run(dist.all_to_all_single(out, src, out_splits, in_splits, group=g, async_op=a), a)
        return out

    def gather(g, a):
        outs = [torch.empty(4, dtype=dt) for _ in range(size)] if rank == 0 else None
        run(dist.gather(data(dt, 4, salt), outs, dst=0, group=g, async_op=a), a)
        return outs or []

    def scatter(g, a):
        ins = [data(dt, 4, salt + j) for j in range(size)] if rank == 1 else None
        out = torch.empty(4, dtype=dt)
        run(dist.scatter(out, ins, src=1, group=g, async_op=a), a)
        return out

    for name, fn in [("broadcast", broadcast), ("all_gather", all_gather),
                     ("all_gather_into_tensor", all_gather_into_tensor),
                     ("all_to_all", all_to_all), ("all_to_all_single equal", all_to_all_single_equal),
                     ("all_to_all_single unequal", all_to_all_single_unequal),
                     ("gather", gather), ("scatter", scatter)]:
        both(f"{name} {dt}", nx, gl, fn)


def coalesced_and_strided(nx, gl) -> None:
    ts = [data(torch.float32, n, n) for n in (3, 8, 1)]
    refs = [t.clone() for t in ts]
    dist.all_reduce_coalesced(ts, group=nx)
    dist.all_reduce_coalesced(refs, group=gl)
    same("all_reduce_coalesced", ts, refs)
    # A transposed (non-contiguous) tensor: reduced through a copy, written back.
    base = data(torch.float64, 12, 7).view(3, 4)
    t, ref = base.clone().t(), base.clone().t()
    assert not t.is_contiguous()
    dist.all_reduce(t, group=nx)
    dist.all_reduce(ref, group=gl)
    same("all_reduce non-contiguous", t, ref)
    # A non-contiguous output: gathered into a copy, written back.
    out = torch.empty(4, 3 * dist.get_world_size(), dtype=torch.float64).t()
    ref_out = out.clone()
    assert not out.is_contiguous()
    dist.all_gather_into_tensor(out, data(torch.float64, 12, 7).view(3, 4), group=nx)
    dist.all_gather_into_tensor(ref_out, data(torch.float64, 12, 7).view(3, 4), group=gl)
    same("all_gather_into_tensor non-contiguous output", out, ref_out)
    dist.barrier(group=nx)
    dist.barrier(group=nx, async_op=True).wait()


def point_to_point(nx, gl) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    peer = (rank + 1) % size
    prev = (rank - 1) % size
    for dt in DTYPES:
        # Tags keep two messages between the same pair apart, sent in the other order.
        a, b = data(dt, 10, 1), data(dt, 3, 2)
        got_a, got_b = torch.empty(10, dtype=dt), torch.empty(3, dtype=dt)
        reqs = [dist.isend(b, peer, group=nx, tag=7), dist.isend(a, peer, group=nx, tag=3),
                dist.irecv(got_a, prev, group=nx, tag=3), dist.irecv(got_b, prev, group=nx, tag=7)]
        for r in reqs:
            r.wait()
        ref_a, ref_b = torch.empty(10, dtype=dt), torch.empty(3, dtype=dt)
        reqs = [dist.isend(a, peer, group=gl, tag=3), dist.isend(b, peer, group=gl, tag=7),
                dist.irecv(ref_a, prev, group=gl, tag=3), dist.irecv(ref_b, prev, group=gl, tag=7)]
        for r in reqs:
            r.wait()
        same(f"isend/irecv {dt}", [got_a, got_b], [ref_a, ref_b])
    # Blocking send / recv on a pair, and batch_isend_irecv (both ranks send first).
    t = data(torch.float32, 4, 3)
    if rank == 0:
        dist.send(t, 1, group=nx, tag=11)
    elif rank == 1:
        got = torch.empty(4)
        dist.recv(got, 0, group=nx, tag=11)
        ref = torch.empty(4)
    if rank == 0:
        dist.send(t, 1, group=gl, tag=11)
    elif rank == 1:
        dist.recv(ref, 0, group=gl, tag=11)
        same("send/recv", got, ref)
    for g, label in ((nx, "nexar"), (gl, "gloo")):
        send = data(torch.float32, 6, 4)
        got = torch.empty(6)
        ops = [dist.P2POp(dist.isend, send, peer, g), dist.P2POp(dist.irecv, got, prev, g)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        if label == "nexar":
            mine = got
        else:
            same("batch_isend_irecv", mine, got)


def unsupported(nx) -> None:
    """Errors that name what is wrong, raised before anything is issued."""
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG, group=nx)
    except Exception as e:  # noqa: BLE001 - its message is checked
        assert "AVG needs a floating dtype" in str(e), e
    else:
        raise AssertionError("AVG on int32 did not raise")
    dist.barrier(group=nx)  # the group still works after the refusal


def scenario_subgroups() -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    evens = [r for r in range(size) if r % 2 == 0]
    odds = [r for r in range(size) if r % 2 == 1]
    nx_even, nx_odd = dist.new_group(evens, backend="nexar"), dist.new_group(odds, backend="nexar")
    gl_even, gl_odd = dist.new_group(evens, backend="gloo"), dist.new_group(odds, backend="gloo")
    nx_mine, gl_mine = (nx_even, gl_even) if rank % 2 == 0 else (nx_odd, gl_odd)
    t = data(torch.float32, 8, 1)
    ref = t.clone()
    dist.all_reduce(t, group=nx_mine)
    dist.all_reduce(ref, group=gl_mine)
    same("subgroup all_reduce", t, ref)
    # broadcast from the group's first member, named by its global rank
    src = evens[0] if rank % 2 == 0 else odds[0]
    t, ref = data(torch.int64, 5, 2), data(torch.int64, 5, 2)
    dist.broadcast(t, src=src, group=nx_mine)
    dist.broadcast(ref, src=src, group=gl_mine)
    same("subgroup broadcast", t, ref)
    print("subgroups OK", flush=True)


def step_both_and_compare(models, optims, x, y, where: str, local=lambda p: p) -> None:
    """One training step of the "nexar" and the "gloo" model on the same
    batch; their parameters (local(p): this rank's part) must then agree."""
    for name, m in models.items():
        optims[name].zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        optims[name].step()
    for (pn, a), (_, b) in zip(models["nexar"].named_parameters(),
                               models["gloo"].named_parameters()):
        torch.testing.assert_close(local(a), local(b), rtol=1e-6, atol=1e-7,
                                   msg=lambda m, pn=pn: f"{where} {pn}: {m}")


def scenario_ddp() -> None:
    """The same MLP trained with DDP on "nexar" and on "gloo" (same data, same
    start): the parameters agree after every step."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()
    nx = dist.new_group(backend="nexar")
    gl = dist.new_group(backend="gloo")

    def mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 4))

    models = {"nexar": DDP(mlp(), process_group=nx, bucket_cap_mb=0.01),
              "gloo": DDP(mlp(), process_group=gl, bucket_cap_mb=0.01)}
    optims = {k: torch.optim.SGD(m.parameters(), lr=0.05) for k, m in models.items()}
    g = torch.Generator().manual_seed(rank)
    steps = int(os.environ.get("DDP_STEPS", "100"))
    for step in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 4, generator=g)
        step_both_and_compare(models, optims, x, y, f"step {step}")
    print(f"ddp OK after {steps} steps", flush=True)


class Batches(torch.utils.data.Dataset):
    """Sample i is the same in every process (a seed of its own)."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.randn(4, generator=g)


def scenario_dataloader() -> None:
    """DDP fed by a DataLoader whose workers are forked from the rank, as
    training scripts do, each epoch anew, one fork while a "nexar" all_reduce
    is in flight: the children neither use nor break the parent's nexar, and
    the parameters agree with "gloo" after every step."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, size = dist.get_rank(), dist.get_world_size()
    nx = dist.new_group(backend="nexar")
    gl = dist.new_group(backend="gloo")

    def mlp() -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 4))

    models = {"nexar": DDP(mlp(), process_group=nx), "gloo": DDP(mlp(), process_group=gl)}
    optims = {k: torch.optim.SGD(m.parameters(), lr=0.05) for k, m in models.items()}
    sampler = torch.utils.data.distributed.DistributedSampler(Batches(), size, rank)
    big = torch.ones(1 << 20)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(Batches(), batch_size=8, sampler=sampler,
                                             num_workers=2, multiprocessing_context="fork")
        pending = dist.all_reduce(big, group=nx, async_op=True) if epoch == 1 else None
        batches = iter(loader)  # forks the workers
        if pending is not None:
            pending.wait()
            same("all_reduce across the fork", big, torch.full((1 << 20,), float(size)))
        for step, (x, y) in enumerate(batches):
            step_both_and_compare(models, optims, x, y, f"epoch {epoch} step {step}")
    print("dataloader OK", flush=True)


def scenario_fsdp() -> None:
    """FSDP2 (fully_shard) on CPU: the same MLP sharded over a "nexar" and a
    "gloo" mesh trains to the same parameters."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    rank = dist.get_rank()
    nx = dist.new_group(backend="nexar")
    gl = dist.new_group(backend="gloo")

    def sharded(group) -> torch.nn.Module:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
        mesh = DeviceMesh.from_group(group, "cpu")
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(m, mesh=mesh)

    models = {"nexar": sharded(nx), "gloo": sharded(gl)}
    optims = {k: torch.optim.SGD(m.parameters(), lr=0.05) for k, m in models.items()}
    g = torch.Generator().manual_seed(rank)
    for step in range(20):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        step_both_and_compare(models, optims, x, y, f"step {step}", lambda p: p.to_local())
    print("fsdp OK", flush=True)


def scenario_monitored() -> None:
    """monitored_barrier passes when all arrive, and names the rank that does not."""
    rank, size = dist.get_rank(), dist.get_world_size()
    nx = dist.new_group(backend="nexar")
    dist.monitored_barrier(group=nx, timeout=timedelta(seconds=30))
    store = STORE  # size 2: rank 1 is the late one
    if rank == size - 1:  # late: waits until rank 0 has reported it
        store.wait(["reported"], timedelta(seconds=60))
    elif rank == 0:
        try:
            dist.monitored_barrier(group=nx, timeout=timedelta(seconds=2), wait_all_ranks=True)
        except Exception as e:  # noqa: BLE001 - checked below
            message = f"{type(e).__name__}: {e}"
        else:
            message = "no error"
        store.set("reported", "1")
        assert f"rank {size - 1} did not reach" in message, message
    print("monitored OK", flush=True)


def scenario_killed() -> None:
    """Rank 1 dies; rank 0's next all_reduce raises naming it."""
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        os._exit(17)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        dist.all_reduce(t)
    except dist.DistBackendError as e:
        print(f"raised after {time.monotonic() - start:.2f} s: {type(e).__name__}: {e}",
              flush=True)
        os._exit(0)
    print("no error", flush=True)
    os._exit(3)


def scenario_interrupted() -> None:
    """Rank 0 blocks in a synchronous all_reduce that rank 1 never joins; the
    test sends it SIGINT. It prints when KeyboardInterrupt came, then both
    ranks leave (rank 1 once rank 0 is done)."""
    rank = dist.get_rank()
    g = dist.new_group(backend="nexar")
    done = Path(STORE_PATH + ".interrupted")
    if rank == 0:
        print("waiting", flush=True)
        try:
            dist.all_reduce(torch.ones(4), group=g)
        except KeyboardInterrupt:
            print(f"KeyboardInterrupt at {time.monotonic():.6f}", flush=True)
            done.touch()
            os._exit(0)
        print("returned", flush=True)
        os._exit(3)
    deadline = time.monotonic() + 60
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0 if done.exists() else 4)


def scenario_mismatch() -> None:
    """Ranks that call different collectives, or the same one with different
    sizes, each get a DistBackendError naming the mismatch instead of a hang;
    the group works on afterwards."""
    rank = dist.get_rank()
    cases = [
        ("all_reduce against broadcast",
         lambda g, a: dist.all_reduce(torch.ones(4), group=g, async_op=a) if rank == 0
         else dist.broadcast(torch.ones(4), src=0, group=g, async_op=a)),
        ("all_reduce of 4 against 8 elements",
         lambda g, a: dist.all_reduce(torch.ones(4 if rank == 0 else 8), group=g, async_op=a)),
        ("all_gather_into_tensor against reduce_scatter_tensor",
         lambda g, a: dist.all_gather_into_tensor(torch.empty(8), torch.ones(4), group=g,
                                                  async_op=a) if rank == 0
         else dist.reduce_scatter_tensor(torch.empty(4), torch.ones(8), group=g, async_op=a)),
    ]
    # Not detected, a call would fail only at this timeout, saying so.
    g = dist.new_group(backend="nexar", timeout=timedelta(seconds=60))
    for name, call in cases:
        for async_op in (False, True):
            start = time.monotonic()
            try:
                work = call(g, async_op)
                if async_op:
                    work.wait()
            except dist.DistBackendError as e:
                message = str(e)
            else:
                raise AssertionError(f"{name}: no error on rank {rank}")
            assert "NEXAR_ERR_MISMATCH" in message and "different collective" in message, \
                f"{name} on rank {rank}: {message}"
            print(f"{name} (async_op={async_op}): raised after "
                  f"{time.monotonic() - start:.2f} s: {message}", flush=True)
            t = torch.full((3,), float(rank + 1))
            dist.all_reduce(t, group=g)
            assert t.tolist() == [3.0] * 3, f"after {name} on rank {rank}: {t}"
    print("mismatch OK", flush=True)


from worker_hooks import scenario_hooks  # noqa: E402,F401 - run by name from main()

STORE = None
STORE_PATH = ""


def main() -> None:
    scenario, rank, size, store_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    global STORE, STORE_PATH
    STORE_PATH = store_path
    store = STORE = dist.FileStore(store_path, size)
    backend = "nexar" if scenario in ("killed",) else "gloo"
    pg_options = None
    if scenario == "killed":
        pg_options = {"heartbeat_interval": 0.2, "heartbeat_timeout": 1.0}
    dist.init_process_group(backend, store=store, rank=rank, world_size=size,
                            timeout=timedelta(seconds=300), pg_options=pg_options)
    for name in scenario.split("+"):  # several in one launch: torch imports slowly
        globals()[f"scenario_{name}"]()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
