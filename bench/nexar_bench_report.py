#!/usr/bin/env python3
"""Rewrites the results section of docs/bench/results.md from nexar-bench rows.

usage: nexar_bench_report.py ROWS.json DOC.md --command "nexar-bench ..."

Replaces everything between the lines
    <!-- nexar-bench:results:begin -->
    <!-- nexar-bench:results:end -->
with: when and on what it was measured (CPU and its AES-GCM features, vCPUs,
memory, kernel, OS, compiler and library versions, nexar's commit), the exact
command, and one table per (ranks, op): nexar's median, busbw, loop and CPU
time and check, then each compared library's median, busbw and ratio (lib
median / nexar median: above 1 means nexar is faster). Python standard library
only.
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys

BEGIN = "<!-- nexar-bench:results:begin -->"
END = "<!-- nexar-bench:results:end -->"
OPS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier", "pingpong",
       "stream", "bucketed", "per_tensor", "compressed_topk", "compressed_randomk"]
LIBS = ["nexar", "nexar-quic", "nexar-spin", "nexar-bound", "openmpi", "openmpi-shm", "gloo", "gloo-hd"]


def sh(*cmd, cwd=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                              cwd=cwd).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def deb_version(pkg):
    v = sh("dpkg-query", "-W", "-f=${Version}", pkg)
    return v or "not installed"


# The CPU features AES-GCM's speed depends on (ipsec-mb picks its code path
# by them), as /proc/cpuinfo names them and as the page shows them.
AES_FEATURES = [("aes", "AES-NI"), ("pclmulqdq", "PCLMULQDQ"), ("avx2", "AVX2"), ("vaes", "VAES"),
                ("vpclmulqdq", "VPCLMULQDQ"), ("avx512f", "AVX-512F")]


def aes_line(flags):
    """Which of AES_FEATURES the CPU has: nexar seals and opens every byte it
    sends, so they bound its byte rates where the peers send in the clear."""
    have = set(flags.split(":", 1)[1].split()) if ":" in flags else set()
    if not have:
        return "- AES-GCM's CPU features: not known (/proc/cpuinfo lists no x86 flags)"
    yes = [name for flag, name in AES_FEATURES if flag in have]
    no = [name for flag, name in AES_FEATURES if flag not in have]
    return (f"- AES-GCM's CPU features: {', '.join(yes) or 'none'}"
            + (f"; not {', '.join(no)}" if no else "")
            + " (nexar encrypts every byte; ipsec-mb's AES-GCM sealed 11–15 GB/s per core with"
            " VAES and AVX-512, about 3 GB/s without: docs/performance.md)")


def machine(repo):
    cpu, flags, family, model = "unknown", "", "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                value = line.split(":", 1)[-1].strip()
                if line.startswith("model name") and cpu == "unknown":
                    cpu = value
                elif line.startswith("cpu family") and not family:
                    family = value
                elif re.match(r"model\s*:", line) and not model:
                    model = value
                elif line.startswith("flags") and not flags:
                    flags = line
    except OSError:
        pass
    if family and model:
        # A virtual machine's model name can be as bare as "AMD EPYC".
        cpu += f" (family {family}, model {model})"
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1))
            mem = f"{kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    osname = ""
    try:
        with open("/etc/os-release") as f:
            osname = re.search(r'PRETTY_NAME="([^"]*)"', f.read()).group(1)
    except (OSError, AttributeError):
        pass
    virt = "virtual machine" if " hypervisor" in flags else "bare metal"
    gxx = sh("g++", "-dumpfullversion")
    commit = sh("git", "rev-parse", "--short", "HEAD", cwd=repo) or "(unknown commit)"
    dirty = (" (with local changes)"
             if sh("git", "status", "--porcelain", "--untracked-files=no", cwd=repo) else "")
    return [
        f"- CPU: {cpu}, {os.cpu_count()} vCPUs{', ' + mem if mem else ''}; "
        f"{virt}",
        aes_line(flags),
        f"- Kernel {platform.release()}, {osname or platform.system()}",
        f"- g++ {gxx}; nexar {commit}{dirty} (ngtcp2 {deb_version('libngtcp2-dev')}, "
        f"GnuTLS {deb_version('libgnutls28-dev')})",
        f"- Open MPI {deb_version('openmpi-bin')} (Debian `openmpi-bin`), "
        f"Gloo {deb_version('libgloo-dev')} (Debian `libgloo-dev`)",
    ]


def size_label(b):
    if b == 0:
        return "-"
    for unit in ["", "K", "M", "G"]:
        if b < 1024 or b % 1024:
            return f"{b}{unit}"
        b //= 1024
    return f"{b}T"


def us(v):
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def bw(op, v):
    return "-" if op == "barrier" else f"{v:.3g}"


def tables(rows):
    out = []
    libs = [l for l in LIBS if any(r["lib"] == l for r in rows)]
    libs += sorted({r["lib"] for r in rows} - set(LIBS))
    peers = [l for l in libs if l != "nexar"]
    for n in sorted({r["ranks"] for r in rows}):
        out.append(f"### {n} ranks\n")
        for op in [o for o in OPS if any(r["op"] == o and r["ranks"] == n for r in rows)]:
            mine = [r for r in rows if r["op"] == op and r["ranks"] == n]
            here = [l for l in peers if any(r["lib"] == l for r in mine)]
            head = ["size", "nexar µs", "busbw GB/s", "loop µs", "cpu µs", "check"]
            for l in here:
                head += [f"{l} µs", "busbw", f"×{l}"]
            out.append(f"**{op}**, {n} ranks\n")
            out.append("| " + " | ".join(head) + " |")
            out.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
            for b in sorted({r["bytes"] for r in mine if r["lib"] == "nexar"} or
                            {r["bytes"] for r in mine}):
                cells = [size_label(b)]
                nx = next((r for r in mine if r["lib"] == "nexar" and r["bytes"] == b), None)
                if nx and nx["check"] == "ok":
                    cells += [us(nx["median_us"]), bw(op, nx["busbw_gbps"]), us(nx["loop_us"]),
                              us(nx["cpu_us"]), "ok"]
                else:
                    cells += ["-", "-", "-", "-", "FAIL" if nx else "n/a"]
                for l in here:
                    p = next((r for r in mine if r["lib"] == l and r["bytes"] == b), None)
                    if not p:
                        cells += ["n/a", "", ""]
                    elif p["check"] != "ok":
                        cells += ["FAIL", "", ""]
                    else:
                        ratio = (f"{p['median_us'] / nx['median_us']:.2f}"
                                 if nx and nx["check"] == "ok" and nx["median_us"] > 0 else "-")
                        cells += [us(p["median_us"]), bw(op, p["busbw_gbps"]), ratio]
                out.append("| " + " | ".join(cells) + " |")
            fails = [r["check"] for r in mine if r["check"] != "ok"]
            out.append("")
            out += [f"- {f}" for f in fails] + ([""] if fails else [])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows")
    ap.add_argument("doc")
    ap.add_argument("--command", required=True, help="the nexar-bench command that made ROWS")
    ap.add_argument("--note", default="", help="a line to add under the command")
    args = ap.parse_args()
    with open(args.rows) as f:
        rows = json.load(f)
    with open(args.doc) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"nexar_bench_report: {args.doc} has no {BEGIN} ... {END} section")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    failed = sum(r["check"] != "ok" for r in rows)
    body = [BEGIN, "", f"Measured {now} with:", "", "```sh", args.command, "```", ""]
    if args.note:
        body += [args.note, ""]
    body += ["Machine:", ""] + machine(os.path.dirname(os.path.abspath(args.doc))) + [""]
    body += [f"{len(rows)} rows, {failed} failed. Times are microseconds; busbw in GB/s "
             "(1e9 B/s); ×lib = lib median / nexar median, so **above 1 means nexar is "
             "faster**, below 1 that the library is.", ""]
    body += tables(rows)
    body += [END]
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    doc = doc[:start] + "\n".join(body) + doc[end:]
    with open(args.doc, "w") as f:
        f.write(doc)
    print(f"nexar_bench_report: {args.doc}: {len(rows)} rows ({failed} failed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
