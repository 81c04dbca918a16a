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


def test_data_parallel_logistic_regression_matches_single_process(tmp_path):
    out = tmp_path / "w.npy"
    r = launch(4, os.path.join(HERE, "mp", "train.py"), str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    X, y = dataset()
    reference = train(X, y)
    distributed = np.load(out)
    assert np.abs(reference).max() > 0.1  # it learned something
    np.testing.assert_allclose(distributed, reference, rtol=0, atol=1e-6)


def test_usage_errors():
    r = subprocess.run([sys.executable, "-m", "nexar.run", "-n", "0", "x.py"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "not in 1..1024" in r.stderr
    r = subprocess.run([sys.executable, "-m", "nexar.run", "-n", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no program given" in r.stderr
