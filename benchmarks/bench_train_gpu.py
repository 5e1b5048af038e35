#!/usr/bin/env python3
"""Training time per epoch on the GPU: the engine's `custom` and `cudnn` backends against PyTorch on the same
model, batch, optimiser and data in device memory. JSON out; medians of --epochs epochs after
--warmup epochs.

    /opt/torch/.venv/bin/python3 benchmarks/bench_train_gpu.py --engine-bin build/train_bench_gpu --json out.json

What one epoch is, on every side: --samples random uint8 images (the model's raw input, 28x28 for
LeNet-5) and random labels made once and copied to the GPU before anything is timed, cut into
samples // batch full batches (the last partial batch dropped); per batch a whole training step:
preprocessing (uint8 -> float, /255, the model's padding), forward, softmax cross-entropy (mean),
backward, optimiser step (Adam lr 1e-3 by default, torch.optim definitions). Wall-clock time per
epoch, the device synchronised at the epoch's end.

  engine-custom    build/train_bench_gpu --backend custom (DeviceTrainer::step_device, a CUDA graph
                   per batch size); it also reads the loss sum and correct count back every step
                   (one sync per step).
  engine-cudnn     the same with --backend cudnn (cuDNN + cuBLAS per op, deterministic algorithms).
  torch-eager      plain PyTorch; loss summed on the device, no sync inside the epoch.
  torch-cudagraph  the whole step (forward, backward, Adam(capturable=True).step) captured with
                   torch.cuda.graph and replayed per batch (PyTorch's whole-network capture recipe).
  torch-compile    torch.compile(model) (default mode), eager optimiser.
  torch-compile-ro torch.compile(model, mode="reduce-overhead") (CUDA graphs under the compiler).

TF32 is off on the PyTorch side (fp32 arithmetic, as the engine's). Only LeNet-5-like graphs (conv,
tanh/relu, avgpool/maxpool, flatten, dense, softmax) are built in PyTorch here.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def torch_model(graph: dict):
    import torch.nn as nn
    layers = []
    for node in graph["nodes"]:
        op, a = node["op"], node.get("attrs", {})
        if op == "conv2d":
            t, b, l, r = a.get("padding", [0, 0, 0, 0])
            assert t == b and l == r, "asymmetric padding not built here"
            layers.append(nn.LazyConv2d(a["out_channels"], tuple(a["kernel"]), tuple(a.get("stride", [1, 1])), (t, l)))
        elif op in ("avgpool", "maxpool"):
            t, b, l, r = a.get("padding", [0, 0, 0, 0])
            cls = nn.AvgPool2d if op == "avgpool" else nn.MaxPool2d
            layers.append(cls(tuple(a["kernel"]), tuple(a.get("stride", a["kernel"])), (t, l)))
        elif op == "tanh":
            layers.append(nn.Tanh())
        elif op == "relu":
            layers.append(nn.ReLU())
        elif op == "sigmoid":
            layers.append(nn.Sigmoid())
        elif op == "flatten":
            layers.append(nn.Flatten())
        elif op == "dense":
            layers.append(nn.LazyLinear(a["units"]))
        elif op == "softmax":
            pass  # the loss takes the logits
        else:
            raise SystemExit(f"op {op} is not built by this benchmark")
    return nn.Sequential(*layers)


def bench_torch(graph, x_u8, y, batch, epochs, warmup, lr, mode):
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = x_u8.device
    pre = graph["input"].get("preprocess", {})
    scale = pre.get("scale", 1.0)
    pad = pre.get("pad", [0, 0, 0, 0])  # top, bottom, left, right
    torch.manual_seed(0)
    model = torch_model(graph).to(dev)
    with torch.no_grad():
        model(F.pad(x_u8[:batch].float() * scale, (pad[2], pad[3], pad[0], pad[1])))  # materialise lazy layers
    capturable = mode == "torch-cudagraph"
    opt = torch.optim.Adam(model.parameters(), lr=lr, capturable=capturable)
    fwd = model
    if mode == "torch-compile":
        fwd = torch.compile(model)
    elif mode == "torch-compile-ro":
        fwd = torch.compile(model, mode="reduce-overhead")
    steps = x_u8.shape[0] // batch

    def step(xb, yb):
        x = F.pad(xb.float() * scale, (pad[2], pad[3], pad[0], pad[1]))
        loss = F.cross_entropy(fwd(x), yb.long())
        opt.zero_grad(set_to_none=not capturable)
        loss.backward()
        opt.step()
        return loss.detach()

    times = []
    if mode == "torch-cudagraph":
        sx = x_u8[:batch].clone()
        sy = y[:batch].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step(sx, sy)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_loss = step(sx, sy)
        for e in range(warmup + epochs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            total = torch.zeros((), device=dev)
            for i in range(steps):
                sx.copy_(x_u8[i * batch:(i + 1) * batch], non_blocking=True)
                sy.copy_(y[i * batch:(i + 1) * batch], non_blocking=True)
                g.replay()
                total += static_loss
            torch.cuda.synchronize()
            if e >= warmup:
                times.append(1000 * (time.perf_counter() - t0))
        return times, steps, float(total) / steps
    for e in range(warmup + epochs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        total = torch.zeros((), device=dev)
        for i in range(steps):
            total += step(x_u8[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
        torch.cuda.synchronize()
        if e >= warmup:
            times.append(1000 * (time.perf_counter() - t0))
    return times, steps, float(total) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(REPO / "models" / "architectures" / "lenet5.json"))
    ap.add_argument("--engine-bin", default=str(REPO / "build" / "train_bench_gpu"))
    ap.add_argument("--batch", default="256,32")
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--backends", default="custom,cudnn", help="the engine's GPU backends to time")
    ap.add_argument("--modes", default="torch-eager,torch-cudagraph,torch-compile,torch-compile-ro")
    ap.add_argument("--json")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    out = {"model": args.model, "samples": args.samples, "epochs": args.epochs, "warmup": args.warmup,
           "optimizer": "adam", "lr": args.lr, "host": platform.node(), "results": [], "errors": []}

    engines = [f"engine-{be}" for be in args.backends.split(",") if be]
    for be in args.backends.split(","):
        if not be:
            continue
        eng = subprocess.run([args.engine_bin, args.model, "--backend", be, "--batch", args.batch,
                              "--samples", str(args.samples), "--epochs", str(args.epochs), "--warmup",
                              str(args.warmup), "--optimizer", "adam", "--lr", str(args.lr)],
                             capture_output=True, text=True)
        sys.stderr.write(eng.stderr)
        if eng.returncode == 0:
            e = json.loads(eng.stdout)
            out["device"] = e["device"]
            out["results"] += e["results"]
        else:
            out["errors"].append({"framework": f"engine-{be}", "error": eng.stderr.strip()[-2000:]})

    try:
        import torch
        out["torch"] = torch.__version__
        graph = json.loads(pathlib.Path(args.model).read_text())
        shape = graph["input"]["shape"]
        g = torch.Generator(device="cpu").manual_seed(1)
        x = torch.randint(0, 256, (args.samples, *shape), dtype=torch.uint8, generator=g).cuda()
        y = torch.randint(0, 10, (args.samples,), dtype=torch.uint8, generator=g).cuda()
        for mode in args.modes.split(","):
            for b in batches:
                try:
                    times, steps, loss = bench_torch(graph, x, y, b, args.epochs, args.warmup, args.lr, mode)
                    med = statistics.median(times)
                    out["results"].append({"framework": "torch", "mode": mode, "batch": b, "steps": steps,
                                           "epoch_ms": times, "median_epoch_ms": med,
                                           "us_per_step": 1000 * med / steps, "final_epoch_mean_loss": loss})
                    print(f"{mode:18s} batch {b:4d}: median {med:9.2f} ms/epoch ({1000 * med / steps:7.1f} us/step)",
                          file=sys.stderr)
                except Exception as ex:  # noqa: BLE001 - one mode failing must not lose the others
                    out["errors"].append({"framework": "torch", "mode": mode, "batch": b, "error": repr(ex)[-2000:]})
                    print(f"{mode} batch {b}: {ex!r}", file=sys.stderr)
    except Exception as ex:  # noqa: BLE001
        out["errors"].append({"framework": "torch", "error": repr(ex)[-2000:]})

    # Ratios: PyTorch's time over each engine backend's, per batch and mode (> 1: the engine is faster).
    out["speedup_vs_torch"] = []
    for eng_name in engines:
        engine_ms = {r["batch"]: r["median_epoch_ms"] for r in out["results"] if r["framework"] == eng_name}
        out["speedup_vs_torch"] += [
            {"engine": eng_name, "batch": r["batch"], "mode": r["mode"],
             "ratio": r["median_epoch_ms"] / engine_ms[r["batch"]]}
            for r in out["results"]
            if r["framework"] == "torch" and r["batch"] in engine_ms and engine_ms[r["batch"]] > 0]
    for s in out["speedup_vs_torch"]:
        print(f"{s['engine']:13s} vs {s['mode']:18s} batch {s['batch']:4d}: {s['ratio']:.2f}x", file=sys.stderr)
    text = json.dumps(out, indent=2)
    if args.json:
        pathlib.Path(args.json).write_text(text + "\n")
    else:
        print(text)
    return 0 if not out["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
