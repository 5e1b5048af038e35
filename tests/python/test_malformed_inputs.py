"""The engine command on malformed files, as a user meets them.

Each case writes a real broken model, weights, IDX or image file in tmp_path and runs
`engine info MODEL`, `engine run MODEL DATA --backend cpu --output FILE` or `engine show DATA`.
The contract (the CLI's exit codes; formats/README.md for the messages): exit code 1, exactly one
error line on stderr that names the offending file and the problem, no traceback or abort, and no
--output file left behind. A valid control case runs first so that "fails" cannot pass by accident.

The engine is $ENGINE_BIN, else the first built of <repo>/build/engine, build/bin/engine,
build-cpu/engine, build-cpu/bin/engine; the tests skip, saying so, when none is built.
"""
import gzip
import hashlib
import json
import os
import pathlib
import struct
import subprocess
import zlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
ENGINE_CANDIDATES = ("build/engine", "build/bin/engine", "build-cpu/engine", "build-cpu/bin/engine")


def engine_binary():
    env = os.environ.get("ENGINE_BIN")
    if env:
        return pathlib.Path(env) if pathlib.Path(env).is_file() else None
    for cand in (REPO / c for c in ENGINE_CANDIDATES):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


@pytest.fixture(scope="module")
def engine():
    found = engine_binary()
    if found is None:
        pytest.skip("engine not built: set $ENGINE_BIN or build one of "
                    + ", ".join(f"<repo>/{c}" for c in ENGINE_CANDIDATES))
    return found


# --------------------------------------------------------------------------------------------------
# Writers (independent of the C++: plain struct/json/zlib, as another tool would write the files)

def safetensors_bytes(tensors, metadata=None, header_override=None):
    """tensors: list of (name, float32 array). Header padded with spaces to 8 bytes."""
    header, data, offset = {}, b"", 0
    if metadata:
        header["__metadata__"] = metadata
    for name, array in tensors:
        raw = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = header_override if header_override is not None else json.dumps(header)
    text = text.encode() if isinstance(text, str) else text
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def graph_dict(sha256, weights_file="m.safetensors"):
    return {
        "format": "cnn-engine-model", "version": 1, "name": "flat-dense",
        "weights": {"file": weights_file, "sha256": sha256},
        "input": {"name": "image", "dtype": "uint8", "shape": [1, 28, 28],
                  "preprocess": {"scale": 0.003921568859368563, "mean": [0.0], "std": [1.0]}},
        "labels": [str(i) for i in range(10)],
        "nodes": [
            {"name": "flat", "op": "flatten", "inputs": ["image"]},
            {"name": "fc", "op": "dense", "inputs": ["flat"], "attrs": {"units": 10},
             "tensors": {"weight": "fc.weight", "bias": "fc.bias"}},
            {"name": "prob", "op": "softmax", "inputs": ["fc"]},
        ],
        "outputs": ["prob"],
    }


def default_tensors():
    rng = np.random.default_rng(0)
    return [("fc.weight", rng.standard_normal((10, 784)).astype(np.float32) * 0.01),
            ("fc.bias", np.zeros(10, np.float32))]


def write_model(dir_, graph_edit=None, tensors=None, weights_bytes=None, graph_text=None, fix_sha=True):
    """Writes m.safetensors and m.json; returns the graph path. The digest matches the weights
    written unless fix_sha is False, so that later rules are what reject the file."""
    weights = weights_bytes if weights_bytes is not None else safetensors_bytes(
        tensors if tensors is not None else default_tensors())
    (dir_ / "m.safetensors").write_bytes(weights)
    graph = graph_dict(hashlib.sha256(weights).hexdigest() if fix_sha else "0" * 64)
    if graph_edit:
        graph_edit(graph)
    path = dir_ / "m.json"
    if graph_text is not None:
        path.write_bytes(graph_text if isinstance(graph_text, bytes) else graph_text.encode())
    else:
        path.write_text(json.dumps(graph, indent=1))
    return path


def idx_bytes(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def images_idx(count=3):
    pixels = (np.arange(count * 784) % 256).astype(np.uint8).tobytes()
    return idx_bytes(0x08, [count, 28, 28], pixels)


def labels_idx(values):
    return idx_bytes(0x08, [len(values)], bytes(values))


def png_gray(width, height, pixels):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + pixels[y * width:(y + 1) * width] for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


# --------------------------------------------------------------------------------------------------
# Running the engine and checking the contract

def run_engine(engine, *args):
    return subprocess.run([str(engine), *map(str, args)], capture_output=True, text=True,
                          errors="replace", timeout=120)


def expect_failure(result, file, *problem, output=None):
    """Exit 1, one error line naming `file` and containing each of `problem`, no output file."""
    stderr_lines = [line for line in result.stderr.splitlines() if line.strip()]
    # Log lines at info/debug level may precede the failure; everything else must be that error.
    errors = [line for line in stderr_lines if not line.startswith(("info:", "debug:"))]
    context = f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.returncode == 1, context
    assert len(errors) == 1, "expected exactly one error line\n" + context
    line = errors[0]
    assert str(file) in line, f"the error must name {file}\n" + context
    for part in problem:
        assert part in line, f"expected {part!r} in the error\n" + context
    for crash in ("terminate called", "what():", "Aborted", "Segmentation", "Traceback"):
        assert crash not in result.stderr, context
    if output is not None:
        assert not pathlib.Path(output).exists(), f"{output} was written despite the error\n" + context


@pytest.fixture
def valid(tmp_path):
    """A valid model and MNIST-shaped data beside it."""
    model = write_model(tmp_path)
    data = tmp_path / "t10k-images-idx3-ubyte"
    data.write_bytes(images_idx(3))
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(labels_idx([7, 2, 1]))
    return model, data


def test_control_valid_files_succeed(engine, valid, tmp_path):
    model, data = valid
    info = run_engine(engine, "info", model)
    assert info.returncode == 0, info.stderr
    out = tmp_path / "out.txt"
    run = run_engine(engine, "run", model, data, "--backend", "cpu", "--output", out)
    assert run.returncode == 0, run.stderr
    assert out.is_file()
    png = tmp_path / "digit.png"
    png.write_bytes(png_gray(28, 28, bytes(range(256)) * 3 + bytes(16)))
    run = run_engine(engine, "run", model, png, "--backend", "cpu")
    assert run.returncode == 0, run.stderr
    show = run_engine(engine, "show", data, "--index", 2)
    assert show.returncode == 0, show.stderr


def test_control_weights_written_by_the_safetensors_package(engine, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "m.safetensors"
    st.save_file(dict(default_tensors()), str(path), metadata={"producer": "safetensors"})
    model = write_model(tmp_path, weights_bytes=path.read_bytes())
    result = run_engine(engine, "info", model)
    assert result.returncode == 0, result.stderr


# ---- Model files: `engine info` and `engine run` ---------------------------------------------------

MODEL_CASES = {
    "missing graph file": (lambda d: d / "absent.json", "graph", ["not found"]),
    "invalid JSON": (lambda d: write_model(d, graph_text='{"format": "cnn-engine-model",'), "graph",
                     ["not valid JSON"]),
    "invalid UTF-8": (lambda d: write_model(d, graph_text=b'{"name": "\xff"}'), "graph", ["not valid UTF-8"]),
    "duplicate key": (lambda d: write_model(d, graph_text='{"format": "cnn-engine-model", "format": "x"}'),
                      "graph", ["'format' twice"]),
    "not a graph file": (lambda d: write_model(d, graph_text="[1, 2, 3]"), "graph", ["JSON object"]),
    "unknown key": (lambda d: write_model(d, lambda g: g.update(nodez=[])), "graph", ["unknown key 'nodez'"]),
    "unsupported version": (lambda d: write_model(d, lambda g: g.update(version=7)), "graph",
                            ["unsupported version 7"]),
    "unknown op": (lambda d: write_model(d, lambda g: g["nodes"][2].update(op="gelu")), "graph",
                   ["node 'prob'", "unknown op 'gelu'"]),
    "missing attribute": (lambda d: write_model(d, lambda g: g["nodes"][1].pop("attrs")), "graph",
                          ["node 'fc'", "missing required key 'units'"]),
    "unknown input": (lambda d: write_model(d, lambda g: g["nodes"][1].update(inputs=["flatt"])), "graph",
                      ["node 'fc'", "input 'flatt'"]),
    "cycle": (lambda d: write_model(d, lambda g: g["nodes"][0].update(inputs=["prob"])), "graph", ["cycle"]),
    "weights outside the folder": (
        lambda d: write_model(d, lambda g: g["weights"].update(file="../m.safetensors")), "graph",
        ["must stay inside the graph file's folder"]),
    "weights missing": (lambda d: write_model(d, lambda g: g["weights"].update(file="gone.safetensors")),
                        "gone.safetensors", ["not found"]),
    "sha256 mismatch": (lambda d: write_model(d, fix_sha=False), "weights", ["SHA-256"]),
    "weights truncated": (lambda d: write_model(d, weights_bytes=safetensors_bytes(default_tensors())[:-8]),
                          "weights", ["past its end"]),
    "weights header length huge": (lambda d: write_model(d, weights_bytes=b"\xff" * 64), "weights",
                                   ["header length"]),
    "weights shorter than 8 bytes": (lambda d: write_model(d, weights_bytes=b"\x01\x00"), "weights",
                                     ["shorter than the 8-byte"]),
    "weights duplicate tensor": (
        lambda d: write_model(d, weights_bytes=safetensors_bytes(
            default_tensors(),
            header_override='{"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [0, 40]}, '
                            '"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [40, 80]}}')),
        "weights", ["'fc.bias' twice"]),
    "weights bad dtype": (
        lambda d: write_model(d, weights_bytes=safetensors_bytes(
            default_tensors(),
            header_override='{"fc.weight": {"dtype": "F8", "shape": [10, 784], "data_offsets": [0, 31360]}, '
                            '"fc.bias": {"dtype": "F32", "shape": [10], "data_offsets": [31360, 31400]}}')),
        "weights", ["unknown dtype 'F8'"]),
    "tensor wrong shape": (
        lambda d: write_model(d, tensors=[("fc.weight", np.zeros((10, 783), np.float32)),
                                          ("fc.bias", np.zeros(10, np.float32))]),
        "graph", ["node 'fc'", "[10, 783]", "expected [10, 784]"]),
    "tensor missing": (lambda d: write_model(d, tensors=default_tensors()[:1]), "graph",
                       ["node 'fc'", "'fc.bias' is not in the weights file"]),
    "tensor unused": (lambda d: write_model(d, tensors=default_tensors() + [("extra", np.zeros(3, np.float32))]),
                      "weights", ["tensor 'extra' is not used"]),
    "labels length": (lambda d: write_model(d, lambda g: g.update(labels=["a", "b"])), "graph",
                      ["labels has 2 entries"]),
}


def _file_for(kind, tmp_path, model):
    if kind == "graph":
        return model
    if kind == "weights":
        return tmp_path / "m.safetensors"
    return tmp_path / kind


@pytest.mark.parametrize("case", sorted(MODEL_CASES))
def test_info_rejects_malformed_model(engine, tmp_path, case):
    make, kind, problem = MODEL_CASES[case]
    model = make(tmp_path)
    expect_failure(run_engine(engine, "info", model), _file_for(kind, tmp_path, model), *problem)


@pytest.mark.parametrize("case", sorted(MODEL_CASES))
def test_run_rejects_malformed_model(engine, tmp_path, case):
    make, kind, problem = MODEL_CASES[case]
    model = make(tmp_path)
    data = tmp_path / "images-idx3-ubyte"
    data.write_bytes(images_idx(2))
    out = tmp_path / "out.txt"
    expect_failure(run_engine(engine, "run", model, data, "--backend", "cpu", "--output", out),
                   _file_for(kind, tmp_path, model), *problem, output=out)


# ---- Data files: `engine run` and `engine show` ----------------------------------------------------

DATA_CASES = {
    "empty file": (b"", ["empty"]),
    "unknown format": (b"<html><body>not data</body></html>", ["not a recognised data file"]),
    "IDX truncated": (images_idx(3)[:-1], ["IDX header says 3 images of 28×28", "truncated"]),
    "IDX trailing bytes": (images_idx(3) + b"\x00", ["holds 2353 bytes after the header"]),
    "IDX claims billions of images": (idx_bytes(0x08, [4_000_000_000, 28, 28], bytes(784)),
                                      ["4000000000 images"]),
    "IDX zero rows": (idx_bytes(0x08, [1, 0, 28], b""), ["dimension rows is 0"]),
    "IDX float elements": (idx_bytes(0x0D, [1, 28, 28], bytes(4 * 784)), ["float32", "not supported"]),
    "IDX labels given as images": (labels_idx([1, 2, 3]), ["labels file, not images"]),
    "IDX header truncated": (images_idx(1)[:10], ["IDX header is truncated"]),
    "gzip truncated": (gzip.compress(images_idx(3))[:-30], ["gzip data are truncated"]),
    "gzip corrupt": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 32, ["gzip data are corrupt"]),
    "gzip trailing garbage": (gzip.compress(images_idx(1)) + b"junk", ["trailing garbage"]),
    "PNG truncated": (png_gray(28, 28, bytes(784))[:-20], ["cannot decode PNG"]),
    "PNG bad CRC": (png_gray(28, 28, bytes(784))[:29] + b"\x00\x00\x00\x00" + png_gray(28, 28, bytes(784))[33:],
                    ["cannot decode PNG", "CRC"]),
    "JPEG header only": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", ["cannot decode JPEG"]),
    "PGM truncated": (b"P5\n28 28\n255\n" + bytes(700), ["PGM raster is truncated"]),
    "PGM bad maxval": (b"P5\n28 28\n0\n" + bytes(784), ["PGM maximum value is 0"]),
    "PGM plain sample too large": (b"P2\n2 1\n10\n3 11\n", ["PGM sample 11 exceeds the maximum value 10"]),
    "PPM not supported": (b"P6\n1 1\n255\nabc", ["PBM/PPM images are not supported"]),
}


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_run_rejects_malformed_data(engine, valid, tmp_path, case):
    content, problem = DATA_CASES[case]
    model, _ = valid
    data = tmp_path / "broken.data"
    data.write_bytes(content)
    out = tmp_path / "out.txt"
    expect_failure(run_engine(engine, "run", model, data, "--backend", "cpu", "--output", out),
                   data, *problem, output=out)


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_show_rejects_malformed_data(engine, tmp_path, case):
    content, problem = DATA_CASES[case]
    data = tmp_path / "broken.data"
    data.write_bytes(content)
    expect_failure(run_engine(engine, "show", data, "--index", 0), data, *problem)


def test_run_rejects_missing_data(engine, valid, tmp_path):
    model, _ = valid
    out = tmp_path / "out.txt"
    data = tmp_path / "nothing-here"
    expect_failure(run_engine(engine, "run", model, data, "--backend", "cpu", "--output", out),
                   data, "not found", output=out)


LABEL_CASES = {
    "labels truncated": (idx_bytes(0x08, [3], b"\x07\x02"), ["IDX header says 3 labels"]),
    "labels bad magic": (b"\x01\x02\x08\x01" + struct.pack(">I", 3) + b"\x07\x02\x01", ["not an IDX file"]),
    "labels given images": (images_idx(3), ["images file, not labels"]),
    "labels gzip corrupt": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 8, ["gzip data are corrupt"]),
}


@pytest.mark.parametrize("case", sorted(LABEL_CASES))
def test_run_rejects_malformed_labels(engine, valid, tmp_path, case):
    content, problem = LABEL_CASES[case]
    model, data = valid
    labels = tmp_path / "broken-labels"
    labels.write_bytes(content)
    out = tmp_path / "out.txt"
    expect_failure(run_engine(engine, "run", model, data, "--labels", labels, "--backend", "cpu",
                              "--output", out), labels, *problem, output=out)


def test_run_rejects_labels_of_another_length(engine, valid, tmp_path):
    model, data = valid
    labels = tmp_path / "four-labels"
    labels.write_bytes(labels_idx([1, 2, 3, 4]))
    out = tmp_path / "out.txt"
    expect_failure(run_engine(engine, "run", model, data, "--labels", labels, "--backend", "cpu",
                              "--output", out), labels, "4 labels", output=out)


def test_run_rejects_images_of_the_wrong_size(engine, valid, tmp_path):
    model, _ = valid
    data = tmp_path / "small-images-idx3-ubyte"
    data.write_bytes(idx_bytes(0x08, [2, 8, 8], bytes(128)))
    out = tmp_path / "out.txt"
    expect_failure(run_engine(engine, "run", model, data, "--backend", "cpu", "--output", out),
                   data, output=out)
