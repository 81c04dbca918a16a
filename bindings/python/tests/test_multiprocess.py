"""Real processes through python -m nexar.run (seed, token, QUIC mesh)."""
import os
import subprocess
import sys

import numpy as np

from logreg import dataset, train

HERE = os.path.dirname(os.path.abspath(__file__))


def launch(n, *args, timeout=180):
    env = dict(os.environ)
    env.pop("NEXAR_LOG_LEVEL", None)
    return subprocess.run([sys.executable, "-m", "nexar.run", "-n", str(n), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_every_method_across_processes():
    r = launch(4, os.path.join(HERE, "mp", "all_ops.py"))
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(4):
        assert f"[r{rank}] rank {rank}: every method and" in r.stdout, r.stdout
    assert "cluster formed: 4 ranks" in r.stderr


def test_rpc_across_processes():
    r = launch(4, os.path.join(HERE, "mp", "rpc_server.py"))
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(4):
        assert f"[r{rank}] rank {rank}: rpc ok" in r.stdout, r.stdout


def test_unhandled_exception_stops_the_job():
    r = launch(3, os.path.join(HERE, "mp", "fail.py"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "[r1] RuntimeError: boom on rank 1" in r.stderr
    assert "nexar.run: failed: rank 1 exited with status 1" in r.stderr
    assert "passed a barrier" not in r.stdout


def test_exit_status_of_a_single_rank():
    r = launch(1, os.path.join(HERE, "mp", "exit_code.py"))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "nexar.run: failed: rank 0 exited with status 3" in r.stderr


def test_a_forked_child_is_refused_its_parents_communicator_and_can_make_its_own():
    # mp/forked_child.py: the inherited communicator refuses to work in the
    # child; a world the child makes completes asynchronous calls (its own
    # dispatch thread); the child's exit (atexit) neither hangs nor disturbs
    # the parent.
    r = launch(2, os.path.join(HERE, "mp", "forked_child.py"), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[r0] child: ClosedError: " in r.stdout, r.stdout + r.stderr
    assert "was forked from it" in r.stdout, r.stdout
    assert "[r0] child: own world's all_reduce [3.0, 3.0, 3.0, 3.0], callback ran" in r.stdout, \
        r.stdout + r.stderr
    assert "[r0] child: awaited [2.0, 2.0]" in r.stdout, r.stdout + r.stderr
    assert "[r0] child exited with 0" in r.stdout, r.stdout + r.stderr
    for rank in range(2):
        assert f"[r{rank}] rank {rank}: all_reduce after the fork ok" in r.stdout, r.stdout


def test_data_parallel_logistic_regression_matches_single_process(tmp_path):
    out = tmp_path / "w.npy"
    r = launch(4, os.path.join(HERE, "mp", "train.py"), str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    X, y = dataset()
    reference = train(X, y)
    distributed = np.load(out)
    assert np.abs(reference).max() > 0.1  # it learned something
    np.testing.assert_allclose(distributed, reference, rtol=0, atol=1e-6)


def _rank_cpus(out, rank):
    """The CPUs rank said it may use ("[rN] Cpus_allowed_list:\t0-1,3")."""
    for line in out.splitlines():
        if line.startswith(f"[r{rank}] Cpus_allowed_list:"):
            cpus = set()
            for part in line.split(":", 1)[1].strip().split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
            return cpus
    return None


def test_bind_to_pins_each_rank_to_its_slot_in_turn():
    # Confined to two CPUs, three ranks wrap round them; unbound, every rank
    # keeps both.
    cpus = sorted(os.sched_getaffinity(0))[:2]
    script = "grep Cpus_allowed_list /proc/self/status"
    base = ["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "-m", "nexar.run"]
    r = subprocess.run(base + ["-n", "3", "--bind-to", "hwthread", "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(3):
        assert _rank_cpus(r.stdout, rank) == {cpus[rank % len(cpus)]}, r.stdout
    assert f"binding: local rank 0 on CPU {cpus[0]}" in r.stderr
    r = subprocess.run(base + ["-n", "2", "--", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert _rank_cpus(r.stdout, rank) == set(cpus), r.stdout
    assert "binding:" not in r.stderr
    # Cores cover every CPU the launcher may use, each once: as many ranks as
    # CPUs fill every core's slot, and two ranks' sets are one core or disjoint.
    r = subprocess.run(base + ["-n", str(len(cpus)), "--bind-to", "core", "--", "sh", "-c",
                               script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    slots = [_rank_cpus(r.stdout, rank) for rank in range(len(cpus))]
    assert set().union(*slots) == set(cpus), r.stdout
    assert all(a == b or not a & b for a in slots for b in slots), r.stdout


def test_usage_errors():
    r = subprocess.run([sys.executable, "-m", "nexar.run", "-n", "0", "x.py"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not in 1..1024" in r.stderr
    r = subprocess.run([sys.executable, "-m", "nexar.run", "-n", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no program given" in r.stderr
    r = subprocess.run([sys.executable, "-m", "nexar.run", "-n", "2", "--bind-to", "socket",
                        "x.py"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--bind-to socket: expected none, core or hwthread" in r.stderr, \
        r.stderr
    # The seed's own refusals, said plainly (no traceback): a formation
    # timeout past its bound (1e6 s; infinity once made an undefined cast).
    for timeout in ("2e6", "inf"):
        r = subprocess.run([sys.executable, "-m", "nexar.run", "-n", "2", "--formation-timeout",
                            timeout, "x.py"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert "cannot start the seed" in r.stderr and "formation timeout" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
