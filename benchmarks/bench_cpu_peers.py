#!/usr/bin/env python3
"""The engine's CPU backends next to ONNX Runtime and PyTorch on the CPU, same model, threads and
batches, in one run (docs/performance.md, "CPU peers").

For every round, thread count and batch, in that order, each implementation is measured back to
back (engine, ONNX Runtime, PyTorch), so a machine whose load changes during the run slows all of
them alike and the ratios stay fair; the reported figure is the median over rounds.

- engine: `engine bench MODEL --backend B --threads T --batch N --no-data-transfers` (compute scope:
  uint8 pixels in, probabilities out, preprocessing included), its images/s.
- ONNX Runtime: the model rebuilt by the reference interpreter (cnnengine.model_format.to_torch) with the
  preprocessing inside, exported with torch.onnx.export (uint8 input, dynamic batch), run with
  intra_op_num_threads=T, inter_op_num_threads=1, sequential execution, all graph optimisations.
- PyTorch: the same module, torch.set_num_threads(T), inference_mode.
Each point: a warm-up, then calls for at least --duration seconds; images/s = batch / median call.

Needs python3 with numpy, torch and onnxruntime (safetensors is used when present; a small reader
of the format's F32 tensors stands in otherwise). matplotlib only for --plot.

  python3 benchmarks/bench_cpu_peers.py models/lenet5.json --engine build/engine --threads 1,2 \\
      --batch 1,64,1024 --json docs/figures/cpu/peers.json --plot docs/figures/cpu/peers.png
"""
from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from cnnengine import model_format as mf

REPO = pathlib.Path(__file__).resolve().parent.parent


def _load_weights_without_safetensors(blob: bytes, where: str = "weights") -> dict:
    """The safetensors layout (8-byte little-endian header size, JSON header, raw data) for F32
    tensors: enough for the committed models when the package is not installed."""
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise mf.ModelFormatError(f"{where}: tensor {name} is {t['dtype']}; install safetensors")
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).copy()
    return out


try:
    import safetensors  # noqa: F401
except ImportError:
    mf.load_weights = _load_weights_without_safetensors


def parse_list(text: str, kind=int) -> list:
    return [kind(v) for v in text.split(",") if v.strip()]


def loadavg() -> list[float]:
    try:
        return [float(v) for v in pathlib.Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def cpu_name() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_calls(fn, batch: int, duration: float, warmup: float) -> dict:
    """Calls fn() for `warmup` seconds, then for at least `duration` seconds (and 5 calls)."""
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        fn()
    samples = []
    start = time.perf_counter()
    while time.perf_counter() - start < duration or len(samples) < 5:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    med = statistics.median(samples)
    return {"images_per_s": batch / med, "median_ms": med * 1e3, "best_images_per_s": batch / min(samples),
            "calls": len(samples)}


def export_onnx(module, spec: dict, path: pathlib.Path) -> None:
    import torch
    shape = (2,) + tuple(spec["shape"])
    dtype = torch.uint8 if spec["dtype"] == "uint8" else torch.float32
    example = torch.zeros(shape, dtype=dtype)
    kwargs = dict(input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    # torch >= 2.9 exports through dynamo (and onnxscript) by default; the TorchScript exporter,
    # the only one torch 1.13 has, needs no extra package, so ask for it where the choice exists.
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        try:
            torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=13, **kwargs)
            return
        except Exception as e:  # a torch without the TorchScript exporter: try dynamo
            print(f"torch.onnx.export(dynamo=False) failed ({e}); trying dynamo=True", file=sys.stderr)
            torch.onnx.export(module, (example,), str(path), dynamo=True, **kwargs)
            return
    torch.onnx.export(module, (example,), str(path), opset_version=13, **kwargs)


def raw_input(spec: dict, batch: int, rng) -> np.ndarray:
    if spec["dtype"] == "uint8":
        return rng.integers(0, 256, size=(batch,) + tuple(spec["shape"]), dtype=np.uint8)
    return rng.standard_normal(size=(batch,) + tuple(spec["shape"])).astype(np.float32)


def engine_point(engine: str, model: str, backend: str, threads: int, batch: int, duration: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        cmd = [engine, "-q", "bench", model, "--backend", backend, "--threads", str(threads), "--batch", str(batch),
               "--duration", str(duration), "--repetitions", "1", "--warmup", "200", "--no-data-transfers",
               "--max-cpu-batch", str(max(batch, 4096)), "--json", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        doc = json.loads(out.read_text())
    rows = [r for r in doc["results"] if r["backend"] == backend and r["scope"] == "compute" and r["mode"] == "plain"]
    if not rows:
        raise SystemExit(f"{' '.join(cmd)}: no compute result (skipped: {doc.get('skipped')})")
    lat = rows[0]["latency_ms"]
    return {"images_per_s": rows[0]["images_per_s"], "median_ms": lat["median"],
            "best_images_per_s": batch / lat["min"] * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="engine model (format v1 .json)")
    ap.add_argument("--engine", default=str(REPO / "build" / "engine"), help="engine binary (default build/engine)")
    ap.add_argument("--engine-backends", default="cpu", help="engine backends, comma-separated (e.g. cpu,reference)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--batch", default="1,64,1024", help="batch sizes, comma-separated")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per point (at least)")
    ap.add_argument("--warmup", type=float, default=0.3, help="seconds of warm-up per ORT/PyTorch point")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median is reported")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    ap.add_argument("--json", help="write every measurement and the ratios here")
    ap.add_argument("--plot", help="write a PNG (matplotlib) here")
    args = ap.parse_args(argv)

    import torch
    threads_list, batches = parse_list(args.threads), parse_list(args.batch)
    backends = [b for b in args.engine_backends.split(",") if b]
    if min(threads_list) < 1 or min(batches) < 1:
        raise SystemExit("--threads and --batch values must be at least 1")
    model = mf.read_model(args.model)
    spec = dict(model.graph["input"])  # "shape" is the raw input's (before preprocessing padding)
    module = mf.to_torch(model).eval()

    ort = None
    if not args.no_ort:
        import onnxruntime as ort
        tmpdir = tempfile.TemporaryDirectory()
        onnx_path = pathlib.Path(tmpdir.name) / "model.onnx"
        export_onnx(module, spec, onnx_path)
        sessions = {}
        for t in threads_list:
            so = ort.SessionOptions()
            so.intra_op_num_threads = t
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            sessions[t] = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])

    rng = np.random.default_rng(0)
    inputs = {b: raw_input(spec, b, rng) for b in batches}
    # The three agree on the answers before anything is timed.
    x = inputs[max(batches)][:64]
    with torch.inference_mode():
        ref = module(torch.from_numpy(x)).numpy()
    if ort is not None:
        got = sessions[threads_list[0]].run(None, {"x": x})[0]
        err = float(np.abs(got - ref).max())
        if err > 1e-4:
            raise SystemExit(f"ONNX Runtime and PyTorch disagree by {err:.3g} on the same model")

    load_before = loadavg()
    raw: dict[str, list] = {}
    started = time.time()
    for rnd in range(args.rounds):
        for t in threads_list:
            for b in batches:
                for be in backends:
                    r = engine_point(args.engine, args.model, be, t, b, args.duration)
                    raw.setdefault(f"engine-{be}|{t}|{b}", []).append(r)
                if ort is not None:
                    s, feed = sessions[t], {"x": inputs[b]}
                    r = time_calls(lambda: s.run(None, feed), b, args.duration, args.warmup)
                    raw.setdefault(f"onnxruntime|{t}|{b}", []).append(r)
                if not args.no_torch:
                    torch.set_num_threads(t)
                    xt = torch.from_numpy(inputs[b])

                    def call():
                        with torch.inference_mode():
                            module(xt)
                    r = time_calls(call, b, args.duration, args.warmup)
                    raw.setdefault(f"pytorch|{t}|{b}", []).append(r)
                line = "  ".join(f"{k.split('|')[0]} {v[-1]['images_per_s']:,.0f}" for k, v in raw.items()
                                 if k.endswith(f"|{t}|{b}"))
                print(f"round {rnd + 1} threads {t} batch {b}: {line} images/s", file=sys.stderr, flush=True)
    load_after = loadavg()

    # Two statistics: the median call (what a user sees on this machine as loaded as it was) and
    # the fastest call (closest to the code's speed on free cores: neighbours only ever slow a call).
    tables = {}
    for stat, key in (("median", "images_per_s"), ("best", "best_images_per_s")):
        med = {k: statistics.median(r[key] for r in v) for k, v in raw.items()}
        tables[stat] = summarise(med, threads_list, batches, backends)
    impls = tables["median"]["impls"]
    for stat in ("median", "best"):
        print(f"\n{stat} call, images/s (median over {args.rounds} rounds) and ratios:\n")
        print_table(tables[stat])
    print(f"\nload average before {load_before}, after {load_after}; {time.time() - started:.0f} s")

    doc = {
        "schema": "cnn-engine-cpu-peers/1",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "model": str(args.model),
        "host": {"cpu": cpu_name(), "logical_cpus": os.cpu_count(), "loadavg_before": load_before,
                 "loadavg_after": load_after, "python": platform.python_version()},
        "versions": {"torch": torch.__version__, "onnxruntime": getattr(ort, "__version__", None),
                     "numpy": np.__version__},
        "settings": {"threads": threads_list, "batches": batches, "duration_s": args.duration,
                     "rounds": args.rounds, "engine_backends": backends},
        "raw": raw, "median": tables["median"], "best": tables["best"],
    }
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        try:
            plot(doc, impls, args.plot)
        except ImportError as e:  # the JSON is written; a machine without matplotlib skips the PNG
            print(f"no plot ({e}); the numbers are in {args.json or 'the table above'}", file=sys.stderr)
    return 0


def summarise(med: dict, threads_list: list, batches: list, backends: list) -> dict:
    impls = sorted({k.split("|")[0] for k in med}, key=lambda s: (not s.startswith("engine"), s))
    rows = []
    for t in threads_list:
        for b in batches:
            row = {"threads": t, "batch": b}
            for i in impls:
                row[i] = med.get(f"{i}|{t}|{b}")
            for be in backends:
                e = row.get(f"engine-{be}")
                if row.get("onnxruntime"):
                    row[f"engine-{be}/onnxruntime"] = e / row["onnxruntime"]
                if row.get("pytorch"):
                    row[f"engine-{be}/pytorch"] = e / row["pytorch"]
            rows.append(row)
    scaling = []
    if 1 in threads_list:
        for t in threads_list:
            if t == 1:
                continue
            for b in batches:
                sc = {"threads": t, "batch": b}
                for i in impls:
                    if med.get(f"{i}|1|{b}") and med.get(f"{i}|{t}|{b}"):
                        sc[i] = med[f"{i}|{t}|{b}"] / med[f"{i}|1|{b}"]
                scaling.append(sc)
    return {"impls": impls, "images_per_s": med, "rows": rows, "scaling": scaling}


def print_table(table: dict) -> None:
    rows, impls = table["rows"], table["impls"]
    head = ["threads", "batch"] + impls + [k for k in rows[0] if "/" in k]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        cells = [str(row["threads"]), str(row["batch"])]
        for k in head[2:]:
            v = row.get(k)
            cells.append("-" if v is None else (f"{v:.2f}x" if "/" in k else f"{v:,.0f}"))
        print("| " + " | ".join(cells) + " |")
    for sc in table["scaling"]:
        print(f"\nspeed-up {sc['threads']} threads vs 1, batch {sc['batch']}: " +
              ", ".join(f"{i} {sc[i]:.2f}x" for i in impls if i in sc))


def plot(doc: dict, impls: list[str], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(max(10, 2.6 * len(doc["median"]["rows"])), 4.4))
    for ax, stat in zip(axes, ("median", "best")):
        draw(ax, doc[stat]["rows"], impls, stat, doc)
    fig.tight_layout()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def draw(ax, rows: list, impls: list[str], stat: str, doc: dict) -> None:
    width = 0.8 / len(impls)
    colors = {"onnxruntime": "tab:purple", "pytorch": "tab:red"}
    for k, impl in enumerate(impls):
        vals = [r.get(impl) or 0 for r in rows]
        xs = [i + (k - (len(impls) - 1) / 2) * width for i in range(len(rows))]
        bars = ax.bar(xs, vals, width, label=impl, color=colors.get(impl, "tab:blue" if k == 0 else "tab:cyan"))
        for bar, v in zip(bars, vals):
            if v:
                ax.text(bar.get_x() + bar.get_width() / 2, v, f"{v / 1e3:.1f}k", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['threads']} thr\nbatch {r['batch']}" for r in rows])
    ax.set_ylabel(f"images/s ({stat} call; median of rounds)")
    ax.set_yscale("log")
    h = doc["host"]
    ax.set_title(f"{pathlib.Path(doc['model']).stem}, {stat} call, on {h['cpu']} "
                 f"(load avg {h['loadavg_before'][0]} / {h['loadavg_after'][0]})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")


if __name__ == "__main__":
    sys.exit(main())
