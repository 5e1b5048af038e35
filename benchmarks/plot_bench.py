#!/usr/bin/env python3
"""Figures from `engine bench --json`, `benchmarks/bench_torch.py --json` and `engine bench ops --json`.

  throughput.png  images/s against batch size, one line per backend and mode, PyTorch (dashed) and
                  the measured ceiling (dotted) beside them; compute-only and end-to-end panels
  latency.png     latency median (line) and the highest percentile asked for (dashed) against batch
                  size, per backend and mode, both scopes
  ops.png         the seeds' Part 1 study: time against n for every CPU and GPU variant (solid:
                  kernel only, dashed: with transfers), the crossover marked; the launch-shape sweep

  benchmarks/plot_bench.py --bench bench.json --torch torch.json --ops ops.json -o docs/figures
  benchmarks/plot_bench.py ... --combined bench.png      # every panel in one file (the device run)

Any of the three inputs may be left out (its figures are then not drawn). Several --bench files
(e.g. one from the GPU machine, one from a CPU machine) are drawn together, labelled by device.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys


def load(path):
    return json.loads(pathlib.Path(path).read_text()) if path else None


def device_label(doc):
    dev = doc.get("device", {})
    if dev.get("available") and dev.get("name"):
        return dev["name"]
    return (doc.get("host", {}).get("cpu") or "CPU").split(" @")[0]


def series(results, scope, key="images_per_s"):
    """{(backend, mode): ([batch], [value])} for one scope; a PyTorch run of several dtypes gives one
    series per dtype, its mode then "graph fp16" (fp32 keeps the plain mode name)."""
    out = {}
    for r in results:
        if r["scope"] != scope:
            continue
        mode = r["mode"] if r.get("dtype", "fp32") == "fp32" else f'{r["mode"]} {r["dtype"]}'
        xs, ys = out.setdefault((r["backend"], mode), ([], []))
        value = r[key] if key in r else r["latency_ms"][key]
        xs.append(r["batch"])
        ys.append(value)
    for k, (xs, ys) in out.items():
        order = sorted(range(len(xs)), key=xs.__getitem__)
        out[k] = ([xs[i] for i in order], [ys[i] for i in order])
    return out


COLORS = {"cpu": "tab:gray", "custom": "tab:blue", "cudnn": "tab:green", "pytorch": "tab:red",
          "custom fp16": "tab:purple", "custom bf16": "tab:pink", "cudnn fp16": "tab:olive",
          "cudnn bf16": "tab:cyan", "pytorch fp16": "tab:orange", "pytorch bf16": "tab:brown"}


def color(backend, i=0, precision="fp32"):
    import matplotlib.pyplot as plt
    if precision != "fp32" and f"{backend} {precision}" in COLORS:
        return COLORS[f"{backend} {precision}"]
    return COLORS.get(backend, plt.rcParams["axes.prop_cycle"].by_key()["color"][i % 10])


def precision_of(doc):
    return doc.get("precision") or "fp32"


def torch_label(doc, mode, several):
    """"PyTorch eager", with the device (or the CPU threads) when several PyTorch runs are drawn."""
    if not several:
        return f"PyTorch {mode}"
    dev = doc.get("device", {})
    where = dev.get("name") if dev.get("available") else f"CPU, {doc.get('host', {}).get('threads')} threads"
    return f"PyTorch {mode} ({where})"


def batch_ticks(ax, benches, torch_docs):
    """Log-2 x axis labelled with the batch sizes measured, as plain numbers."""
    from matplotlib.ticker import FixedLocator, NullLocator
    batches = sorted({r["batch"] for d in list(benches) + list(torch_docs) for r in d["results"]})
    ax.set_xscale("log", base=2)
    if batches:
        ax.xaxis.set_major_locator(FixedLocator(batches))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(b) for b in batches])


def draw_throughput(axes, benches, torch_docs):
    for ax, scope in zip(axes, ("compute", "e2e")):
        devices = {device_label(d) for d in benches}
        drawn_ceilings = set()
        for b_i, doc in enumerate(benches):
            prec = precision_of(doc)
            tag = f" [{device_label(doc)}]" if len(devices) > 1 else ""
            name = "" if prec == "fp32" else f" {prec}"
            same_run = len({precision_of(d) for d in benches}) > 1  # precisions side by side: no fading
            for (backend, mode), (xs, ys) in series(doc["results"], scope).items():
                ax.plot(xs, ys, marker="o", color=color(backend, b_i, prec), linestyle="-" if mode == "plain" else "-.",
                        label=f"{backend}{name} {mode}{tag}", alpha=1.0 if b_i == 0 or same_run else 0.6)
            # The ceiling a file states is the fp32 one (arithmetic at the FMA rate, or memory), which
            # does not bound tensor-core precisions: drawn once per device, from an fp32 run.
            ceil = doc.get("ceilings", [])
            key = "device_compute_images_per_s" if scope == "compute" else "device_e2e_images_per_s"
            pts = [(c["batch"], c[key]) for c in ceil if c.get(key)]
            if pts and doc.get("device", {}).get("available") and prec == "fp32" and tag not in drawn_ceilings:
                drawn_ceilings.add(tag)
                ax.plot(*zip(*pts), linestyle=":", color="black", label=f"GPU ceiling (fp32){tag}")
            host_pts = [(c["batch"], c["host_images_per_s"]) for c in ceil if c.get("host_images_per_s")]
            if host_pts and any(r["backend"] == "cpu" for r in doc["results"]):
                ax.plot(*zip(*host_pts), linestyle=":", color="tab:gray", label=f"CPU ceiling{tag}")
        for t_i, doc in enumerate(torch_docs):
            for (backend, mode), (xs, ys) in series(doc["results"], scope).items():
                dtype = mode.split(" ")[1] if " " in mode else "fp32"
                ax.plot(xs, ys, marker="s" if t_i == 0 else "^", color=color("pytorch", 0, dtype),
                        linestyle="--" if mode.startswith("eager") else ":", alpha=1.0 if t_i == 0 else 0.6,
                        label=torch_label(doc, mode, len(torch_docs) > 1))
        batch_ticks(ax, benches, torch_docs)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("images/s (batch / median latency)")
        ax.set_title(f"throughput, {'compute only' if scope == 'compute' else 'end to end'}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)


def draw_latency(axes, benches, torch_docs):
    for ax, scope in zip(axes, ("compute", "e2e")):
        docs = list(benches) + list(torch_docs)
        for d_i, doc in enumerate(docs):
            is_torch = d_i >= len(benches)
            pcts = doc.get("settings", {}).get("percentiles") or [99]
            top = f"p{max(pcts):g}"
            med = series(doc["results"], scope, "median")
            hi = series(doc["results"], scope, top)
            for (backend, mode), (xs, ys) in med.items():
                prec = (mode.split(" ")[1] if " " in mode else "fp32") if is_torch else precision_of(doc)
                c = color(backend, d_i, prec)
                name = (torch_label(doc, mode, len(torch_docs) > 1) if is_torch
                        else f"{backend}{'' if prec == 'fp32' else ' ' + prec} {mode}")
                ax.plot(xs, ys, marker="o", color=c, linestyle="-" if mode.split(" ")[0] in ("plain", "eager") else "-.",
                        alpha=0.6 if d_i > len(benches) else 1.0, label=f"{name} median")
                hx, hy = hi[(backend, mode)]
                ax.plot(hx, hy, color=c, linestyle=":", alpha=0.8, label=f"{name} {top}")
        batch_ticks(ax, benches, torch_docs)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("latency per batch, ms")
        ax.set_title(f"latency, {'compute only' if scope == 'compute' else 'end to end'}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)


def grouped_bars(ax, groups, series_names, value, title, ylabel="images/s"):
    """One group of bars per entry of `groups` (e.g. the zoo's models), one bar per series (e.g.
    backend and precision), log scale; value(group, series) is a number or None (not drawn)."""
    width = 0.8 / max(1, len(series_names))
    palette = ["tab:blue", "tab:green", "tab:red", "tab:purple", "tab:olive", "tab:orange", "tab:cyan", "tab:gray",
               "tab:pink", "tab:brown"]
    for k, name in enumerate(series_names):
        xs = [i + (k - (len(series_names) - 1) / 2) * width for i in range(len(groups))]
        vals = [value(g, name) or 0 for g in groups]
        ax.bar(xs, vals, width, label=name, color=COLORS.get(name, palette[k % len(palette)]))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)


OPS_STYLE = {"naive": "tab:orange", "tiled": "tab:purple", "cublas": "tab:green"}


def draw_ops(axes_curves, axes_sweep, ops_doc):
    rows = ops_doc["results"]
    for ax, op in zip(axes_curves, ("add", "matmul")):
        impls = {}
        for r in rows:
            if r["op"] != op or r["sweep"] or "ms" not in r:
                continue
            key = (r["impl"], r["transfers"])
            impls.setdefault(key, []).append((r["n"], r["ms"]["median"]))
        for (impl, transfers), pts in sorted(impls.items()):
            pts.sort()
            c = "tab:gray" if impl.startswith("cpu") else OPS_STYLE.get(impl, "black")
            style = "-" if not transfers else "--"
            if impl.startswith("cpu"):
                style = "-" if impl == "cpu-1t" else "-."
            ax.plot(*zip(*pts), marker="s" if impl.startswith("cpu-") and impl != "cpu-1t" else "o", color=c,
                    linestyle=style,
                    label=f"{impl}{' + transfers' if transfers else ''}")
        cross = ops_doc.get("crossover", {}).get(op, {})
        for key, style in (("kernel_only", "-"), ("with_transfers", "--")):
            n = (cross.get(key) or {}).get("estimate") or (cross.get(key) or {}).get("n")
            if n:
                ax.axvline(n, color="black", linestyle=style, alpha=0.4,
                           label=f"GPU wins from ~{n:.0f} ({key.replace('_', ' ')})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (n x n matrices)")
        ax.set_ylabel("median time, ms")
        ax.set_title(f"{op}: CPU vs GPU" + ("" if ops_doc.get("device", {}).get("available") else " (no GPU)"))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    for ax, op in zip(axes_sweep, ("add", "matmul")):
        sweep = [r for r in rows if r["op"] == op and r["sweep"] and "ms" in r]
        if not sweep:
            ax.set_visible(False)
            continue
        labels = [r["launch"].replace("grid ", "g").replace(" x block ", "\nb").replace(" (covering)", "*")
                  + ("\n" + r["impl"] if r["impl"] != "naive" else "") for r in sweep]
        values = [r["ms"]["median"] for r in sweep]
        ax.bar(range(len(values)), values, color=[OPS_STYLE.get(r["impl"], "gray") for r in sweep])
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(labels, fontsize=5, rotation=90)
        ax.set_yscale("log")
        ax.set_ylabel("median time, ms")
        ax.set_title(f"{op} launch-shape sweep at n = {sweep[0]['n']} (g = gridDim, b = blockDim)")
        ax.grid(True, axis="y", which="both", alpha=0.3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="append", default=[], help="engine bench --json output (repeatable)")
    ap.add_argument("--torch", action="append", default=[], help="benchmarks/bench_torch.py --json output (repeatable)")
    ap.add_argument("--ops", help="engine bench ops --json output")
    ap.add_argument("-o", "--out", default=".", help="folder for throughput.png, latency.png, ops.png")
    ap.add_argument("--combined", help="write every panel into this one PNG instead")
    args = ap.parse_args(argv)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = [load(p) for p in args.bench]
    torch_docs = [load(p) for p in args.torch]
    ops_doc = load(args.ops)
    written = []
    if args.combined:
        rows = (2 if benches else 0) + (2 if ops_doc else 0)
        if rows == 0:
            sys.exit("error: nothing to plot")
        fig, axes = plt.subplots(rows, 2, figsize=(14, 5 * rows), squeeze=False)
        r = 0
        if benches:
            draw_throughput(axes[r], benches, torch_docs)
            draw_latency(axes[r + 1], benches, torch_docs)
            r += 2
        if ops_doc:
            draw_ops(axes[r], axes[r + 1], ops_doc)
        fig.tight_layout()
        fig.savefig(args.combined, dpi=90)
        written.append(args.combined)
    else:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        if benches:
            fig, axes = plt.subplots(1, 2, figsize=(13, 5))
            draw_throughput(axes, benches, torch_docs)
            fig.tight_layout()
            fig.savefig(out / "throughput.png", dpi=110)
            written.append(out / "throughput.png")
            fig, axes = plt.subplots(1, 2, figsize=(13, 5))
            draw_latency(axes, benches, torch_docs)
            fig.tight_layout()
            fig.savefig(out / "latency.png", dpi=110)
            written.append(out / "latency.png")
        if ops_doc:
            sweep = any(r["sweep"] for r in ops_doc["results"])
            fig, axes = plt.subplots(2 if sweep else 1, 2, figsize=(13, 10 if sweep else 5), squeeze=False)
            draw_ops(axes[0], axes[1] if sweep else [], ops_doc)
            fig.tight_layout()
            fig.savefig(out / "ops.png", dpi=110)
            written.append(out / "ops.png")
    for w in written:
        print(f"wrote {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
