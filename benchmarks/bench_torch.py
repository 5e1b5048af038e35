#!/usr/bin/env python3
"""PyTorch side by side with `engine bench`: the same model file, the same cases, the same JSON.

Loads MODEL (format v1) into PyTorch through the reference interpreter (cnnengine.model_format.
to_torch), on the same GPU, and measures what `engine bench` measures, the same way:

  compute  the nodes on a preprocessed input already on the device;
  e2e      uint8 pixels from pinned host memory: upload, preprocessing + nodes, probabilities back
           to pinned host memory;

each in two modes: `eager` (PyTorch launches every op; the engine's `plain`) and `graph` (the
compute part captured once as a CUDA graph and replayed; the engine's `graph`). Times come from CUDA
events recorded between the parts, every iteration synchronised, after a warm-up, over repetitions
of at least --iterations and --duration. fp32 by default: TF32 is switched off for convolutions and
matrix products (PyTorch enables it for cuDNN convolutions by default) so both sides do the same
arithmetic. --dtype fp32,fp16,bf16 adds reduced-precision configurations as PyTorch users run them:
the module in half / bfloat16 and channels_last (NHWC: what cuDNN's tensor-core kernels read), the
preprocessing in float32 as the spec fixes it; results carry "dtype", and the ratios pair an engine
run of --precision P with PyTorch's P.

With --engine BENCH.json (the output of `engine bench --json`), the settings (batches, warm-up,
iterations, duration, repetitions, percentiles) default to that run's and the report ends with
engine / PyTorch ratios of images/s, also written into the JSON ("ratios").

  benchmarks/bench_torch.py models/lenet5.json --engine bench.json --json torch.json
  benchmarks/bench_torch.py models/lenet5.json --device cpu --batch 1,64,1024   # PyTorch on the CPU
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time

import numpy as np

from cnnengine import model_format as mf
from peer_bench import (SCHEMA, git_commit, measure, parse_list, print_table, settings, si, stats, summary_line,
                        write_json)

# --------------------------------------------------------------------------------------------------
# The module, split as the engine splits it

def nodes_forward(gm, x):
    """GraphModule.forward after its preprocessing: the graph's nodes on the preprocessed input."""
    values = {gm.input_name: x}
    frees = getattr(gm, "_free_after", None) or [[] for _ in gm.layers]
    for layer, name, ins, free in zip(gm.layers, gm.node_names, gm.node_inputs, frees):
        values[name] = layer(*[values[v] for v in ins])
        for v in free:
            del values[v]
    outs = tuple(values[o] for o in gm.output_names)
    return outs[0] if len(outs) == 1 else outs


def first(out):
    return out[0] if isinstance(out, tuple) else out


class Split:
    """A model as the engine splits it: `preprocess` (uint8 pixels -> the float input) and `nodes`
    (the float input -> outputs); calling it runs both. Any nn.Module fits as `nodes`."""

    def __init__(self, preprocess, nodes):
        self.preprocess, self.nodes = preprocess, nodes

    def __call__(self, x):
        return self.nodes(self.preprocess(x))


def graph_split(gm):
    """The reference interpreter's GraphModule (cnnengine.model_format.to_torch) as a Split."""
    return Split(gm.preprocess, lambda x: nodes_forward(gm, x))


def typed(torch, module, preprocess, dtype):
    """`module` for `dtype`: fp16 and bf16 run in that type and channels_last (NHWC: what cuDNN's
    tensor-core kernels read); `preprocess` (a cnnengine Preprocess) keeps float32 arithmetic, as
    the spec fixes it, and hands the nodes its result in their type."""
    if dtype == "fp32":
        return module
    module = module.to(dtype=torch.float16 if dtype == "fp16" else torch.bfloat16)
    module = module.to(memory_format=torch.channels_last)
    preprocess.to(dtype=torch.float16 if dtype == "fp16" else torch.bfloat16)
    for name in ("mean", "std"):
        if hasattr(preprocess, name):
            setattr(preprocess, name, getattr(preprocess, name).float())
    return module


class Timer:
    """Time points on the current stream (CUDA events) or a host clock (CPU)."""

    def __init__(self, torch, device, count=4):
        self.torch, self.cuda = torch, device.type == "cuda"
        if self.cuda:
            self.events = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        else:
            self.times = [0.0] * count

    def record(self, i):
        if self.cuda:
            self.events[i].record()
        else:
            self.times[i] = time.perf_counter()

    def ms(self, a, b):
        if self.cuda:
            self.events[b].synchronize()
            return self.events[a].elapsed_time(self.events[b])
        return (self.times[b] - self.times[a]) * 1e3


class Case:
    """One (batch, mode) of a Split model: static buffers, and the compute part eager or as a graph.
    `spec` is the format's input object (dtype, raw shape)."""

    def __init__(self, torch, gm, spec, device, n, mode, dtype="fp32"):
        self.torch, self.gm, self.device, self.n, self.mode, self.dtype = torch, gm, device, n, mode, dtype
        shape = (n,) + tuple(spec["shape"])
        gen = torch.Generator().manual_seed(1234)
        if spec["dtype"] == "uint8":
            host = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
        else:
            host = torch.rand(shape, dtype=torch.float32, generator=gen)
        cuda = device.type == "cuda"
        self.host_in = host.pin_memory() if cuda else host
        self.dev_in = self.host_in.to(device)
        with torch.inference_mode():
            self.pre = gm.preprocess(self.dev_in)      # the compute scope's input
            if dtype != "fp32":
                self.pre = self.pre.contiguous(memory_format=torch.channels_last)
            out = first(gm(self.dev_in))
        self.host_out = torch.empty(out.shape, dtype=out.dtype, pin_memory=cuda)
        self.graph_compute = self.graph_full = None
        if mode == "graph":
            self.graph_compute, self.out_compute = self._capture(lambda: first(gm.nodes(self.pre)))
            self.graph_full, self.out_full = self._capture(lambda: first(gm(self.dev_in)))

    def _capture(self, fn):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            out = fn()
        return graph, out

    def compute(self):
        if self.graph_compute is not None:
            self.graph_compute.replay()
            return self.out_compute
        return first(self.gm.nodes(self.pre))

    def full(self):
        if self.graph_full is not None:
            self.graph_full.replay()
            return self.out_full
        return first(self.gm(self.dev_in))

    def outputs_finite(self):
        with self.torch.inference_mode():
            out = self.full()
            self.host_out.copy_(out)
        return bool(self.torch.isfinite(self.host_out).all())


def one_iteration(case, scope, timer, samples):
    torch = case.torch
    h0 = time.perf_counter()
    with torch.inference_mode():
        if scope == "compute":
            timer.record(0)
            case.compute()
            timer.record(1)
            h1 = time.perf_counter()
            samples["latency"].append(timer.ms(0, 1))
        else:
            timer.record(0)
            case.dev_in.copy_(case.host_in, non_blocking=True)
            timer.record(1)
            out = case.full()
            timer.record(2)
            case.host_out.copy_(out, non_blocking=True)
            timer.record(3)
            h1 = time.perf_counter()
            samples["h2d"].append(timer.ms(0, 1))
            samples["compute"].append(timer.ms(1, 2))
            samples["d2h"].append(timer.ms(2, 3))
            samples["latency"].append(timer.ms(0, 3))
    samples["enqueue"].append((h1 - h0) * 1e3)


def bench_case(case, scope, s, log):
    timer = Timer(case.torch, case.device)
    measured = measure(case.n, s, ("latency", "h2d", "compute", "d2h", "enqueue"),
                       lambda samples: one_iteration(case, scope, timer, samples))
    all_samples = measured.pop("samples")
    reps = measured.pop("repetitions")
    result = {
        "backend": "pytorch", "batch": case.n, "scope": scope, "mode": case.mode, "dtype": case.dtype,
        "memory_format": "channels_last" if case.dtype != "fp32" else "contiguous",
        "device": "gpu" if case.device.type == "cuda" else "cpu",
        **measured,
    }
    if scope == "e2e":
        for k in ("h2d", "compute", "d2h"):
            result[f"{k}_ms"] = stats(all_samples[k], s["percentiles"])
    result["repetitions"] = reps
    log(summary_line(f"pytorch {case.dtype} {case.mode:5s} batch {case.n:6d} {scope:7s}", result))
    return result


def run_cases(torch, nets, spec, device, configs, scopes, s, max_batch, log):
    """Every batch of s["batches"] in every (dtype, mode) of `configs` (nets[dtype]: a Split), each
    scope of `scopes`. Returns (results, skipped); a case that fails (out of memory included) is
    skipped with its reason, and the others run."""
    results, skipped = [], []
    for n, (d, mode) in [(n, c) for n in s["batches"] for c in configs]:
        if max_batch is not None and n > max_batch:
            if (d, mode) == configs[0]:
                skipped.append({"backend": "pytorch", "batch": n, "reason": f"batch > --max-batch {max_batch}"})
            continue
        try:
            case = Case(torch, nets[d], spec, device, n, mode, d)
            finite = case.outputs_finite()
            for scope in scopes:
                r = bench_case(case, scope, s, log)
                r["outputs_finite"] = finite
                results.append(r)
            del case
        except RuntimeError as e:  # out of memory included (torch.cuda.OutOfMemoryError)
            skipped.append({"backend": "pytorch", "batch": n, "reason": f"{d} {mode}: {e}".splitlines()[0]})
            log(f"pytorch {d} {mode} batch {n}: skipped: {str(e).splitlines()[0]}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results, skipped


# --------------------------------------------------------------------------------------------------
# Engine / PyTorch ratios

MODE_MATCH = {"plain": "eager", "graph": "graph"}


def ratios(engine_json, torch_results):
    # The engine run's precision against PyTorch's same dtype (fp32 when either says nothing).
    dtype = engine_json.get("precision", "fp32")
    torch_results = [r for r in torch_results if r.get("dtype", "fp32") == dtype]
    by_key = {(r["batch"], r["scope"], r["mode"]): r for r in torch_results}
    out = []
    for r in engine_json.get("results", []):
        want_device = torch_results[0]["device"] if torch_results else None
        if r.get("device") != want_device:
            continue
        t = by_key.get((r["batch"], r["scope"], MODE_MATCH.get(r["mode"], r["mode"])))
        if t is None:
            continue
        # Against the best PyTorch mode too: the engine's plain launches vs PyTorch's CUDA graph.
        best = max((x for x in torch_results if x["batch"] == r["batch"] and x["scope"] == r["scope"]),
                   key=lambda x: x["images_per_s"])
        out.append({"backend": r["backend"], "precision": dtype, "batch": r["batch"], "scope": r["scope"], "mode": r["mode"],
                    "engine_images_per_s": r["images_per_s"], "pytorch_mode": t["mode"],
                    "pytorch_images_per_s": t["images_per_s"], "ratio": r["images_per_s"] / t["images_per_s"],
                    "pytorch_best_mode": best["mode"],
                    "ratio_to_best_pytorch": r["images_per_s"] / best["images_per_s"]})
    return out


def print_ratios(rows, out=sys.stdout):
    if not rows:
        print("no engine results on the same device to compare with", file=out)
        return
    header = ["backend", "batch", "scope", "mode", "engine img/s", "pytorch img/s", "engine/pytorch",
              "vs best pytorch"]
    table = [[r["backend"], str(r["batch"]), r["scope"], f"{r['mode']}~{r['pytorch_mode']}",
              si(r["engine_images_per_s"]), si(r["pytorch_images_per_s"]), f"{r['ratio']:.2f}x",
              f"{r['ratio_to_best_pytorch']:.2f}x ({r['pytorch_best_mode']})"] for r in rows]
    print_table("engine / PyTorch, images/s (same batch, scope and mode; > 1: the engine is faster)", header, table,
                out)


# --------------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="format-v1 graph file (.json)")
    ap.add_argument("--engine", help="engine bench --json output: default settings and the ratios")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--batch", help="batch sizes, comma-separated (default: the engine run's, else 1,64,1024,65536)")
    ap.add_argument("--warmup", type=float, help="warm-up per case, ms (default 200)")
    ap.add_argument("--iterations", type=int, help="at least this many iterations per repetition (default 10)")
    ap.add_argument("--duration", type=float, help="at least this many seconds per repetition (default 1)")
    ap.add_argument("--repetitions", type=int, help="repetitions per case (default 3)")
    ap.add_argument("--percentile", help="latency percentiles, comma-separated (default 90,99)")
    ap.add_argument("--modes", default=None, help="eager,graph (default: both on a GPU, eager on the CPU)")
    ap.add_argument("--no-data-transfers", action="store_true", help="compute scope only")
    ap.add_argument("--max-batch", type=int, default=None,
                    help="skip larger batches (default: none on a GPU, 4096 on the CPU)")
    ap.add_argument("--threads", type=int, default=None,
                    help="PyTorch CPU threads (default: the engine run's host threads, else PyTorch's own)")
    ap.add_argument("--dtype", default="fp32",
                    help="fp32, fp16, bf16, comma-separated (default fp32); fp16/bf16 run channels_last")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    import torch

    s, engine = settings(args, default_batches=[1, 64, 1024, 65536])
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but PyTorch sees no GPU")
    modes = parse_list(args.modes, str) if args.modes else (["eager", "graph"] if device.type == "cuda" else ["eager"])
    if device.type != "cuda" and "graph" in modes:
        sys.exit("error: CUDA graphs need --device cuda")
    scopes = ["compute"] + ([] if args.no_data_transfers else ["e2e"])
    max_batch = args.max_batch if args.max_batch is not None else (None if device.type == "cuda" else 4096)

    threads = args.threads or (engine or {}).get("host", {}).get("threads")
    if threads:
        torch.set_num_threads(int(threads))
    # fp32 on both sides: no TF32 (PyTorch allows it for cuDNN convolutions by default).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    dtypes = parse_list(args.dtype, str)
    if not dtypes or any(d not in ("fp32", "fp16", "bf16") for d in dtypes):
        ap.error(f"--dtype takes fp32, fp16, bf16, comma-separated: {args.dtype!r}")
    model = mf.read_model(args.model)
    modules = {}
    for d in dtypes:
        gm = mf.to_torch(model).eval().to(device)
        modules[d] = graph_split(typed(torch, gm, gm.preprocess, d))

    results, skipped = run_cases(torch, modules, model.graph["input"], device,
                                 [(d, mode) for d in dtypes for mode in modes], scopes, s, max_batch, log)

    dev_json = {"available": device.type == "cuda"}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        dev_json.update({"name": p.name, "compute_capability": f"{p.major}.{p.minor}",
                         "multiprocessors": p.multi_processor_count, "memory_gib": p.total_memory / 2**30,
                         "cuda_runtime": torch.version.cuda,
                         "cudnn": str(torch.backends.cudnn.version())})
    out = {
        "schema": SCHEMA, "tool": "benchmarks/bench_torch.py", "command": " ".join([sys.executable] + sys.argv),
        "git_commit": git_commit(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": {"name": model.name, "path": args.model, "parameters": model.parameter_count()},
        "device": dev_json,
        "host": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads()},
        "pytorch": {"version": torch.__version__, "device": str(device), "numpy": np.__version__,
                    "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                    "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                    "cudnn_benchmark": torch.backends.cudnn.benchmark,
                    "module": "cnnengine.model_format.to_torch (reference interpreter, native torch ops)"},
        "settings": dict(s, modes=modes, dtypes=dtypes, no_data_transfers=args.no_data_transfers, max_batch=max_batch),
        "results": results, "skipped": skipped,
    }

    print(f"PyTorch {torch.__version__} on {device}"
          + (f" ({dev_json['name']})" if device.type == "cuda" else f" ({torch.get_num_threads()} threads)")
          + f", model {model.name} ({args.model})")
    header = ["batch", "mode", "scope", "images/s", "±%", "median ms"] + [f"p{p:g} ms" for p in s["percentiles"]]
    rows = [header]
    for r in results:
        lat = r["latency_ms"]
        mode = r["mode"] if r["dtype"] == "fp32" else f"{r['mode']} {r['dtype']} channels_last"
        rows.append([str(r["batch"]), mode, r["scope"], si(r["images_per_s"]), f"{r['spread_pct']:.1f}",
                     f"{lat['median']:.4f}"] + [f"{lat[f'p{p:g}']:.4f}" for p in s["percentiles"]])
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    for row in rows:
        print("  " + "  ".join(cell.rjust(w) if c in (0, 3, 4) or c >= 5 else cell.ljust(w)
                               for c, (cell, w) in enumerate(zip(row, widths))))
    for sk in skipped:
        print(f"  skipped batch {sk['batch']}: {sk['reason']}")
    if engine is not None:
        out["engine_json"] = args.engine
        out["ratios"] = ratios(engine, results)
        print_ratios(out["ratios"])
    if args.json:
        write_json(args.json, out, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
