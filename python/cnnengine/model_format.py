"""Model format v1 (formats/model-format-v1.md): writer, validating reader, reference interpreter.

A model in memory is a `Model`: the graph file's JSON object (`graph`) and the weights by tensor
name (`tensors`, float32 numpy arrays). `write_model` and `read_model` move it to and from the two
files; `validate` applies the spec's rules and returns every value's per-sample shape; `to_torch`
builds a torch.nn.Module that runs the graph (the reference the engine is compared with).

The reader is strict in the spec's order so that the Python side never accepts a file the engine
must reject; the C++ loader remains the authority on safetensors byte-level rules.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import re
import tempfile
from typing import Any

import numpy as np

FORMAT = "cnn-engine-model"
VERSION = 1
MAX_GRAPH_BYTES = 16 * 1024 * 1024
MAX_VALUE_ELEMENTS = 2**31 - 1
OPS = ("conv2d", "avgpool", "maxpool", "relu", "tanh", "sigmoid", "flatten", "dense", "softmax", "add",
       "scale_shift", "concat")
MAX_CONCAT_INPUTS = 4096
MAX_ARCHITECTURE_TENSOR_ELEMENTS = 2**28  # an architecture-only file's zero tensors, refused before allocation

# Per op: (required attrs, optional attrs, required tensor roles, optional tensor roles, input count)
_OP_RULES = {
    "conv2d": ({"out_channels", "kernel"}, {"stride", "padding"}, {"weight"}, {"bias"}, 1),
    "avgpool": ({"kernel", "count_include_pad"}, {"stride", "padding"}, set(), set(), 1),
    "maxpool": ({"kernel"}, {"stride", "padding"}, set(), set(), 1),
    "relu": (set(), set(), set(), set(), 1),
    "tanh": (set(), set(), set(), set(), 1),
    "sigmoid": (set(), set(), set(), set(), 1),
    "flatten": (set(), set(), set(), set(), 1),
    "dense": ({"units"}, set(), {"weight"}, {"bias"}, 1),
    "softmax": (set(), set(), set(), set(), 1),
    "add": (set(), set(), set(), set(), 2),
    "scale_shift": (set(), set(), {"scale", "shift"}, set(), 1),
    "concat": (set(), set(), set(), set(), None),  # 2 to MAX_CONCAT_INPUTS inputs
}


class ModelFormatError(ValueError):
    """A file or in-memory graph that breaks format v1. The message names file, node and problem."""


@dataclasses.dataclass
class Model:
    graph: dict[str, Any]
    tensors: dict[str, np.ndarray]
    path: pathlib.Path | None = None  # graph file it was read from or written to
    # False for an architecture-only graph (no "weights" key): every tensor is zeros of its shape.
    has_weights: bool = True

    @property
    def name(self) -> str:
        return self.graph["name"]

    @property
    def labels(self) -> list[str] | None:
        return self.graph.get("labels")

    def node(self, name: str) -> dict[str, Any]:
        for n in self.graph["nodes"]:
            if n["name"] == name:
                return n
        raise KeyError(name)

    def parameter_count(self) -> int:
        return int(sum(t.size for t in self.tensors.values()))


# --------------------------------------------------------------------------------------------------
# Validation

def _is_int(v) -> bool:
    # JSON true/false arrive as Python bools, which are ints; the spec's integers are not booleans.
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


class _Checker:
    def __init__(self, where: str):
        self.where = where

    def fail(self, msg: str, node: str | None = None):
        loc = self.where + (f": node '{node}'" if node is not None else "")
        raise ModelFormatError(f"{loc}: {msg}")

    def keys(self, obj, what: str, required: set[str], optional: set[str], node=None):
        if not isinstance(obj, dict):
            self.fail(f"{what} must be an object", node)
        missing = sorted(required - obj.keys())
        if missing:
            self.fail(f"{what} lacks required key(s) {', '.join(missing)}", node)
        unknown = sorted(obj.keys() - required - optional)
        if unknown:
            self.fail(f"{what} has unknown key(s) {', '.join(unknown)}", node)

    def int_list(self, v, what: str, length: int | None, minimum: int, node=None) -> list[int]:
        if not isinstance(v, list) or not all(_is_int(x) for x in v):
            self.fail(f"{what} must be an array of integers", node)
        if length is not None and len(v) != length:
            self.fail(f"{what} must have {length} entries, has {len(v)}", node)
        if any(x < minimum for x in v):
            self.fail(f"{what} entries must be >= {minimum}: {v}", node)
        return v

    def string(self, v, what: str, node=None, nonempty=True) -> str:
        if not isinstance(v, str) or (nonempty and not v):
            self.fail(f"{what} must be a {'non-empty ' if nonempty else ''}string", node)
        return v


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def topological_order(nodes: list[dict], input_name: str, where: str = "graph") -> list[int]:
    """Indices of `nodes` in execution order: Kahn's algorithm, ties broken by file order."""
    chk = _Checker(where)
    producer = {n["name"]: i for i, n in enumerate(nodes)}
    pending = []
    for i, n in enumerate(nodes):
        deps = set()
        for v in n["inputs"]:
            if v == input_name:
                continue
            if v not in producer:
                chk.fail(f"input '{v}' is not the model input nor any node's output", n["name"])
            deps.add(producer[v])
        pending.append(deps)
    order, done = [], set()
    while len(order) < len(nodes):
        ready = [i for i in range(len(nodes)) if i not in done and pending[i] <= done]
        if not ready:
            cyclic = [nodes[i]["name"] for i in range(len(nodes)) if i not in done]
            chk.fail(f"the graph has a cycle among nodes {', '.join(cyclic)}")
        order.append(ready[0])
        done.add(ready[0])
    return order


def _window(chk: _Checker, attrs: dict, name: str, default_stride_is_kernel: bool):
    kernel = chk.int_list(attrs["kernel"], "kernel", 2, 1, name)
    stride = chk.int_list(attrs.get("stride", kernel if default_stride_is_kernel else [1, 1]),
                          "stride", 2, 1, name)
    padding = chk.int_list(attrs.get("padding", [0, 0, 0, 0]), "padding", 4, 0, name)
    t, b, l, r = padding
    if t >= kernel[0] or b >= kernel[0] or l >= kernel[1] or r >= kernel[1]:
        chk.fail(f"padding {padding} must be smaller than the kernel {kernel} in each dimension", name)
    return kernel, stride, padding


def _window_out(chk, in_shape, kernel, stride, padding, name) -> tuple[int, int]:
    h, w = in_shape[1], in_shape[2]
    t, b, l, r = padding
    oh = (h + t + b - kernel[0]) // stride[0] + 1 if h + t + b >= kernel[0] else 0
    ow = (w + l + r - kernel[1]) // stride[1] + 1 if w + l + r >= kernel[1] else 0
    if oh < 1 or ow < 1:
        chk.fail(f"window {kernel} with padding {padding} does not fit input {list(in_shape)}", name)
    return oh, ow


def _check_calibration(chk, cal, names: set[str]) -> None:
    """The "calibration" object (model-format-v1.md, "Calibration"), as the C++ loader checks it."""
    if not isinstance(cal, dict):
        chk.fail("calibration must be an object")
    chk.keys(cal, "calibration", {"method", "images", "ranges"}, {"percentile", "data"})
    if cal["method"] not in ("max", "percentile"):
        chk.fail(f"calibration.method must be \"max\" or \"percentile\", is {cal['method']!r}")
    if cal["method"] == "percentile":
        if "percentile" not in cal:
            chk.fail("calibration method \"percentile\" needs 'percentile'")
        if not _is_number(cal["percentile"]) or not 0 < cal["percentile"] <= 100:
            chk.fail("calibration.percentile must be in (0, 100]")
    elif "percentile" in cal:
        chk.fail("calibration.percentile belongs to method \"percentile\" only")
    if not _is_int(cal["images"]) or cal["images"] < 1:
        chk.fail("calibration.images must be an integer >= 1")
    if "data" in cal and not isinstance(cal["data"], str):
        chk.fail("calibration.data must be a string")
    ranges = cal["ranges"]
    if not isinstance(ranges, dict) or not ranges:
        chk.fail("calibration.ranges must be an object naming at least one value")
    for name, v in ranges.items():
        if name not in names:
            chk.fail(f"calibration.ranges: '{name}' is not the input or a node of the graph")
        if not _is_number(v) or v < 0:
            chk.fail(f"calibration.ranges: the range of '{name}' must be a finite number >= 0")


def validate(graph: dict, tensors: dict[str, np.ndarray] | None, where: str = "model",
             sha256: str | None = None, shapes: bool = True,
             tensor_shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, tuple[int, ...]]:
    """Checks `graph` (and `tensors`, when given) against format v1, in the spec's order.

    `sha256`, when given, is the weights file's actual digest and must match the graph's.
    `shapes=False` stops before shape propagation (the reader's first pass, before the weights).
    `tensor_shapes`, when given, receives the shape each named tensor must have.
    A graph without "weights" is an architecture-only graph (the v1 amendment).
    Returns the per-sample shape of every value. Raises ModelFormatError naming `where` and the node.
    """
    chk = _Checker(where)
    chk.keys(graph, "the top level", {"format", "version", "name", "input", "nodes", "outputs"},
             {"description", "labels", "weights", "calibration"})
    if graph["format"] != FORMAT:
        chk.fail(f"format must be \"{FORMAT}\", is {graph['format']!r}")
    if not _is_int(graph["version"]) or graph["version"] != VERSION:
        chk.fail(f"unsupported version {graph['version']!r} (this reader knows version {VERSION})")
    chk.string(graph["name"], "name")
    if "description" in graph:
        chk.string(graph["description"], "description", nonempty=False)
    weights = graph.get("weights")
    wfile = "the architecture-only graph"
    if weights is not None:
        chk.keys(weights, "weights", {"file", "sha256"}, set())
        wfile = chk.string(weights["file"], "weights.file")
        wpath = pathlib.PurePosixPath(wfile)
        if wpath.is_absolute() or pathlib.PureWindowsPath(wfile).is_absolute() or ".." in wpath.parts \
                or "\\" in wfile:
            chk.fail(f"weights.file {wfile!r} must be a relative path without '..'")
        if not isinstance(weights["sha256"], str) or not re.fullmatch(r"[0-9a-f]{64}", weights["sha256"]):
            chk.fail("weights.sha256 must be 64 lowercase hex digits")

    # input
    inp = graph["input"]
    chk.keys(inp, "input", {"name", "dtype", "shape"}, {"preprocess"})
    input_name = chk.string(inp["name"], "input.name")
    if inp["dtype"] not in ("uint8", "float32"):
        chk.fail(f"input.dtype must be \"uint8\" or \"float32\", is {inp['dtype']!r}")
    shape = chk.int_list(inp["shape"], "input.shape", None, 1)
    if inp["dtype"] == "uint8":
        if len(shape) != 3:
            chk.fail(f"input.shape of a uint8 input must be [C, H, W], is {shape}")
        if "preprocess" not in inp:
            chk.fail("input.preprocess is required for a uint8 input")
        pre = inp["preprocess"]
        chk.keys(pre, "input.preprocess", {"scale", "mean", "std"}, {"pad", "pad_value"})
        if not _is_number(pre["scale"]) or pre["scale"] <= 0:
            chk.fail("input.preprocess.scale must be a positive finite number")
        for key in ("mean", "std"):
            v = pre[key]
            if not isinstance(v, list) or len(v) != shape[0] or not all(_is_number(x) for x in v):
                chk.fail(f"input.preprocess.{key} must hold {shape[0]} finite number(s), one per channel")
        if any(s <= 0 for s in pre["std"]):
            chk.fail("input.preprocess.std entries must be positive")
        pad = chk.int_list(pre.get("pad", [0, 0, 0, 0]), "input.preprocess.pad", 4, 0)
        if "pad_value" in pre and not _is_number(pre["pad_value"]):
            chk.fail("input.preprocess.pad_value must be a finite number")
        shape = [shape[0], shape[1] + pad[0] + pad[1], shape[2] + pad[2] + pad[3]]
    else:
        if not 1 <= len(shape) <= 3:
            chk.fail(f"input.shape of a float32 input must have rank 1 to 3, is {shape}")
        if "preprocess" in inp:
            chk.fail("input.preprocess must be absent for a float32 input")
    if _elements(shape) > MAX_VALUE_ELEMENTS:
        chk.fail(f"input value has {_elements(shape)} elements per sample, over 2^31 - 1")

    if "labels" in graph:
        labels = graph["labels"]
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            chk.fail("labels must be an array of strings")

    # nodes: structure, ops, attributes, roles
    nodes = graph["nodes"]
    if not isinstance(nodes, list) or not nodes:
        chk.fail("nodes must be a non-empty array")
    for i, n in enumerate(nodes):
        nname = n.get("name") if isinstance(n, dict) and isinstance(n.get("name"), str) else f"#{i}"
        chk.keys(n, "node", {"name", "op", "inputs"}, {"attrs", "tensors"}, nname)
        chk.string(n["name"], "name", f"#{i}")
        if n["op"] not in OPS:
            chk.fail(f"unknown op {n['op']!r}", nname)
        req_a, opt_a, req_t, opt_t, n_in = _OP_RULES[n["op"]]
        if not isinstance(n["inputs"], list) or not all(isinstance(x, str) for x in n["inputs"]):
            chk.fail("inputs must be an array of strings", nname)
        if n_in is None:
            if not 2 <= len(n["inputs"]) <= MAX_CONCAT_INPUTS:
                chk.fail(f"op {n['op']} takes 2 to {MAX_CONCAT_INPUTS} inputs, has {len(n['inputs'])}", nname)
        elif len(n["inputs"]) != n_in:
            chk.fail(f"op {n['op']} takes {n_in} input(s), has {len(n['inputs'])}", nname)
        chk.keys(n.get("attrs", {}), "attrs", req_a, opt_a, nname)
        chk.keys(n.get("tensors", {}), "tensors", req_t, opt_t, nname)
        for role, tname in n.get("tensors", {}).items():
            chk.string(tname, f"tensor name of role {role}", nname)

    # names
    seen = set()
    for n in nodes:
        if n["name"] == input_name:
            chk.fail("a node must not be named like the input", n["name"])
        if n["name"] in seen:
            chk.fail("duplicate node name", n["name"])
        seen.add(n["name"])
    outputs = graph["outputs"]
    if not isinstance(outputs, list) or not outputs or not all(isinstance(x, str) for x in outputs):
        chk.fail("outputs must be a non-empty array of strings")
    if len(set(outputs)) != len(outputs):
        chk.fail(f"outputs has duplicates: {outputs}")
    for o in outputs:
        if o not in seen:
            chk.fail(f"output '{o}' is not a node's output")
    order = topological_order(nodes, input_name, where)
    if "calibration" in graph:
        _check_calibration(chk, graph["calibration"], {input_name} | seen)

    # weights
    if sha256 is not None and weights is not None and sha256 != weights["sha256"]:
        chk.fail(f"weights file {wfile} has sha256 {sha256}, the graph says {weights['sha256']}")

    if not shapes:
        return {}
    # shapes (and, with tensors, their roles)
    shapes: dict[str, tuple[int, ...]] = {input_name: tuple(shape)}
    used: dict[str, str] = {}
    for i in order:
        n = nodes[i]
        name, op, attrs = n["name"], n["op"], n.get("attrs", {})
        ins = [shapes[v] for v in n["inputs"]]
        x = ins[0]
        if op in ("conv2d", "avgpool", "maxpool"):
            if len(x) != 3:
                chk.fail(f"{op} needs a [C, H, W] input, gets {list(x)}", name)
            kernel, stride, padding = _window(chk, attrs, name, op != "conv2d")
            oh, ow = _window_out(chk, x, kernel, stride, padding, name)
            if op == "conv2d":
                oc = attrs["out_channels"]
                if not _is_int(oc) or oc < 1:
                    chk.fail("out_channels must be an integer >= 1", name)
                expect = {"weight": (oc, x[0], kernel[0], kernel[1]), "bias": (oc,)}
                out = (oc, oh, ow)
            else:
                if op == "avgpool" and not isinstance(attrs["count_include_pad"], bool):
                    chk.fail("count_include_pad must be true or false", name)
                expect = {}
                out = (x[0], oh, ow)
        elif op in ("relu", "tanh", "sigmoid"):
            expect, out = {}, x
        elif op == "flatten":
            expect, out = {}, (_elements(x),)
        elif op in ("dense", "softmax"):
            if len(x) != 1:
                chk.fail(f"{op} needs a rank-1 input [K], gets {list(x)} (flatten first)", name)
            if op == "dense":
                units = attrs["units"]
                if not _is_int(units) or units < 1:
                    chk.fail("units must be an integer >= 1", name)
                expect, out = {"weight": (units, x[0]), "bias": (units,)}, (units,)
            else:
                expect, out = {}, x
        elif op == "add":
            if ins[0] != ins[1]:
                chk.fail(f"add needs equal shapes, gets {list(ins[0])} and {list(ins[1])}", name)
            expect, out = {}, x
        elif op == "scale_shift":
            # One scale and one shift per channel: the first dimension of the value.
            expect, out = {"scale": (x[0],), "shift": (x[0],)}, x
        elif op == "concat":
            for v, other in zip(n["inputs"][1:], ins[1:]):
                if len(other) != len(x) or tuple(other[1:]) != tuple(x[1:]):
                    chk.fail(f"concat joins along the first (channel) dimension, so every other dimension "
                             f"must be equal, but '{n['inputs'][0]}' is {list(x)} and '{v}' is {list(other)}",
                             name)
            expect, out = {}, (sum(s[0] for s in ins),) + tuple(x[1:])
        else:  # pragma: no cover - OPS and this chain are kept in step
            raise AssertionError(op)
        if _elements(out) > MAX_VALUE_ELEMENTS:
            chk.fail(f"output has {_elements(out)} elements per sample, over 2^31 - 1", name)
        shapes[name] = tuple(out)
        if tensor_shapes is not None:
            for role, tname in n.get("tensors", {}).items():
                if tname in tensor_shapes:
                    chk.fail(f"tensor '{tname}' is already used by another node", name)
                tensor_shapes[tname] = tuple(int(d) for d in expect[role])
        if tensors is not None:
            for role, tname in n.get("tensors", {}).items():
                if tname in used:
                    chk.fail(f"tensor '{tname}' is already used by {used[tname]}", name)
                used[tname] = f"node '{name}' role {role}"
                if tname not in tensors:
                    chk.fail(f"tensor '{tname}' (role {role}) is missing from {wfile}", name)
                t = tensors[tname]
                if t.dtype != np.float32:
                    chk.fail(f"tensor '{tname}' has dtype {t.dtype}, v1 needs F32", name)
                if tuple(t.shape) != expect[role]:
                    chk.fail(f"tensor '{tname}' (role {role}) has shape {list(t.shape)}, "
                             f"the node needs {list(expect[role])}", name)
    if tensors is not None:
        unused = sorted(set(tensors) - set(used))
        if unused:
            chk.fail(f"{wfile} holds tensor(s) no node uses: {', '.join(unused)}")
    if "labels" in graph and len(graph["labels"]) != _elements(shapes[outputs[0]]):
        chk.fail(f"labels has {len(graph['labels'])} entries, the first output '{outputs[0]}' "
                 f"has {_elements(shapes[outputs[0]])} elements")
    return shapes


# --------------------------------------------------------------------------------------------------
# Files

def _format_graph(graph: dict) -> str:
    """Readable JSON with one node per line, so a diff of two models shows which nodes changed."""
    lines = ["{"]
    items = list(graph.items())
    for i, (k, v) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        if k == "nodes":
            body = ",\n".join("    " + json.dumps(n, ensure_ascii=False) for n in v)
            lines.append(f'  "nodes": [\n{body}\n  ]{comma}')
        else:
            lines.append(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _temp_beside(path: pathlib.Path, data: bytes) -> pathlib.Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; a model file is as readable as any file the user creates.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return pathlib.Path(tmp)


def serialize_weights(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    from safetensors.numpy import save
    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    return save(arrays, metadata=metadata)


def write_model(path: str | os.PathLike, graph: dict, tensors: dict[str, np.ndarray],
                producer: str = "python/cnnengine") -> Model:
    """Writes NAME.json and its weights file (graph['weights']['file'], default NAME.safetensors).

    The weights' sha256 is filled in. Both files are first written to temporary files in the target
    folder and then renamed over the targets, weights first, so no half-written file is ever seen
    and the graph never names a blob that is not there.
    """
    path = pathlib.Path(path)
    graph = json.loads(json.dumps(graph))  # a private deep copy; also proves it is JSON
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    wfile = graph.get("weights", {}).get("file") or path.with_suffix(".safetensors").name
    blob = serialize_weights(tensors, {"producer": producer})
    sha = hashlib.sha256(blob).hexdigest()
    ordered = {"format": FORMAT, "version": VERSION}
    ordered.update({k: v for k, v in graph.items() if k not in ("format", "version", "weights")})
    ordered["weights"] = {"file": wfile, "sha256": sha}
    # Keep the spec's key order for readability: weights right after name/description.
    key_order = ["format", "version", "name", "description", "weights", "input", "labels", "nodes", "outputs"]
    graph = {k: ordered[k] for k in key_order if k in ordered}
    graph.update({k: v for k, v in ordered.items() if k not in graph})
    validate(graph, tensors, where=str(path))
    text = _format_graph(graph).encode("utf-8")
    if len(text) > MAX_GRAPH_BYTES:
        raise ModelFormatError(f"{path}: graph file would be {len(text)} bytes, over 16 MiB")

    path.parent.mkdir(parents=True, exist_ok=True)
    wpath = path.parent / wfile
    tmp_w = _temp_beside(wpath, blob)
    try:
        tmp_g = _temp_beside(path, text)
    except BaseException:
        os.unlink(tmp_w)
        raise
    os.replace(tmp_w, wpath)
    os.replace(tmp_g, path)
    return Model(graph, tensors, path)


def read_model(path: str | os.PathLike) -> Model:
    """Reads and validates a graph file and its weights; ModelFormatError on any broken rule."""
    path = pathlib.Path(path)
    where = str(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ModelFormatError(f"{where}: cannot read the graph file: {e.strerror}") from None
    if size > MAX_GRAPH_BYTES:
        raise ModelFormatError(f"{where}: graph file is {size} bytes, over 16 MiB")

    def no_duplicates(pairs):
        obj = {}
        for k, v in pairs:
            if k in obj:
                raise ModelFormatError(f"{where}: duplicate key {k!r}")
            obj[k] = v
        return obj

    try:
        graph = json.loads(path.read_bytes().decode("utf-8"), object_pairs_hook=no_duplicates,
                           parse_constant=lambda c: (_ for _ in ()).throw(
                               ModelFormatError(f"{where}: {c} is not JSON")))
    except UnicodeDecodeError as e:
        raise ModelFormatError(f"{where}: not UTF-8: {e}") from None
    except json.JSONDecodeError as e:
        raise ModelFormatError(f"{where}: invalid JSON: {e}") from None
    if not isinstance(graph, dict):
        raise ModelFormatError(f"{where}: the top level must be a JSON object")
    # Everything that needs no weights first, as the spec orders the checks.
    validate(graph, None, where, shapes=False)
    if "weights" not in graph:
        # An architecture-only graph: every named tensor is zeros of the shape its node requires.
        shapes: dict[str, tuple[int, ...]] = {}
        validate(graph, None, where, tensor_shapes=shapes)
        for tname, shape in shapes.items():
            if _elements(shape) > MAX_ARCHITECTURE_TENSOR_ELEMENTS:
                raise ModelFormatError(f"{where}: tensor '{tname}' would hold {_elements(shape)} values, over 2^28")
        tensors = {tname: np.zeros(shape, np.float32) for tname, shape in shapes.items()}
        validate(graph, tensors, where)
        return Model(graph, tensors, path, has_weights=False)
    wpath = path.parent / graph["weights"]["file"]
    try:
        blob = wpath.read_bytes()
    except OSError as e:
        raise ModelFormatError(f"{where}: cannot read weights file {wpath}: {e.strerror}") from None
    sha = hashlib.sha256(blob).hexdigest()
    if sha != graph["weights"]["sha256"]:
        raise ModelFormatError(f"{where}: weights file {wpath.name} has sha256 {sha}, "
                               f"the graph says {graph['weights']['sha256']}")
    tensors = load_weights(blob, str(wpath))
    validate(graph, tensors, where)
    return Model(graph, tensors, path)


def load_weights(blob: bytes, where: str = "weights") -> dict[str, np.ndarray]:
    """Tensors of a safetensors blob; dtypes other than F32 come back as they are, for validate()
    to name the tensor (the package itself rejects what numpy cannot hold, e.g. BF16)."""
    from safetensors.numpy import load
    try:
        tensors = load(blob)
    except Exception as e:
        raise ModelFormatError(f"{where}: not a valid safetensors file: {e}") from None
    return {k: np.ascontiguousarray(v) for k, v in tensors.items()}


# --------------------------------------------------------------------------------------------------
# Reference interpreter

def preprocess_numpy(graph: dict, x: np.ndarray) -> np.ndarray:
    """The spec's preprocessing in float32 numpy: [N, C, H, W] uint8 -> [N, C, H', W'] float32."""
    inp = graph["input"]
    if inp["dtype"] == "float32":
        return np.asarray(x, dtype=np.float32)
    pre = inp["preprocess"]
    scale = np.float32(pre["scale"])
    mean = np.asarray(pre["mean"], np.float32)[None, :, None, None]
    std = np.asarray(pre["std"], np.float32)[None, :, None, None]
    y = (x.astype(np.float32) * scale - mean) / std
    t, b, l, r = pre.get("pad", [0, 0, 0, 0])
    return np.pad(y, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=np.float32(pre.get("pad_value", 0.0)))


def to_torch(model: Model):
    """A torch.nn.Module that runs `model`'s graph: forward(x) takes the raw input batch
    (uint8 [N, C, H, W], or float32 [N, *shape]) and returns the first output, or a tuple of all
    outputs when the graph has several.

    Parameters are float32 as stored; `.to(torch.float64)` makes a wider reference (preprocessing
    stays float32, as the spec fixes it, and is then widened). `.to('cuda')` runs it on a GPU.
    Only long-standing torch.nn.functional calls are used, so it runs on torch 1.13 through 2.x.
    """
    from . import _torch_graph
    graph = model.graph
    shapes = validate(graph, model.tensors, where=str(model.path or graph.get("name", "model")))
    order = topological_order(graph["nodes"], graph["input"]["name"])
    return _torch_graph.GraphModule(graph, model.tensors, shapes, order)
