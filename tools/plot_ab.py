#!/usr/bin/env python3
"""A/B figure: images/s against batch for several `engine bench --json` files of the same backend,
one line per file (e.g. a planner choice on and off), with the ratio of each to the first below.

    tools/plot_ab.py --label off docs/bench/s6-h100/cudnn-s2d-off.json --label on docs/bench/s6-h100/cudnn-s2d-on.json \\
        --backend cudnn --mode graph -o docs/figures/s6/cudnn-s2d-ab.png
"""
from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(path, backend, mode, scope):
    rows = [r for r in json.load(open(path))["results"]
            if r["backend"] == backend and r["mode"] == mode and r["scope"] == scope]
    rows.sort(key=lambda r: r["batch"])
    return [r["batch"] for r in rows], [r["images_per_s"] for r in rows]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="engine bench --json outputs")
    ap.add_argument("--label", action="append", required=True, help="one per file, in order")
    ap.add_argument("--backend", required=True)
    ap.add_argument("--mode", default="graph")
    ap.add_argument("--scope", default="compute")
    ap.add_argument("--title", default="")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    if len(a.label) != len(a.files):
        ap.error("give one --label per file")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    base = None
    for path, label in zip(a.files, a.label):
        b, v = series(path, a.backend, a.mode, a.scope)
        top.plot(b, v, marker="o", label=label)
        if base is None:
            base = dict(zip(b, v))
        bottom.plot(b, [x / base[k] for k, x in zip(b, v) if k in base], marker="o", label=f"{label} / {a.label[0]}")
    top.set(xscale="log", yscale="log", ylabel="images/s", title=a.title or f"{a.backend}, {a.mode}, {a.scope}")
    bottom.set(xscale="log", xlabel="batch size", ylabel="ratio")
    bottom.axhline(1.0, color="grey", lw=0.8)
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
