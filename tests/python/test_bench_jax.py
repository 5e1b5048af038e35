"""benchmarks/bench_jax.py on JAX's CPU backend: it runs, its built-in reference check passes on a model
that uses every op with the awkward attributes (asymmetric padding, strides, count_include_pad both
ways, padded max pooling), it writes the cnn-engine-bench/1 JSON with sane fields and the engine /
JAX ratios, and its check does fail on a wrong model. No timing assertions.

Skipped when JAX is not installed (the project's .venv does not have it; the script is meant for the
GPU machine's Python). Kept short: tiny batches, durations of tens of milliseconds.
"""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from cnnengine import model_format as mf  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_jax.py"
FAST = ["--warmup", "5", "--iterations", "2", "--duration", "0.02", "--repetitions", "2"]


def every_op_graph():
    """uint8 [3, 9, 10], per-channel mean/std, asymmetric input pad with a pad value; conv with
    asymmetric padding and stride; relu; padded maxpool; two padded avgpools (count_include_pad false
    and true) joined by add; tanh and sigmoid joined by add; flatten; dense; softmax."""
    pool = {"kernel": [2, 3], "stride": [1, 2], "padding": [1, 0, 2, 1]}
    return {
        "name": "bench-jax-every-op",
        "input": {"name": "image", "dtype": "uint8", "shape": [3, 9, 10],
                  "preprocess": {"scale": float(np.float32(1 / 255)), "mean": [0.2, 0.4, 0.6],
                                 "std": [0.3, 0.25, 0.5], "pad": [1, 0, 2, 1], "pad_value": 0.5}},
        "nodes": [
            {"name": "c1", "op": "conv2d", "inputs": ["image"],
             "attrs": {"out_channels": 4, "kernel": [3, 4], "stride": [2, 1], "padding": [1, 2, 0, 3]},
             "tensors": {"weight": "c1.w", "bias": "c1.b"}},
            {"name": "r1", "op": "relu", "inputs": ["c1"]},
            {"name": "m1", "op": "maxpool", "inputs": ["r1"], "attrs": {"kernel": [3, 3], "stride": [1, 1],
                                                                        "padding": [2, 0, 1, 1]}},
            {"name": "a_ex", "op": "avgpool", "inputs": ["m1"], "attrs": dict(pool, count_include_pad=False)},
            {"name": "a_in", "op": "avgpool", "inputs": ["m1"], "attrs": dict(pool, count_include_pad=True)},
            {"name": "sum1", "op": "add", "inputs": ["a_ex", "a_in"]},
            {"name": "t1", "op": "tanh", "inputs": ["sum1"]},
            {"name": "s1", "op": "sigmoid", "inputs": ["sum1"]},
            {"name": "sum2", "op": "add", "inputs": ["t1", "s1"]},
            {"name": "flat", "op": "flatten", "inputs": ["sum2"]},
            {"name": "f1", "op": "dense", "inputs": ["flat"], "attrs": {"units": 7},
             "tensors": {"weight": "f1.w", "bias": "f1.b"}},
            {"name": "prob", "op": "softmax", "inputs": ["f1"]},
        ],
        "outputs": ["prob"],
    }


def write_every_op(folder):
    graph = every_op_graph()
    # The flattened size comes from the spec's shape rules, not from a hand count.
    flat = mf.validate(dict(graph, format=mf.FORMAT, version=1, weights={"file": "x", "sha256": "0" * 64}),
                       None, shapes=True)["flat"][0]
    rng = np.random.default_rng(3)
    tensors = {"c1.w": rng.normal(0, 0.5, (4, 3, 3, 4)), "c1.b": rng.normal(0, 0.1, (4,)),
               "f1.w": rng.normal(0, 1.0, (7, flat)), "f1.b": rng.normal(0, 0.1, (7,))}
    return mf.write_model(folder / "every-op.json", graph, tensors)


def write_float_mlp(folder):
    """A float32 input (no preprocessing): dense, sigmoid, dense, softmax."""
    graph = {"name": "bench-jax-float", "input": {"name": "x", "dtype": "float32", "shape": [12]},
             "nodes": [{"name": "d1", "op": "dense", "inputs": ["x"], "attrs": {"units": 8},
                        "tensors": {"weight": "d1.w", "bias": "d1.b"}},
                       {"name": "s", "op": "sigmoid", "inputs": ["d1"]},
                       {"name": "d2", "op": "dense", "inputs": ["s"], "attrs": {"units": 5},
                        "tensors": {"weight": "d2.w"}},
                       {"name": "prob", "op": "softmax", "inputs": ["d2"]}],
             "outputs": ["prob"]}
    rng = np.random.default_rng(4)
    tensors = {"d1.w": rng.normal(0, 1, (8, 12)), "d1.b": rng.normal(0, 0.1, (8,)), "d2.w": rng.normal(0, 1, (5, 8))}
    return mf.write_model(folder / "float-mlp.json", graph, tensors)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench-jax")
    return {"every-op": write_every_op(folder), "float": write_float_mlp(folder)}


@pytest.fixture(scope="module")
def bench_jax():
    # The script as a module; its sibling peer_bench is found beside it, as when it runs.
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(SCRIPT.parent))
        import bench_jax as module
    return module


def check_stats(s, where):
    assert s["count"] >= 1, where
    assert 0 <= s["min"] <= s["median"] <= s["max"], (where, s)
    assert s["min"] <= s["mean"] <= s["max"], (where, s)
    for p in ("p90", "p99"):
        assert s["median"] <= s[p] <= s["max"], (where, p, s)


def test_runs_checks_and_writes_json(models, tmp_path):
    engine = tmp_path / "engine.json"
    # The engine's settings are copied (batches 1 and 3); its compute results give the ratios.
    engine.write_text(json.dumps({
        "schema": "cnn-engine-bench/1",
        "settings": {"batches": [1, 3], "warmup_ms": 5, "iterations": 2, "duration_s": 0.02, "repetitions": 2,
                     "percentiles": [90, 99]},
        "results": [{"backend": "cpu", "device": "cpu", "batch": b, "scope": sc, "mode": "plain",
                     "images_per_s": 1000.0 * b} for b in (1, 3) for sc in ("compute", "e2e")]}))
    out = tmp_path / "jax.json"
    cmd = [sys.executable, SCRIPT, models["every-op"].path, "--device", "cpu", "--dtype", "fp32,bf16",
           "--engine", engine, "--json", out]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert "engine / JAX" in proc.stdout

    doc = json.loads(out.read_text())
    assert doc["schema"] == "cnn-engine-bench/1" and doc["framework"] == "jax"
    assert doc["jax"]["version"] == jax.__version__
    assert doc["settings"]["batches"] == [1, 3] and doc["settings"]["duration_s"] == 0.02
    fp32 = [c for c in doc["check"] if c["dtype"] == "fp32"][0]
    assert fp32["ok"] is True and fp32["max_abs_diff"] <= 1e-4 and fp32["argmax_agree"] == fp32["images"]
    keys = {(r["batch"], r["scope"], r["mode"]) for r in doc["results"]}
    assert keys == {(b, sc, m) for b in (1, 3) for sc in ("compute", "e2e") for m in ("jit", "jit-bf16")}
    for r in doc["results"]:
        where = (r["batch"], r["scope"], r["mode"])
        assert r["backend"] == "jax" and r["device"] == "cpu" and r["outputs_finite"], where
        assert r["images_per_s"] > 0 and r["compile"]["compile_s"] > 0, where
        check_stats(r["latency_ms"], where)
        assert len(r["repetitions"]) == 2 and all(rep["iterations"] >= 2 for rep in r["repetitions"]), where
    ratios = doc["ratios"]
    assert {(x["batch"], x["scope"]) for x in ratios} == {(1, "compute"), (3, "compute")}
    for x in ratios:
        jax_rate = [r for r in doc["results"] if r["batch"] == x["batch"] and r["scope"] == "compute"
                    and r["mode"] == "jit"][0]["images_per_s"]
        assert x["ratio"] == pytest.approx(1000.0 * x["batch"] / jax_rate)


def test_float_input_model(models, tmp_path):
    out = tmp_path / "jax.json"
    cmd = [sys.executable, SCRIPT, models["float"].path, "--device", "cpu", "--batch", "2",
           "--no-data-transfers", "--json", out] + FAST
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    doc = json.loads(out.read_text())
    assert doc["check"][0]["ok"] is True
    assert [(r["batch"], r["scope"]) for r in doc["results"]] == [(2, "compute")]


@pytest.mark.parametrize("name", ["every-op", "float"])
def test_numpy_reference_matches_interpreter(models, bench_jax, name):
    # The fallback reference (no PyTorch) must be the interpreter's semantics.
    pytest.importorskip("torch")
    model = mf.read_model(models[name].path)
    x = bench_jax.random_input(model.graph["input"], 5, np.random.default_rng(0))
    np.testing.assert_allclose(bench_jax.numpy_reference(model, x), bench_jax.torch_reference(model, x),
                               rtol=0, atol=1e-12)


def test_check_fails_on_a_wrong_forward(models, bench_jax):
    model = mf.read_model(models["every-op"].path)
    device = jax.devices("cpu")[0]
    jm = bench_jax.JaxModel(model, "fp32", device)
    good = bench_jax.check_against_reference(jm, model, device, 4, "auto", lambda msg: None)
    assert good["ok"] is True
    jm.params["f1.b"] = jm.params["f1.b"] + 0.5 * np.arange(7, dtype=np.float32)
    bad = bench_jax.check_against_reference(jm, model, device, 4, "auto", lambda msg: None)
    assert bad["ok"] is False and bad["max_abs_diff"] > 1e-4


def test_weights_without_the_safetensors_package(models, bench_jax, monkeypatch):
    path = models["every-op"].path
    blob = (path.parent / "every-op.safetensors").read_bytes()
    ours = bench_jax.parse_safetensors(blob, "every-op.safetensors")
    theirs = mf.load_weights(blob)
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert ours[k].dtype == np.float32 and np.array_equal(ours[k], theirs[k]), k
    with pytest.raises(mf.ModelFormatError, match="not a valid safetensors file"):
        bench_jax.parse_safetensors(blob[:20], "cut.safetensors")

    # read_model falls back to that parser when the package cannot be imported (None in
    # sys.modules makes the import fail as if the package were not installed).
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    model = bench_jax.read_model(path)
    assert all(np.array_equal(model.tensors[k], theirs[k]) for k in theirs)
    (path.parent / "tampered.json").write_text(path.read_text().replace(model.graph["weights"]["sha256"], "0" * 64))
    with pytest.raises(mf.ModelFormatError, match="sha256"):
        bench_jax.read_model(path.parent / "tampered.json")
