#!/usr/bin/env python3
"""Seed corpora for the fuzz targets (tests/fuzz/fuzz_*.cpp), one folder per target.

    make_seeds.py OUT_DIR [--synthetic-only] [--models DIR] [--data FILE...]

Synthetic seeds (small, deterministic, committed as tests/fuzz/seeds/ with --synthetic-only):
a model using every op of format v1, a float32-input model, IDX files raw and gzip, and one image
in every supported encoding (PNG gray/RGBA/16-bit/palette/interlaced, JPEG baseline/progressive,
PGM P5/P2/16-bit). Without --synthetic-only the project's real files are added too: every model in
--models (default models/), and the first images of the MNIST test set (default: data/mnist or
../shared/data/mnist), as IDX and as images, so that the fuzzers start from what users feed.

Only the standard library, numpy and (for JPEG and some PNG variants) Pillow are used; without
Pillow the PNG seeds are written by hand and JPEG seeds are skipped.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import pathlib
import struct
import sys
import zlib

import numpy as np

try:
    from PIL import Image
except ImportError:  # pragma: no cover
    Image = None

ROOT = pathlib.Path(__file__).resolve().parents[2]
from cnnengine import allops  # noqa: E402
BLOB_SEPARATOR = b"\n#--weights--#\n"  # fuzz_support.hpp: kBlobSeparator


# ---- safetensors and models ------------------------------------------------------------------

def safetensors_bytes(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    header: dict = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    data = b""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def allops_model() -> tuple[dict, dict[str, np.ndarray]]:
    """Every op of format v1 in one small graph (uint8 [1, 12, 12] input, two outputs)."""
    return allops.allops_model(size=12, kernel=3, pad=1, seed=7, conv_scale=0.3, dense_scale=0.1,
                               description="fuzz seed: every op")


def float_model() -> tuple[dict, dict[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    tensors = {"d.weight": rng.standard_normal((5, 20)).astype(np.float32)}
    graph = {
        "format": "cnn-engine-model", "version": 1, "name": "float-input",
        "weights": {"file": "float-input.safetensors", "sha256": ""},
        "input": {"name": "x", "dtype": "float32", "shape": [20]},
        "nodes": [{"name": "d", "op": "dense", "inputs": ["x"], "attrs": {"units": 5},
                   "tensors": {"weight": "d.weight"}},
                  {"name": "y", "op": "sigmoid", "inputs": ["d"]}],
        "outputs": ["y"],
    }
    return graph, tensors


def branches_model() -> tuple[dict, dict[str, np.ndarray]]:
    """scale_shift and concat (added to format v1 after allops was fixed): a float32 [2, 6, 6] input
    scaled per channel, two conv branches joined by concat (3 + 2 channels), maxpool, scale_shift of
    the joined channels, flatten, dense 4, scale_shift of the features."""
    rng = np.random.default_rng(13)
    tensors = {
        "in_bn.scale": rng.uniform(0.5, 1.5, 2).astype(np.float32),
        "in_bn.shift": rng.uniform(-0.2, 0.2, 2).astype(np.float32),
        "a.weight": (rng.standard_normal((3, 2, 3, 3)) * 0.3).astype(np.float32),
        "b.weight": (rng.standard_normal((2, 2, 1, 1)) * 0.3).astype(np.float32),
        "b.bias": (rng.standard_normal(2) * 0.1).astype(np.float32),
        "bn.scale": rng.uniform(0.5, 1.5, 5).astype(np.float32),
        "bn.shift": rng.uniform(-0.2, 0.2, 5).astype(np.float32),
        "d.weight": (rng.standard_normal((4, 45)) * 0.1).astype(np.float32),
        "out_bn.scale": rng.uniform(0.5, 1.5, 4).astype(np.float32),
        "out_bn.shift": rng.uniform(-0.2, 0.2, 4).astype(np.float32),
    }
    graph = {
        "format": "cnn-engine-model", "version": 1, "name": "branches",
        "weights": {"file": "branches.safetensors", "sha256": ""},
        "input": {"name": "x", "dtype": "float32", "shape": [2, 6, 6]},
        "nodes": [{"name": "in_bn", "op": "scale_shift", "inputs": ["x"],
                   "tensors": {"scale": "in_bn.scale", "shift": "in_bn.shift"}},
                  {"name": "a", "op": "conv2d", "inputs": ["in_bn"],
                   "attrs": {"kernel": [3, 3], "padding": [1, 1, 1, 1], "out_channels": 3},
                   "tensors": {"weight": "a.weight"}},
                  {"name": "b", "op": "conv2d", "inputs": ["x"], "attrs": {"kernel": [1, 1], "out_channels": 2},
                   "tensors": {"weight": "b.weight", "bias": "b.bias"}},
                  {"name": "cat", "op": "concat", "inputs": ["a", "b"]},
                  {"name": "p", "op": "maxpool", "inputs": ["cat"], "attrs": {"kernel": [2, 2]}},
                  {"name": "bn", "op": "scale_shift", "inputs": ["p"],
                   "tensors": {"scale": "bn.scale", "shift": "bn.shift"}},
                  {"name": "f", "op": "flatten", "inputs": ["bn"]},
                  {"name": "d", "op": "dense", "inputs": ["f"], "attrs": {"units": 4},
                   "tensors": {"weight": "d.weight"}},
                  {"name": "out_bn", "op": "scale_shift", "inputs": ["d"],
                   "tensors": {"scale": "out_bn.scale", "shift": "out_bn.shift"}}],
        "outputs": ["out_bn"],
    }
    return graph, tensors


def graph_text(graph: dict, blob: bytes) -> bytes:
    graph = json.loads(json.dumps(graph))
    graph["weights"]["sha256"] = hashlib.sha256(blob).hexdigest()
    return (json.dumps(graph, indent=2) + "\n").encode()


# ---- data ------------------------------------------------------------------------------------

def idx_images(images: np.ndarray) -> bytes:
    n, h, w = images.shape
    return struct.pack(">IIII", 0x803, n, h, w) + images.astype(np.uint8).tobytes()


def idx_labels(labels: np.ndarray) -> bytes:
    return struct.pack(">II", 0x801, len(labels)) + labels.astype(np.uint8).tobytes()


def idx_floats(samples: np.ndarray) -> bytes:
    """IDX float32 (type 0x0D): the data of float32-input models, big-endian like every IDX field."""
    return struct.pack(">I", 0xD00 + samples.ndim) + struct.pack(f">{samples.ndim}I", *samples.shape) \
        + samples.astype(">f4").tobytes()


def png_by_hand(gray: np.ndarray) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    h, w = gray.shape
    raw = b"".join(b"\x00" + gray[y].astype(np.uint8).tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def image_seeds(gray: np.ndarray, prefix: str) -> dict[str, bytes]:
    h, w = gray.shape
    out = {f"{prefix}.pgm": b"P5\n%d %d\n255\n" % (w, h) + gray.astype(np.uint8).tobytes(),
           f"{prefix}-plain.pgm": (f"P2\n# fuzz seed\n{w} {h}\n255\n".encode()
                                   + " ".join(str(int(v)) for v in gray.flatten()).encode() + b"\n"),
           f"{prefix}-16bit.pgm": b"P5\n%d %d\n65535\n" % (w, h) + (gray.astype(">u2") * 257).tobytes(),
           f"{prefix}-hand.png": png_by_hand(gray)}
    if Image is None:
        return out

    def save(img, fmt, **kw) -> bytes:
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        return buf.getvalue()
    g = Image.fromarray(gray.astype(np.uint8), "L")
    rgba = np.stack([gray, 255 - gray, gray // 2, np.full_like(gray, 200)], axis=-1).astype(np.uint8)
    out[f"{prefix}.png"] = save(g, "PNG")
    out[f"{prefix}-interlaced.png"] = save(g, "PNG", interlace=1)
    out[f"{prefix}-rgba.png"] = save(Image.fromarray(rgba, "RGBA"), "PNG")
    out[f"{prefix}-16bit.png"] = save(Image.fromarray(gray.astype(np.uint16) * 257, "I;16"), "PNG")
    out[f"{prefix}-palette.png"] = save(g.convert("P"), "PNG")
    out[f"{prefix}.jpg"] = save(g, "JPEG", quality=90)
    out[f"{prefix}-progressive.jpg"] = save(Image.fromarray(rgba[..., :3], "RGB"), "JPEG", quality=75,
                                            progressive=True)
    return out


def find_mnist(explicit: list[str]) -> list[pathlib.Path]:
    if explicit:
        return [pathlib.Path(p) for p in explicit]
    for folder in (ROOT / "data" / "mnist", ROOT.parent / "shared" / "data" / "mnist"):
        found = sorted(folder.glob("t10k-*-idx?-ubyte*"))
        if found:
            return found
    return []


def read_idx(path: pathlib.Path) -> np.ndarray:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


# ---- main ------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--synthetic-only", action="store_true")
    ap.add_argument("--models", type=pathlib.Path, default=ROOT / "models")
    ap.add_argument("--data", nargs="*", default=[], help="MNIST IDX files (default: found)")
    ap.add_argument("--images", type=int, default=3, help="images taken from the real data set")
    args = ap.parse_args()

    seeds: dict[str, dict[str, bytes]] = {t: {} for t in ("graph", "safetensors", "model", "idx", "image")}
    weights: dict[str, bytes] = {}  # top-level *.safetensors: what the graph target resolves against

    models = [("allops",) + allops_model(), ("float-input",) + float_model(), ("branches",) + branches_model()]
    for name, graph, tensors in models:
        blob = safetensors_bytes(tensors, {"producer": "tests/fuzz/make_seeds.py"} if name == "allops" else None)
        text = graph_text(graph, blob)
        weights[f"{name}.safetensors"] = blob
        seeds["graph"][f"{name}.json"] = text
        seeds["safetensors"][f"{name}.safetensors"] = blob
        seeds["model"][f"{name}.model"] = text + BLOB_SEPARATOR + blob
    seeds["safetensors"]["empty.safetensors"] = safetensors_bytes({})

    rng = np.random.default_rng(3)
    synthetic = rng.integers(0, 256, (2, 4, 4), dtype=np.uint8)
    seeds["idx"]["tiny-images-idx3-ubyte"] = idx_images(synthetic)
    seeds["idx"]["tiny-images-idx3-ubyte.gz"] = gzip.compress(idx_images(synthetic), mtime=0)
    seeds["idx"]["tiny-labels-idx1-ubyte"] = idx_labels(np.array([3, 7]))
    seeds["idx"]["tiny-labels-idx1-ubyte.gz"] = gzip.compress(idx_labels(np.array([3, 7])), mtime=0)
    floats = (np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) - 11.5) / 8  # exact in float32
    seeds["idx"]["tiny-floats.idx"] = idx_floats(floats)
    seeds["idx"]["tiny-floats.idx.gz"] = gzip.compress(idx_floats(floats.reshape(2, 12)), mtime=0)
    ramp = (np.add.outer(np.arange(12), np.arange(10)) * 11 % 256).astype(np.uint8)
    seeds["image"].update(image_seeds(ramp, "ramp"))

    if not args.synthetic_only:
        if args.models.is_dir():
            for graph_path in sorted(args.models.glob("*.json")):
                try:
                    graph = json.loads(graph_path.read_text())
                    blob_path = graph_path.parent / graph["weights"]["file"]
                    blob = blob_path.read_bytes()
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                text = graph_path.read_bytes()
                weights[blob_path.name] = blob
                seeds["graph"][graph_path.name] = text
                seeds["safetensors"][blob_path.name] = blob
                seeds["model"][graph_path.stem + ".model"] = text + BLOB_SEPARATOR + blob
        for path in find_mnist(args.data):
            array = read_idx(path)[: args.images]
            stem = path.name.replace(".gz", "")
            raw = idx_images(array) if array.ndim == 3 else idx_labels(array)
            seeds["idx"][f"real-{stem}"] = raw
            seeds["idx"][f"real-{stem}.gz"] = gzip.compress(raw, mtime=0)
            if array.ndim == 3:
                seeds["image"].update(image_seeds(array[0], "mnist0"))

    for target, files in seeds.items():
        folder = args.out / target
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    for name, data in weights.items():
        (args.out / name).write_bytes(data)
    print(f"seeds: {', '.join(f'{t} {len(f)}' for t, f in seeds.items())} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
