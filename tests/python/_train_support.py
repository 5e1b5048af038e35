"""Helpers of the `engine train` tests: IDX files, small graphs, running the engine, PyTorch's
side of a training run written with torch.optim, exactly as docs/design/training.md defines the engine's."""
from __future__ import annotations

import gzip
import json
import pathlib
import struct
import subprocess

import numpy as np

from cnnengine import datasets, export
from cnnengine import model_format as mf

ENGINE = export.engine_binary()


def write_idx_images(path: pathlib.Path, images: np.ndarray) -> pathlib.Path:
    images = np.ascontiguousarray(images, dtype=np.uint8)
    path.write_bytes(struct.pack(">I", 0x803) + struct.pack(">3I", *images.shape) + images.tobytes())
    return path


def write_idx_labels(path: pathlib.Path, labels: np.ndarray) -> pathlib.Path:
    labels = np.ascontiguousarray(labels, dtype=np.uint8)
    path.write_bytes(struct.pack(">I", 0x801) + struct.pack(">I", labels.size) + labels.tobytes())
    return path


def write_idx_floats(path: pathlib.Path, a: np.ndarray) -> pathlib.Path:
    path.write_bytes(struct.pack(">I", 0xD00 + a.ndim) + struct.pack(f">{a.ndim}I", *a.shape) + a.astype(">f4").tobytes())
    return path


def mnist_subset(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` MNIST training images [N, 28, 28] uint8 and their labels."""
    d = datasets.shared_data_dir() / "mnist"
    with gzip.open(d / "train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:count]
    with gzip.open(d / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:count]
    return images.copy(), labels.copy()


def shared_mnist_available() -> bool:
    d = datasets.shared_data_dir() / "mnist"
    return (d / "train-images-idx3-ubyte.gz").is_file() and (d / "train-labels-idx1-ubyte.gz").is_file()


def init_tensors(graph: dict, seed: int) -> dict[str, np.ndarray]:
    """PyTorch-default-like parameters (U(±1/sqrt(fan_in))) for every tensor the graph names,
    shapes from a shape walk of the graph (mf.validate needs them to exist, so walk it here)."""
    rng = np.random.default_rng(seed)
    shapes = {graph["input"]["name"]: _input_shape(graph["input"])}
    tensors = {}
    for n in graph["nodes"]:  # the tests' graphs list nodes in topological order
        x = shapes[n["inputs"][0]]
        a, op, roles = n.get("attrs", {}), n["op"], n.get("tensors", {})
        if op == "conv2d":
            k, s, p = a["kernel"], a.get("stride", [1, 1]), a.get("padding", [0, 0, 0, 0])
            fan = x[0] * k[0] * k[1]
            tensors[roles["weight"]] = _uniform(rng, (a["out_channels"], x[0], k[0], k[1]), fan)
            if "bias" in roles:
                tensors[roles["bias"]] = _uniform(rng, (a["out_channels"],), fan)
            shapes[n["name"]] = [a["out_channels"], (x[1] + p[0] + p[1] - k[0]) // s[0] + 1,
                                 (x[2] + p[2] + p[3] - k[1]) // s[1] + 1]
        elif op in ("avgpool", "maxpool"):
            k, p = a["kernel"], a.get("padding", [0, 0, 0, 0])
            s = a.get("stride", k)
            shapes[n["name"]] = [x[0], (x[1] + p[0] + p[1] - k[0]) // s[0] + 1, (x[2] + p[2] + p[3] - k[1]) // s[1] + 1]
        elif op == "dense":
            tensors[roles["weight"]] = _uniform(rng, (a["units"], x[0]), x[0])
            if "bias" in roles:
                tensors[roles["bias"]] = _uniform(rng, (a["units"],), x[0])
            shapes[n["name"]] = [a["units"]]
        elif op == "flatten":
            shapes[n["name"]] = [int(np.prod(x))]
        elif op == "scale_shift":
            tensors[roles["scale"]] = rng.uniform(0.5, 1.5, x[0]).astype(np.float32)
            tensors[roles["shift"]] = rng.uniform(-0.5, 0.5, x[0]).astype(np.float32)
            shapes[n["name"]] = x
        elif op == "concat":
            shapes[n["name"]] = [sum(shapes[v][0] for v in n["inputs"])] + x[1:]
        else:
            shapes[n["name"]] = x
    return tensors


def _input_shape(spec: dict) -> list[int]:
    shape = list(spec["shape"])
    pad = spec.get("preprocess", {}).get("pad", [0, 0, 0, 0])
    if len(shape) == 3:
        shape[1] += pad[0] + pad[1]
        shape[2] += pad[2] + pad[3]
    return shape


def _uniform(rng, shape, fan_in):
    b = 1 / np.sqrt(fan_in)
    return rng.uniform(-b, b, shape).astype(np.float32)


def run_engine(*args, check=True, env=None, timeout=300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(ENGINE), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"engine {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def torch_train(model_path: pathlib.Path, x: np.ndarray, y: np.ndarray, *, dtype, batch: int, optimizer: str,
                lr: float, lr_decay: float = 0.0, momentum: float = 0.0, weight_decay: float = 0.0):
    """One epoch in data order with torch.optim; returns (per-step mean losses, {tensor: array})."""
    import torch
    import torch.nn.functional as F

    model = mf.read_model(model_path)
    module = mf.to_torch(model).to(dtype)
    named = _tensor_parameters(model, module)
    for p in named.values():
        p.requires_grad_(True)
    params = list(named.values())
    if optimizer == "adam":
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    graph = model.graph
    prob = graph["outputs"][0]
    logits = next(n["inputs"][0] for n in graph["nodes"] if n["name"] == prob)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    losses = []
    for t, start in enumerate(range(0, len(x), batch)):
        for g in opt.param_groups:
            g["lr"] = lr / (1 + lr_decay * t)
        z = module.forward_values(xt[start:start + batch])[logits]
        loss = F.cross_entropy(z, yt[start:start + batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, {k: v.detach().to(torch.float64).numpy() for k, v in named.items()}


def _tensor_parameters(model, module) -> dict:
    """Tensor name -> the torch module's parameter holding it."""
    out = {}
    by_node = dict(zip(module.node_names, module.layers))
    for n in model.graph["nodes"]:
        layer = by_node[n["name"]]
        for role, name in n.get("tensors", {}).items():
            out[name] = getattr(layer, {"weight": "weight", "bias": "bias", "scale": "scale", "shift": "shift"}[role])
    return out


def engine_curve(out_json: pathlib.Path) -> dict:
    return json.loads(out_json.with_name(out_json.stem + ".curve.json").read_text())
