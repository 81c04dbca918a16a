#!/usr/bin/env python3
"""ctest check of nexar_bench_floor.py --bound-from on rows written here: the
CPU bound is the CPU per operation times the ranks over the vCPUs they share,
the goals come from the peers' medians, failed rows are left out. No perf and
no run: the rows are made up, so the figures can be asserted."""
import json
import os
import subprocess
import sys
import tempfile


def row(lib, op, ranks, nbytes, median_us, cpu_us, check="ok"):
    return {"lib": lib, "op": op, "ranks": ranks, "bytes": nbytes, "median_us": median_us,
            "cpu_us": cpu_us, "check": check}


rows = [
    row("nexar", "broadcast", 2, 262144, 300.0, 170.0),
    row("gloo", "broadcast", 2, 262144, 200.0, 120.0),
    row("nexar", "allreduce", 4, 67108864, 180000.0, 86000.0),
    row("gloo", "allreduce", 4, 67108864, 150000.0, 71000.0),
    row("openmpi", "allreduce", 4, 67108864, 192000.0, 92000.0),
    row("nexar", "allreduce", 2, 8, 100.0, 60.0, check="FAIL"),
    # Small rows: the 8 B allreduce has a fixed goal, not Gloo / 2; the 8 B
    # broadcast has none, and so no line.
    row("nexar", "allreduce", 4, 8, 200.0, 60.0),
    row("gloo", "allreduce", 4, 8, 500.0, 150.0),
    row("nexar", "broadcast", 2, 8, 80.0, 50.0),
    row("gloo", "broadcast", 2, 8, 70.0, 40.0),
    # 64 MiB broadcast, 2 ranks: 2 GB/s as well as Gloo / 2.
    row("nexar", "broadcast", 2, 67108864, 25000.0, 21000.0),
    row("gloo", "broadcast", 2, 67108864, 16000.0, 12000.0),
]
here = os.path.dirname(os.path.abspath(__file__))
with tempfile.TemporaryDirectory() as out:
    path = os.path.join(out, "rows.json")
    with open(path, "w") as f:
        json.dump(rows, f)
    p = subprocess.run([sys.executable, os.path.join(here, "nexar_bench_floor.py"), "--bound-from",
                        path, "--cpus", "2"], capture_output=True, text=True, timeout=60)
sys.stdout.write(p.stdout)
sys.stderr.write(p.stderr)
if p.returncode != 0:
    sys.exit(f"nexar_bench_floor.py --bound-from exited {p.returncode}")

table = [line for line in p.stdout.splitlines() if line.startswith("| ") and "---" not in line]
want = [
    # 2 ranks on 2 vCPUs: 170 µs each; Gloo / 2 = 100 µs; Gloo's bound 120 µs.
    "| broadcast 2r 256 KiB | 300 µs | 170 µs | 170 µs | Gloo / 2 = 100 µs | 1.70 | 120 µs |",
    # 4 ranks on 2 vCPUs: twice the CPU per rank; both goals of a 64 MiB allreduce.
    "| allreduce 4r 64 MiB | 180.0 ms | 86.0 ms | 172.0 ms | Gloo / 2 = 75.0 ms | 2.29 "
    "| 142.0 ms |",
    "| allreduce 4r 64 MiB | 180.0 ms | 86.0 ms | 172.0 ms | Open MPI / 1.2 = 160.0 ms | 1.07 "
    "| 142.0 ms |",
    # 4 ranks on 2 vCPUs: 120 µs against 250 µs.
    "| allreduce 4r 8 B | 200 µs | 60 µs | 120 µs | under 250 µs = 250 µs | 0.48 | 300 µs |",
    "| broadcast 2r 64 MiB | 25.0 ms | 21.0 ms | 21.0 ms | Gloo / 2 = 8000 µs | 2.62 | 12.0 ms |",
    # 64 MiB at 2e9 B/s: 33554 µs.
    "| broadcast 2r 64 MiB | 25.0 ms | 21.0 ms | 21.0 ms | 2 GB/s = 33.6 ms | 0.63 | 12.0 ms |",
]
if table[1:] != want:
    sys.exit("unexpected table:\n" + "\n".join(table[1:]) + "\nwanted:\n" + "\n".join(want))
print("check_floor_bound: ok")
