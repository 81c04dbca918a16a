"""Runs scenarios of worker.py as real processes that meet through a
FileStore (torch's own rendezvous, no fixed port)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

WORKER = Path(__file__).with_name("worker.py")


class Ranks:
    def __init__(self, procs: List[subprocess.Popen], logs: List[Path]):
        self.procs, self.logs = procs, logs

    def wait(self, timeout: float) -> List[int]:
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                codes.append(-9)
        return codes

    def output(self, rank: int) -> str:
        return self.logs[rank].read_text()

    def outputs(self) -> str:
        return "\n".join(f"--- rank {r}\n{self.output(r)}" for r in range(len(self.logs)))


@pytest.fixture
def launch(tmp_path):
    started: List[Ranks] = []

    def start(scenario: str, size: int, env: Optional[Dict[str, str]] = None) -> Ranks:
        store = tmp_path / f"store-{scenario}"
        procs, logs = [], []
        for rank in range(size):
            log = tmp_path / f"{scenario}-{rank}.log"
            full_env = dict(os.environ, **(env or {}))
            with open(log, "w") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, str(WORKER), scenario, str(rank), str(size), str(store)],
                    stdout=out, stderr=subprocess.STDOUT, env=full_env))
            logs.append(log)
        ranks = Ranks(procs, logs)
        started.append(ranks)
        return ranks

    yield start
    for ranks in started:  # a failed test leaves no process behind
        for p in ranks.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
