#!/usr/bin/env python3
"""ctest check of nexar_bench_floor.py on a real recording: one 2-rank 4 MiB
allreduce row, nexar only. Asserts that the profile was read (the byte passes
and the user-space copies both found among nexar's samples) and that the
floors are below what the row measured; never the figures themselves.
Exit 77 (skipped) when perf is missing or may not record every CPU."""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
with tempfile.TemporaryDirectory() as out:
    rows_file = os.path.join(out, "floors.json")
    p = subprocess.run([sys.executable, os.path.join(here, "nexar_bench_floor.py"), "--bench", bench,
                        "--ops", "allreduce", "--ranks", "2", "--sizes", "4M", "--compare", "",
                        "--out", out, "--json", rows_file, "--", "--iters", "20", "--warmup", "2",
                        "--timeout", "300"], capture_output=True, text=True, timeout=900)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if p.returncode == 77:
        sys.exit(77)
    if p.returncode != 0:
        sys.exit(f"nexar_bench_floor.py exited {p.returncode}")
    rows = json.load(open(rows_file))

failures = []
if len(rows) != 1:
    failures.append(f"{len(rows)} rows, want 1")
for r in rows:
    where = f"{r['op']} {r['ranks']} ranks {r['bytes']} B"
    # AES-GCM, the kernel's copies and the reduction are always there...
    if not 0.2 < r["pass_share"] < 1.0:
        failures.append(f"{where}: byte passes {r['pass_share']:.3f} of the samples")
    # ...and so is ngtcp2's copy into each packet.
    if not 0.0 < r["copy_share"] < r["pass_share"]:
        failures.append(f"{where}: user-space copies {r['copy_share']:.3f} of the samples")
    spread = r["cpu_us"] * r["ranks"] / min(r["ranks"], len(os.sched_getaffinity(0)))
    if not 0 < r["floor_without_copies_us"] < r["floor_us"] < spread:
        failures.append(f"{where}: floors {r['floor_without_copies_us']:.0f} / {r['floor_us']:.0f}"
                        f" us against {spread:.0f} us of CPU per vCPU")
    if r["goals_us"]:
        failures.append(f"{where}: goals {r['goals_us']} without --compare")
if "| allreduce 2r 4 MiB |" not in p.stdout:
    failures.append("no table row for the allreduce")
for f in failures:
    print("FAIL: " + f)
sys.exit(1 if failures else 0)
