"""The engine as a Python object: cnnengine.load() returns a Model that classifies NumPy arrays,
torch tensors and (on a GPU backend) GPU arrays handed over through DLPack, with `engine run`'s
exact outputs; raw uint8 images or float32 ones already preprocessed; any node's output by name."""
import json
import os
import pathlib
import re
import tempfile
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

try:
    from . import _engine
except ImportError as e:  # pragma: no cover - depends on how the package was installed
    raise ImportError(
        "cnnengine's compiled engine (cnnengine._engine) is not installed: run `pip install .` in the "
        f"repository (scripts/setup.sh does) ({e})") from e

EngineError = _engine.EngineError

# Files load() imports on the fly (through cnnengine.export, with its numerical check).
IMPORTED_SUFFIXES = {".onnx": "onnx", ".keras": "keras", ".h5": "keras", ".hdf5": "keras"}
# The name run(outputs=...) takes for the scores before a final softmax or sigmoid.
LOGITS = "logits"


def backends() -> List[Dict[str, Any]]:
    """The backends built in, in the order `engine backends` lists them. Each is a dict: name,
    available (bool), default (the one load() takes without a backend), priority, detail (what it
    runs on when available, otherwise why it cannot run here) and precisions."""
    return _engine.backends()


def _python_words(message: str) -> str:
    """The engine's message with its command-line advice said as load()'s keywords."""
    message = re.sub(r"--(backend|precision|threads|devices)[ =]?([\w,]+)?",
                     lambda m: f"{m.group(1)}='{m.group(2)}'" if m.group(2) else f"{m.group(1)}=", message)
    message = re.sub(r"--batch[ =]?(\d+)?", lambda m: f"max_batch={m.group(1) or ''}", message)
    return message.replace("`engine backends`", "cnnengine.backends()")


def _engine_error(e: Exception) -> Exception:
    return EngineError(_python_words(str(e)))


class Model:
    """A model loaded and compiled for one backend. Thread-safe: concurrent calls run one batch at a
    time on the model's executable (make one Model per thread for parallel work)."""

    def __init__(self, options: dict, graph_path: str, path: str, keep: Any = None, report: Any = None):
        self._options = options  # the _engine.Session keywords every compiled form shares
        self._graph_path = graph_path
        self._keep = keep  # the scratch folder of an imported model: variants compile from it
        self.path = path
        self.export_report = report  # the numerical check of an imported model (None for .json)
        graph = json.loads(pathlib.Path(graph_path).read_text(encoding="utf8"))
        self._nodes = {n["name"]: n for n in graph["nodes"]}
        self._lock = threading.Lock()
        self._sessions: Dict[Tuple[Tuple[str, ...], bool], Any] = {}
        self._session = self._compiled((), False)

    def _compiled(self, outputs: tuple, preprocessed: bool) -> Any:
        """The Session for one set of outputs and input kind, compiled on first use."""
        key = (outputs, preprocessed)
        with self._lock:
            if key not in self._sessions:
                try:
                    self._sessions[key] = _engine.Session(self._graph_path, outputs=list(outputs),
                                                          preprocessed=preprocessed, **self._options)
                except EngineError as e:
                    raise _engine_error(e) from None
            return self._sessions[key]

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
        """The dtype of the raw input (uint8 images, or float32 for a model without preprocessing)."""
        return np.dtype(self._session.input_dtype)

    @property
    def input_shape(self) -> Tuple[int, ...]:
        """(C, H, W) of one raw image as the model file gives it ((K,) for a vector model)."""
        return self._session.input_shape

    @property
    def preprocessed_shape(self) -> Tuple[int, ...]:
        """(C, H, W) of one float32 preprocessed (and padded) input, as the first layer sees it."""
        return self._session.model_input_shape

    @property
    def preprocess(self) -> Optional[dict]:
        """How raw pixels become the model's input: scale, mean, std, pad, pad_value (None for a
        float32-input model)."""
        return self.info()["input"].get("preprocess")

    @property
    def outputs(self) -> List[str]:
        """The model's output names; run() returns the first unless told otherwise."""
        return list(self._session.outputs)

    @property
    def nodes(self) -> List[str]:
        """Every node name: each is an output run(outputs=[...]) can return."""
        return list(self._nodes)

    @property
    def labels(self) -> List[str]:
        """Class names from the model file ([] when it has none)."""
        return list(self._session.labels)

    @property
    def classes(self) -> int:
        return self._session.classes

    @property
    def max_batch(self) -> int:
        """Images per engine call; run() splits larger inputs into batches of this size."""
        return self._session.max_batch

    def info(self) -> Dict[str, Any]:
        """The model and its plan: name, graph and weights files, input (name, dtype, raw shape,
        preprocessing), outputs, labels, parameters, backend, device, execution path, max_batch."""
        return self._session.info()

    def _node_for(self, name: str) -> str:
        if name != LOGITS or LOGITS in self._nodes:
            if name not in self._nodes:
                raise ValueError(f"model {self.name!r} has no output {name!r}; outputs= takes node names "
                                 f"({', '.join(self._nodes)}) or {LOGITS!r}")
            return name
        last = self._nodes[self.outputs[0]]
        # The scores before a final softmax or sigmoid; a model that ends without one gives them already.
        return last["inputs"][0] if last["op"] in ("softmax", "sigmoid") else last["name"]

    def _as_array(self, images: Any) -> Tuple[Any, bool]:
        """(an array the engine reads, whether `images` was a single image)."""
        if type(images).__module__.startswith("torch") and hasattr(images, "detach"):
            images = images.detach()
            if images.device.type == "cpu":
                images = images.numpy()  # a view with the tensor's strides: made contiguous below
            elif not images.is_contiguous():
                images = images.contiguous()
        if isinstance(images, np.ndarray):
            images = np.ascontiguousarray(images)  # the engine reads samples back to back
        elif not hasattr(images, "__dlpack__"):
            raise TypeError(f"images must be a NumPy array, a torch tensor or a DLPack array (CuPy, JAX), "
                            f"not {type(images).__name__}")
        dtype = np.dtype(str(images.dtype).replace("torch.", ""))
        if dtype not in (np.uint8, np.float32) or (self.input_dtype == np.float32 and dtype != np.float32):
            raise ValueError(f"images are {dtype}; model {self.name!r} takes {self._accepted()}")
        c = (self.preprocessed_shape if dtype == np.float32 else self.input_shape)[0]
        shape = tuple(images.shape)
        single = len(shape) == 2 and c == 1 or (len(shape) == 3 and c != 1 and shape[0] == c)
        if single:
            if not isinstance(images, np.ndarray):
                raise ValueError(f"a single image of shape {list(shape)} must be a NumPy array or a CPU tensor; "
                                 "give GPU arrays a batch dimension")
            images = images[None]
        return images, single

    def _accepted(self) -> str:
        if len(self.input_shape) != 3:  # a vector model ([K]) or another rank: [N, *shape]
            return f"{self.input_dtype} [N, {', '.join(map(str, self.input_shape))}]"
        c, h, w = self.input_shape
        raw = f"[N, {h}, {w}], [{h}, {w}] or [N, {c}, {h}, {w}]" if c == 1 else f"[N, {c}, {h}, {w}] or [{c}, {h}, {w}]"
        if self.input_dtype == np.float32:
            return f"float32 {raw}"
        pc, ph, pw = self.preprocessed_shape
        return f"uint8 {raw} (raw pixels), or float32 [N, {pc}, {ph}, {pw}] already preprocessed"

    def run(self, images: Any, outputs: Union[None, str, Sequence[str]] = None) -> Any:
        """The model's outputs for `images`, a NumPy array, a torch tensor (any strides) or a DLPack
        array (CuPy, JAX; GPU arrays are read in place by the GPU backends):

        - uint8 raw images [N, H, W] (one channel) or [N, C, H, W]; a single image [H, W] (or
          [C, H, W] with C > 1) gives outputs without the batch dimension;
        - float32 images already preprocessed (scaled, normalised and padded as `preprocess` says),
          [N, C, H', W'] of `preprocessed_shape`.

        outputs: None for the first output (float32 [N, classes]: probabilities for a softmax
        model); a node name or 'logits' (the scores before a final softmax or sigmoid) for that
        one array; a list of them for a list of arrays in that order.
        Raises ValueError for a wrong dtype, shape, device or output name, EngineError when the
        engine fails."""
        array, single = self._as_array(images)
        preprocessed = self.input_dtype == np.uint8 and np.dtype(str(array.dtype).replace("torch.", "")) == np.float32
        names = [outputs] if isinstance(outputs, str) else list(outputs or [])
        nodes = tuple(self._node_for(n) for n in names)
        session = self._compiled(nodes if nodes != tuple(self.outputs) else (), preprocessed)
        try:
            results = session.run(array)
        except EngineError as e:
            raise _engine_error(e) from None
        if single:
            results = [r[0] for r in results]
        if outputs is None or isinstance(outputs, str):
            return results[0]
        return results

    def predict(self, images: Any) -> np.ndarray:
        """int64 [N]: the class of each image (the first output's argmax; on ties the first, as
        `engine run` picks); a single image gives one int64."""
        return np.asarray(self.run(images)).argmax(axis=-1)

    def __repr__(self) -> str:
        dims = ", ".join(map(str, self.input_shape))
        return (f"<cnnengine.Model {self.name!r} on {self.backend}: {self.input_dtype} [N, {dims}] -> "
                f"[N, {self.classes}], max_batch {self.max_batch}>")


def _import(path: str, kind: str, preprocessing: dict) -> Tuple[str, Any, Any]:
    """(graph file, scratch folder holding it, check report) of an ONNX or Keras file."""
    from . import export
    from .export_args import PreprocessingMissing
    try:
        if kind == "onnx":
            exported = export.from_onnx(path, log=lambda text: None, **preprocessing)
        else:
            exported = export.from_keras(path, log=lambda text: None, **preprocessing)
    except PreprocessingMissing as e:
        raise ValueError(str(e)) from None
    except export.ExportError as e:
        raise ValueError(f"{path}: cannot import: {e}") from None
    scratch = tempfile.TemporaryDirectory(prefix="cnnengine-")
    graph = pathlib.Path(scratch.name) / f"{exported.name}.json"
    exported.save(graph)
    return str(graph), scratch, exported.report


def load(path: Union[str, os.PathLike], backend: Optional[str] = None, precision: str = "fp32",
         max_batch: Optional[int] = None, *, threads: int = 0, fuse: bool = True, deterministic: bool = True,
         cuda_graph: bool = True, preset: Optional[str] = None, scale: Optional[float] = None,
         mean: Optional[Sequence[float]] = None, std: Optional[Sequence[float]] = None,
         transforms: Optional[str] = None) -> Model:
    """Load a model and compile it for a backend.

    path: a format v1 graph (NAME.json beside NAME.safetensors), or an ONNX (.onnx) or Keras
    (.keras, .h5) file, imported on the fly with `cnnengine-export`'s numerical check (the report is
    the model's export_report). An imported file states how raw pixels become its input where it
    holds that (a Keras Rescaling layer, a leading Div/Sub/Mul in ONNX); otherwise give preset=
    ('mnist', 'imagenet', 'unit', 'raw', 'symmetric': cnnengine.preprocessing.PRESETS) or scale=
    with mean= and std= (the input is (x * scale - mean) / std), or transforms= (the torchvision
    pipeline as written in Python, "ToTensor(), Normalize((0.1307,), (0.3081,))"). A .json records
    its own.

    backend: 'cpu', 'reference', 'custom', 'cudnn', or None for the best available (a GPU backend
    where a GPU is usable, else cpu), as `engine run` picks. precision: 'fp32', 'tf32' (GPU),
    'fp16' / 'bf16' (cudnn: tensor cores; reference: emulated), 'int8' (needs a calibrated model).
    max_batch: images per engine call (default: the backend's, as `engine run`: 256 on the CPU,
    65536 on a GPU). threads: CPU backends' threads (0: all cores). fuse, deterministic, cuda_graph:
    `engine run`'s --no-fuse, --nondeterministic and --no-cuda-graph, inverted.

    Raises FileNotFoundError for a missing file, ValueError for bad arguments or a file that cannot
    be imported (naming what to pass), EngineError (with the engine's message) for an unknown or
    unavailable backend or an invalid model."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(2, f"{path}: graph file not found", path)  # as the engine says it
    options = {"backend": backend or "", "precision": precision, "max_batch": max_batch, "threads": threads,
               "fuse": fuse, "deterministic": deterministic, "cuda_graph": cuda_graph}
    preprocessing = {"preset": preset, "scale": scale, "mean": mean, "std": std, "transforms": transforms}
    kind = IMPORTED_SUFFIXES.get(pathlib.Path(path).suffix.lower())
    if kind is None:
        given = [k for k, v in preprocessing.items() if v is not None]
        if given:
            raise ValueError(f"{path}: a format v1 model records its own preprocessing; "
                             f"{', '.join(k + '=' for k in given)} apply to .onnx, .keras and .h5 files")
        return Model(options, path, path)
    graph, scratch, report = _import(path, kind, preprocessing)
    return Model(options, graph, path, keep=scratch, report=report)
