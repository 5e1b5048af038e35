#!/usr/bin/env python3
"""Training throughput on the CPU: `engine train --backend cpu` against PyTorch (torch.optim, same
architecture, same batch, same optimiser, same thread count), as images per second of the training
loop and the time of one 60,000-image MNIST epoch that implies. Medians of --repetitions runs.

    .venv/bin/python benchmarks/bench_train_cpu.py                       # mlp, cnn, lenet; 2 threads
    .venv/bin/python benchmarks/bench_train_cpu.py --models mlp --repetitions 5 --json out.json

What is timed: on the engine, the epoch's steps as `engine train` reports them in OUT.curve.json
(`images_per_second`: batch gathering, forward, loss, backward and update; not the data loading
before nor the checkpoint after); on PyTorch, the same loop over the same images in memory
(forward, cross-entropy on the logits, backward, optimiser step). PyTorch runs twice: its stock
layers, and with dense layers computed as 1x1 convolutions ("torch-conv1x1"), because Debian's
torch has a generic BLAS that makes nn.Linear about ten times slower than its oneDNN convolutions
(scripts/train_seed_models.py trains that way for the same reason). The ratio is taken against the
faster of the two.
"""
from __future__ import annotations

import argparse
import os
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
ARCH = REPO / "models" / "architectures"
# name: (architecture file, optimizer, batch, lr, images timed per run)
CONFIGS = {
    "mlp": ("seed003-mlp.json", "sgd", 256, 0.02, 25_600),
    "cnn": ("seed002-cnn.json", "adam", 32, 0.001, 6_400),
    "lenet": ("lenet5.json", "adam", 128, 0.001, 6_400),
}


def engine_images_per_second(engine, arch, images, labels, optimizer, batch, lr, count, threads) -> float:
    with tempfile.TemporaryDirectory() as d:
        out = pathlib.Path(d) / "m.json"
        subprocess.run([str(engine), "train", str(arch), "--data", str(images), "--labels", str(labels), "--limit",
                        str(count), "--batch", str(batch), "--optimizer", optimizer, "--lr", str(lr), "--threads",
                        str(threads), "--backend", "cpu", "--no-plot", "--no-checkpoints", "-q", "-o", str(out)],
                       check=True, capture_output=True, text=True)
        curve = json.loads((pathlib.Path(d) / "m.curve.json").read_text())
        return curve["epochs"][0]["images_per_second"]


def torch_images_per_second(arch, x, y, optimizer, batch, lr, conv1x1: bool) -> float:
    import torch
    import torch.nn.functional as F

    from cnnengine import model_format as mf
    from cnnengine import _torch_graph

    graph = json.loads(arch.read_text())
    tensors = _init(graph)
    with tempfile.TemporaryDirectory() as d:
        model = mf.write_model(pathlib.Path(d) / "m.json", graph, tensors)
        module = mf.to_torch(model)
    params = [p for p in module.parameters()]
    for p in params:
        p.requires_grad_(True)
    if conv1x1:
        def fast_forward(self, v):
            return F.conv2d(v[:, :, None, None], self.weight[:, :, None, None], self.bias).flatten(1)
        for layer in module.layers:
            if isinstance(layer, _torch_graph.Dense):
                layer.forward = fast_forward.__get__(layer)
    opt = torch.optim.Adam(params, lr=lr) if optimizer == "adam" else torch.optim.SGD(params, lr=lr)
    prob = graph["outputs"][0]
    logits = next(n["inputs"][0] for n in graph["nodes"] if n["name"] == prob)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    start = time.perf_counter()
    for s in range(0, len(x), batch):
        z = module.forward_values(xt[s:s + batch])[logits]
        loss = F.cross_entropy(z, yt[s:s + batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return len(x) / (time.perf_counter() - start)


def _init(graph):
    # The tests' initialisation, so the benchmark trains what the tests train.
    import importlib.util
    spec = importlib.util.spec_from_file_location("_train_support", REPO / "tests" / "python" / "_train_support.py")
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    return support.init_tensors(graph, seed=0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,cnn,lenet")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--engine", help="the engine command (default: $ENGINE_BIN, else build/engine, else the "
                   "package's own)")
    args = p.parse_args(argv)
    import torch

    from cnnengine import export
    from cnnengine import datasets

    torch.set_num_threads(args.threads)
    built = REPO / "build" / "engine"
    engine = pathlib.Path(args.engine) if args.engine else (
        export.engine_binary() if "ENGINE_BIN" in os.environ or not built.is_file() else built)
    if engine is None:
        print("error: the engine is not built (build/engine)", file=sys.stderr)
        return 1
    images, labels = datasets.mnist_files("train")
    all_x = datasets.read_idx(images).reshape(-1, 1, 28, 28)
    all_y = datasets.read_idx(labels)
    results = {"host": platform.node(), "processor": _cpu_name(), "threads": args.threads,
               "torch": torch.__version__, "models": {}}
    print(f"{'model':<6} {'batch':>5} {'opt':<4} {'engine img/s':>13} {'torch img/s':>12} {'torch-1x1':>10} "
          f"{'engine s/epoch':>15} {'torch s/epoch':>14} {'ratio':>6}")
    for name in args.models.split(","):
        arch_file, optimizer, batch, lr, count = CONFIGS[name]
        arch = ARCH / arch_file
        x, y = all_x[:count].copy(), all_y[:count].copy()
        eng, stock, fast = [], [], []
        for _ in range(args.repetitions):
            eng.append(engine_images_per_second(engine, arch, images, labels, optimizer, batch, lr, count, args.threads))
            stock.append(torch_images_per_second(arch, x, y, optimizer, batch, lr, conv1x1=False))
            fast.append(torch_images_per_second(arch, x, y, optimizer, batch, lr, conv1x1=True))
        e, s, f = statistics.median(eng), statistics.median(stock), statistics.median(fast)
        best = max(s, f)
        results["models"][name] = {"architecture": str(arch.relative_to(REPO)), "optimizer": optimizer, "batch": batch,
                                   "images_timed": count, "engine_images_per_second": eng,
                                   "torch_images_per_second": stock, "torch_conv1x1_images_per_second": fast,
                                   "engine_epoch_seconds": 60000 / e, "torch_epoch_seconds": 60000 / best,
                                   "ratio": e / best}
        print(f"{name:<6} {batch:>5} {optimizer:<4} {e:>13.0f} {s:>12.0f} {f:>10.0f} {60000 / e:>15.2f} "
              f"{60000 / best:>14.2f} {e / best:>6.2f}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
