#!/usr/bin/env python3
"""Writes a corpus of malformed inputs for the `engine` CLI, derived from the real models and data.

    tests/python/corpus/make_malformed_corpus.py OUT_DIR [--models DIR] [--data IDX_FILE] [--max-truncations N]

Every case is a set of files (a broken model: graph + weights; or a broken data, labels or image
file) and the engine command that reads them. Each case is broken *by construction*, so that the
engine must refuse it: exit code 1 and one "error: FILE: problem" line on stderr, no crash, no
sanitizer report, no hang (tests/python/test_malformed_corpus.py runs them all).

Sources: every model in --models (default models/) whose weights file exists, plus a small
synthetic model that uses every op of format v1 (so the corpus exists before any model is trained),
and the first images of the MNIST test set (--data, default data/mnist or ../shared/data/mnist;
random images when there is none). The primary model (lenet5, else the first taking 28x28 uint8
images; its data cases run with it) gets every case; each other model --max-cases-per-model of
its cases, evenly spread, so the corpus stays near 3,000 cases as models are added.

Kinds of damage (the `category` of each case in manifest.json):
  graph-truncated      the graph file cut at every structural boundary ({ } [ ] , : "); for models
                       other than the primary one (the first taking MNIST), --max-truncations of them
  graph-flipped        high bit flipped / structural byte replaced at structural positions
  graph-key            a key misspelled (every key of the file, one at a time)
  graph-semantic       names, outputs, labels, versions, paths, sha256, cycles, duplicates, ...
  graph-absurd         absurd dimensions and attributes; models whose work or memory are absurd
  weights-truncated    the weights file cut at every boundary (length, header tokens, tensors)
  weights-flipped      flipped bytes in the length field and the header
  weights-dtype        a tensor stored with another dtype (valid safetensors), or an unknown one
  weights-shape        a tensor with a wrong shape (transposed, reshaped, grown, shrunk)
  weights-swapped      two tensors' names or two roles swapped
  weights-semantic     safetensors rules: gaps, overlaps, trailing bytes, offsets, metadata, ...
  idx / gzip / labels / png / jpeg / pgm / data   broken data files fed to `engine run`/`show`

The weights file's sha256 is kept matching in the graph (except where the mismatch is the
point), so that damage to the weights reaches the safetensors rules instead of the checksum.

Writes OUT_DIR/manifest.json: {"cases": [{"id", "category", "description", "args"}...]} with
paths relative to OUT_DIR (run the engine from there), and OUT_DIR/valid/ (the intact inputs the
cases are derived from, with the commands that must succeed: "controls").
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import pathlib
import shutil
import struct
import sys
import zlib

import numpy as np

try:
    from PIL import Image
except ImportError:  # pragma: no cover - Pillow comes with Debian's matplotlib
    Image = None

ROOT = pathlib.Path(__file__).resolve().parents[3]
from cnnengine import allops  # noqa: E402
STRUCTURAL = b'{}[],:"'

# ---- safetensors -------------------------------------------------------------------------------

DTYPES = {"F16": "<f2", "BF16": None, "F64": "<f8", "I32": "<i4", "I64": "<i8", "U8": "u1", "BOOL": "?",
          "I16": "<i2", "U16": "<u2", "U32": "<u4", "U64": "<u8", "I8": "i1"}


def st_pack(entries: list[tuple[str, dict]], data: bytes, pad: bool = True, raw_header: bytes | None = None) -> bytes:
    """Safetensors bytes from header entries (name, value) in order, exactly as given."""
    if raw_header is None:
        raw_header = ("{" + ",".join(json.dumps(k) + ":" + json.dumps(v, separators=(",", ":"))
                                     for k, v in entries) + "}").encode()
    if pad:
        raw_header += b" " * ((8 - len(raw_header) % 8) % 8)
    return struct.pack("<Q", len(raw_header)) + raw_header + data


def st_parse(blob: bytes) -> tuple[list[tuple[str, dict]], bytes, int]:
    """(header entries in order, data buffer, header length) of a valid safetensors file."""
    n = struct.unpack("<Q", blob[:8])[0]
    entries = json.loads(blob[8:8 + n], object_pairs_hook=list)
    entries = [(k, dict(v) if isinstance(v, list) else v) for k, v in entries]
    return entries, blob[8 + n:], n


def st_from_arrays(tensors: list[tuple[str, str, list[int], bytes]], metadata: dict | None = None) -> bytes:
    """Safetensors from (name, dtype, shape, raw bytes), offsets laid out in order."""
    entries: list[tuple[str, dict]] = []
    if metadata is not None:
        entries.append(("__metadata__", metadata))
    data = b""
    for name, dtype, shape, raw in tensors:
        entries.append((name, {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}))
        data += raw
    return st_pack(entries, data)


def st_tensors(blob: bytes) -> tuple[list[tuple[str, str, list[int], bytes]], dict | None]:
    entries, data, _ = st_parse(blob)
    tensors, metadata = [], None
    for name, entry in entries:
        if name == "__metadata__":
            metadata = entry
            continue
        b, e = entry["data_offsets"]
        tensors.append((name, entry["dtype"], list(entry["shape"]), data[b:e]))
    return tensors, metadata


# ---- models ------------------------------------------------------------------------------------

def synthetic_model() -> tuple[dict, bytes]:
    """Every op of format v1: uint8 [1, 28, 28] (MNIST-sized), two outputs, labels."""
    graph, tensors = allops.allops_model(size=28, kernel=5, pad=2, seed=5, conv_scale=0.2, dense_scale=0.05,
                                         description="synthetic model using every op (malformed corpus source)")
    blob = st_from_arrays([(n, "F32", list(a.shape), a.astype("<f4").tobytes()) for n, a in tensors.items()],
                          {"producer": "tests/python/corpus/make_malformed_corpus.py"})
    graph["weights"]["sha256"] = hashlib.sha256(blob).hexdigest()
    return graph, blob


class Model:
    def __init__(self, name: str, graph_text: bytes, blob: bytes):
        self.name = name
        self.text = graph_text
        self.graph = json.loads(graph_text)
        self.blob = blob
        self.weights_name = self.graph["weights"]["file"]

    def graph_copy(self) -> dict:
        return json.loads(json.dumps(self.graph))

    def takes_mnist(self) -> bool:
        i = self.graph["input"]
        return i.get("dtype") == "uint8" and i.get("shape") == [1, 28, 28]


def real_models(folder: pathlib.Path) -> list[Model]:
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            graph = json.loads(path.read_text())
            blob = (path.parent / graph["weights"]["file"]).read_bytes()
            if hashlib.sha256(blob).hexdigest() != graph["weights"]["sha256"]:
                continue
            st_parse(blob)
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            continue
        out.append(Model(path.stem, path.read_bytes(), blob))
    return out


# ---- data --------------------------------------------------------------------------------------

def find_mnist(explicit: str | None) -> pathlib.Path | None:
    if explicit:
        return pathlib.Path(explicit)
    for folder in (ROOT / "data" / "mnist", ROOT.parent / "shared" / "data" / "mnist"):
        for name in ("t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte"):
            if (folder / name).is_file():
                return folder / name
    return None


def read_idx(path: pathlib.Path) -> np.ndarray:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def idx_images(images: np.ndarray) -> bytes:
    n, h, w = images.shape
    return struct.pack(">IIII", 0x803, n, h, w) + images.astype(np.uint8).tobytes()


def idx_labels(labels) -> bytes:
    labels = np.asarray(labels, np.uint8)
    return struct.pack(">II", 0x801, len(labels)) + labels.tobytes()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_gray(img: np.ndarray, width: int | None = None, height: int | None = None, depth: int = 8,
             color: int = 0) -> bytes:
    h, w = img.shape
    raw = b"".join(b"\x00" + img[y].astype(np.uint8).tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", width if width is not None else w, height if height is not None else h,
                       depth, color, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9))
            + png_chunk(b"IEND", b""))


def png_chunks(png: bytes) -> list[tuple[int, bytes, int]]:
    """(offset, type, total length) of each chunk."""
    out, at = [], 8
    while at + 8 <= len(png):
        n = struct.unpack(">I", png[at:at + 4])[0]
        out.append((at, png[at + 4:at + 8], 12 + n))
        at += 12 + n
    return out


def jpeg_bytes(img: np.ndarray, **kw) -> bytes | None:
    if Image is None:
        return None
    buf = io.BytesIO()
    Image.fromarray(img.astype(np.uint8), "L").save(buf, "JPEG", **kw)
    return buf.getvalue()


def jpeg_markers(jpg: bytes) -> list[int]:
    """Offsets of the markers before the scan data, and of the EOI."""
    out, at = [0], 2
    while at + 4 <= len(jpg) and jpg[at] == 0xFF:
        marker = jpg[at + 1]
        out.append(at)
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            break
        at += 2 + struct.unpack(">H", jpg[at + 2:at + 4])[0]
    out.append(len(jpg) - 2)
    return out


# ---- the corpus --------------------------------------------------------------------------------

class Corpus:
    def __init__(self, out: pathlib.Path):
        self.out = out
        self.cases: list[dict] = []
        self.controls: list[list[str]] = []
        self.counter = 0
        if out.exists():
            shutil.rmtree(out)
        (out / "cases").mkdir(parents=True)
        (out / "valid").mkdir()

    def add(self, category: str, description: str, files: dict[str, bytes], args: list[str],
            sparse: dict[str, int] | None = None) -> None:
        """`args` may name the case's files as {name}; other paths are relative to the corpus."""
        case_id = f"{self.counter:05d}-{category}"
        self.counter += 1
        folder = self.out / "cases" / case_id
        folder.mkdir()
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        for name, size in (sparse or {}).items():
            with open(folder / name, "r+b" if (folder / name).exists() else "wb") as f:
                f.truncate(size)
        rel = f"cases/{case_id}"
        names = list(files) + list(sparse or {})

        def expand(arg: str) -> str:
            for name in names:
                arg = arg.replace("{" + name + "}", f"{rel}/{name}")
            return arg
        self.cases.append({"id": case_id, "category": category, "description": description,
                           "args": [expand(a) for a in args]})

    def keep_evenly(self, since: int, limit: int) -> None:
        """Keeps `limit` of the cases added since case number `since`, evenly spread."""
        added = self.cases[since:]
        kept = evenly(added, limit)
        for case in added:
            if case not in kept:
                shutil.rmtree(self.out / "cases" / case["id"])
        self.cases[since:] = kept

    def valid(self, name: str, data: bytes) -> str:
        (self.out / "valid" / name).write_bytes(data)
        return f"valid/{name}"

    # A model case: graph text + weights bytes. `command`: "info", or "run" on the valid images.
    def model(self, category: str, description: str, graph: bytes | dict, blob: bytes | None,
              weights_name: str, command: str = "info", fix_sha: bool = False, extra: dict | None = None) -> None:
        if isinstance(graph, dict):
            graph = json.loads(json.dumps(graph))
            if fix_sha and blob is not None and isinstance(graph.get("weights"), dict):
                graph["weights"]["sha256"] = hashlib.sha256(blob).hexdigest()
            graph = (json.dumps(graph, indent=1) + "\n").encode()
        files = {"model.json": graph}
        if blob is not None:
            files[weights_name] = blob
        files.update(extra or {})
        args = ["info", "{model.json}"] if command == "info" else \
            ["run", "{model.json}", self.images_path, "--backend", "cpu", "-q"]
        self.add(category, description, files, args)

    def data(self, category: str, description: str, data: bytes, name: str = "data", command: str = "run",
             labels: bytes | None = None, sparse: int | None = None) -> None:
        files = {name: data}
        if labels is not None:
            files["labels"] = labels
        if command == "run":
            args = ["run", self.model_path, "{" + name + "}", "--backend", "cpu", "-q"]
            if labels is not None:
                args += ["--labels", "{labels}"]
        else:
            args = ["show", "{" + name + "}"]
        self.add(category, description, files, args, sparse={name: sparse} if sparse else None)


def structural_positions(text: bytes) -> list[int]:
    """Offsets of JSON's structural bytes: { } [ ] , : outside strings, and the quotes that open and
    close strings (a comma inside a description is text, and replacing it keeps the file valid)."""
    out, in_string, escaped = [], False, False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:
                in_string = False
                out.append(i)
        elif c == 0x22:
            in_string = True
            out.append(i)
        elif c in STRUCTURAL:
            out.append(i)
    return out


def evenly(items: list, limit: int | None) -> list:
    if limit is None or len(items) <= limit:
        return items
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


# ---- model damage ------------------------------------------------------------------------------

def graph_cases(c: Corpus, m: Model, max_trunc: int | None) -> None:
    text, blob, wn = m.text, m.blob, m.weights_name
    end = len(text.rstrip())
    # Truncations: right after every structural byte (and the empty file); a prefix that lacks the
    # final '}' is never valid JSON.
    cuts = sorted({0} | {i + 1 for i in structural_positions(text) if i + 1 < end})
    for cut in evenly(cuts, max_trunc):
        c.model("graph-truncated", f"{m.name}.json cut to {cut} of {len(text)} bytes", text[:cut], blob, wn)
    # Flips at structural bytes: high bit (never valid UTF-8 then), or the byte replaced by 'x'.
    for i in evenly(structural_positions(text), 60 if max_trunc is None else 15):
        flipped = bytearray(text)
        flipped[i] ^= 0x80
        c.model("graph-flipped", f"{m.name}.json byte {i} {chr(text[i])!r} with its high bit flipped", bytes(flipped), blob, wn)
        replaced = bytearray(text)
        replaced[i] = ord("x")
        c.model("graph-flipped", f"{m.name}.json byte {i} {chr(text[i])!r} replaced by 'x'", bytes(replaced), blob, wn)
    # Every key misspelled once (unknown keys are errors at every level; a required one goes missing).
    seen = 0
    at = 0
    while True:
        at = text.find(b'":', at)
        if at < 0:
            break
        start = text.rfind(b'"', 0, at)
        key = text[start + 1:at]
        if key and key[:1].isalpha():
            bad = text[:start + 1] + key[:1].swapcase() + key[1:] + text[at:]
            c.model("graph-key", f"{m.name}.json key {key.decode()!r} at byte {start} misspelled", bad, blob, wn)
            seen += 1
        at += 2


def graph_semantic_cases(c: Corpus, m: Model) -> None:
    g0, blob, wn = m.graph, m.blob, m.weights_name

    def case(desc: str, mutate, category: str = "graph-semantic", command: str = "info", blob_=None, extra=None):
        g = m.graph_copy()
        mutate(g)
        c.model(category, f"{m.name}: {desc}", g, blob if blob_ is None else blob_, wn, command, extra=extra)

    def setk(path, value):
        def f(g):
            obj = g
            for k in path[:-1]:
                obj = obj[k]
            obj[path[-1]] = value
        return f

    def delk(path):
        def f(g):
            obj = g
            for k in path[:-1]:
                obj = obj[k]
            del obj[path[-1]]
        return f

    nodes = g0["nodes"]
    names = [n["name"] for n in nodes]
    inp = g0["input"]["name"]
    param_nodes = [i for i, n in enumerate(nodes) if n.get("tensors")]
    window_nodes = [i for i, n in enumerate(nodes) if n["op"] in ("conv2d", "maxpool", "avgpool")]
    conv_nodes = [i for i, n in enumerate(nodes) if n["op"] == "conv2d"]
    dense_nodes = [i for i, n in enumerate(nodes) if n["op"] == "dense"]

    # top level
    for k in ("format", "version", "name", "input", "nodes", "outputs"):
        case(f"required key '{k}' removed", delk([k]))
    # Without 'weights' a graph is architecture-only (format v1, amended for engine train): engine
    # info reads it, engine run must refuse it.
    case("key 'weights' removed (architecture-only): engine run", delk(["weights"]), command="run")
    for v in ("cnn-engine-modell", "", "CNN-ENGINE-MODEL", 1):
        case(f"format {v!r}", setk(["format"], v))
    for v in (2, 0, -1, "1", 1.0, True, None, 2**64):
        case(f"version {v!r}", setk(["version"], v))
    for v in ("", 5, None, ["x"]):
        case(f"name {v!r}", setk(["name"], v))
    case("description is a number", setk(["description"], 7))
    case("unknown top-level key", setk(["extra"], 1))
    # weights
    for v in ("", "/etc/passwd", "../" + wn, "sub/../../" + wn, "missing.safetensors", ".", "model.json", 5, None):
        case(f"weights.file {v!r}", setk(["weights", "file"], v))
    sha = g0["weights"]["sha256"]
    for desc, v in (("uppercase", sha.upper()), ("63 digits", sha[:63]), ("65 digits", sha + "0"),
                    ("of another file", hashlib.sha256(b"other").hexdigest()), ("not hex", "g" * 64), ("number", 5)):
        case(f"weights.sha256 {desc}", setk(["weights", "sha256"], v))
    case("weights has an extra key", setk(["weights", "size"], 1))
    case("weights is a string", setk(["weights"], wn))
    # input
    for v in ("", 3, None):
        case(f"input.name {v!r}", setk(["input", "name"], v))
    case("input named like a node", setk(["input", "name"], names[-1]))
    for v in ("float16", "UINT8", "", None):
        case(f"input.dtype {v!r}", setk(["input", "dtype"], v))
    case("float32 input with preprocess", setk(["input", "dtype"], "float32"))
    case("uint8 input without preprocess", delk(["input", "preprocess"]))
    for k in ("scale", "mean", "std"):
        case(f"preprocess.{k} removed", delk(["input", "preprocess", k]))
    for v in (0, -1, 1e39, "0.5", None, float("nan")):
        case(f"preprocess.scale {v!r}", setk(["input", "preprocess", "scale"], v))
    chans = g0["input"]["shape"][0]
    for v in ([], [0.5] * (chans + 1), ["a"] * chans, 0.5):
        case(f"preprocess.mean {v!r}", setk(["input", "preprocess", "mean"], v))
    for v in ([0.0] * chans, [-1.0] * chans, [1e39] * chans, [float("inf")] * chans):
        case(f"preprocess.std {v!r}", setk(["input", "preprocess", "std"], v))
    for v in ([-1, 0, 0, 0], [2, 2, 2], [2, 2, 2, 2, 2], [2.5, 2, 2, 2], [2**31, 0, 0, 0], "2"):
        case(f"preprocess.pad {v!r}", setk(["input", "preprocess", "pad"], v))
    for v in (1e39, "0", None):
        case(f"preprocess.pad_value {v!r}", setk(["input", "preprocess", "pad_value"], v))
    case("preprocess has an extra key", setk(["input", "preprocess", "gamma"], 1.0))
    # labels and outputs
    labels = g0.get("labels")
    if labels:
        case("labels one short", setk(["labels"], labels[:-1]))
        case("labels one too many", setk(["labels"], labels + ["extra"]))
        case("labels are numbers", setk(["labels"], list(range(len(labels)))))
    case("labels empty", setk(["labels"], []))
    case("labels is a string", setk(["labels"], "0123456789"))
    for v in ([], ["nonexistent"], [names[-1], names[-1]], [inp], "prob", [3]):
        case(f"outputs {v!r}", setk(["outputs"], v))
    # nodes
    case("nodes empty", setk(["nodes"], []))
    case("nodes is an object", setk(["nodes"], {"a": 1}))
    case("a node is a string", lambda g: g["nodes"].__setitem__(0, "conv"))
    case("two nodes with the same name", lambda g: g["nodes"][1].__setitem__("name", names[0]))
    case("a node with an empty name", lambda g: g["nodes"][0].__setitem__("name", ""))
    case("a node named like the input", lambda g: g["nodes"][0].__setitem__("name", inp))
    for v in ("Conv2D", "gelu", "", 7):
        case(f"op {v!r}", lambda g, v=v: g["nodes"][0].__setitem__("op", v))
    case("a node without op", lambda g: g["nodes"][0].pop("op"))
    case("a node without inputs", lambda g: g["nodes"][0].pop("inputs"))
    case("a node reading an unknown value", lambda g: g["nodes"][0].__setitem__("inputs", ["ghost"]))
    case("a one-input op given two inputs", lambda g: g["nodes"][0].__setitem__("inputs", [inp, inp]))
    case("a node with no inputs", lambda g: g["nodes"][0].__setitem__("inputs", []))
    case("inputs is a string", lambda g: g["nodes"][0].__setitem__("inputs", inp))
    case("a node with an unknown key", lambda g: g["nodes"][0].__setitem__("comment", "x"))
    for i in [j for j, n in enumerate(nodes) if n["op"] in ("relu", "tanh", "sigmoid", "softmax", "flatten")][:2]:
        case(f"node {names[i]} ({nodes[i]['op']}) with attributes",
             lambda g, i=i: g["nodes"][i].__setitem__("attrs", {"alpha": 1}))
    # cycles
    case("cycle: the first node reads the last", lambda g: g["nodes"][0].__setitem__("inputs", [g["outputs"][0]]), "graph-semantic")
    case("cycle: a node reads itself", lambda g: g["nodes"][1].__setitem__("inputs", [g["nodes"][1]["name"]]))
    if len(nodes) >= 3:
        case("cycle: two nodes read each other",
             lambda g: (g["nodes"][1].__setitem__("inputs", [g["nodes"][2]["name"]]),
                        g["nodes"][2].__setitem__("inputs", [g["nodes"][1]["name"]])))
        case("cycle: nodes listed backwards and looped",
             lambda g: (g["nodes"].reverse(), g["nodes"][-1].__setitem__("inputs", [g["nodes"][0]["name"]])))
    # tensor roles
    for i in param_nodes[:2]:
        case(f"node {names[i]}: tensors removed", lambda g, i=i: g["nodes"][i].pop("tensors"))
        case(f"node {names[i]}: weight role removed", lambda g, i=i: g["nodes"][i]["tensors"].pop("weight"))
        case(f"node {names[i]}: unknown role", lambda g, i=i: g["nodes"][i]["tensors"].__setitem__("scale", "x"))
        case(f"node {names[i]}: weight names a missing tensor",
             lambda g, i=i: g["nodes"][i]["tensors"].__setitem__("weight", "missing.weight"))
        case(f"node {names[i]}: weight name empty", lambda g, i=i: g["nodes"][i]["tensors"].__setitem__("weight", ""))
        case(f"node {names[i]}: bias role dropped (tensor unused)", lambda g, i=i: g["nodes"][i]["tensors"].pop("bias", None)
             or g["nodes"][i]["tensors"].__setitem__("weight", "missing"))
    if len(param_nodes) >= 2:
        a, b = param_nodes[0], param_nodes[1]
        case("two nodes' tensors swapped", lambda g: (lambda ta, tb: (g["nodes"][a].__setitem__("tensors", tb),
                                                                   g["nodes"][b].__setitem__("tensors", ta)))(
            g["nodes"][a]["tensors"], g["nodes"][b]["tensors"]), "weights-swapped")
        case("two nodes share one weight", lambda g: g["nodes"][b]["tensors"].__setitem__(
            "weight", g["nodes"][a]["tensors"]["weight"]), "weights-swapped")
    for i in param_nodes:
        t = nodes[i]["tensors"]
        if "bias" in t:
            case(f"node {names[i]}: weight and bias roles swapped",
                 lambda g, i=i: g["nodes"][i].__setitem__("tensors", {"weight": t["bias"], "bias": t["weight"]}),
                 "weights-swapped")
    # absurd dimensions and attributes
    for v in ([0, 28, 28], [-1, 28, 28], [1, 28], [1, 28, 28, 1], [1, 2**31, 2**31], [2**32, 2**32, 2**32],
              [1, 46341, 46341], [1, 28.0, 28], ["1", 28, 28], [1, 2**63, 1], [1, -2**63, 1], [], 28):
        case(f"input.shape {v!r}", setk(["input", "shape"], v), "graph-absurd")
    for i in window_nodes[:3]:
        for k, vals in (("kernel", ([0, 0], [-1, 5], [5], [5, 5, 5], [2**31, 5], [2**31 - 1, 2**31 - 1], [65536, 1], "5", [5.0, 5])),
                        ("stride", ([0, 1], [-1, -1], [2**31, 1], [1])),
                        ("padding", ([-1, 0, 0, 0], [0, 0, 0], [9, 9, 9, 9], [2**31 - 1, 0, 0, 0]))):
            for v in vals:
                case(f"node {names[i]}: {k} {v!r}", lambda g, i=i, k=k, v=v: g["nodes"][i].setdefault("attrs", {}).__setitem__(k, v),
                     "graph-absurd")
        case(f"node {names[i]}: unknown attribute", lambda g, i=i: g["nodes"][i].setdefault("attrs", {}).__setitem__("dilation", [1, 1]),
             "graph-absurd")
    for i in conv_nodes[:2]:
        oc = nodes[i]["attrs"]["out_channels"]
        for v in (0, -oc, oc + 1, 2**31, 10**9, "6", None):
            case(f"node {names[i]}: out_channels {v!r}", lambda g, i=i, v=v: g["nodes"][i]["attrs"].__setitem__("out_channels", v),
                 "graph-absurd")
    for i in dense_nodes[:2]:
        u = nodes[i]["attrs"]["units"]
        for v in (0, -1, u + 1, 2**31, 7.5):
            case(f"node {names[i]}: units {v!r}", lambda g, i=i, v=v: g["nodes"][i]["attrs"].__setitem__("units", v), "graph-absurd")
    for i in [j for j, n in enumerate(nodes) if n["op"] == "avgpool"][:1]:
        case("avgpool without count_include_pad", lambda g, i=i: g["nodes"][i]["attrs"].pop("count_include_pad"), "graph-absurd")
        case("avgpool count_include_pad 1", lambda g, i=i: g["nodes"][i]["attrs"].__setitem__("count_include_pad", 1), "graph-absurd")
    # A flatten moved before a conv (rank mismatch), dense without flatten.
    for i in dense_nodes[:1]:
        case("dense on a rank-3 value", lambda g, i=i: g["nodes"][i].__setitem__("inputs", [inp]), "graph-absurd")
    flat = [n["name"] for n in nodes if n["op"] == "flatten"]
    for i in conv_nodes[:1] if flat else []:
        case("conv2d on a rank-1 value", lambda g, i=i: g["nodes"][i].__setitem__("inputs", [flat[0]]), "graph-absurd")
    # Text-level damage that a dict cannot express.
    text = m.text
    c.model("graph-semantic", f"{m.name}: duplicate key 'name' at the top", text.replace(b"{", b'{"name": "dup", ', 1), blob, wn)
    for version in (b'"version": 1', b'"version":1'):
        if version in text:
            c.model("graph-semantic", f"{m.name}: NaN literal", text.replace(version, b'"version": NaN', 1), blob, wn)
            break
    c.model("graph-semantic", f"{m.name}: trailing garbage", text + b"}", blob, wn)
    c.model("graph-semantic", f"{m.name}: a second object after the first", text + text, blob, wn)
    c.model("graph-semantic", f"{m.name}: Latin-1 byte in a string", text.replace(b'"name"', b'"n\xe9me"', 1), blob, wn)
    c.model("graph-semantic", f"{m.name}: NUL byte", text[:10] + b"\x00" + text[10:], blob, wn)
    c.model("graph-semantic", f"{m.name}: UTF-16", text.decode().encode("utf-16"), blob, wn)
    c.model("graph-semantic", f"{m.name}: nested 100 levels deep", text.rstrip()[:-1] + b', "x": ' + b"[" * 100 + b"]" * 100 + b"}",
            blob, wn)
    c.model("graph-semantic", f"{m.name}: 5000 keys in one object",
            text.rstrip()[:-1] + b", " + b", ".join(b'"k%d": 0' % i for i in range(5000)) + b"}", blob, wn)
    c.model("graph-semantic", f"{m.name}: the weights file empty", m.graph_copy(), b"", wn)
    c.model("graph-semantic", f"{m.name}: the weights file absent", m.graph_copy(), None, wn)
    c.model("graph-semantic", f"{m.name}: the weights file is a folder", m.graph_copy(), None, wn,
            extra={wn + "/x": b""})
    c.model("graph-semantic", f"{m.name}: the graph file is the weights file", blob, blob, wn)


def absurd_models(c: Corpus) -> None:
    """Files that follow every rule of the format yet ask for absurd memory or work: refused at plan time."""
    blob = st_pack([], b"")
    sha = hashlib.sha256(blob).hexdigest()

    def model(desc, input_spec, nodes, outputs, command="info"):
        g = {"format": "cnn-engine-model", "version": 1, "name": "absurd",
             "weights": {"file": "w.safetensors", "sha256": sha}, "input": input_spec, "nodes": nodes, "outputs": outputs}
        c.model("graph-absurd", desc, g, blob, "w.safetensors", command)

    mnist = {"name": "image", "dtype": "uint8", "shape": [1, 28, 28],
             "preprocess": {"scale": 1.0, "mean": [0.0], "std": [1.0]}}
    for k, command in ((2**30, "info"), (2**30, "run"), (4096, "info"), (4096, "run"), (65536, "run")):
        model(f"maxpool {k}x{k} window, padding {k - 1}: each sample is a huge value and/or huge work ({command})", mnist,
              [{"name": "p", "op": "maxpool", "inputs": ["image"],
                "attrs": {"kernel": [k, k], "stride": [1, 1], "padding": [k - 1] * 4}}], ["p"], command)
    model("avgpool with a 1 x 2^30 window over a padded row (run)", mnist,
          [{"name": "p", "op": "avgpool", "inputs": ["image"],
            "attrs": {"kernel": [1, 2**30], "stride": [1, 1], "padding": [0, 0, 2**30 - 1, 2**30 - 1],
                      "count_include_pad": True}}], ["p"], "run")
    model("chain of poolings growing the value to 2^31 - 1 elements", {"name": "x", "dtype": "float32", "shape": [1, 1, 1]},
          [{"name": "a", "op": "maxpool", "inputs": ["x"], "attrs": {"kernel": [46340, 46340], "stride": [1, 1],
                                                                     "padding": [46339] * 4}},
           {"name": "b", "op": "relu", "inputs": ["a"]}], ["b"])
    model("float32 input of 2^31 - 1 elements", {"name": "x", "dtype": "float32", "shape": [2**31 - 1]},
          [{"name": "s", "op": "softmax", "inputs": ["x"]}], ["s"])
    model("uint8 input of 16384 x 16384 (1 GiB floats per value)",
          {"name": "x", "dtype": "uint8", "shape": [1, 16384, 16384], "preprocess": {"scale": 1.0, "mean": [0.0], "std": [1.0]}},
          [{"name": "r", "op": "relu", "inputs": ["x"]}], ["r"])
    nodes = [{"name": "n0", "op": "relu", "inputs": ["x"]}] + \
        [{"name": f"n{i}", "op": "relu", "inputs": [f"n{i - 1}"]} for i in range(1, 5000)]
    model("5000 nodes", {"name": "x", "dtype": "float32", "shape": [4]}, nodes, ["n4999"])


def weights_cases(c: Corpus, m: Model, max_trunc: int | None) -> None:
    g, blob, wn = m.graph, m.blob, m.weights_name
    entries, data, n = st_parse(blob)
    header_end = 8 + n

    def case(category, desc, new_blob, fix_sha=True, command="info"):
        c.model(category, f"{m.name}: {desc}", g, new_blob, wn, command, fix_sha=fix_sha)

    # Truncations: every byte of the length field, after every structural byte of the header, the
    # header's end, every tensor's start, middle and end, and the last byte.
    cuts = set(range(0, 8)) | {8 + i + 1 for i in structural_positions(blob[8:header_end])} | {header_end}
    for _, e in entries:
        if isinstance(e, dict) and "data_offsets" in e:
            b, en = e["data_offsets"]
            cuts |= {header_end + b, header_end + (b + en) // 2, header_end + en}
    cuts |= {len(blob) - 1}
    cuts = sorted(x for x in cuts if x < len(blob))
    for cut in evenly(cuts, max_trunc):
        case("weights-truncated", f"weights cut to {cut} of {len(blob)} bytes", blob[:cut])
    case("weights-truncated", "weights cut in half, sha256 not updated", blob[:len(blob) // 2], fix_sha=False)
    case("weights-truncated", "weights cut in half (run)", blob[:len(blob) // 2], command="run")
    # Flipped bytes: the length field, then the header's structural bytes.
    for i in range(8):
        for x in (0x01, 0x80, 0xFF):
            flipped = bytearray(blob)
            flipped[i] ^= x
            case("weights-flipped", f"length byte {i} xor {x:#04x}", bytes(flipped))
    for i in evenly(structural_positions(blob[8:header_end]), 40 if max_trunc is None else 10):
        for how in ("high bit", "x"):
            flipped = bytearray(blob)
            if how == "x":
                flipped[8 + i] = ord("x")
            else:
                flipped[8 + i] ^= 0x80
            case("weights-flipped", f"header byte {i} {chr(blob[8 + i])!r}: {how}", bytes(flipped))
    flipped = bytearray(blob)
    flipped[len(blob) - 1] ^= 0x01
    case("weights-flipped", "last data byte flipped, sha256 not updated", bytes(flipped), fix_sha=False)

    tensors, metadata = st_tensors(blob)
    floats = {name: np.frombuffer(raw, "<f4") for name, dtype, shape, raw in tensors}
    # Wrong dtypes: each tensor stored (validly) in another dtype; unknown dtype names.
    for k, (name, _, shape, raw) in enumerate(tensors):
        for dt in ("F16", "BF16", "F64", "I32", "U8", "BOOL", "I64"):
            if DTYPES[dt] is None:  # bfloat16: the top halves of the float32s
                new_raw = b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))
            else:
                new_raw = floats[name].astype(DTYPES[dt]).tobytes()
            t2 = list(tensors)
            t2[k] = (name, dt, shape, new_raw)
            case("weights-dtype", f"tensor {name} stored as {dt}", st_from_arrays(t2, metadata))
        if k >= 3:
            break
    name, _, shape, raw = tensors[0]
    for dt in ("f32", "F33", "float32", "", 32, None, ["F32"]):
        ents = [(nm, e) for nm, e in entries]
        ents = [(nm, dict(e, dtype=dt) if nm == name else e) for nm, e in ents]
        case("weights-dtype", f"tensor {name} dtype {dt!r}", st_pack(ents, data))
    # Wrong shapes.
    for k, (name, dt, shape, raw) in enumerate(tensors):
        a = floats[name].reshape(shape)
        variants = [("leading 1 added", [1] + shape, raw), ("flattened", [int(a.size)], raw) if len(shape) > 1 else None,
                    ("transposed", list(reversed(shape)), a.T.copy().astype("<f4").tobytes()) if len(shape) > 1 and shape != shape[::-1] else None,
                    ("first dimension + 1", [shape[0] + 1] + shape[1:], raw + b"\0" * (len(raw) // shape[0])),
                    ("first dimension - 1", [shape[0] - 1] + shape[1:], raw[: len(raw) - len(raw) // shape[0]]) if shape[0] > 1 else None,
                    ("scalar", [], raw[:4]), ("empty", [0] + shape[1:], b"")]
        for v in variants:
            if v is None:
                continue
            desc, new_shape, new_raw = v
            t2 = list(tensors)
            t2[k] = (name, dt, new_shape, new_raw)
            case("weights-shape", f"tensor {name} {desc}: {new_shape}", st_from_arrays(t2, metadata))
    # Swapped tensors (names exchanged between tensors of different shapes), missing, extra.
    for i in range(len(tensors)):
        for j in range(i + 1, len(tensors)):
            if tensors[i][2] != tensors[j][2] and (i + j) % 2 == 1:
                t2 = list(tensors)
                t2[i], t2[j] = (tensors[j][0],) + tensors[i][1:], (tensors[i][0],) + tensors[j][1:]
                case("weights-swapped", f"tensors {tensors[i][0]} and {tensors[j][0]} swapped", st_from_arrays(t2, metadata))
    if tensors[0][2] != tensors[-1][2]:
        t2 = list(tensors)
        t2[0], t2[-1] = (tensors[0][0],) + tensors[-1][1:], (tensors[-1][0],) + tensors[0][1:]
        case("weights-swapped", "first and last tensors' data swapped", st_from_arrays(t2, metadata))
    for k in range(len(tensors)):
        case("weights-semantic", f"tensor {tensors[k][0]} missing", st_from_arrays(tensors[:k] + tensors[k + 1:], metadata))
    case("weights-semantic", "an unused extra tensor", st_from_arrays(tensors + [("extra", "F32", [1], b"\0\0\0\0")], metadata))
    case("weights-semantic", "a tensor renamed", st_from_arrays([(tensors[0][0] + "_", ) + tensors[0][1:]] + tensors[1:], metadata))
    case("weights-semantic", "a tensor with an empty name", st_from_arrays([("",) + tensors[0][1:]] + tensors[1:], metadata))
    # safetensors rules, one at a time (header edited, data kept).
    first = next(nm for nm, e in entries if nm != "__metadata__")

    def edit(desc, fn, new_data=None, raw_header=None):
        ents = [(nm, dict(e) if isinstance(e, dict) else e) for nm, e in entries]
        fn(ents)
        case("weights-semantic", desc, st_pack(ents, data if new_data is None else new_data, raw_header=raw_header))

    def entry(ents, nm):
        return next(e for k, e in ents if k == nm)

    edit("4 trailing bytes", lambda e: None, data + b"\0\0\0\0")
    last = max((e for k, e in entries if k != "__metadata__"), key=lambda e: e["data_offsets"][1])
    lb, le = last["data_offsets"]
    edit("a gap of 4 bytes before the first tensor",
         lambda ents: [e.__setitem__("data_offsets", [e["data_offsets"][0] + 4, e["data_offsets"][1] + 4])
                       for k, e in ents if k != "__metadata__"], b"\0\0\0\0" + data)
    edit("two tensors overlap", lambda ents: entry(ents, first).__setitem__("data_offsets", [lb, le]) if entry(ents, first) is not last else None)
    edit("offsets past the end", lambda ents: entry(ents, first).__setitem__(
        "data_offsets", [len(data), len(data) + entry(ents, first)["data_offsets"][1] - entry(ents, first)["data_offsets"][0]]))
    for v in ([5, 1], [0], [0, 1, 2], [-4, 0], [0.0, 4.0], "0,4", None, [0, 2**64], [2**64, 2**64 + 4]):
        edit(f"data_offsets {v!r}", lambda ents, v=v: entry(ents, first).__setitem__("data_offsets", v))
    for v in ([-1], [2**32, 2**32, 2], [2**62, 8], [1.5], ["6"], None, 6):
        edit(f"shape {v!r}", lambda ents, v=v: entry(ents, first).__setitem__("shape", v))
    edit("an entry with an extra key", lambda ents: entry(ents, first).__setitem__("extra", 1))
    edit("an entry without dtype", lambda ents: entry(ents, first).pop("dtype"))
    edit("an entry that is a list", lambda ents: ents.__setitem__(
        next(i for i, (k, _) in enumerate(ents) if k == first), (first, [1, 2, 3])))
    edit("__metadata__ with a number", lambda ents: ents.insert(0, ("__metadata__", {"epochs": 3})))
    edit("__metadata__ is a string", lambda ents: ents.insert(0, ("__metadata__", "x")))
    hdr = blob[8:header_end]
    case("weights-semantic", "duplicate tensor key", st_pack([], data, raw_header=hdr.rstrip()[:-1] + b"," +
                                                               json.dumps(first).encode() + b":" +
                                                               json.dumps(entry(entries, first)).encode() + b"}"))
    case("weights-semantic", "header is an array", st_pack([], data, raw_header=b"[" + hdr.strip()[1:-1] + b"]"))
    case("weights-semantic", "header is not JSON", st_pack([], data, raw_header=b"not json"))
    case("weights-semantic", "header length 0", struct.pack("<Q", 0) + data)
    case("weights-semantic", "header length 2^64 - 1", b"\xff" * 8 + blob[8:])
    case("weights-semantic", "header length just over the 100 MB limit", struct.pack("<Q", 100_000_001) + blob[8:])
    case("weights-semantic", "header with invalid UTF-8", st_pack([], data, raw_header=hdr.replace(b'"', b'"\xc3\x28', 1)))
    case("weights-semantic", "header with a NUL", st_pack([], data, raw_header=hdr[:3] + b"\0" + hdr[4:]))
    case("weights-semantic", "all zeros", b"\0" * len(blob))
    case("weights-semantic", "8 bytes only", blob[:8])
    case("weights-semantic", "a graph file instead of weights", m.text)
    case("weights-semantic", "5000 tensors", st_from_arrays([(f"t{i}", "F32", [0], b"") for i in range(5000)]))


# ---- data damage -------------------------------------------------------------------------------

def data_cases(c: Corpus, images: np.ndarray, labels: np.ndarray, classes: int) -> None:
    idx = idx_images(images)
    n = len(images)
    # IDX: truncations at every header byte and image boundary, extra bytes, header fields.
    for cut in sorted(set(range(0, 17)) | {16 + 784 * k for k in range(1, n)} | {16 + 392, len(idx) - 1}):
        c.data("idx", f"IDX images cut to {cut} of {len(idx)} bytes", idx[:cut])
    c.data("idx", "one extra byte", idx + b"\0")
    c.data("idx", "one extra image", idx + idx[16:16 + 784])
    for pos, values in ((0, (1, 0x80, 0xFF)), (1, (1, 8)), (2, (0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0xFF)),
                        (3, (0, 1, 2, 4, 0xFF))):
        for v in values:
            b = bytearray(idx)
            b[pos] = v
            c.data("idx", f"IDX header byte {pos} = {v:#04x}", bytes(b))
    for field, offset in (("count", 4), ("rows", 8), ("columns", 12)):
        for v in (0, 1, 27, 29, 4_000_000_000, 0xFFFFFFFF, n + 1) if field == "count" else (0, 1, 27, 29, 56, 0xFFFFFFFF):
            b = bytearray(idx)
            b[offset:offset + 4] = struct.pack(">I", v)
            c.data("idx", f"IDX {field} = {v}", bytes(b))
    c.data("idx", "IDX 14x56 images (the model takes 28x28)", struct.pack(">IIII", 0x803, n, 14, 56) + idx[16:])
    c.data("idx", "IDX labels file given as images", idx_labels(labels))
    for cut in (0, 3, 15, 100):
        c.data("idx", f"IDX cut to {cut} bytes (show)", idx[:cut], command="show")
    # gzip
    gz = gzip.compress(idx, mtime=0)
    for cut in sorted(set(range(0, 20)) | set(range(20, len(gz), max(1, len(gz) // 40))) | {len(gz) - 8, len(gz) - 4, len(gz) - 1}):
        c.data("gzip", f"gzip cut to {cut} of {len(gz)} bytes", gz[:cut])
    body = range(10, len(gz) - 10)  # not the last deflate bytes: their padding bits are unused
    for i in evenly(list(body), 30):
        b = bytearray(gz)
        b[i] ^= 0x55
        c.data("gzip", f"gzip body byte {i} flipped", bytes(b))
    for i in range(len(gz) - 8, len(gz)):
        b = bytearray(gz)
        b[i] ^= 0x01
        c.data("gzip", f"gzip trailer byte {i} (CRC-32/ISIZE) flipped", bytes(b))
    b = bytearray(gz)
    b[2] = 7
    c.data("gzip", "gzip compression method 7", bytes(b))
    c.data("gzip", "gzip with trailing garbage", gz + b"garbage")
    c.data("gzip", "gzip with a truncated second member", gz + gz[:30])
    c.data("gzip", "gzip of a truncated IDX", gzip.compress(idx[:-1], mtime=0))
    c.data("gzip", "gzip of an IDX claiming 4e9 images", gzip.compress(struct.pack(">IIII", 0x803, 4_000_000_000, 28, 28)
                                                                       + idx[16:], mtime=0))
    c.data("gzip", "gzip of a PNG", gzip.compress(png_gray(images[0]), mtime=0))
    c.data("gzip", "gzip of nothing", gzip.compress(b"", mtime=0))
    c.data("gzip", "gzip (show) cut in half", gz[:len(gz) // 2], command="show")
    # A decompression bomb: 1 GiB + 1 MiB of zeros after an IDX header, about 1 MiB compressed.
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [comp.compress(struct.pack(">IIII", 0x803, 1_370_000, 28, 28))]
    zeros = bytes(1 << 20)
    for _ in range(1025):
        parts.append(comp.compress(zeros))
    parts.append(comp.flush())
    c.data("gzip", "decompression bomb: 1 MiB of gzip inflating past the 1 GiB limit", b"".join(parts))
    # Labels.
    lab = idx_labels(labels)
    c.data("labels", "labels: one label short", idx, labels=idx_labels(labels[:-1]))
    c.data("labels", "labels: one label too many", idx, labels=idx_labels(list(labels) + [1]))
    c.data("labels", f"labels: a label equal to the class count {classes}", idx, labels=idx_labels([classes] + list(labels[1:])))
    c.data("labels", "labels: a label 255", idx, labels=idx_labels(list(labels[:-1]) + [255]))
    c.data("labels", "labels: an images file", idx, labels=idx)
    c.data("labels", "labels: truncated", idx, labels=lab[:-1])
    c.data("labels", "labels: count field 0", idx, labels=lab[:4] + b"\0\0\0\0" + lab[8:])
    c.data("labels", "labels: gzip cut short", idx, labels=gzip.compress(lab, mtime=0)[:-3])
    c.data("labels", "labels: empty file", idx, labels=b"")
    # PNG
    img = images[0]
    png = png_gray(img)
    chunks = png_chunks(png)
    # Up to the end of the image data: libpng (and so the engine) does not read on past it, so a
    # damaged IEND chunk after complete pixels is not an error (formats/README.md, PNG).
    cuts = {0, 4, 8}
    for off, kind, length in chunks:
        cuts |= {off, off + 4, off + 8, off + 8 + (length - 12) // 2, off + length - 4, off + length - 1}
    iend = next(off for off, kind, _ in chunks if kind == b"IEND")
    for cut in sorted(x for x in cuts if x < iend):
        c.data("png", f"PNG cut to {cut} of {len(png)} bytes", png[:cut], name="image.png")
    for off, kind, length in chunks[:-1]:  # not IEND's (see above)
        b = bytearray(png)
        b[off + length - 1] ^= 0x01
        c.data("png", f"PNG {kind.decode()} CRC flipped", bytes(b), name="image.png")
    for desc, kw in (("width 0", {"width": 0}), ("height 0", {"height": 0}), ("width 2^31", {"width": 2**31}),
                     ("width 16385", {"width": 16385}), ("width 100000 x 100000", {"width": 100000, "height": 100000}),
                     ("bit depth 3", {"depth": 3}), ("color type 5", {"color": 5}), ("width 27 (too short rows)", {"width": 27})):
        c.data("png", f"PNG IHDR {desc}", png_gray(img, **kw), name="image.png")
    idat = next((off, length) for off, kind, length in chunks if kind == b"IDAT")
    b = bytearray(png)
    b[idat[0] + 10] ^= 0xFF
    c.data("png", "PNG IDAT data corrupt (CRC fixed)", png[:idat[0]] + png_chunk(b"IDAT", bytes(b[idat[0] + 8:idat[0] + idat[1] - 4]))
           + png[idat[0] + idat[1]:], name="image.png")
    c.data("png", "PNG 27x28 (the model takes 28x28)", png_gray(img[:, :27]), name="image.png")
    c.data("png", "PNG signature only", png[:8], name="image.png")
    c.data("png", "PNG without IDAT", png[:chunks[1][0]] + png_chunk(b"IEND", b""), name="image.png")
    c.data("png", "PNG cut in half (show)", png[:len(png) // 2], name="image.png", command="show")
    # JPEG
    jpg = jpeg_bytes(img, quality=90)
    if jpg:
        marks = jpeg_markers(jpg)
        for cut in sorted(set(marks + [m + 2 for m in marks] + [m + 4 for m in marks] + [len(jpg) // 2, len(jpg) - 1]) - {len(jpg)}):
            if cut < len(jpg):
                c.data("jpeg", f"JPEG cut to {cut} of {len(jpg)} bytes", jpg[:cut], name="image.jpg")
        prog = jpeg_bytes(img, quality=75, progressive=True)
        for cut in (len(prog) // 3, len(prog) // 2, len(prog) - 2):
            c.data("jpeg", f"progressive JPEG cut to {cut} of {len(prog)} bytes", prog[:cut], name="image.jpg")
        sof = jpg.find(b"\xff\xc0")
        for desc, h, w in (("height 0", 0, 28), ("width 0", 28, 0), ("65535 x 65535", 65535, 65535), ("27 x 28", 27, 28)):
            b = bytearray(jpg)
            b[sof + 5:sof + 9] = struct.pack(">HH", h, w)
            c.data("jpeg", f"JPEG SOF {desc}", bytes(b), name="image.jpg")
        dht = jpg.find(b"\xff\xc4")
        b = bytearray(jpg)
        for i in range(dht + 5, dht + 21):
            b[i] = 0xFF
        c.data("jpeg", "JPEG Huffman table counts all 255", bytes(b), name="image.jpg")
        c.data("jpeg", "JPEG SOI only", jpg[:3], name="image.jpg")
        big = jpeg_bytes(np.zeros((1024, 1024), np.uint8), quality=50, progressive=True)
        last_scan = big[big.rfind(b"\xff\xda"):-2]
        c.data("jpeg", "progressive JPEG whose last scan is repeated 2000 times (decoding time)",
               big[:-2] + last_scan * 2000 + b"\xff\xd9", name="image.jpg")
        c.data("jpeg", "JPEG cut in half (show)", jpg[:len(jpg) // 2], name="image.jpg", command="show")
    # PGM
    pgm = b"P5\n28 28\n255\n" + img.astype(np.uint8).tobytes()
    for cut in (2, 3, 5, 6, 8, 9, 12, 13, 13 + 392, len(pgm) - 1):
        c.data("pgm", f"PGM cut to {cut} of {len(pgm)} bytes", pgm[:cut], name="image.pgm")
    for desc, head in (("maxval 0", b"P5\n28 28\n0\n"), ("maxval 65536", b"P5\n28 28\n65536\n"),
                       ("width 0", b"P5\n0 28\n255\n"), ("width 99999999999", b"P5\n99999999999 28\n255\n"),
                       ("width -28", b"P5\n-28 28\n255\n"), ("width 16385", b"P5\n16385 28\n255\n"),
                       ("no whitespace after maxval", b"P5\n28 28\n255"), ("27 x 28 header", b"P5\n27 28\n255\n"),
                       ("maxval 65535 (needs 2 bytes per sample)", b"P5\n28 28\n65535\n"), ("letters", b"P5\nab cd\n255\n")):
        c.data("pgm", f"PGM {desc}", head + img.astype(np.uint8).tobytes(), name="image.pgm")
    c.data("pgm", "PGM with a second image", pgm + pgm, name="image.pgm")
    plain = b"P2\n28 28\n255\n" + b" ".join(b"%d" % v for v in img.flatten())
    c.data("pgm", "plain PGM sample above maxval", plain.replace(b"\n255\n", b"\n100\n", 1) if img.max() > 100 else plain + b" 999",
           name="image.pgm")
    c.data("pgm", "plain PGM with a letter", plain[:-1] + b"x", name="image.pgm")
    c.data("pgm", "plain PGM one sample short", plain.rsplit(b" ", 1)[0], name="image.pgm")
    c.data("pgm", "plain PGM, samples without separators", b"P2\n28 28\n255\n" + b"1" * 784, name="image.pgm")
    # Other files.
    for desc, data in (("empty file", b""), ("text", b"hello\n"), ("PPM (P6)", b"P6\n28 28\n255\n" + bytes(28 * 28 * 3)),
                       ("PBM (P4)", b"P4\n28 28\n" + bytes(4 * 28)), ("BMP", b"BM" + bytes(60)), ("GIF", b"GIF89a" + bytes(20)),
                       ("a safetensors file", st_pack([], b"")), ("one byte 0x00", b"\0"), ("gzip magic only", b"\x1f\x8b")):
        c.data("data", f"data file: {desc}", data, name="image")
        c.data("data", f"data file: {desc} (show)", data, name="image", command="show")
    c.data("data", "data file over the 1 GiB limit (sparse)", idx[:16], name="big-idx", sparse=(1 << 30) + 1)
    c.data("data", "image file over the 64 MiB limit (sparse)", png[:8], name="big.png", sparse=(64 << 20) + 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--models", type=pathlib.Path, default=ROOT / "models")
    ap.add_argument("--data", help="MNIST images (IDX, raw or gzip)")
    ap.add_argument("--images", type=int, default=5, help="images taken from the data set")
    ap.add_argument("--max-truncations", type=int, default=60,
                    help="truncations per file of the models other than the primary one (which gets "
                         "every boundary), evenly spread (default 60)")
    ap.add_argument("--max-cases-per-model", type=int, default=300,
                    help="cases kept, evenly spread, for each model other than the primary one "
                         "(which gets every case), so that the corpus does not grow with every model "
                         "trained (default 300)")
    args = ap.parse_args()

    c = Corpus(args.out)
    graph, blob = synthetic_model()
    models = real_models(args.models) + [Model("allops", (json.dumps(graph, indent=2) + "\n").encode(), blob)]

    mnist = find_mnist(args.data)
    if mnist:
        images = np.array(read_idx(mnist)[: args.images])
        labels_path = mnist.parent / mnist.name.replace("images-idx3", "labels-idx1")
        labels = np.array(read_idx(labels_path)[: args.images]) if labels_path.exists() else np.arange(args.images) % 10
    else:
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (args.images, 28, 28), dtype=np.uint8)
        labels = np.arange(args.images) % 10

    primary = next((m for m in models if m.name == "lenet5" and m.takes_mnist()), None) or \
        next((m for m in models if m.takes_mnist()), models[-1])
    (c.out / "valid" / primary.weights_name).write_bytes(primary.blob)
    c.model_path = c.valid("model.json", primary.text)
    c.images_path = c.valid("images.idx", idx_images(images))
    c.valid("labels.idx", idx_labels(labels))
    c.controls = [["info", c.model_path], ["run", c.model_path, c.images_path, "--backend", "cpu", "-q"],
                  ["run", c.model_path, c.images_path, "--labels", "valid/labels.idx", "--backend", "cpu", "-q"],
                  ["show", c.images_path]]
    classes = len(primary.graph.get("labels") or []) or 10

    for m in models:
        limit = None if m is primary else args.max_truncations
        since = len(c.cases)
        graph_cases(c, m, limit)
        graph_semantic_cases(c, m)
        weights_cases(c, m, limit)
        if m is not primary:
            c.keep_evenly(since, args.max_cases_per_model)
    absurd_models(c)
    data_cases(c, images, labels, classes)

    manifest = {"sources": [m.name for m in models], "data": str(mnist) if mnist else "random",
                "controls": c.controls, "cases": c.cases}
    (c.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    files = sum(1 for p in (c.out / "cases").rglob("*") if p.is_file())
    cats: dict[str, int] = {}
    for case in c.cases:
        cats[case["category"]] = cats.get(case["category"], 0) + 1
    print(f"{len(c.cases)} cases, {files} files in {c.out} from {', '.join(manifest['sources'])} and {manifest['data']}")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(cats.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
