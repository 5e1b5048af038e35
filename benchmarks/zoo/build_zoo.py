#!/usr/bin/env python3
"""Builds the model zoo (benchmarks/zoo/models.py) into OUT/<name>/:

  torch.pt           the state_dict (loads with torch.load(weights_only=True))
  model.onnx         torch.onnx.export (TorchScript exporter, opset 13) of the module with its softmax,
                     float [N, C, H, W] input, dynamic batch
  model.json         format v1 (+ model.safetensors), imported from model.onnx by `cnnengine-export onnx`
                     with the preprocessing stated (--scale, --mean, --std) and its numerical check

MNIST-shaped models are trained for one pass over the first `train_images` MNIST training images
(Adam, batch 64): seconds to a minute each on a CPU. CIFAR-shaped models keep seeded random weights
(Kaiming normal), BatchNorm statistics measured on a seeded random batch and then perturbed, and a
last layer that spreads random images over every class. Their test set is random:
OUT/<name>/test-images.npy (uint8 [N, 3, 32, 32], for the Python API). `engine run` reads uint8
images only as one-channel IDX/PNG/JPEG/PGM, so for these models the zoo also holds
model-float.json (the same graph and weights with a float32 input: no preprocessing) and
test-images-float.idx (the preprocessed test images as IDX float32 samples), which it does read.

OUT/zoo.json lists every model: description, data set, input shape, preprocessing, parameters,
test files (the zoo's own relative to the model's folder), PyTorch's accuracy on the MNIST test
set. Deterministic: fixed seeds, fixed CPU threads.

  python3 benchmarks/zoo/build_zoo.py [--out zoo] [--models keras-cnn,mlp-128] [--mnist DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pathlib
import sys
import time
import zlib

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
from models import REGISTRY  # noqa: E402
from peer_bench import onnx_export  # noqa: E402

REPO = HERE.parent.parent
CIFAR_TEST_IMAGES = 1000


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def mnist_dir(arg: str | None) -> pathlib.Path:
    for d in ([arg] if arg else []) + [os.environ.get("CNN_SHARED_DATA", "") + "/mnist",
                                       str(REPO.parent / "shared" / "data" / "mnist")]:
        if d and (pathlib.Path(d) / "train-images-idx3-ubyte.gz").is_file():
            return pathlib.Path(d)
    raise SystemExit("error: MNIST not found: give --mnist DIR (with train-images-idx3-ubyte.gz and the others)")


def preprocess(x_uint8: np.ndarray, pre: dict) -> torch.Tensor:
    """The format's preprocessing in float32: (x * scale - mean[c]) / std[c]."""
    c = x_uint8.shape[1]
    f32 = np.float32
    y = (x_uint8.astype(f32) * f32(pre["scale"]) - np.asarray(pre["mean"], f32).reshape(1, c, 1, 1)) \
        / np.asarray(pre["std"], f32).reshape(1, c, 1, 1)
    return torch.from_numpy(np.ascontiguousarray(y, f32))


def train_mnist(model, pre, n, data, log):
    images, labels = data["train"]
    x_all = preprocess(images[:n], pre)
    y_all = torch.from_numpy(labels[:n].astype(np.int64))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for i in range(0, n, 64):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model.logits(x_all[i:i + 64]), y_all[i:i + 64])
        loss.backward()
        opt.step()
    model.eval()
    log(f"  trained on {n} images, last batch loss {loss.item():.3f}")


def randomise(model, x, gen):
    """Seeded random weights for a network that is never trained, kept at a sane scale so that
    reduced precisions stay in range and the softmax is not saturated: Kaiming normal weights
    (fan in, ReLU gain) and small biases; BatchNorm statistics measured on `x` (a preprocessed
    random batch, so each BatchNorm normalises what it sees), then perturbed by seeded factors,
    with seeded affine parameters; the last layer shifted and scaled so the logits vary about 3 around 0."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.05)
        for m in bns:
            m.weight.copy_(0.6 + torch.rand(m.num_features, generator=gen) * 0.8)
            m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: the statistics of `x` itself
        model.train()
        model.logits(x)
        model.eval()
        for m in bns:
            m.momentum = 0.1
            c = m.num_features
            m.running_mean.add_(torch.randn(c, generator=gen) * 0.05 * m.running_var.sqrt())
            m.running_var.mul_(0.8 + torch.rand(c, generator=gen) * 0.45)
        # Centred per class over `x` (else one class wins every random image) and scaled; both
        # rounded so that the last bits of the statistics (thread count) do not reach the weights.
        last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
        logits = model.logits(x)
        mu = torch.round(logits.mean(0) * 1000) / 1000
        factor = float(f"{3.0 / float((logits - mu).std()):.3g}")
        last.weight.mul_(factor)
        last.bias.sub_(mu).mul_(factor)


def export_onnx(model, shape, path):
    onnx_export(torch, model, torch.zeros((2,) + tuple(shape)), path, input_names=["x"], output_names=["prob"],
                dynamic_axes={"x": {0: "n"}, "prob": {0: "n"}})


def import_onnx(name, entry, onnx_path, out_json, check_data, check_count, log):
    """`cnnengine-export onnx` with the preprocessing stated; its report goes to the log."""
    from cnnengine import export_cli
    pre = entry.preprocess
    argv = ["onnx", str(onnx_path), "-o", str(out_json), "--name", name, "--description", entry.description,
            "--scale", repr(pre["scale"]), "--mean", ",".join(map(str, pre["mean"])),
            "--std", ",".join(map(str, pre["std"])), "--labels", ",".join(str(i) for i in range(10)),
            "--check-count", str(check_count)]
    if check_data:
        argv += ["--check-data", str(check_data)]
    else:
        argv += ["--no-engine"]  # the engine command reads no 3-channel uint8 file: checked below instead
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        rc = export_cli.main(argv)
    if rc != 0:
        raise RuntimeError(f"cnnengine-export {' '.join(argv)} failed:\n{text.getvalue()}")
    log("  " + text.getvalue().strip().replace("\n", "\n  "))


def write_float_variant(out_dir: pathlib.Path, x_uint8: np.ndarray, pre: dict):
    """model-float.json (the graph with a float32 input, same weights file) and the test images
    preprocessed as IDX float32 samples (big-endian, formats/README.md)."""
    graph = json.loads((out_dir / "model.json").read_text())
    inp = graph["input"]
    graph["input"] = {"name": inp["name"], "dtype": "float32", "shape": inp["shape"]}
    (out_dir / "model-float.json").write_text(json.dumps(graph, indent=1) + "\n")
    a = preprocess(x_uint8, pre).numpy()
    with open(out_dir / "test-images-float.idx", "wb") as f:
        f.write(bytes([0, 0, 0x0D, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape))
        f.write(a.astype(">f4").tobytes())


def engine_float_outputs(out_dir: pathlib.Path, count: int) -> np.ndarray | None:
    """`engine run` (cpu backend) of model-float.json on the first `count` float test images;
    None when no engine command is built."""
    from cnnengine import export
    engine = export.engine_binary()
    if engine is None:
        return None
    npy = out_dir / "check-outputs.npy"
    try:
        export.run_engine(engine, out_dir / "model-float.json", out_dir / "test-images-float.idx", npy, "cpu",
                          ["--limit", str(count)])
        return np.load(npy)
    finally:
        npy.unlink(missing_ok=True)


def build_one(name, out_root, data, log, max_train_images=None, check_count=256):
    entry = REGISTRY[name]
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed_of(name))
    model = entry.build()
    info = {"description": entry.description, "dataset": entry.dataset, "input_shape": list(entry.shape),
            "preprocess": entry.preprocess, "seed": seed_of(name)}
    if entry.dataset == "mnist":
        n_train = min(entry.train_images, max_train_images or entry.train_images)
        train_mnist(model, entry.preprocess, n_train, data, log)
        test_x, test_y = data["test"]
        with torch.no_grad():
            pred = model(preprocess(test_x, entry.preprocess)).argmax(1).numpy()
        info["pytorch_test_accuracy"] = float((pred == test_y).mean())
        info["train_images"] = n_train
        info["test_images"] = str(data["test_path"])
        log(f"  PyTorch accuracy on the MNIST test set: {info['pytorch_test_accuracy']:.4f}")
        check_data = data["test_path"]
    else:
        rng = np.random.default_rng(seed_of(name))
        test_x = rng.integers(0, 256, size=(CIFAR_TEST_IMAGES,) + tuple(entry.shape), dtype=np.uint8)
        stats_x = rng.integers(0, 256, size=(256,) + tuple(entry.shape), dtype=np.uint8)
        randomise(model, preprocess(stats_x, entry.preprocess), torch.Generator().manual_seed(seed_of(name)))
        np.save(out / "test-images.npy", test_x)
        info["test_images"] = "test-images.npy"  # relative: the model's folder
        check_data = None
    model.eval()
    torch.save(model.state_dict(), out / "torch.pt")
    export_onnx(model, entry.shape, out / "model.onnx")
    import_onnx(name, entry, out / "model.onnx", out / "model.json", check_data, check_count, log)
    if entry.dataset != "mnist":
        write_float_variant(out, test_x, entry.preprocess)
        info["test_images_float"] = "test-images-float.idx"
        # The import's check ran without the engine (it reads no 3-channel uint8 file): the
        # engine command runs the float32 variant (same nodes and weights) here instead.
        with torch.no_grad():
            want = model(preprocess(test_x[:check_count], entry.preprocess)).numpy()
        got = engine_float_outputs(out, check_count)
        if got is None:
            log("  engine command not built: the engine's check of the float32 variant skipped")
        else:
            err = float(np.abs(got - want).max())
            if err > 1e-4:
                raise RuntimeError(f"{name}: the engine's cpu backend differs from PyTorch by {err:.3g}")
            log(f"  engine run (cpu) of model-float.json vs PyTorch on {check_count} random images: "
                f"max |diff| {err:.2e}")
    info["parameters"] = sum(p.numel() for p in model.parameters())
    info["files"] = sorted(p.name for p in out.iterdir())
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "zoo"), help="folder to write the zoo into (default: zoo/)")
    ap.add_argument("--models", help="comma-separated names (default: all): " + ", ".join(REGISTRY))
    ap.add_argument("--mnist", help="folder with the four MNIST idx files (default: ../shared/data/mnist)")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch CPU threads (fixed for determinism)")
    ap.add_argument("--max-train-images", type=int, help="train on at most this many images (a quick zoo for tests)")
    ap.add_argument("--check-count", type=int, default=256, help="images in each export's numerical check")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n] if args.models else list(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        ap.error(f"unknown models {unknown}; the zoo has {', '.join(REGISTRY)}")
    torch.set_num_threads(args.threads)
    log = lambda msg: print(msg, flush=True)  # noqa: E731

    data = {}
    if any(REGISTRY[n].dataset == "mnist" for n in names):
        from cnnengine import datasets
        d = mnist_dir(args.mnist)
        data["train"] = (datasets.read_idx(d / "train-images-idx3-ubyte.gz")[:, None],
                         datasets.read_idx(d / "train-labels-idx1-ubyte.gz"))
        data["test_path"] = d / "t10k-images-idx3-ubyte.gz"
        data["test"] = (datasets.read_idx(data["test_path"])[:, None],
                        datasets.read_idx(d / "t10k-labels-idx1-ubyte.gz"))

    out_root = pathlib.Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    manifest_path = out_root / "zoo.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    for name in names:
        t0 = time.time()
        log(f"{name}: {REGISTRY[name].description}")
        manifest[name] = build_one(name, out_root, data, log, args.max_train_images, args.check_count)
        log(f"  done in {time.time() - t0:.1f} s")
        tmp = manifest_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        tmp.replace(manifest_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
