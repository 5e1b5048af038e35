"""What the peer benchmarks (bench_torch.py, bench_jax.py) share, so that both compute the same
numbers the same way: the statistics (as engine/bench/common.cpp computes them), the measurement
loop of one case, the ratio table and the small helpers of their JSON reports."""
from __future__ import annotations

import math
import os
import pathlib
import statistics
import subprocess
import sys
import time

SCHEMA = "cnn-engine-bench/1"
REPO = pathlib.Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------------------------------
# Statistics (numpy's linear interpolation)

def percentile(sorted_samples, p):
    if not sorted_samples:
        return float("nan")
    rank = min(max(p, 0.0), 100.0) / 100.0 * (len(sorted_samples) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (rank - lo)


def stats(samples, percentiles):
    s = sorted(samples)
    out = {"count": len(s), "min": s[0], "mean": statistics.fmean(s), "median": percentile(s, 50)}
    for p in percentiles:
        out[f"p{p:g}"] = percentile(s, p)
    out["max"] = s[-1]
    out["sd"] = statistics.stdev(s) if len(s) > 1 else 0.0
    return out


def si(v):
    for div, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(v) >= div:
            x = v / div
            return f"{x:.{max(0, 3 - len(str(int(abs(x)))))}f}{suffix}"
    return f"{v:.{max(0, 3 - len(str(int(abs(v)))))}f}"


def git_commit(repo=REPO):
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + (" (+ local changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("ENGINE_GIT_COMMIT", "unknown")


def write_json(path, doc, log):
    """Writes the report atomically (a .tmp file renamed over PATH)."""
    import json
    tmp = pathlib.Path(path + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)
    log(f"wrote {path}")


def parse_list(text, kind):
    return [kind(x) for x in text.split(",") if x.strip()]


def settings(args, default_batches):
    """The measurement settings: each from its command-line option, else from the engine run's
    (`engine bench --json`, args.engine) so both sides measure alike, else the defaults.
    Returns (settings, the engine run's JSON or None)."""
    import json
    engine = json.loads(pathlib.Path(args.engine).read_text()) if args.engine else None
    es = (engine or {}).get("settings", {})
    return {
        "batches": parse_list(args.batch, int) if args.batch else es.get("batches", default_batches),
        "warmup_ms": args.warmup if args.warmup is not None else es.get("warmup_ms", 200.0),
        "iterations": args.iterations if args.iterations is not None else es.get("iterations", 10),
        "duration_s": args.duration if args.duration is not None else es.get("duration_s", 1.0),
        "repetitions": args.repetitions if args.repetitions is not None else es.get("repetitions", 3),
        "percentiles": (parse_list(args.percentile, float) if args.percentile
                        else es.get("percentiles", [90.0, 99.0])),
    }, engine


def onnx_export(torch, module, example, path, **kwargs):
    """torch.onnx.export through the TorchScript exporter, opset 13 (what cnnengine's ONNX importer
    and every ONNX Runtime read). torch >= 2.9 exports through dynamo (and onnxscript) by default;
    the TorchScript exporter, the only one torch 1.13 has, needs no extra package, so it is asked
    for where the choice exists, and dynamo is the fallback where it is gone."""
    import inspect
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        try:
            torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=13, **kwargs)
            return
        except Exception as e:  # a torch without the TorchScript exporter
            print(f"torch.onnx.export(dynamo=False) failed ({e}); trying dynamo=True", file=sys.stderr)
            torch.onnx.export(module, (example,), str(path), dynamo=True, **kwargs)
            return
    torch.onnx.export(module, (example,), str(path), opset_version=13, **kwargs)


# --------------------------------------------------------------------------------------------------
# One case's measurement

def measure(n, s, sample_keys, iterate):
    """Warms up for s["warmup_ms"] (at least two iterations), then runs s["repetitions"] repetitions
    of at least s["duration_s"] seconds and s["iterations"] iterations each (a repetition also ends
    after 4x the duration with two iterations, or at two million). `iterate(samples)` runs one
    iteration of a batch of `n` images and appends its milliseconds to samples[key] for each of
    `sample_keys` ("latency" among them).

    Returns the result's common fields: throughput from the median latency, the wall-clock rate,
    the spread over repetitions, the latency and enqueue statistics, each repetition, and
    "samples" (every sample, by key, for the caller's own statistics; not part of the report)."""
    scratch = {k: [] for k in sample_keys}
    w0 = time.perf_counter()
    i = 0
    while i < 2 or (time.perf_counter() - w0) * 1e3 < s["warmup_ms"]:
        iterate(scratch)
        i += 1
    reps, all_samples = [], {k: [] for k in sample_keys}
    for _ in range(s["repetitions"]):
        samples = {k: [] for k in sample_keys}
        t0 = time.perf_counter()
        iterations = 0
        while True:
            iterate(samples)
            iterations += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= s["duration_s"] and (iterations >= s["iterations"] or
                                               (elapsed >= 4 * s["duration_s"] and iterations >= 2)):
                break
            if iterations >= 2_000_000:
                break
        lat = stats(samples["latency"], s["percentiles"])
        reps.append({"iterations": iterations, "seconds": elapsed,
                     "images_per_s": n / (lat["median"] * 1e-3),
                     "wall_images_per_s": n * iterations / elapsed, "latency_ms": lat})
        for k in samples:
            all_samples[k] += samples[k]
    rates = [r["images_per_s"] for r in reps]
    mean = statistics.fmean(rates)
    sd = statistics.stdev(rates) if len(rates) > 1 else 0.0
    latency = stats(all_samples["latency"], s["percentiles"])
    return {
        "images_per_s": n / (latency["median"] * 1e-3),
        "wall_images_per_s": sum(n * r["iterations"] for r in reps) / sum(r["seconds"] for r in reps),
        "images_per_s_mean": mean, "images_per_s_sd": sd, "spread_pct": 100 * sd / mean if mean else 0.0,
        "latency_ms": latency, "enqueue_ms": stats(all_samples["enqueue"], s["percentiles"]),
        "repetitions": reps, "samples": all_samples,
    }


def summary_line(label, result):
    return (f"{label}: {si(result['images_per_s'])} images/s, median {result['latency_ms']['median']:.4f} ms "
            f"(±{result['spread_pct']:.1f}% over {len(result['repetitions'])} repetitions)")


def print_table(title, header, table, out=sys.stdout):
    """A left-aligned first column, the rest right-aligned, under '== title =='."""
    table = [header] + table
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    print(f"\n== {title} ==", file=out)
    for row in table:
        print("  " + "  ".join(cell.rjust(w) if c > 0 else cell.ljust(w)
                               for c, (cell, w) in enumerate(zip(row, widths))), file=out)
