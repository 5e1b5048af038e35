"""The engine as a Python object: cnnengine.load() returns a Model that classifies NumPy arrays, and
(on a GPU backend) GPU arrays handed over through DLPack, with `engine run`'s exact outputs."""
from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

try:
    from . import _engine
except ImportError as e:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "cnnengine's compiled engine (cnnengine._engine) is not installed: run `pip install .` in the "
        f"repository (scripts/setup.sh does) ({e})") from e

EngineError = _engine.EngineError


def backends() -> list[dict[str, Any]]:
    """The backends built in, in the order `engine backends` lists them. Each is a dict: name,
    available (bool), default (the one load() takes without a backend), priority, and detail: what it
    runs on when available, otherwise why it cannot run here."""
    return _engine.backends()


class Model:
    """A model loaded and compiled for one backend. Thread-safe: concurrent calls run one batch at a
    time on the model's executable (make one Model per thread for parallel work)."""

    def __init__(self, session: "_engine.Session", path: str):
        self._session = session
        self.path = path

    @property
    def name(self) -> str:
        """The model's name from its graph file (e.g. 'lenet5')."""
        return self._session.name

    @property
    def backend(self) -> str:
        return self._session.backend

    @property
    def device(self) -> str:
        """What the backend runs on, e.g. 'fp32 SIMD kernels (AVX2+FMA), 2 threads'."""
        return self._session.device

    @property
    def input_name(self) -> str:
        return self._session.input_name

    @property
    def input_dtype(self) -> np.dtype:
        return np.dtype(self._session.input_dtype)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one raw image, as the model file gives it."""
        return self._session.input_shape

    @property
    def labels(self) -> list[str]:
        """Class names from the model file ([] when it has none)."""
        return list(self._session.labels)

    @property
    def classes(self) -> int:
        return self._session.classes

    @property
    def max_batch(self) -> int:
        """Images per engine call; run() splits larger inputs into batches of this size."""
        return self._session.max_batch

    def info(self) -> dict[str, Any]:
        """The model and its plan: name, graph and weights files, input (name, dtype, raw shape,
        preprocessing), outputs, labels, parameters, backend, device, execution path, max_batch."""
        return self._session.info()

    def run(self, images: Any) -> np.ndarray:
        """float32 [N, classes]: the model's first output (probabilities for the usual softmax models)
        for `images`: uint8 [N, H, W] (one channel) or [N, C, H, W], any N, as a NumPy array or any
        DLPack array (torch, CuPy, JAX). GPU arrays are read in place by the GPU backends. Raises
        ValueError for a wrong dtype, shape or device, EngineError when the engine fails."""
        if isinstance(images, np.ndarray):
            # The engine reads samples back to back; a C-ordered array passes through uncopied.
            images = np.ascontiguousarray(images)
        elif not hasattr(images, "__dlpack__"):
            raise TypeError(f"images must be a NumPy array or a DLPack array (torch, CuPy), "
                            f"not {type(images).__name__}")
        return self._session.run(images)

    def predict(self, images: Any) -> np.ndarray:
        """int64 [N]: the class of each image (the first output's argmax; on ties the first, as
        `engine run` picks)."""
        return self.run(images).argmax(axis=1)

    def __repr__(self) -> str:
        c, h, w = self.input_shape
        return (f"<cnnengine.Model {self.name!r} on {self.backend}: {self.input_dtype} [N, {c}, {h}, {w}] -> "
                f"[N, {self.classes}], max_batch {self.max_batch}>")


def load(path: "str | os.PathLike[str]", backend: Optional[str] = None, precision: str = "fp32",
         max_batch: Optional[int] = None, *, threads: int = 0, fuse: bool = True,
         deterministic: bool = True, cuda_graph: bool = True) -> Model:
    """Load a format v1 model (NAME.json beside NAME.safetensors) and compile it for a backend.

    backend: 'cpu', 'reference', 'custom', 'cudnn', or None for the best available (a GPU backend
    where a GPU is usable, else cpu), as `engine run` picks. precision: 'fp32', 'tf32' (GPU), 'fp16' / 'bf16' (cudnn: tensor cores; reference:
    emulated), 'int8' (reference: emulated; needs a calibrated model).
    max_batch: images per engine call (default: the backend's, as `engine run`: 256 on the CPU,
    65536 on a GPU). threads: CPU backends' threads (0: all cores). fuse, deterministic, cuda_graph:
    `engine run`'s --no-fuse, --nondeterministic and --no-cuda-graph, inverted.

    Raises FileNotFoundError for a missing graph file, EngineError (with the engine's message) for
    an unknown or unavailable backend or an invalid model, ValueError for bad arguments."""
    path = os.fspath(path)
    try:
        session = _engine.Session(path, backend or "", precision, max_batch, threads, fuse, deterministic,
                                  cuda_graph)
    except EngineError as e:
        if not os.path.exists(path):
            raise FileNotFoundError(2, str(e), path) from None
        raise
    return Model(session, path)
