#!/usr/bin/env python3
"""How fast each nexar row could be if only its byte passes cost anything.

Every byte nexar moves is copied into a QUIC packet (ngtcp2), sealed with
AES-GCM, copied into the kernel, copied out of it, opened, and copied or
reduced into the result. Open MPI and Gloo pay only the two kernel copies
(and the reduction). For each row this runs nexar-bench once side by side
with the peers (--compare), then `perf record -a` over nexar alone, and
finds the share of nexar's CPU samples spent in those passes (libc
memmove/memcpy, the reduction kernels, AES-GCM, the kernel's user copies).
The row's CPU per operation scaled by that share, spread over the vCPUs the
ranks can use, is the time the row cannot go below without removing a pass;
a second floor leaves out the user-space copies, which a QUIC stack sealing
from and opening into the application's memory would not make. Both are
compared with issue 5's goals (goals_us): half Gloo's median for allreduce
and broadcast from 256 KiB, Open MPI's median / 1.2 for the 64 MiB
allreduce, 2 GB/s for the 2-rank 64 MiB broadcast, 100 and 250 µs for the
8 B allreduce with 2 and 4 ranks. Needs perf (Debian linux-perf) and the right to record
every CPU (root, or kernel.perf_event_paranoid <= -1).

With --bound-from FILE (rows an earlier nexar-bench --json wrote, --rounds
allowed) nothing runs: each nexar row's whole CPU per operation, spread the
same way, is the bound printed against the goals, next to the same bound for
Gloo's row. No perf needed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# ngtcp2 0.12 copies stream data into each packet and out of its decrypt
# buffer: the user-space copies.
COPY = re.compile(r"memmove|memcpy")
# The other passes by symbol: the reduction kernels and the kernel's copies
# (the hot symbol is _copy_to_iter/_copy_from_iter on recent kernels,
# copy_user_enhanced_fast_string on 6.1, rep_movs_alternative from 6.4).
PASS = re.compile(r"memmove|memcpy|reduce_op|_copy_to_iter|_copy_from_iter|copy_user|rep_movs")
# Sealing and opening by library: ipsec-mb's AES-GCM, or, with
# NEXAR_FAST_AEAD=0, GnuTLS and nettle, whose stripped symbols perf cannot
# name (nearly all their samples are then the AEAD; with ipsec-mb they have
# only the handshake's few).
AEAD_DSO = re.compile(r"libIPSec_MB|libgnutls|libnettle")
# The bench worker fills and checks buffers outside the timed loop.
BENCH = re.compile(r"benchm::|memcmp|memset")
# "  12.41%  nexar-bench  libc.so.6  [.] __memmove_avx512_unaligned_erms"
SAMPLE = re.compile(r"\s*([\d.]+)%\s+(\S+)\s+(\S+)\s+\[[.k]\]\s+(.+?)\s*$")


def pass_shares(report_text):
    """From `perf report --sort comm,dso,sym --stdio`: the shares of
    nexar-bench's samples (bench checks left out) in all byte passes, and in
    the user-space copies among them."""
    total = passes = copies = bench = 0.0
    for line in report_text.splitlines():
        m = SAMPLE.match(line)
        if not m or m.group(2) != "nexar-bench":
            continue
        share, dso, sym = float(m.group(1)), m.group(3), m.group(4)
        total += share
        if BENCH.search(sym):
            bench += share
        elif PASS.search(sym) or AEAD_DSO.search(dso):
            passes += share
            if COPY.search(sym):
                copies += share
    if total - bench <= 0:
        return None
    return passes / (total - bench), copies / (total - bench)


def fmt_us(us):
    return f"{us / 1000:.1f} ms" if us >= 10000 else f"{us:.0f} µs"


def spread_us(row, cpus):
    """The row's CPU per operation over all ranks, spread over the vCPUs they
    share: no scheduling of that work finishes sooner."""
    return row["cpu_us"] * row["ranks"] / min(row["ranks"], cpus)


def row_key(r):
    return (r["lib"], r["op"], r["ranks"], r["bytes"])


def ok_rows_by_key(rows):
    return {row_key(r): r for r in rows if r.get("check") == "ok"}


def goals_us(by_key, op, ranks, nbytes):
    """Issue 5's goals for a row, as times; the peers' medians come from
    by_key (ok_rows_by_key). A row the issue sets no goal for gets none."""
    key = (op, ranks, nbytes)
    gloo, openmpi = by_key.get(("gloo",) + key), by_key.get(("openmpi",) + key)
    goals = {}
    if op == "allreduce" and nbytes == 8 and ranks in (2, 4):
        goals[f"under {100 if ranks == 2 else 250} µs"] = 100.0 if ranks == 2 else 250.0
    if op in ("allreduce", "broadcast") and nbytes >= 256 << 10 and gloo:
        goals["Gloo / 2"] = gloo["median_us"] / 2
    if op == "allreduce" and nbytes >= 64 << 20 and openmpi:
        goals["Open MPI / 1.2"] = openmpi["median_us"] / 1.2
    if op == "broadcast" and nbytes >= 64 << 20 and ranks == 2:
        goals["2 GB/s"] = nbytes / 2e3  # bytes at 2e9 B/s, in µs
    return goals


def row_label(op, ranks, nbytes):
    if nbytes < 1 << 10:
        size = f"{nbytes} B"
    elif nbytes < 1 << 20:
        size = f"{nbytes >> 10} KiB"
    else:
        size = f"{nbytes >> 20} MiB"
    return f"{op} {ranks}r {size}"


def print_bounds(rows, cpus):
    """The --bound-from table: each nexar row's CPU bound against its goals."""
    by_key = ok_rows_by_key(rows)
    print("| row | nexar | CPU per op per rank | CPU bound | goal | bound / goal "
          "| Gloo's CPU bound |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r["lib"] != "nexar" or r.get("check") != "ok":
            continue
        bound = spread_us(r, cpus)
        gloo = by_key.get(("gloo", r["op"], r["ranks"], r["bytes"]))
        gloo_bound = fmt_us(spread_us(gloo, cpus)) if gloo else "–"
        for name, goal in goals_us(by_key, r["op"], r["ranks"], r["bytes"]).items():
            print(f"| {row_label(r['op'], r['ranks'], r['bytes'])} | {fmt_us(r['median_us'])} "
                  f"| {fmt_us(r['cpu_us'])} | {fmt_us(bound)} | {name} = {fmt_us(goal)} "
                  f"| {bound / goal:.2f} | {gloo_bound} |")


def load_rows(path):
    rows = json.load(open(path))
    return rows if isinstance(rows, list) else rows["rows"]


def run(cmd, **kw):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/tools/bench/nexar-bench", help="nexar-bench to run")
    ap.add_argument("--ops", default="allreduce,broadcast")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--sizes", default="256K,4M,64M")
    ap.add_argument("--compare", default="gloo,openmpi", help="peers for the goals ('' for none)")
    ap.add_argument("--out", default="build/pass-floor", help="directory for the recordings")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--cpus", type=int, default=len(os.sched_getaffinity(0)),
                    help="vCPUs the ranks share (default: this process's affinity)")
    ap.add_argument("--bound-from", metavar="FILE",
                    help="only print the CPU bounds of the rows in this nexar-bench JSON")
    ap.add_argument("bench_args", nargs="*", help="passed to every nexar-bench run (after --)")
    args = ap.parse_args()
    if args.bound_from:
        print_bounds(load_rows(args.bound_from), args.cpus)
        return 0
    if not shutil.which("perf"):
        print("nexar_bench_floor: perf is not installed (Debian: linux-perf)", file=sys.stderr)
        return 77
    os.makedirs(args.out, exist_ok=True)
    probe = subprocess.run(["perf", "record", "-q", "-a", "-o", os.path.join(args.out, "probe.data"),
                            "--", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("nexar_bench_floor: perf may not record every CPU here: "
              f"{probe.stderr.strip()[-400:]}", file=sys.stderr)
        return 77
    side = os.path.join(args.out, "bench.json")
    cmd = [args.bench, args.ops, "--ranks", args.ranks, "--sizes", args.sizes, "--json", side]
    if args.compare:
        cmd += ["--compare", args.compare]
    run(cmd + args.bench_args, stdout=subprocess.DEVNULL)
    rows = load_rows(side)
    by_key = ok_rows_by_key(rows)

    results = []
    for r in rows:
        if r["lib"] != "nexar" or r.get("check") != "ok":
            continue
        data = os.path.join(args.out, f"{r['op']}-{r['ranks']}-{r['bytes']}.data")
        rec = subprocess.run(["perf", "record", "-q", "-a", "-F", "1999", "-o", data, "--",
                              args.bench, r["op"], "--ranks", str(r["ranks"]), "--sizes",
                              str(r["bytes"])] + args.bench_args,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if rec.returncode != 0:
            print(f"nexar_bench_floor: perf record failed for {r['op']} {r['ranks']} ranks "
                  f"{r['bytes']} B: {rec.stderr.strip()[-400:]}", file=sys.stderr)
            return 1
        report = run(["perf", "report", "-i", data, "--no-children", "--sort", "comm,dso,sym",
                      "--stdio"], capture_output=True, text=True).stdout
        shares = pass_shares(report)
        if shares is None:
            print(f"nexar_bench_floor: {data}: no nexar-bench samples", file=sys.stderr)
            return 1
        share, copy_share = shares
        spread = spread_us(r, args.cpus)
        goals = goals_us(by_key, r["op"], r["ranks"], r["bytes"])
        results.append({"op": r["op"], "ranks": r["ranks"], "bytes": r["bytes"],
                        "median_us": r["median_us"], "cpu_us": r["cpu_us"],
                        "pass_share": share, "copy_share": copy_share,
                        "floor_us": share * spread,
                        "floor_without_copies_us": (share - copy_share) * spread,
                        "goals_us": goals})

    print("| row | nexar | CPU per op per rank | byte passes | floor | without the user-space "
          "copies | goal | floors / goal |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for x in results:
        label = row_label(x["op"], x["ranks"], x["bytes"])
        for name, goal in (x["goals_us"] or {"": 0}).items():
            verdict = ""
            if name:
                verdict = f"{x['floor_us'] / goal:.2f} / {x['floor_without_copies_us'] / goal:.2f}"
                if x["floor_without_copies_us"] > goal:
                    verdict += " (beyond reach with encryption)"
                elif x["floor_us"] > goal:
                    verdict += " (beyond reach with ngtcp2's copies)"
            print(f"| {label} | {fmt_us(x['median_us'])} | {fmt_us(x['cpu_us'])} "
                  f"| {100 * x['pass_share']:.0f} % | {fmt_us(x['floor_us'])} "
                  f"| {fmt_us(x['floor_without_copies_us'])} "
                  f"| {name + ' = ' + fmt_us(goal) if name else '–'} | {verdict} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
