#!/usr/bin/env python3
"""Draws nexar-bench rows (the --json array) as one PNG.

usage: nexar_bench_plot.py ROWS.json OUT.png [--title TEXT] [--dpi N]

Per operation two panels, both log-log against the message size: bus
bandwidth (GB/s; for pingpong and stream the plain bandwidth) and the median
time per operation (us). One line per library (colour) and rank count (line
style). Barrier has no size: one bar per library and rank count. Rows whose
check is not "ok" are left out (and counted in the footer).

The PNG is kept small, since docs/bench/latest.png is committed with every
full run: 72 dpi by default, and a 32-colour palette when Pillow (a
dependency of Debian's matplotlib) is there. Line plots lose nothing to it.
"""
import argparse
import io
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

OPS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "pingpong",
       "stream", "barrier"]
COLORS = {"nexar": "#d62728", "nexar-quic": "#8c564b", "nexar-spin": "#ff7f0e", "nexar-bound": "#9467bd", "openmpi": "#1f77b4", "openmpi-shm": "#17becf",
          "gloo": "#2ca02c", "gloo-hd": "#bcbd22"}
STYLES = ["-", "--", ":", "-."]


def size_label(b, _pos=None):
    b = int(round(b))
    if b <= 0:
        return "0"
    for unit in ["", "K", "M", "G"]:
        if b < 1024 or b % 1024:
            return f"{b}{unit}"
        b //= 1024
    return f"{b}T"


def lib_order(libs):
    known = list(COLORS)
    return sorted(libs, key=lambda l: (known.index(l) if l in known else len(known), l))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows")
    ap.add_argument("out")
    ap.add_argument("--title", default="")
    ap.add_argument("--dpi", type=int, default=72, help="resolution (default 72)")
    args = ap.parse_args()
    with open(args.rows) as f:
        rows = json.load(f)
    if not isinstance(rows, list):
        sys.exit("nexar_bench_plot: expected a JSON array of rows")
    good = [r for r in rows if r.get("check") == "ok"]
    failed = len(rows) - len(good)
    ops = [op for op in OPS if any(r["op"] == op for r in good)]
    ops += sorted({r["op"] for r in good} - set(OPS))
    if not ops:
        sys.exit("nexar_bench_plot: no row with check \"ok\" to draw")
    libs = lib_order({r["lib"] for r in good})
    ranks = sorted({int(r["ranks"]) for r in good})
    style = {n: STYLES[i % len(STYLES)] for i, n in enumerate(ranks)}
    color = {l: COLORS.get(l, f"C{i}") for i, l in enumerate(libs)}

    sized = [op for op in ops if op != "barrier"]
    panels = [(op, kind) for op in sized for kind in ("bw", "lat")]
    if "barrier" in ops:
        panels.append(("barrier", "bar"))
    ncols = 4
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.5 * nrows + 1.0),
                             squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)

    for ax, (op, kind) in zip(axes.flat, panels):
        mine = [r for r in good if r["op"] == op]
        if kind == "bar":
            names, vals, cols = [], [], []
            for lib in libs:
                for n in ranks:
                    v = [r["median_us"] for r in mine if r["lib"] == lib and int(r["ranks"]) == n]
                    if v:
                        names.append(f"{lib} {n}r")
                        vals.append(v[0])
                        cols.append(color[lib])
            ax.bar(range(len(vals)), vals, color=cols)
            ax.set_xticks(range(len(vals)))
            ax.set_xticklabels(names, fontsize=7, rotation=40, ha="right")
            ax.set_yscale("log")
            ax.set_ylabel("median time (us)")
            ax.set_title("barrier: time per barrier")
            ax.grid(True, axis="y", which="both", alpha=0.3)
            continue
        sizes = set()
        for lib in libs:
            for n in ranks:
                pts = sorted((r["bytes"], r["busbw_gbps"] if kind == "bw" else r["median_us"])
                             for r in mine if r["lib"] == lib and int(r["ranks"]) == n)
                pts = [(x, y) for x, y in pts if x > 0 and y > 0]
                if not pts:
                    continue
                sizes.update(x for x, _ in pts)
                ax.plot([x for x, _ in pts], [y for _, y in pts], style[n], color=color[lib],
                        marker="o", markersize=3.5, linewidth=2.2 if lib == "nexar" else 1.4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if sizes:
            ax.xaxis.set_major_locator(FixedLocator(sorted(sizes)))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("size (bytes)")
        p2p = op in ("pingpong", "stream")
        if kind == "bw":
            ax.set_ylabel("bandwidth (GB/s)" if p2p else "busbw (GB/s)")
            ax.set_title(f"{op}: {'bandwidth' if p2p else 'bus bandwidth'} (higher is better)",
                         fontsize=10)
        else:
            ax.set_ylabel("median time (us)")
            what = {"pingpong": "half round trip", "stream": "time per message"}.get(op, "latency")
            ax.set_title(f"{op}: {what} (lower is better)", fontsize=10)

    handles = [Line2D([], [], color=color[l], linewidth=2.2 if l == "nexar" else 1.4, label=l)
               for l in libs]
    handles += [Line2D([], [], color="gray", linestyle=style[n], label=f"{n} ranks")
                for n in ranks]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
               fontsize=10, bbox_to_anchor=(0.5, 1.0))
    title = args.title or "nexar-bench: bandwidth and latency against message size (log-log)"
    if failed:
        title += f"  [{failed} failed row(s) not drawn]"
    fig.suptitle(title, y=1.0 - 0.45 / fig.get_figheight(), fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 1.0 - 0.9 / fig.get_figheight()))
    save_small(fig, args.out, args.dpi)
    return 0


def save_small(fig, out, dpi):
    """Writes FIG as a palette PNG (32 colours), or as matplotlib's own RGBA
    PNG when Pillow is missing."""
    try:
        from PIL import Image
    except ImportError:
        fig.savefig(out, dpi=dpi)
        return
    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    buf.seek(0)
    with Image.open(buf) as img:
        small = img.convert("RGB").quantize(colors=32, method=Image.Quantize.MEDIANCUT)
        small.save(out, format="PNG", optimize=True)


if __name__ == "__main__":
    sys.exit(main())
