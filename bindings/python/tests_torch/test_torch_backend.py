"""The torch.distributed backend "nexar" against "gloo", in real processes."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def check(ranks, timeout: float, *markers: str) -> None:
    codes = ranks.wait(timeout)
    assert codes == [0] * len(codes), f"exit codes {codes}\n{ranks.outputs()}"
    for r in range(len(codes)):
        for marker in markers:
            assert marker in ranks.output(r), ranks.outputs()


def test_every_op_and_dtype_matches_gloo_and_monitored_barrier_names_the_late_rank(launch):
    # worker.py asserts the results and rank 0's message naming rank 1
    check(launch("ops+monitored", 2), 300, "ops OK", "monitored OK")


def test_subgroups_match_gloo(launch):
    check(launch("subgroups", 4), 180, "subgroups OK")


def test_ddp_and_fsdp_parameters_match_gloo_after_every_step(launch):
    check(launch("ddp+fsdp", 2, {"DDP_STEPS": "60"}), 300, "ddp OK after 60 steps", "fsdp OK")


def test_ddp_fed_by_forked_dataloader_workers_matches_gloo(launch):
    check(launch("dataloader", 2), 240, "dataloader OK")


def test_compressed_comm_hooks_train_and_torch_fp16_bf16_hooks_match_gloo(launch):
    # worker_hooks.py: TopK against a torch reference on gloo after every step,
    # RandomK learning, bfloat16 gradients, every rank's parameters equal;
    # torch's fp16/bf16 hooks as on gloo
    check(launch("hooks", 2), 300, "topk hook OK", "randomk hook OK", "bfloat16 topk hook OK",
          "fp16 hook OK", "bf16 hook OK", "hooks OK")


def test_collective_mismatch_raises_on_every_rank_instead_of_hanging(launch):
    # every rank's DistBackendError names the mismatch, and the group then works
    # on (worker.py asserts both)
    ranks = launch("mismatch", 2)
    check(ranks, 240, "mismatch OK")
    for r in range(2):
        assert ranks.output(r).count(": raised after") == 6, ranks.outputs()


def test_killed_rank_is_named_within_the_heartbeat_timeout(launch):
    ranks = launch("killed", 2)
    codes = ranks.wait(60)
    assert codes == [0, 17], f"exit codes {codes}\n{ranks.outputs()}"
    out = ranks.output(0)
    assert "DistBackendError" in out, out
    assert re.search(r"rank 1\b", out.split("DistBackendError", 1)[1]), out


def test_ctrl_c_interrupts_a_synchronous_collective(launch):
    # A synchronous call runs on the caller's thread as nexar's blocking call,
    # which Ctrl-C aborts; through torch's Work it would wait for its timeout.
    ranks = launch("interrupted", 2)
    deadline = time.monotonic() + 120
    while "waiting" not in ranks.output(0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "waiting" in ranks.output(0), ranks.outputs()
    time.sleep(0.5)  # inside all_reduce
    sent = time.monotonic()
    ranks.procs[0].send_signal(signal.SIGINT)
    codes = ranks.wait(60)
    assert codes == [0, 0], f"exit codes {codes}\n{ranks.outputs()}"
    assert "KeyboardInterrupt at" in ranks.output(0), ranks.outputs()
    # CLOCK_MONOTONIC is one clock for every process of the machine.
    raised_at = float(ranks.output(0).split("KeyboardInterrupt at ")[1].split()[0])
    assert raised_at - sent < 0.5, ranks.outputs()


def test_import_registers_nexar_and_plain_init_is_untouched():
    code = ("import torch.distributed as dist, nexar.torch; "
            "assert dist.Backend.NEXAR == 'nexar'; print(dist.Backend.default_device_backend_map)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "'cpu': 'gloo'" in out.stdout, out.stdout  # the default for CPU stays gloo


# No `import nexar.torch`: torch finds "nexar" through the package's entry point.
TORCHRUN_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("nexar")
t = torch.full((3,), float(dist.get_rank() + 1))
dist.all_reduce(t)
n = dist.get_world_size()
assert t.tolist() == [n * (n + 1) / 2] * 3, t
print("torchrun OK", dist.get_rank(), flush=True)
dist.destroy_process_group()
"""


def test_torchrun_launch(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(TORCHRUN_SCRIPT)
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "4",
                          str(script)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("torchrun OK") == 4, out.stdout + out.stderr


NEXAR_RUN_SCRIPT = """
import torch, torch.distributed as dist, nexar.torch
nexar.torch.init_process_group()          # NEXAR_SEED from the launcher, no MASTER_ADDR
t = torch.full((3,), float(dist.get_rank() + 1))
dist.all_reduce(t)
n = dist.get_world_size()
assert t.tolist() == [n * (n + 1) / 2] * 3, t
print("nexar-run OK", dist.get_rank(), flush=True)
dist.destroy_process_group()
"""


def test_nexar_run_launch(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(NEXAR_RUN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run([sys.executable, "-m", "nexar.run", "-n", "4", str(script)],
                         capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    for rank in range(4):
        assert f"[r{rank}] nexar-run OK {rank}" in out.stdout, out.stdout + out.stderr
