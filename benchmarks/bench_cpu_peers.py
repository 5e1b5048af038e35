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

With --zoo DIR instead of MODEL: every model of the zoo (benchmarks/zoo/build_zoo.py), the engine
on its model.json, ONNX Runtime on its own ONNX export (model.onnx) and PyTorch on its own module
(models.py with torch.pt's weights), these two on the input preprocessed beforehand; 1 thread and
all cores by default, one round of short points (0.2 s, at least two calls); one table with a row
per model, thread count and batch, and a plot of every (threads, batch) panel.

  python3 benchmarks/bench_cpu_peers.py models/lenet5.json --engine build/engine --threads 1,2 \\
      --batch 1,64,1024 --json docs/figures/cpu/peers.json --plot docs/figures/cpu/peers.png
  python3 benchmarks/bench_cpu_peers.py --zoo zoo --json zoo-cpu.json --plot zoo-cpu.png
"""
from __future__ import annotations

import argparse
import datetime
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
from peer_bench import onnx_export

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


def time_calls(fn, batch: int, duration: float, warmup: float, min_calls: int = 5) -> dict:
    """Calls fn() for `warmup` seconds, then for at least `duration` seconds (and `min_calls` calls)."""
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        fn()
    samples = []
    start = time.perf_counter()
    while time.perf_counter() - start < duration or len(samples) < min_calls:
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
    onnx_export(torch, module, torch.zeros(shape, dtype=dtype), path, input_names=["x"], output_names=["y"],
                dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})


def raw_input(spec: dict, batch: int, rng) -> np.ndarray:
    if spec["dtype"] == "uint8":
        return rng.integers(0, 256, size=(batch,) + tuple(spec["shape"]), dtype=np.uint8)
    return rng.standard_normal(size=(batch,) + tuple(spec["shape"])).astype(np.float32)


def engine_point(engine: str, model: str, backend: str, threads: int, batch: int, duration: float,
                 iterations: int = 10) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        cmd = [engine, "-q", "bench", model, "--backend", backend, "--threads", str(threads), "--batch", str(batch),
               "--duration", str(duration), "--repetitions", "1", "--warmup", "200", "--no-data-transfers",
               "--iterations", str(iterations),
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


def ort_sessions(onnx_path, threads_list: list) -> dict:
    """One ONNX Runtime session per thread count: intra-op threads T, sequential, all optimisations."""
    import onnxruntime as ort
    sessions = {}
    for t in threads_list:
        so = ort.SessionOptions()
        so.intra_op_num_threads = t
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions[t] = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    return sessions


def torch_point(torch, module, x, threads: int, batch: int, duration: float, warmup: float, min_calls: int) -> dict:
    torch.set_num_threads(threads)
    xt = torch.from_numpy(x)

    def call():
        with torch.inference_mode():
            module(xt)
    return time_calls(call, batch, duration, warmup, min_calls)


def measure_rounds(points: dict, threads_list: list, batches: list, rounds: int, label: str = "") -> dict:
    """For every round, thread count and batch, each implementation back to back:
    points[name](threads, batch) -> a result with images_per_s. Returns {"name|T|N": [results]}."""
    raw: dict[str, list] = {}
    for rnd in range(rounds):
        for t in threads_list:
            for b in batches:
                for name, point in points.items():
                    raw.setdefault(f"{name}|{t}|{b}", []).append(point(t, b))
                line = "  ".join(f"{k.split('|')[0]} {v[-1]['images_per_s']:,.0f}" for k, v in raw.items()
                                 if k.endswith(f"|{t}|{b}"))
                print(f"{label}round {rnd + 1} threads {t} batch {b}: {line} images/s", file=sys.stderr, flush=True)
    return raw


def agree(got, ref, what: str) -> None:
    err = float(np.abs(got - ref).max())
    if err > 1e-4:
        raise SystemExit(f"{what} disagree by {err:.3g} on the same model")


def add_args(ap) -> None:
    ap.add_argument("model", nargs="?", help="engine model (format v1 .json); or --zoo")
    ap.add_argument("--zoo", help="every model of this zoo (benchmarks/zoo/build_zoo.py) instead of MODEL")
    ap.add_argument("--models", help="with --zoo: these models only, comma-separated")
    ap.add_argument("--engine", default=str(REPO / "build" / "engine"), help="engine binary (default build/engine)")
    ap.add_argument("--engine-backends", default="cpu", help="engine backends, comma-separated (e.g. cpu,reference)")
    ap.add_argument("--threads", help="thread counts, comma-separated (default 1,2; with --zoo 1 and all cores)")
    ap.add_argument("--batch", default="1,64,1024", help="batch sizes, comma-separated")
    ap.add_argument("--duration", type=float, help="seconds per point (at least; default 1, with --zoo 0.2)")
    ap.add_argument("--warmup", type=float,
                    help="seconds of warm-up per ORT/PyTorch point (default 0.3, with --zoo 0.1)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds; the median is reported (default 3, with --zoo 1)")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    ap.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    ap.add_argument("--json", help="write every measurement and the ratios here")
    ap.add_argument("--plot", help="write a PNG (matplotlib) here")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_args(ap)
    args = ap.parse_args(argv)
    if bool(args.model) == bool(args.zoo):
        ap.error("give MODEL or --zoo DIR (one of them)")
    zoo = args.zoo is not None
    args.threads = args.threads or (f"1,{os.cpu_count()}" if zoo else "1,2")
    args.duration = args.duration if args.duration is not None else (0.2 if zoo else 1.0)
    args.rounds = args.rounds if args.rounds is not None else (1 if zoo else 3)
    args.warmup = args.warmup if args.warmup is not None else (0.1 if zoo else 0.3)
    threads_list, batches = sorted(set(parse_list(args.threads))), parse_list(args.batch)
    if min(threads_list) < 1 or min(batches) < 1:
        raise SystemExit("--threads and --batch values must be at least 1")
    return run_zoo(args, threads_list, batches) if zoo else run_model(args, threads_list, batches)


def run_model(args, threads_list: list, batches: list) -> int:
    import torch
    backends = [b for b in args.engine_backends.split(",") if b]
    model = mf.read_model(args.model)
    spec = dict(model.graph["input"])  # "shape" is the raw input's (before preprocessing padding)
    module = mf.to_torch(model).eval()
    rng = np.random.default_rng(0)
    inputs = {b: raw_input(spec, b, rng) for b in batches}

    points = {f"engine-{be}": (lambda t, b, be=be: engine_point(args.engine, args.model, be, t, b, args.duration))
              for be in backends}
    tmpdir = tempfile.TemporaryDirectory()
    if not args.no_ort:
        onnx_path = pathlib.Path(tmpdir.name) / "model.onnx"
        export_onnx(module, spec, onnx_path)
        sessions = ort_sessions(onnx_path, threads_list)
        points["onnxruntime"] = lambda t, b: time_calls(lambda: sessions[t].run(None, {"x": inputs[b]}), b,
                                                        args.duration, args.warmup)
    if not args.no_torch:
        points["pytorch"] = lambda t, b: torch_point(torch, module, inputs[b], t, b, args.duration, args.warmup, 5)
    # The three agree on the answers before anything is timed.
    x = inputs[max(batches)][:64]
    with torch.inference_mode():
        ref = module(torch.from_numpy(x)).numpy()
    if not args.no_ort:
        agree(sessions[threads_list[0]].run(None, {"x": x})[0], ref, "ONNX Runtime and PyTorch")

    load_before = loadavg()
    started = time.time()
    raw = measure_rounds(points, threads_list, batches, args.rounds)
    load_after = loadavg()
    tables = {stat: tables_of(raw, stat, threads_list, batches, backends) for stat in ("median", "best")}
    for stat in ("median", "best"):
        print(f"\n{stat} call, images/s (median over {args.rounds} rounds) and ratios:\n")
        print_table(tables[stat])
    print(f"\nload average before {load_before}, after {load_after}; {time.time() - started:.0f} s")
    doc = report(args, torch, threads_list, batches, backends, load_before, load_after)
    doc.update({"model": str(args.model), "raw": raw, "median": tables["median"], "best": tables["best"]})
    write_outputs(args, doc, lambda path: plot(doc, tables["median"]["impls"], path))
    return 0


def run_zoo(args, threads_list: list, batches: list) -> int:
    """Every zoo model: the engine on its model.json (uint8 in, preprocessing included), ONNX Runtime
    on its model.onnx and PyTorch on its own module with torch.pt's weights (both on the float input,
    preprocessed beforehand)."""
    import torch
    sys.path.insert(0, str(REPO / "benchmarks" / "zoo"))
    import models as zoo_models
    from build_zoo import preprocess
    zoo = pathlib.Path(args.zoo)
    manifest = json.loads((zoo / "zoo.json").read_text())
    names = parse_list(args.models, str) if args.models else list(manifest)
    unknown = [n for n in names if n not in manifest]
    if unknown:
        raise SystemExit(f"{unknown} not in {zoo / 'zoo.json'} (it has {', '.join(manifest)})")
    backends = [b for b in args.engine_backends.split(",") if b]
    load_before = loadavg()
    started = time.time()
    per_model = {}
    for name in names:
        folder = zoo / name
        spec = mf.read_model(folder / "model.json").graph["input"]
        rng = np.random.default_rng(0)
        inputs = {b: raw_input(spec, b, rng) for b in batches}
        floats = {b: preprocess(inputs[b], manifest[name]["preprocess"]).numpy() for b in batches}
        module = zoo_models.load(name, folder / "torch.pt")
        points = {f"engine-{be}": (lambda t, b, be=be: engine_point(args.engine, str(folder / "model.json"), be, t, b,
                                                                    args.duration, iterations=2))
                  for be in backends}
        if not args.no_ort:
            sessions = ort_sessions(folder / "model.onnx", threads_list)
            feed_name = sessions[threads_list[0]].get_inputs()[0].name
            points["onnxruntime"] = (lambda t, b, s=sessions, f=feed_name, x=floats: time_calls(
                lambda: s[t].run(None, {f: x[b]}), b, args.duration, args.warmup, 2))
            with torch.inference_mode():
                ref = module(torch.from_numpy(floats[max(batches)][:64])).numpy()
            agree(sessions[threads_list[0]].run(None, {feed_name: floats[max(batches)][:64]})[0], ref,
                  f"{name}: ONNX Runtime and PyTorch")
        if not args.no_torch:
            points["pytorch"] = (lambda t, b, m=module, x=floats: torch_point(torch, m, x[b], t, b, args.duration,
                                                                              args.warmup, 2))
        raw = measure_rounds(points, threads_list, batches, args.rounds, label=f"{name}: ")
        per_model[name] = {"raw": raw, **{stat: tables_of(raw, stat, threads_list, batches, backends)
                                          for stat in ("median", "best")}}
    load_after = loadavg()
    for stat in ("median", "best"):
        print(f"\n{stat} call, images/s (median over {args.rounds} rounds) and ratios:\n")
        print_zoo_table(per_model, stat)
    print(f"\nload average before {load_before}, after {load_after}; {time.time() - started:.0f} s")
    doc = report(args, torch, threads_list, batches, backends, load_before, load_after)
    doc.update({"zoo": str(zoo), "models": per_model})
    write_outputs(args, doc, lambda path: plot_zoo(doc, path))
    return 0


def tables_of(raw: dict, stat: str, threads_list: list, batches: list, backends: list) -> dict:
    """Two statistics: the median call (what a user sees on this machine as loaded as it was) and
    the fastest call (closest to the code's speed on free cores: neighbours only ever slow a call)."""
    key = "images_per_s" if stat == "median" else "best_images_per_s"
    med = {k: statistics.median(r[key] for r in v) for k, v in raw.items()}
    return summarise(med, threads_list, batches, backends)


def report(args, torch, threads_list, batches, backends, load_before, load_after) -> dict:
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    return {
        "schema": "cnn-engine-cpu-peers/1",
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "host": {"cpu": cpu_name(), "logical_cpus": os.cpu_count(), "loadavg_before": load_before,
                 "loadavg_after": load_after, "python": platform.python_version()},
        "versions": {"torch": torch.__version__, "onnxruntime": getattr(ort, "__version__", None),
                     "numpy": np.__version__},
        "settings": {"threads": threads_list, "batches": batches, "duration_s": args.duration,
                     "rounds": args.rounds, "engine_backends": backends},
    }


def write_outputs(args, doc: dict, draw_png) -> None:
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        try:
            pathlib.Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
            draw_png(args.plot)
        except ImportError as e:  # the JSON is written; a machine without matplotlib skips the PNG
            print(f"no plot ({e}); the numbers are in {args.json or 'the table above'}", file=sys.stderr)


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


def print_zoo_table(per_model: dict, stat: str) -> None:
    """One markdown table: a row per model, thread count and batch."""
    impls = next(iter(per_model.values()))[stat]["impls"]
    rows = [(name, row) for name, m in per_model.items() for row in m[stat]["rows"]]
    ratio_keys = [k for k in rows[0][1] if "/" in k]
    head = ["model", "threads", "batch"] + impls + ratio_keys
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, row in rows:
        cells = [name, str(row["threads"]), str(row["batch"])]
        for k in impls + ratio_keys:
            v = row.get(k)
            cells.append("-" if v is None else (f"{v:.2f}x" if "/" in k else f"{v:,.0f}"))
        print("| " + " | ".join(cells) + " |")


def plot_zoo(doc: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sys.path.insert(0, str(REPO / "benchmarks"))
    from plot_bench import grouped_bars
    names = list(doc["models"])
    impls = doc["models"][names[0]]["median"]["impls"]
    threads, batches = doc["settings"]["threads"], doc["settings"]["batches"]
    fig, axes = plt.subplots(len(threads), len(batches), squeeze=False,
                             figsize=(max(12, 0.7 * len(names) * len(batches)), 4.2 * len(threads)))
    for i, t in enumerate(threads):
        for j, b in enumerate(batches):
            grouped_bars(axes[i][j], names, impls, lambda n, impl, t=t, b=b: doc["models"][n]["median"]["images_per_s"]
                         .get(f"{impl}|{t}|{b}"), f"{t} thread(s), batch {b}, median call, on {doc['host']['cpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
