"""`engine calibrate` (int8 activation ranges, formats/model-format-v1.md "Calibration"): the ranges
against the reference interpreter in float64 on the same samples, percentile below max, the written
model unchanged otherwise (same weights, same outputs bit for bit) and read by both readers; bad
input refused with one line and nothing written."""
from __future__ import annotations

import copy
import json
import pathlib

import numpy as np
import pytest
import torch

from cnnengine import model_format as mf

from _train_support import ENGINE, run_engine, write_idx_images

pytestmark = pytest.mark.skipif(ENGINE is None, reason="the engine is not built (build/engine, or $ENGINE_BIN)")
REPO = pathlib.Path(__file__).resolve().parents[2]
LENET = REPO / "models" / "lenet5.json"


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (300, 28, 28)).astype(np.uint8)
    x[:, :, :6] = 0  # some background, as in digits
    return write_idx_images(tmp_path / "cal-images-idx3-ubyte", x), x


def reference_ranges(model_path: pathlib.Path, x: np.ndarray) -> dict[str, float]:
    """max |value| of the input and of every node over x, from the reference interpreter in float64."""
    m = mf.read_model(model_path)
    graph = copy.deepcopy(m.graph)
    graph["outputs"] = [n["name"] for n in graph["nodes"]]
    graph.pop("labels", None)  # the labels name the first output's classes, now c1
    module = mf.to_torch(mf.Model(graph, m.tensors)).to(torch.float64)
    with torch.no_grad():
        outs = module(torch.from_numpy(x[:, None]))
    ranges = {n: float(o.abs().max()) for n, o in zip(graph["outputs"], outs)}
    ranges[graph["input"]["name"]] = float(np.abs(mf.preprocess_numpy(graph, x[:, None])).max())
    return ranges


def test_max_ranges_match_the_reference_and_the_model_is_unchanged(tmp_path, images):
    path, x = images
    out = tmp_path / "cal.json"
    run_engine("calibrate", LENET, path, "-o", out, "--images", 200, "--batch", 64, "--backend", "cpu")
    m = mf.read_model(out)  # the Python reader takes it
    cal = m.graph["calibration"]
    assert cal["method"] == "max" and cal["images"] == 200 and "the first 200 samples of" in cal["data"]
    want = reference_ranges(LENET, x[:200])
    assert set(cal["ranges"]) == set(want)
    for name, r in want.items():
        assert cal["ranges"][name] == pytest.approx(r, rel=2e-5, abs=1e-6), name
    # Same weights: the same outputs, bit for bit, on the cpu backend.
    dumps = []
    for i, model in enumerate((LENET, out)):
        run_engine("run", model, path, "--backend", "cpu", "--dump-outputs", tmp_path / f"o{i}.npy")
        dumps.append((tmp_path / f"o{i}.npy").read_bytes())
    assert dumps[0] == dumps[1]
    info = run_engine("info", out).stdout
    assert "int8      calibrated: 14 ranges, max |x| over 200 samples" in info
    assert "int8      not calibrated" in run_engine("info", LENET).stdout


def test_percentile_ranges_are_at_most_the_max_and_backends_agree(tmp_path, images):
    path, _ = images
    got = {}
    for name, args in [("max", ()), ("p", ("--method", "percentile", "--percentile", 99.0)),
                       ("p100", ("--method", "percentile", "--percentile", 100)),
                       ("ref", ("--backend", "reference"))]:
        out = tmp_path / f"{name}.json"
        run_engine("calibrate", LENET, path, "-o", out, "--images", 150, *args)
        got[name] = json.loads(out.read_text())["calibration"]
    assert got["p"]["method"] == "percentile" and got["p"]["percentile"] == 99.0
    hi = got["max"]["ranges"]
    assert any(got["p"]["ranges"][k] < 0.9 * v for k, v in hi.items())  # c1/c3/f5 have long tails
    for k, v in hi.items():
        assert got["p"]["ranges"][k] <= v * (1 + 1e-12), k
        assert got["p100"]["ranges"][k] == pytest.approx(v, rel=1e-12), k  # the last bin's upper edge is the max
        assert got["ref"]["ranges"][k] == pytest.approx(v, rel=2e-5, abs=1e-6), k


@pytest.mark.parametrize("case,message", [
    ("same-output", "that is the model being calibrated"),
    ("bad-percentile", "--percentile must be in (0, 100]"),
    ("wrong-size", "calibration data: images are 1x10x10 (CxHxW) but model 'lenet5' expects 1x28x28"),
    ("architecture", "is an architecture-only graph"),
])
def test_bad_input_is_one_clear_error_and_nothing_is_written(tmp_path, images, case, message):
    path, _ = images
    model, data, out, extra = LENET, path, tmp_path / "o" / "cal.json", []
    out.parent.mkdir()
    if case == "same-output":
        model = tmp_path / "m.json"
        src = mf.read_model(LENET)
        mf.write_model(model, src.graph, src.tensors)
        out = model
    elif case == "bad-percentile":
        extra = ["--method", "percentile", "--percentile", 0]
    elif case == "wrong-size":
        data = write_idx_images(tmp_path / "small-images-idx3-ubyte", np.zeros((5, 10, 10), np.uint8))
    elif case == "architecture":
        model = REPO / "models" / "architectures" / "lenet5.json"
    before = sorted(out.parent.iterdir())
    proc = run_engine("calibrate", model, data, "-o", out, *extra, check=False)
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr
    assert proc.stderr.count("error:") == 1
    assert sorted(out.parent.iterdir()) == before


def test_python_reader_checks_calibration_as_the_loader_does(tmp_path):
    src = mf.read_model(LENET)
    graph = copy.deepcopy(src.graph)
    graph["calibration"] = {"method": "max", "images": 10, "ranges": {"image": 1.0, "nosuch": 2.0}}
    with pytest.raises(mf.ModelFormatError, match="'nosuch' is not the input or a node of the graph"):
        mf.write_model(tmp_path / "bad.json", graph, src.tensors)
    graph["calibration"] = {"method": "percentile", "images": 10, "ranges": {"c1": 1.0}}
    with pytest.raises(mf.ModelFormatError, match="needs 'percentile'"):
        mf.write_model(tmp_path / "bad.json", graph, src.tensors)
    graph["calibration"] = {"method": "max", "images": 10, "ranges": {"c1": 1.5}}
    mf.write_model(tmp_path / "ok.json", graph, src.tensors)
    proc = run_engine("info", tmp_path / "ok.json")  # and the C++ loader takes what the writer wrote
    assert "calibrated: 1 ranges" in proc.stdout


def test_float32_input_model_and_int8_on_the_reference(tmp_path):
    """A float32-input model: the input's range is max |x| of the samples; then --precision int8 on
    the reference backend runs it and stays close to fp32."""
    from _train_support import write_idx_floats
    g = {"format": "cnn-engine-model", "version": 1, "name": "mlp", "weights": {"file": "m.safetensors", "sha256": "0" * 64},
         "input": {"name": "x", "dtype": "float32", "shape": [6]},
         "nodes": [{"name": "d", "op": "dense", "inputs": ["x"], "attrs": {"units": 3},
                    "tensors": {"weight": "w", "bias": "b"}},
                   {"name": "s", "op": "softmax", "inputs": ["d"]}],
         "outputs": ["s"]}
    rng = np.random.default_rng(5)
    t = {"w": rng.standard_normal((3, 6)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
    model = mf.write_model(tmp_path / "mlp.json", g, t).path
    x = rng.standard_normal((50, 6)).astype(np.float32)
    data = write_idx_floats(tmp_path / "x.idx", x)
    out = tmp_path / "cal.json"
    refused = run_engine("run", model, data, "--backend", "reference", "--precision", "int8", check=False)
    assert refused.returncode == 1 and "has no calibration data, which int8 needs" in refused.stderr
    run_engine("calibrate", model, data, "-o", out)
    cal = json.loads(out.read_text())["calibration"]
    assert cal["ranges"]["x"] == pytest.approx(float(np.abs(x).max()), rel=1e-7)
    dumps = {}
    for p in ("fp32", "int8"):
        run_engine("run", out, data, "--backend", "reference", "--precision", p, "--dump-outputs", tmp_path / f"{p}.npy")
        dumps[p] = np.load(tmp_path / f"{p}.npy")
    assert not np.array_equal(dumps["fp32"], dumps["int8"])
    assert np.abs(dumps["fp32"] - dumps["int8"]).max() < 0.05
    # The cpu backend computes the same int8 scheme with int8 products (one quantization here: only
    # the last float rounding of a sum may differ).
    run_engine("run", out, data, "--backend", "cpu", "--precision", "int8", "--dump-outputs", tmp_path / "cpu.npy")
    assert np.abs(np.load(tmp_path / "cpu.npy") - dumps["int8"]).max() < 1e-5
