"""DDP comm hooks on "nexar" (scenarios of worker.py): nexar's compressed
hooks against a reference written in torch over "gloo", and torch's own
fp16/bf16 compression hooks against the same hook on "gloo"."""
import math
import os
from typing import Dict, List

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import nexar.torch.hooks as hooks

# A student MLP learns a fixed teacher: every rank draws its own inputs.
IN, HIDDEN, OUT = 32, 48, 4
BUCKET_MB = 0.002  # a few buckets (about 500 floats each): one compressor per bucket


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT))


def batches(steps: int) -> List[tuple]:
    torch.manual_seed(99)  # the same teacher on every rank
    teacher = torch.randn(IN, OUT)
    g = torch.Generator().manual_seed(dist.get_rank())
    out = []
    for _ in range(steps):
        x = torch.randn(16, IN, generator=g)
        out.append((x, x @ teacher))
    return out


class ReferenceTopK:
    """TopK with error feedback in plain torch over a "gloo" group: what
    nexar's compressor is documented to do (k = max(1, floor(ratio * n)), the
    sum over ranks of the kept values, zero elsewhere), then the mean."""

    def __init__(self, group, ratio: float):
        self.group, self.ratio = group, ratio
        self.residual: Dict[int, torch.Tensor] = {}

    def hook(self, _state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buf = bucket.buffer()
        n, size = buf.numel(), self.group.size()
        res = self.residual.get(bucket.index())
        if res is None or res.numel() != n:  # DDP rebuilt its buckets
            res = torch.zeros_like(buf)
        v = buf + res
        k = min(max(1, math.floor(self.ratio * n)), n)
        index = v.abs().topk(k).indices
        values = v[index]
        res = v.clone()
        res[index] = 0
        self.residual[bucket.index()] = res
        indices = [torch.empty_like(index) for _ in range(size)]
        value_lists = [torch.empty_like(values) for _ in range(size)]
        dist.all_gather(indices, index, group=self.group)
        dist.all_gather(value_lists, values, group=self.group)
        total = torch.zeros_like(buf)
        for i, vals in zip(indices, value_lists):  # in rank order, as nexar sums
            total.index_add_(0, i, vals)
        buf.copy_(total.div_(size))
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut


def train_step(model, optim, x, y) -> float:
    optim.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optim.step()
    return float(loss.detach())


def assert_same_on_every_rank(what: str, model, gloo) -> None:
    """Each rank's parameters equal rank 0's, bit for bit."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0, group=gloo)
    assert torch.equal(flat, ref), f"{what}: rank {dist.get_rank()}'s parameters differ " \
                                   f"from rank 0's by up to {(flat - ref).abs().max()}"


def assert_learns(what: str, losses: List[float]) -> None:
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.5 * first, f"{what}: the loss went from {first:.4f} to {last:.4f}"


def scenario_hooks() -> None:
    rank = dist.get_rank()
    nx = dist.new_group(backend="nexar")
    gl = dist.new_group(backend="gloo")
    steps = int(os.environ.get("HOOK_STEPS", "30"))
    data = batches(steps)

    # TopK: the same parameters as the reference on gloo after every step.
    topk = DDP(mlp(), process_group=nx, bucket_cap_mb=BUCKET_MB)
    topk.register_comm_hook(hooks.CompressionState(nx, ratio=0.1), hooks.topk_hook)
    ref = DDP(mlp(), process_group=gl, bucket_cap_mb=BUCKET_MB)
    reference = ReferenceTopK(gl, ratio=0.1)
    ref.register_comm_hook(None, reference.hook)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (topk, ref))
    losses = []
    for step, (x, y) in enumerate(data):
        losses.append(train_step(topk, opt, x, y))
        train_step(ref, ref_opt, x, y)
        assert_same_on_every_rank(f"topk step {step}", topk, gl)
        for (pn, a), b in zip(topk.named_parameters(), ref.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7,
                                       msg=lambda m, pn=pn, step=step: f"topk step {step} "
                                       f"{pn}: {m}")
    assert_learns("topk", losses)
    print(f"topk hook OK after {steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}",
          flush=True)

    # RandomK: the same positions on every rank (one seed), so the same
    # parameters; the residual carries what was not sent yet.
    randomk = DDP(mlp(), process_group=nx, bucket_cap_mb=BUCKET_MB)
    randomk.register_comm_hook(hooks.CompressionState(nx, ratio=0.25, seed=7), hooks.randomk_hook)
    opt = torch.optim.SGD(randomk.parameters(), lr=0.05)
    losses = []
    for step, (x, y) in enumerate(data):
        losses.append(train_step(randomk, opt, x, y))
        assert_same_on_every_rank(f"randomk step {step}", randomk, gl)
    assert_learns("randomk", losses)
    print(f"randomk hook OK, loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)

    # bfloat16 gradients: compressed as they are (the residual in float32).
    half = DDP(mlp().to(torch.bfloat16), process_group=nx, bucket_cap_mb=BUCKET_MB)
    half.register_comm_hook(hooks.CompressionState(nx, ratio=0.1), hooks.topk_hook)
    opt = torch.optim.SGD(half.parameters(), lr=0.05)
    for x, y in data[:5]:
        train_step(half, opt, x.to(torch.bfloat16), y.to(torch.bfloat16))
    assert_same_on_every_rank("topk bfloat16", half, gl)
    print("bfloat16 topk hook OK", flush=True)

    # torch's own compression hooks: as on gloo.
    for name, hook in (("fp16", default_hooks.fp16_compress_hook),
                       ("bf16", default_hooks.bf16_compress_hook)):
        models = {"nexar": DDP(mlp(), process_group=nx, bucket_cap_mb=BUCKET_MB),
                  "gloo": DDP(mlp(), process_group=gl, bucket_cap_mb=BUCKET_MB)}
        models["nexar"].register_comm_hook(nx, hook)
        models["gloo"].register_comm_hook(gl, hook)
        optims = {k: torch.optim.SGD(m.parameters(), lr=0.05) for k, m in models.items()}
        for step, (x, y) in enumerate(data[:5]):
            for k, m in models.items():
                train_step(m, optims[k], x, y)
            for (pn, a), b in zip(models["nexar"].named_parameters(),
                                  models["gloo"].parameters()):
                torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4,
                                           msg=lambda m, pn=pn, step=step, name=name:
                                           f"{name} hook step {step} {pn}: {m}")
        print(f"{name} hook OK", flush=True)

    # A gloo group is refused with a message naming the backend.
    wrong = DDP(mlp(), process_group=gl)
    wrong.register_comm_hook(hooks.CompressionState(gl), hooks.topk_hook)
    try:
        wrong(data[0][0]).sum().backward()
    except Exception as e:  # noqa: BLE001 - its message is checked
        assert "not \"nexar\"" in str(e), f"rank {rank}: {e}"
    else:
        raise AssertionError("topk_hook on a gloo group did not raise")
    print("hooks OK", flush=True)
