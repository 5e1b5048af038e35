"""Parity of the engine's reference backend with PyTorch on the full real test sets.

For each committed model, `engine run MODEL DATA --labels LABELS --backend reference --json
--dump-outputs out.npy` runs once over the whole test set; its probabilities are compared with the
model rebuilt by the reference interpreter (to_torch) in float64 and in float32: the same class for
every image, and a max abs probability difference of at most 1e-5. The engine's reported accuracy
must match the one PyTorch measures on the same labels.

The engine is $ENGINE_BIN, else the first built of <repo>/build/engine, build/bin/engine,
build-cpu/engine, build-cpu/bin/engine; the tests skip, saying so, when none is built.
"""
import json
import pathlib
import subprocess

import numpy as np
import pytest
import torch

from cnnengine import datasets, export
from cnnengine import model_format as mf

REPO = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5


def mnist_test_files():
    # The data every developer machine has (../shared/data), as the engine's own tests read it.
    for d in (datasets.shared_data_dir() / "mnist", pathlib.Path("/work/shared/data/mnist")):
        img, lab = d / "t10k-images-idx3-ubyte.gz", d / "t10k-labels-idx1-ubyte.gz"
        if img.is_file() and lab.is_file():
            return img, lab
    return datasets.mnist_files("test")


CASES = {
    "mnist": ("lenet5.json", mnist_test_files),
    "fashion": ("lenet5-fashion.json", lambda: datasets.fashion_files("test")),
}


def _summary(stdout: str) -> dict:
    """The --json summary: the whole stdout, or else the last JSON object printed in it."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        pass
    dec = json.JSONDecoder()
    found = None
    for i, ch in enumerate(stdout):
        if ch == "{":
            try:
                obj, _ = dec.raw_decode(stdout[i:])
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and "accuracy" in obj:
                found = obj
    if found is None:
        raise AssertionError(f"no JSON summary with 'accuracy' in the engine's stdout:\n{stdout[-2000:]}")
    return found


@pytest.fixture(scope="module", params=sorted(CASES))
def run(request, tmp_path_factory):
    name = request.param
    model_file, files = CASES[name]
    model_path = REPO / "models" / model_file
    if not model_path.is_file():
        pytest.fail(f"{model_path} is missing: the committed models must exist (scripts/train_lenet5.py writes them)")
    try:
        images_path, labels_path = files()
    except FileNotFoundError as e:
        pytest.skip(f"{name} test set not on this machine: {e}")
    engine = export.engine_binary()
    if engine is None:
        pytest.skip("engine not built: set $ENGINE_BIN or build build/engine (looked at "
                    + ", ".join(export.ENGINE_CANDIDATES) + ")")
    out = tmp_path_factory.mktemp(name) / "probs.npy"
    cmd = [str(engine), "run", str(model_path), str(images_path), "--labels", str(labels_path),
           "--backend", "reference", "--json", "--dump-outputs", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    engine_probs = np.load(out)

    model = mf.read_model(model_path)
    images = datasets.read_idx(images_path)
    images = images.reshape((len(images),) + tuple(model.graph["input"]["shape"]))
    labels = datasets.read_idx(labels_path).astype(np.int64)
    module = mf.to_torch(model).eval()
    with torch.no_grad():
        x = torch.from_numpy(images)
        ref32 = torch.cat([module(x[i:i + 2000]) for i in range(0, len(x), 2000)]).numpy()
        module64 = module.to(torch.float64)
        ref64 = torch.cat([module64(x[i:i + 2000]) for i in range(0, len(x), 2000)]).numpy()
    return dict(name=name, engine=engine_probs, ref32=ref32, ref64=ref64, labels=labels,
                summary=_summary(proc.stdout), stdout=proc.stdout)


def _report(name, got, ref):
    diff = np.abs(got.astype(np.float64) - ref)
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    flips = np.flatnonzero(got.argmax(1) != ref.argmax(1))
    msg = (f"{name}: max |diff| {diff.max():.3e} at image {worst[0]} class {worst[1]}; "
           f"argmax differs on {len(flips)} images {flips[:10].tolist()}")
    print(msg)
    return diff.max(), flips, msg


def test_output_shape(run):
    n = len(run["labels"])
    assert run["engine"].dtype == np.float32
    assert run["engine"].shape == run["ref32"].shape == (n, 10)


@pytest.mark.parametrize("reference", ["ref64", "ref32"])
def test_same_class_and_probabilities(run, reference):
    got, ref = run["engine"], run[reference]
    assert got.shape == ref.shape
    max_diff, flips, msg = _report(f"{run['name']} engine vs PyTorch {reference}", got, ref)
    assert len(flips) == 0, msg
    assert max_diff <= TOLERANCE, msg


def test_reported_accuracy_matches_pytorch(run):
    s = run["summary"]
    pred = run["ref64"].argmax(1)
    correct = int((pred == run["labels"]).sum())
    assert int(s["images"]) == len(run["labels"])
    assert int(s["correct"]) == correct
    assert abs(float(s["accuracy"]) - correct / len(pred)) < 1e-12  # a fraction, not a percentage


@pytest.mark.parametrize("name, target", [("mnist", 0.99), ("fashion", 0.90)])
def test_accuracy_targets(name, target):
    """The model cards' promise, measured by PyTorch alone so that it holds without an engine."""
    model_file, files = CASES[name]
    model_path = REPO / "models" / model_file
    if not model_path.is_file():
        pytest.fail(f"{model_path} is missing: the committed models must exist (scripts/train_lenet5.py writes them)")
    try:
        images_path, labels_path = files()
    except FileNotFoundError as e:
        pytest.skip(f"{name} test set not on this machine: {e}")
    model = mf.read_model(model_path)
    images = datasets.read_idx(images_path).reshape((-1,) + tuple(model.graph["input"]["shape"]))
    labels = datasets.read_idx(labels_path).astype(np.int64)
    with torch.no_grad():
        pred = mf.to_torch(model)(torch.from_numpy(images)).argmax(1).numpy()
    acc = float((pred == labels).mean())
    print(f"{name}: {model_path.name} accuracy {acc:.4f} on {images_path}")
    assert acc >= target, f"{name}: {acc:.4f} < {target}"
