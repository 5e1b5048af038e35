"""The Python package's engine API (cnnengine.load/backends, python/cnnengine/runtime.py over the
extension python/ext/module.cpp): `engine run`'s outputs bit for bit, every accepted input form,
and every refused one as a Python exception with the engine's message. Needs build/engine and the
extension (scripts/setup.sh installs it into .venv); the GPU cases are in test_package_gpu.py."""
import ast
import os
import pathlib
import shutil
import subprocess
import threading
import time

import numpy as np
import pytest

from cnnengine import datasets

REPO = pathlib.Path(__file__).resolve().parents[2]
ENGINE = pathlib.Path(os.environ.get("ENGINE_BIN", REPO / "build" / "engine"))
LENET = REPO / "models" / "lenet5.json"

# No importorskip: where the suite runs (.ci/run), a missing extension is a failure, not a skip.
import cnnengine  # noqa: E402
import cnnengine.runtime  # noqa: E402,F401  (loads the extension, or fails saying how to install it)


def mnist_images_file() -> pathlib.Path:
    for d in (datasets.shared_data_dir() / "mnist", pathlib.Path("/work/shared/data/mnist")):
        f = d / "t10k-images-idx3-ubyte.gz"
        if f.is_file():
            return f
    return datasets.mnist_files("test")[0]


@pytest.fixture(scope="module")
def mnist():
    return datasets.read_idx(mnist_images_file())  # uint8 [10000, 28, 28]


def engine_run_dump(tmp_path, backend, limit, batch=None, model=LENET):
    """`engine run --dump-outputs`: the CLI's float32 outputs for the first `limit` test images."""
    if not ENGINE.exists():
        pytest.skip(f"{ENGINE} is not built")
    out = tmp_path / f"{backend}-{limit}.npy"
    cmd = [str(ENGINE), "run", str(model), str(mnist_images_file()), f"--backend={backend}", f"--limit={limit}",
           f"--dump-outputs={out}", "-q"]
    if batch:
        cmd.append(f"--batch={batch}")
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return np.load(out)


def test_backends_match_the_cli():
    rows = cnnengine.backends()
    names = [r["name"] for r in rows]
    assert names[:2] == ["cpu", "reference"]
    for r in rows:
        assert set(r) == {"name", "available", "default", "priority", "detail", "precisions"}
        assert r["detail"], f"{r['name']}: no description or reason"
        # What load(precision=...) takes: fp32 everywhere it runs; nothing where it cannot run.
        assert ("fp32" in r["precisions"]) == r["available"], r
    assert sum(r["default"] for r in rows) == 1
    cpu = rows[0]
    assert cpu["available"]
    assert "fp16" not in cpu["precisions"]
    assert rows[1]["precisions"] == ["fp32", "tf32", "fp16", "bf16", "int8"]  # the reference emulates all
    if ENGINE.exists():
        cli = subprocess.run([str(ENGINE), "backends"], capture_output=True, text=True, check=True).stdout
        for r in rows:
            line = next(ln for ln in cli.splitlines() if ln.split() and ln.split()[0] == r["name"])
            assert ("not available" in line) == (not r["available"]), line
            # The thread count in parentheses may differ: conftest.py caps torch's (OpenMP's) threads here.
            assert r["detail"].rsplit(" (", 1)[0] in line


def test_unavailable_gpu_backends_say_why():
    for r in cnnengine.backends():
        if r["name"] in ("custom", "cudnn") and not r["available"]:
            # Same reason as `engine backends`; never an empty or "version" message without a GPU.
            assert "GPU" in r["detail"] or "CUDA" in r["detail"], r


def test_load_properties_and_info():
    m = cnnengine.load(LENET, backend="cpu", max_batch=64)
    graph = __import__("json").loads(LENET.read_text())
    assert m.name == "lenet5" and m.backend == "cpu"
    assert m.input_shape == (1, 28, 28)
    assert m.input_dtype == np.uint8
    assert m.labels == graph.get("labels", [])
    assert m.classes == 10 and m.max_batch == 64
    info = m.info()
    assert info["name"] == "lenet5" and info["backend"] == "cpu" and info["max_batch"] == 64
    assert info["input"]["raw_shape"] == [1, 28, 28] and info["input"]["dtype"] == "uint8"
    assert info["input"]["preprocess"]["scale"] == pytest.approx(1 / 255)
    assert info["parameters"] > 40_000 and info["precision"] == "fp32"
    assert pathlib.Path(info["weights"]).name == "lenet5.safetensors"
    assert "lenet5" in repr(m)


@pytest.mark.parametrize("backend,limit", [("cpu", 2000), ("reference", 300)])
def test_bit_identical_to_engine_run(tmp_path, mnist, backend, limit):
    expected = engine_run_dump(tmp_path, backend, limit)
    m = cnnengine.load(LENET, backend=backend)
    got = m.run(mnist[:limit])
    assert got.dtype == np.float32 and got.shape == (limit, 10)
    assert np.array_equal(got, expected), f"max |diff| {np.abs(got - expected).max()}"
    assert np.array_equal(m.predict(mnist[:limit]), expected.argmax(axis=1))


def test_accuracy_and_default_backend(mnist):
    labels = datasets.read_idx(str(mnist_images_file()).replace("images-idx3", "labels-idx1"))
    m = cnnengine.load(LENET)  # no GPU here: the best available is cpu, as `engine run` picks
    assert m.backend == next(r["name"] for r in cnnengine.backends() if r["default"])
    # models/README.md's figure for lenet5 on the engine: 9,927 of 10,000.
    assert int(np.count_nonzero(m.predict(mnist) == labels)) == 9927


def test_every_batch_split_and_layout_gives_the_same_rows(mnist):
    images = mnist[:300]
    whole = cnnengine.load(LENET, backend="cpu").run(images)
    # max_batch 7: 300 images run as 42 full batches and one of 6, through the engine's own loop.
    small = cnnengine.load(LENET, backend="cpu", max_batch=7)
    assert np.array_equal(small.run(images), whole)
    assert np.array_equal(small.run(images[:, None, :, :]), whole)          # [N, C, H, W]
    assert np.array_equal(small.run(images[5:6]), whole[5:6])               # N = 1
    assert small.run(images[:0]).shape == (0, 10)                           # N = 0
    strided = np.zeros((300, 28, 56), np.uint8)[:, :, ::2]                  # not C-contiguous
    strided[...] = images
    assert np.array_equal(small.run(strided), whole)


def test_dlpack_cpu_tensor(mnist):
    torch = pytest.importorskip("torch")
    images = mnist[:100]
    m = cnnengine.load(LENET, backend="cpu")
    assert np.array_equal(m.run(torch.from_numpy(images)), m.run(images))
    assert np.array_equal(m.run(torch.from_numpy(images).unsqueeze(1)), m.run(images))
    # Any strides, as for NumPy arrays: read as the array they describe.
    transposed = torch.from_numpy(images).transpose(1, 2)
    assert np.array_equal(m.run(transposed), m.run(np.ascontiguousarray(images.transpose(0, 2, 1))))


def test_gil_is_released_while_the_engine_runs(mnist):
    m = cnnengine.load(LENET, backend="reference")  # ~3.5 k images/s: a run long enough to observe
    images = np.ascontiguousarray(np.tile(mnist[:500], (4, 1, 1)))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (m.run(images), done.set()))
    ticks = 0
    worker.start()
    t0 = time.perf_counter()
    while not done.is_set():
        ticks += 1  # only runs while the worker's engine call has let go of the GIL
    elapsed = time.perf_counter() - t0
    worker.join()
    assert elapsed > 0.05, "the run was too short to tell"
    assert ticks > 10_000, f"the main thread ran {ticks} loop iterations in {elapsed:.2f} s"


def test_concurrent_calls_on_one_model(mnist):
    m = cnnengine.load(LENET, backend="cpu", max_batch=32)
    expected = m.run(mnist[:400])
    results = [None] * 4
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, m.run(mnist[:400]))) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert np.array_equal(r, expected)


# ---- refusals: each a Python exception with a message naming the problem ----

@pytest.fixture(scope="module")
def cpu_model():
    return cnnengine.load(LENET, backend="cpu")


@pytest.mark.parametrize("array,message", [
    (np.zeros((2, 28, 28), np.float64), r"images are float64; model 'lenet5' takes uint8 \[N, 28, 28\], \[28, 28\] "
                                        r"or \[N, 1, 28, 28\] \(raw pixels\), or float32 \[N, 1, 32, 32\] already"),
    (np.zeros((2, 28, 28), np.int8), "images are int8"),
    (np.zeros((2, 27, 28), np.uint8), r"images have shape \(2, 27, 28\) but model 'lenet5' takes"),
    (np.zeros((2, 3, 28, 28), np.uint8), r"shape \(2, 3, 28, 28\)"),
    (np.zeros((2, 1, 28, 28), np.float32), r"shape \(2, 1, 28, 28\) but model 'lenet5' takes float32 \[N, 32, 32\] or \[N, 1, 32, 32\]"),
    (np.zeros((784,), np.uint8), r"shape \(784,\)"),
])
def test_bad_arrays_raise_value_error(cpu_model, array, message):
    with pytest.raises(ValueError, match=message):
        cpu_model.run(array)
    assert cpu_model.run(np.zeros((1, 28, 28), np.uint8)).shape == (1, 10)  # still usable


def test_non_arrays_raise_type_error(cpu_model):
    with pytest.raises(TypeError, match="NumPy array, a torch tensor or a DLPack array"):
        cpu_model.run([[0] * 28] * 28)


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        cnnengine.load(missing, backend="cpu")


def test_engine_errors_carry_the_cli_message(tmp_path):
    # A weights file whose bytes no longer match the graph's sha256: the loader's message, as the CLI prints it.
    bad = tmp_path / "lenet5.json"
    shutil.copy(LENET, bad)
    weights = bytearray((REPO / "models" / "lenet5.safetensors").read_bytes())
    weights[-1] ^= 0xFF
    (tmp_path / "lenet5.safetensors").write_bytes(bytes(weights))
    with pytest.raises(cnnengine.EngineError) as err:
        cnnengine.load(bad, backend="cpu")
    assert isinstance(err.value, RuntimeError)
    if ENGINE.exists():
        cli = subprocess.run([str(ENGINE), "info", str(bad)], capture_output=True, text=True)
        assert cli.returncode == 1
        assert str(err.value) in cli.stderr


def test_unknown_and_unavailable_backends():
    with pytest.raises(cnnengine.EngineError, match="unknown backend 'nope' .built in: cpu, reference"):
        cnnengine.load(LENET, backend="nope")
    for r in cnnengine.backends():
        if not r["available"]:
            with pytest.raises(cnnengine.EngineError, match=f"backend '{r['name']}' is not available here: "):
                cnnengine.load(LENET, backend=r["name"])


@pytest.mark.parametrize("kwargs,message", [
    ({"precision": "fp8"}, "precision must be 'fp32', 'tf32', 'fp16', 'bf16' or 'int8'"),
    ({"max_batch": 0}, "max_batch must be >= 1"),
    ({"threads": -1}, "threads must be 0 .all cores. to 4096, not -1"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cnnengine.load(LENET, backend="cpu", **kwargs)


def test_type_stubs_name_what_the_extension_defines():
    from cnnengine import _engine
    stub = ast.parse((REPO / "python" / "cnnengine" / "_engine.pyi").read_text())
    top = {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert top == {n for n in dir(_engine) if not n.startswith("_")}
    session = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "Session")
    members = {n.name for n in session.body if isinstance(n, ast.FunctionDef)} - {"__init__"}
    assert members == {n for n in dir(_engine.Session) if not n.startswith("_")}
    assert (REPO / "python" / "cnnengine" / "py.typed").exists()


def test_a_vector_input_model_runs_and_says_its_shape(tmp_path):
    """A float32 [K] input (no image dimensions): input_shape has its rank, [N, K] runs and equals
    the dense layer computed here, a wrong width is a ValueError naming the shape taken."""
    from cnnengine import model_format
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 20)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    graph = {"format": "cnn-engine-model", "version": 1, "name": "vector",
             "weights": {"file": "vector.safetensors"},
             "input": {"name": "x", "dtype": "float32", "shape": [20]},
             "nodes": [{"name": "d", "op": "dense", "inputs": ["x"], "attrs": {"units": 5},
                        "tensors": {"weight": "d.weight", "bias": "d.bias"}}],
             "outputs": ["d"]}
    model_format.write_model(tmp_path / "vector.json", graph, {"d.weight": w, "d.bias": b})
    m = cnnengine.load(str(tmp_path / "vector.json"), backend="cpu")
    assert m.input_shape == (20,)
    x = rng.standard_normal((3, 20)).astype(np.float32)
    np.testing.assert_allclose(m.run(x), x.astype(np.float64) @ w.T.astype(np.float64) + b, rtol=1e-5, atol=1e-5)
    assert "[N, 20]" in repr(m)
    with pytest.raises(ValueError, match=r"\[N, 20\]"):
        m.run(np.zeros((3, 21), np.float32))
