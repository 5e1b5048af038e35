#!/usr/bin/env python3
"""Reduced-precision throughput figure: images/s per precision, the engine's cudnn backend next to PyTorch at the same
batch (compute scope, CUDA graph), from the files `.ci/gpu_check.sh precision` writes:

    benchmarks/plot_precision.py --dir gpu-check -o docs/figures/gpu-precision-throughput.png

reads DIR/precision-cudnn-{fp32,fp16,bf16}.json (engine bench --json) and DIR/precision-torch.json
(benchmarks/bench_torch.py --dtype fp32,fp16,bf16); one group of bars per batch, the ratio engine/PyTorch
written over each engine bar.
"""
from __future__ import annotations

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PRECISIONS = ("fp32", "fp16", "bf16")


def rate(rows, batch, **match):
    for r in rows:
        if r["batch"] == batch and r["scope"] == "compute" and all(r.get(k) == v for k, v in match.items()):
            return r["images_per_s"]
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, type=pathlib.Path)
    ap.add_argument("--mode", default="graph", help="engine mode (graph or plain); PyTorch's matching one")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    engine = {p: json.loads((a.dir / f"precision-cudnn-{p}.json").read_text()) for p in PRECISIONS}
    torch = json.loads((a.dir / "precision-torch.json").read_text())
    device = engine["fp32"]["device"].get("name", "GPU")
    torch_mode = "graph" if a.mode == "graph" else "eager"
    batches = sorted({r["batch"] for r in engine["fp32"]["results"]})

    fig, axes = plt.subplots(1, len(batches), figsize=(5 * len(batches), 4.2), squeeze=False)
    for ax, n in zip(axes[0], batches):
        xs = range(len(PRECISIONS))
        e = [rate(engine[p]["results"], n, backend="cudnn", mode=a.mode) for p in PRECISIONS]
        t = [rate(torch["results"], n, mode=torch_mode, dtype=p) for p in PRECISIONS]
        w = 0.38
        ax.bar([x - w / 2 for x in xs], [v / 1e6 if v else 0 for v in e], w, label=f"engine cudnn ({a.mode})")
        ax.bar([x + w / 2 for x in xs], [v / 1e6 if v else 0 for v in t], w,
               label=f"PyTorch ({torch_mode}; fp16/bf16 channels_last)")
        for x, ev, tv in zip(xs, e, t):
            if ev and tv:
                ax.annotate(f"{ev / tv:.2f}x", (x - w / 2, ev / 1e6), ha="center", va="bottom", fontsize=9)
        ax.set_ylim(0, max(v or 0 for v in e + t) / 1e6 * 1.3)  # room for the ratios and the legend
        ax.set_xticks(list(xs), PRECISIONS)
        ax.set_title(f"batch {n:,}")
        ax.set_ylabel("M images/s (compute)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left", framealpha=0.9)
    fig.suptitle(f"LeNet-5 by precision, {device}: cudnn backend vs PyTorch (ratio over the engine's bar)")
    fig.tight_layout()
    pathlib.Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.output, dpi=120)
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
