"""DDP on "nexar" against "gloo": one training step of an MLP of about 25 M
parameters (a ResNet-50-sized gradient), batch 32, and all_reduce of a 64 MiB
and of an 8-byte float32 tensor through torch (per call, in a loop of 100),
both backends interleaved in one run.

    python bench/torch_ddp.py --ranks 2 --steps 20 [--rounds 5] [--topk 0.01]

Needs the binding with its [torch] extra (scripts/test-torch.sh makes
build/torch-venv). Prints one table: median times per backend and their ratio; with --topk, a
row for the DDP step on "nexar" with nexar.torch.hooks.topk_hook (that
fraction of each bucket sent) against the plain step on "gloo". With
--rounds R the whole measurement runs R times, in fresh processes (where the
scheduler puts them changes a result more than the steps within one run
do): times are medians over the rounds, and a ratio is the median, lowest
and highest of the rounds' ratios, as nexar-bench gives them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    # 1024*4096 + 4096*4096 + 4096*1024 weights, about 25.2 M parameters
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                               torch.nn.Linear(4096, 1024))


def timed(fn, repeats: int) -> list:
    out = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def worker(rank: int, size: int, store_path: str, steps: int, topk: float, queue) -> None:
    import nexar.torch  # registers "nexar"; nexar.torch.hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    store = dist.FileStore(store_path, size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size,
                            timeout=timedelta(seconds=300))
    groups = {"nexar": dist.new_group(backend="nexar"), "gloo": dist.new_group(backend="gloo")}
    models = {k: DDP(mlp(), process_group=g) for k, g in groups.items()}
    if topk:
        models["nexar topk"] = DDP(mlp(), process_group=groups["nexar"])
        models["nexar topk"].register_comm_hook(
            nexar.torch.hooks.CompressionState(groups["nexar"], ratio=topk),
            nexar.torch.hooks.topk_hook)
    optims = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    x, y = torch.randn(32, 1024), torch.randn(32, 1024)
    tensor = torch.ones(16 * 1024 * 1024)  # 64 MiB of float32

    def step(name):
        def run():
            optims[name].zero_grad()
            torch.nn.functional.mse_loss(models[name](x), y).backward()
            optims[name].step()
        return run

    def reduce(name):
        return lambda: dist.all_reduce(tensor, group=groups[name])

    scalar = torch.ones(2)  # 8 bytes: what a training loop reduces for its loss or metrics

    def reduce_small(name):  # 100 back to back: one call's time, past the barrier's skew
        def run():
            for _ in range(100):
                dist.all_reduce(scalar, group=groups[name])
        return run

    times = {("ddp step", k): [] for k in models}
    times.update({("all_reduce 64 MiB", k): [] for k in groups})
    times.update({("all_reduce 8 B", k): [] for k in groups})
    for k in models:  # warm-up
        step(k)()
    for k in groups:
        reduce(k)()
    for _ in range(steps):  # interleaved: both backends see the same machine load
        for k in models:
            times[("ddp step", k)] += timed(step(k), 1)
        for k in groups:
            times[("all_reduce 64 MiB", k)] += timed(reduce(k), 1)
            times[("all_reduce 8 B", k)] += [t / 100 for t in timed(reduce_small(k), 5)]
    if rank == 0:
        queue.put({key: statistics.median(v) for key, v in times.items()})
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run everything this many times, each in fresh processes")
    ap.add_argument("--topk", type=float, default=0.0,
                    help="also time DDP on nexar with topk_hook sending this fraction")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    rounds = []  # per round: {(what, backend): median seconds}
    for _ in range(args.rounds):
        queue = ctx.SimpleQueue()
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(worker, args=(args.ranks, os.path.join(tmp, "store"), args.steps,
                                             args.topk, queue),
                               nprocs=args.ranks, start_method="spawn")
        rounds.append(queue.get())
    params = sum(p.numel() for p in mlp().parameters())
    print(f"{args.ranks} ranks, {params / 1e6:.1f} M parameters, batch 32, "
          f"median of {args.steps} steps, {args.rounds} round(s), torch {torch.__version__}")
    print(f"{'what':<20}{'nexar (ms)':>12}{'gloo (ms)':>12}  gloo / nexar")

    def row(label: str, nexar_key, gloo_key, digits: int) -> None:
        n = statistics.median(r[nexar_key] for r in rounds) * 1e3
        g = statistics.median(r[gloo_key] for r in rounds) * 1e3
        ratios = sorted(r[gloo_key] / r[nexar_key] for r in rounds)
        spread = f" ({ratios[0]:.2f}-{ratios[-1]:.2f})" if len(ratios) > 1 else ""
        print(f"{label:<20}{n:>12.{digits}f}{g:>12.{digits}f}  "
              f"{statistics.median(ratios):.2f}{spread}")

    for what in ("ddp step", "all_reduce 64 MiB", "all_reduce 8 B"):
        row(what, (what, "nexar"), (what, "gloo"), 3)
    if args.topk:
        row("ddp step, topk " + format(args.topk, "g"), ("ddp step", "nexar topk"),
            ("ddp step", "gloo"), 1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
