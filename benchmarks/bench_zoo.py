#!/usr/bin/env python3
"""Every model of the zoo (benchmarks/zoo/build_zoo.py) on both GPU backends and PyTorch, in one call.

For each model of ZOO/zoo.json:
- engine: `engine bench MODEL --backend custom,cudnn --cuda-graph --no-data-transfers` (compute
  scope: uint8 pixels on the device in, probabilities out) for each precision: fp32, fp16 and int8
  (int8 on a model calibrated first with `engine calibrate` on its test images; a CIFAR-shaped
  model is calibrated through its float32-input variant, since the engine command reads no
  3-channel uint8 file). Of the engine's two modes (plain launches, CUDA graph) the faster counts.
- PyTorch: the zoo's own nn.Module (benchmarks/zoo/models.py) with the weights of torch.pt, its
  preprocessing as the model file states it, measured by bench_torch.py's machinery (compute scope,
  CUDA events): eager fp32, CUDA graph fp32 (TF32 off, as the engine's fp32), CUDA graph fp16
  channels_last.
An engine or PyTorch failure on one model is reported (FAILED, with the engine's message) and the
run goes on. Writes OUT/zoo-gpu.json (every result), OUT/zoo-gpu.md (the table with ratios, the
command, machine and commit) and OUT/zoo-gpu.png.

  python3 benchmarks/bench_zoo.py --zoo zoo --engine build/engine --out docs/figures/zoo [--quick]
  python3 benchmarks/bench_zoo.py --zoo zoo --device cpu --out /tmp/zoo-dry --models mlp-128   # dry run
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "zoo"))
import models as zoo_models  # noqa: E402
from bench_torch import Split, run_cases, typed  # noqa: E402
from peer_bench import git_commit, parse_list, si, write_json  # noqa: E402

FULL = {"batches": [1, 1024, 65536], "precisions": ["fp32", "fp16", "int8"]}
QUICK = {"batches": [1, 1024], "precisions": ["fp32", "fp16"]}
# Short cases: ten models, three precisions, three batches and six PyTorch cases each fit in about
# five minutes of a GPU; the engine's and PyTorch's settings are the same.
SETTINGS = {"warmup_ms": 50.0, "iterations": 3, "duration_s": 0.1, "repetitions": 2, "percentiles": [90.0]}
DRY_RUN = {"batches": [1, 8], "precisions": ["fp32"]}
TORCH_CONFIGS = {"cuda": [("fp32", "eager"), ("fp32", "graph"), ("fp16", "graph")], "cpu": [("fp32", "eager")]}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def zoo_entries(zoo: pathlib.Path, names):
    manifest = json.loads((zoo / "zoo.json").read_text())
    picked = names or list(manifest)
    missing = [n for n in picked if n not in manifest]
    if missing:
        raise SystemExit(f"error: {missing} not in {zoo / 'zoo.json'} (it has {', '.join(manifest)})")
    return {n: manifest[n] for n in picked}


# --------------------------------------------------------------------------------------------------
# The engine

def run_engine(cmd, what):
    """Runs an engine command; returns None, or the failure's one-paragraph reason."""
    try:
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{what}: {e}"
    if proc.returncode != 0:
        return f"{what}: exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-600:]}"
    return None


def calibrated(engine, zoo, name, info, work: pathlib.Path, mnist=None):
    """The model calibrated for int8 (path), or raises RuntimeError with the reason. An MNIST model
    is calibrated on the training images where they lie beside its test set (in `mnist` when
    given), else on the test set."""
    out = work / f"{name}-int8.json"
    model = zoo / name / "model.json"
    if info["dataset"] == "mnist":
        test = pathlib.Path(info["test_images"])
        test = pathlib.Path(mnist) / test.name if mnist else test
        train = test.with_name(test.name.replace("t10k-", "train-"))
        err = run_engine([engine, "-q", "calibrate", model, train if train.is_file() else test, "-o", out,
                          "--images", "1000"], f"engine calibrate {name}")
        if err:
            raise RuntimeError(err)
        return out
    floats = work / f"{name}-float-int8.json"
    folder = zoo / name
    err = run_engine([engine, "-q", "calibrate", folder / "model-float.json", folder / info["test_images_float"],
                      "-o", floats, "--images", "1000"], f"engine calibrate {name} (float32 variant)")
    if err:
        raise RuntimeError(err)
    graph = json.loads(floats.read_text())
    graph["input"] = json.loads(model.read_text())["input"]  # the same ranges; the uint8 input
    out.write_text(json.dumps(graph, indent=1) + "\n")
    return out


def engine_results(engine, model, backends, precision, batches, device, work):
    """`engine bench` of one model and precision: (results, failure or None)."""
    out = work / f"bench-{model.stem}-{precision}.json"
    cmd = [engine, "-q", "bench", model, "--backend", ",".join(backends), "--precision", precision,
           "--batch", ",".join(map(str, batches)), "--no-data-transfers", "--json", out,
           "--warmup", SETTINGS["warmup_ms"], "--iterations", SETTINGS["iterations"],
           "--duration", SETTINGS["duration_s"], "--repetitions", SETTINGS["repetitions"]]
    if device == "cuda":
        cmd.append("--cuda-graph")
    else:
        cmd += ["--max-cpu-batch", max(batches)]
    err = run_engine(cmd, f"engine bench {model.name} --precision {precision}")
    if err:
        return [], err
    doc = json.loads(out.read_text())
    rows = [dict(r, precision=precision) for r in doc.get("results", []) if r.get("scope") == "compute"]
    for sk in doc.get("skipped", []):
        log(f"  engine {precision}: skipped {sk}")
    return rows, None


# --------------------------------------------------------------------------------------------------
# PyTorch

def torch_results(torch, name, zoo, device, batches):
    from cnnengine import model_format as mf
    graph_model = mf.read_model(zoo / name / "model.json")
    nets = {}
    for dtype in {d for d, _ in TORCH_CONFIGS[device.type]}:
        module = zoo_models.load(name, zoo / name / "torch.pt").to(device)
        pre = mf.to_torch(graph_model).preprocess.to(device)  # the file's preprocessing, float32
        nets[dtype] = Split(pre, typed(torch, module, pre, dtype))
    s = dict(SETTINGS, batches=batches)
    results, skipped = run_cases(torch, nets, graph_model.graph["input"], device, TORCH_CONFIGS[device.type],
                                 ["compute"], s, None, log)
    return results, skipped


# --------------------------------------------------------------------------------------------------
# The table

def best(rows, **match):
    vals = [r["images_per_s"] for r in rows if all(r.get(k) == v for k, v in match.items())]
    return max(vals) if vals else None


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def table(doc):
    """Markdown: per model and batch, images/s and the ratios to PyTorch's CUDA graph."""
    gpu = doc["device"] == "cuda"
    be = doc["backends"]
    head = ["model", "batch"] + [f"{b} fp32" for b in be] + ["PyTorch eager", "PyTorch graph"]
    head += [f"{b}/PyTorch {'graph' if gpu else 'eager'}" for b in be]
    if gpu:
        head += [f"{b} fp16" for b in be] + ["PyTorch fp16 graph CL", "best fp16/PyTorch fp16"]
        head += [f"{b} int8" for b in be]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in doc["models"].items():
        for n in doc["batches"]:
            e, t = m["engine"], m["pytorch"]
            fp32 = [best(e, backend=b, precision="fp32", batch=n) for b in be]
            eager = best(t, dtype="fp32", mode="eager", batch=n)
            graph = best(t, dtype="fp32", mode="graph", batch=n)
            cells = [name, str(n)] + [si(v) if v else "-" for v in fp32]
            cells += [si(eager) if eager else "-", si(graph) if graph else "-"]
            cells += [ratio(v, graph or eager) for v in fp32]
            if gpu:
                fp16 = [best(e, backend=b, precision="fp16", batch=n) for b in be]
                t16 = best(t, dtype="fp16", mode="graph", batch=n)
                best16 = max([v for v in fp16 if v] or [0])
                cells += [si(v) if v else "-" for v in fp16] + [si(t16) if t16 else "-", ratio(best16, t16)]
                cells += [si(v) if v else "-" for v in (best(e, backend=b, precision="int8", batch=n) for b in be)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from plot_bench import grouped_bars
    names = list(doc["models"])
    series = [f"{b} {p}" for p in ("fp32", "fp16", "int8") for b in doc["backends"]
              if any(r["precision"] == p for m in doc["models"].values() for r in m["engine"])]
    series += [f"pytorch {d} {mode}" for d, mode in TORCH_CONFIGS[doc["device"]]]

    def value(name, label, n):
        m = doc["models"][name]
        parts = label.split()
        if parts[0] == "pytorch":
            return best(m["pytorch"], dtype=parts[1], mode=parts[2], batch=n)
        return best(m["engine"], backend=parts[0], precision=parts[1], batch=n)
    fig, axes = plt.subplots(len(doc["batches"]), 1, figsize=(max(10, 1.3 * len(names)), 4.2 * len(doc["batches"])),
                             squeeze=False)
    for ax, n in zip(axes[:, 0], doc["batches"]):
        grouped_bars(ax, names, series, lambda g, s, n=n: value(g, s, n),
                     f"zoo, batch {n}, compute scope, on {doc['device_name']} (commit {doc['git_commit']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


# --------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", default=str(HERE.parent / "zoo"), help="the built zoo (default: zoo/)")
    ap.add_argument("--engine", default=str(HERE.parent / "build" / "engine"), help="engine binary")
    ap.add_argument("--out", required=True, help="folder for zoo-gpu.json, zoo-gpu.md, zoo-gpu.png")
    ap.add_argument("--models", help="comma-separated zoo names (default: every model of zoo.json)")
    ap.add_argument("--quick", action="store_true", help="batches 1 and 1024, fp32 and fp16 only")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a dry run of the whole pipeline (engine cpu backend, PyTorch eager on the CPU, "
                         "batches 1 and 8)")
    ap.add_argument("--batch", help="batch sizes, comma-separated (overrides the mode's)")
    ap.add_argument("--precisions", help="engine precisions, comma-separated (overrides the mode's)")
    ap.add_argument("--mnist", help="folder of the MNIST files, for int8 calibration (default: where zoo.json says)")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds: start no model after this much time (the rest are reported as not run)")
    args = ap.parse_args(argv)
    if not args.time_budget >= 0:  # NaN too
        ap.error(f"--time-budget must be 0 (no limit) or more seconds, got {args.time_budget:g}")

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: PyTorch sees no GPU; --device cpu runs the dry run")
    plan = DRY_RUN if args.device == "cpu" else QUICK if args.quick else FULL
    batches = parse_list(args.batch, int) if args.batch else plan["batches"]
    precisions = parse_list(args.precisions, str) if args.precisions else plan["precisions"]
    backends = ["custom", "cudnn"] if args.device == "cuda" else ["cpu"]
    torch.backends.cudnn.allow_tf32 = False  # fp32 on both sides
    torch.backends.cuda.matmul.allow_tf32 = False
    zoo = pathlib.Path(args.zoo)
    entries = zoo_entries(zoo, parse_list(args.models, str) if args.models else None)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    device_name = torch.cuda.get_device_name(device) if args.device == "cuda" else platform.processor() or "CPU"

    doc = {"schema": "cnn-engine-zoo-bench/1", "tool": "benchmarks/bench_zoo.py",
           "command": " ".join(["python3"] + [pathlib.Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
           "git_commit": git_commit(),
           "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "device": args.device, "device_name": device_name, "torch": torch.__version__,
           "backends": backends, "batches": batches, "precisions": precisions, "settings": SETTINGS,
           "models": {}, "failures": []}
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for name, info in entries.items():
            t0 = time.time()
            if args.time_budget and t0 - started > args.time_budget:
                doc["failures"].append({"model": name, "what": "all", "reason": f"not run: past --time-budget {args.time_budget:g} s"})
                log(f"{name}: not run (past --time-budget)")
                continue
            m = doc["models"][name] = {"engine": [], "pytorch": [], "skipped": []}
            for precision in precisions:
                model = zoo / name / "model.json"
                if precision == "int8":
                    try:
                        model = calibrated(args.engine, zoo, name, info, work, args.mnist)
                    except RuntimeError as e:
                        doc["failures"].append({"model": name, "what": "int8 calibration", "reason": str(e)})
                        log(f"{name} int8: FAILED: {e}")
                        continue
                rows, err = engine_results(args.engine, model, backends, precision, batches, args.device, work)
                m["engine"] += rows
                if err:
                    doc["failures"].append({"model": name, "what": f"engine {precision}", "reason": err})
                    log(f"{name} engine {precision}: FAILED: {err}")
            try:
                m["pytorch"], m["skipped"] = torch_results(torch, name, zoo, device, batches)
            except Exception as e:  # a model PyTorch cannot load or run: reported, the others go on
                doc["failures"].append({"model": name, "what": "pytorch", "reason": f"{type(e).__name__}: {e}"})
                log(f"{name} pytorch: FAILED: {type(e).__name__}: {e}")
            log(f"{name}: {time.time() - t0:.1f} s")
    doc["seconds"] = time.time() - started
    md = table(doc)
    head = (f"Zoo on {device_name}, compute scope (uint8 on the device in, probabilities out), images/s "
            f"(batch / median latency); engine: the faster of plain launches and CUDA graph. "
            f"Commit {doc['git_commit']}, PyTorch {torch.__version__}, {doc['timestamp']}.\n\n"
            f"    {doc['command']}\n\n")
    fails = "".join(f"\n- FAILED {f['model']} {f['what']}: {f['reason'].splitlines()[0]}" for f in doc["failures"])
    (out / "zoo-gpu.md").write_text(head + md + "\n" + (fails + "\n" if fails else ""))
    print(head + md + fails)
    write_json(str(out / "zoo-gpu.json"), doc, log)
    try:
        plot(doc, out / "zoo-gpu.png")
    except ImportError as e:
        log(f"no plot ({e})")
    log(f"{len(entries)} models in {doc['seconds']:.0f} s; {len(doc['failures'])} failures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
