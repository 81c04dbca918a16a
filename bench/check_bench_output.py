#!/usr/bin/env python3
"""CI check of nexar-bench: runs it, then checks what it wrote.

usage: check_bench_output.py BENCH_EXE [--mode rows|timeout] [--report] [nexar-bench arguments...]

mode rows (default): runs `BENCH_EXE ARGS --json J --csv C` and asserts that
  it exits 0; that the JSON is an array with one row per expected (lib, op,
  ranks, size) and nothing else, every key present with the right type, every
  check "ok", times positive and ordered (min <= median <= max), bandwidths
  positive (zero for barrier), bytes as bench_measure.h lays them out; that
  the CSV holds the same rows; and that the terminal table names every op.
  With --plot in ARGS it also asserts a PNG was written. With --rounds R
  (R > 1) it asserts that the rounds were combined (still one row per size),
  that every table says "medians of R rounds", and that each ratio cell
  reads "median (lowest-highest)" with lowest <= median <= highest. With
  --bind-to core it asserts that every table says its ranks were bound, and
  with it or --compare nexar-bound that nexar-run's binding report (passed
  on by the driver) names each rank count's last local rank.
  It skips (exit 77) when what ARGS need is not installed and ctest cannot
  install it (scripts/test.sh does, first): with --compare, the peers'
  packages (Open MPI: openmpi-bin, libopenmpi-dev; Gloo: libgloo-dev); with
  --plot, a python3 that imports matplotlib.
  With --report (the checker's own option, not passed on) it also runs
  nexar_bench_report.py, which scripts/bench.sh uses to rewrite
  docs/bench/results.md, on the rows and a page of its own: the marked section
  must be replaced, holding the command, the machine (CPU and its AES-GCM
  features) and one table per (ranks, op) with a line per row, and the text
  around it kept; a page without the markers must be refused and left as it
  was.
mode timeout: runs with NEXAR_BENCH_TEST_STALL_SECS set (the worker stalls
  in its first timed phase) and asserts that the run ends well before the
  stall would, exits 1, and reports every row (one per size) as failed,
  naming lib, op, size.

Figures are never asserted.
"""
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nexar_bench_report as report  # noqa: E402 (next to this file)

KEYS = {"lib": str, "op": str, "ranks": int, "bytes": int, "median_us": float, "min_us": float,
        "max_us": float, "loop_us": float, "algbw_gbps": float, "busbw_gbps": float,
        "cpu_us": float, "check": str}
OPS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier", "pingpong",
       "stream", "bucketed", "per_tensor", "compressed_topk", "compressed_randomk"]
GRADIENT_OPS = ["bucketed", "per_tensor", "compressed_topk", "compressed_randomk"]  # nexar only
PEER_PACKAGES = {"openmpi": ["openmpi-bin", "libopenmpi-dev"],
                 "openmpi-shm": ["openmpi-bin", "libopenmpi-dev"],
                 "gloo": ["libgloo-dev"], "gloo-hd": ["libgloo-dev"]}
SKIP = 77


def fail(msg):
    print(f"check_bench_output: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def arg(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.upper().removesuffix("IB").removesuffix("B")
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def expected_ops(spec):
    ops = []
    for op in spec.split(","):
        for o in OPS if op == "all" else ["pingpong", "stream"] if op == "p2p" else [op]:
            if o not in ops:
                ops.append(o)
    return ops


def layout_bytes(op, size, n):
    """bench_measure.h's layoutFor: the bytes a row reports."""
    if op == "barrier":
        return 0
    floats = max(size // 4, 1)
    if op in ("allgather", "reduce_scatter", "alltoall"):
        return max(floats // n, 1) * n * 4
    return floats * 4


def installed(pkg):
    if not shutil.which("dpkg-query"):
        return False
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return "install ok installed" in r.stdout


def check_row(r, where):
    if set(r) != set(KEYS):
        fail(f"{where}: keys {sorted(r)} are not {sorted(KEYS)}")
    for k, t in KEYS.items():
        v = r[k]
        if t is float and not (isinstance(v, (int, float)) and not isinstance(v, bool)):
            fail(f"{where}: {k} is not a number: {v!r}")
        if t is int and not (isinstance(v, int) and not isinstance(v, bool)):
            fail(f"{where}: {k} is not an integer: {v!r}")
        if t is str and not isinstance(v, str):
            fail(f"{where}: {k} is not a string: {v!r}")
    if r["check"] != "ok":
        fail(f"{where}: check is {r['check']!r}")
    for k in ("median_us", "min_us", "max_us", "loop_us"):
        if not r[k] > 0:
            fail(f"{where}: {k} = {r[k]} is not positive")
    if not r["min_us"] <= r["median_us"] <= r["max_us"]:
        fail(f"{where}: not min_us <= median_us <= max_us: {r}")
    if not r["cpu_us"] >= 0:
        fail(f"{where}: cpu_us = {r['cpu_us']} is negative")
    if r["op"] == "barrier":
        if r["busbw_gbps"] != 0 or r["algbw_gbps"] != 0:
            fail(f"{where}: barrier has a bandwidth")
    elif not (r["algbw_gbps"] > 0 and r["busbw_gbps"] > 0):
        fail(f"{where}: bandwidths are not positive: {r}")


def run(bench, args, json_path, csv_path, env=None, timeout=1200):
    cmd = [bench] + args + ["--json", json_path, "--csv", csv_path]
    print("+ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    return p, time.monotonic() - t0


def check_report(rows_path, rows, tmp):
    """nexar_bench_report.py on ROWS: see --report in the module's doc."""
    page = os.path.join(tmp, "page.md")
    before, after = "# A page\n\nText before.\n\n", "\n\nText after.\n"
    stale = "stale figures"
    command = "nexar-bench (the command the check names)"

    def rewrite(text):
        with open(page, "w") as f:
            f.write(text)
        p = subprocess.run([sys.executable, report.__file__, rows_path, page, "--command", command],
                           capture_output=True, text=True, timeout=120)
        with open(page) as f:
            return p, f.read()

    p, text = rewrite(before + report.BEGIN + "\n" + stale + "\n" + report.END + after)
    if p.returncode != 0:
        fail(f"nexar_bench_report.py exited with status {p.returncode}: {p.stderr.strip()}")
    if not text.startswith(before + report.BEGIN) or not text.endswith(report.END + after):
        fail("nexar_bench_report.py changed the page outside its section")
    if stale in text:
        fail("nexar_bench_report.py left the section's old text in place")
    for needle in (command, "Machine:", "- CPU: ", "- AES-GCM's CPU features: ", "- Kernel "):
        if needle not in text:
            fail(f"the rewritten section has no {needle!r}")
    for n in sorted({r["ranks"] for r in rows}):
        for op in sorted({r["op"] for r in rows if r["ranks"] == n}):
            title = f"**{op}**, {n} ranks\n"
            if title not in text:
                fail(f"the rewritten section has no table {title.strip()!r}")
            table = text.split(title, 1)[1].split("\n\n", 1)[0]
            for b in sorted({r["bytes"] for r in rows if r["ranks"] == n and r["op"] == op}):
                if f"\n| {report.size_label(b)} | " not in table:
                    fail(f"table {title.strip()!r} has no line for {report.size_label(b)}")
    p, kept = rewrite(before + after)
    if p.returncode == 0 or report.BEGIN not in p.stderr or kept != before + after:
        fail("a page without the markers was not refused, naming them, and left as it was "
             f"(status {p.returncode}: {p.stderr.strip()!r})")
    print(f"check_bench_output: report ok ({len(rows)} rows in {page})")


def mode_rows(bench, args, tmp):
    want_report = "--report" in args
    if want_report:
        args.remove("--report")
    compare = [l for l in arg(args, "--compare", "").split(",") if l]
    missing = sorted({p for l in compare for p in PEER_PACKAGES.get(l, []) if not installed(p)})
    if missing:
        print(f"check_bench_output: skipped: peer packages not installed: {' '.join(missing)} "
              "(bench/peers/install.sh installs them)")
        sys.exit(SKIP)
    plot = arg(args, "--plot")
    if plot and not any(shutil.which(py) and subprocess.run(
            [py, "-c", "import matplotlib"], capture_output=True).returncode == 0
            for py in ("python3", "/usr/bin/python3")):
        # nexar-bench would install matplotlib; a test must not.
        print("check_bench_output: skipped: no python3 imports matplotlib "
              "(bench/install-plot-deps.sh installs it)")
        sys.exit(SKIP)
    if plot:
        plot = os.path.join(tmp, os.path.basename(plot))
        args[args.index("--plot") + 1] = plot
    j, c = os.path.join(tmp, "rows.json"), os.path.join(tmp, "rows.csv")
    p, _ = run(bench, args, j, c)
    if p.returncode != 0:
        fail(f"nexar-bench exited with status {p.returncode}")
    try:
        with open(j) as f:
            rows = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"--json output is not valid JSON: {e}")
    if not isinstance(rows, list):
        fail("--json output is not an array")

    ops = expected_ops(args[0])
    ranks = [int(n) for n in arg(args, "--ranks", "2").split(",")]
    sizes = [parse_size(s) for s in arg(args, "--sizes", "8,4K,256K,4M,64M").split(",")]
    expected = []
    for n in ranks:
        for op in ops:
            for lib in ["nexar"] + [l for l in compare
                                    if (l != "gloo-hd" or op == "allreduce")
                                    and (l.startswith("nexar") or op not in GRADIENT_OPS)]:
                for s in [0] if op == "barrier" else sizes:
                    expected.append((lib, op, n, layout_bytes(op, s, n)))
    got = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            fail(f"row {i} is not an object")
        check_row(r, f"row {i} ({r.get('lib')} {r.get('op')} {r.get('bytes')})")
        got.append((r["lib"], r["op"], r["ranks"], r["bytes"]))
    if sorted(got) != sorted(expected):
        fail(f"rows {sorted(got)}\n  differ from the expected {sorted(expected)}")

    with open(c, newline="") as f:
        table = list(csv.reader(f))
    if not table or table[0] != list(KEYS):
        fail(f"CSV header {table[:1]} is not {list(KEYS)}")
    if len(table) != len(rows) + 1:
        fail(f"CSV has {len(table) - 1} rows, JSON {len(rows)}")
    for i, (line, r) in enumerate(zip(table[1:], rows)):
        if len(line) != len(KEYS):
            fail(f"CSV row {i} has {len(line)} fields")
        for k, v in zip(KEYS, line):
            want = r[k]
            ok = v == want if isinstance(want, str) else abs(float(v) - want) <= 1e-6 * abs(want)
            if not ok:
                fail(f"CSV row {i} {k} = {v!r}, JSON has {want!r}")

    for n in ranks:
        for op in ops:
            if f"{op}, {n} ranks" not in p.stdout:
                fail(f"no table for {op}, {n} ranks on stdout")
    if compare and "\u00d7" + compare[0] not in p.stdout:
        fail(f"no ratio column \u00d7{compare[0]} in the table")
    if arg(args, "--bind-to") == "core":
        bound = p.stdout.count("ranks bound to cores")
        if bound != len(ranks) * len(ops):
            fail(f"--bind-to core: {bound} table(s) say 'ranks bound to cores', "
                 f"want {len(ranks) * len(ops)}")
    if arg(args, "--bind-to") == "core" or "nexar-bound" in compare:
        # nexar-run's own report, passed on once per rank count: the ranks
        # really were bound. Each line lists local ranks 0.. (up to 8).
        reported = [sorted(int(k) for k in re.findall(r"local rank (\d+) on CPU", line))
                    for line in p.stderr.splitlines() if "nexar-bench: binding: " in line]
        for n in ranks:
            if list(range(min(n, 8))) not in reported:
                fail(f"no 'binding: local rank 0 ... local rank {min(n, 8) - 1} on CPU ...' "
                     f"from nexar-run for {n} ranks (got {reported})")
    if want_report:
        check_report(j, rows, tmp)
    rounds = int(arg(args, "--rounds", "1"))
    if rounds > 1:
        check_round_ratios(p.stdout, rounds, len(ranks) * len(ops), bool(compare))
    if plot:
        with open(plot, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                fail("--plot did not write a PNG")
    print(f"check_bench_output: ok ({len(rows)} rows)")


def check_round_ratios(stdout, rounds, tables, compared):
    """--rounds R: every table header names R rounds; ratio cells are
    'median (lowest\u2013highest)' with the median between the extremes."""
    if stdout.count(f"medians of {rounds} rounds") != tables:
        fail(f"want {tables} table(s) headed 'medians of {rounds} rounds'")
    cells = re.findall(r"(\d+\.\d\d) \((\d+\.\d\d)\u2013(\d+\.\d\d)\)", stdout)
    if compared and not cells:
        fail("no paired ratio cell 'median (lowest\u2013highest)' in the tables")
    for med, lo, hi in cells:
        if not float(lo) <= float(med) <= float(hi):
            fail(f"ratio {med} is not within its rounds' range {lo}\u2013{hi}")


def mode_timeout(bench, args, tmp):
    stall = 120
    env = dict(os.environ, NEXAR_BENCH_TEST_STALL_SECS=str(stall))
    j, c = os.path.join(tmp, "rows.json"), os.path.join(tmp, "rows.csv")
    p, took = run(bench, args, j, c, env=env, timeout=stall)
    if p.returncode != 1:
        fail(f"a stalled worker should make nexar-bench exit 1, not {p.returncode}")
    if took > stall / 2:
        fail(f"nexar-bench took {took:.0f} s: the stall was not cut short by --timeout")
    with open(j) as f:
        rows = json.load(f)
    op = args[0]
    want = 1 if op == "barrier" else len(arg(args, "--sizes", "8,4K,256K,4M,64M").split(","))
    if len(rows) != want:
        fail(f"{len(rows)} rows, want {want}: every row must be reported failed")
    for r in rows:
        if not r["check"].startswith("FAIL:"):
            fail(f"row {r} should have failed")
        if f"nexar {op}" not in r["check"]:
            fail(f"failed row {r['check']!r} does not name the lib and op")
    print(f"check_bench_output: ok (stall ended after {took:.1f} s): {rows[0]['check']}")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    bench, args = sys.argv[1], sys.argv[2:]
    mode = "rows"
    if args[0] == "--mode":
        mode, args = args[1], args[2:]
    if mode not in ("rows", "timeout"):
        print(f"check_bench_output: unknown mode {mode!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="nexar-bench-check.") as tmp:
        (mode_timeout if mode == "timeout" else mode_rows)(bench, args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
