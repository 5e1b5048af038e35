"""The seeds' CNN (seed 002) and MLP (seed 003), committed in models/: the engine reproduces each
card's test accuracy on every backend available here, agrees with the reference interpreter on the
whole MNIST test set, and a Keras file of each model (written in Keras' exact HDF5 layout from the
committed weights) imports back to exactly the committed graph and tensors."""
import json
import pathlib
import re
import subprocess

import numpy as np
import pytest
import torch

import _keras_h5 as kh
from cnnengine import datasets, export, export_cli
from cnnengine import model_format as mf

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS = REPO / "models"
ENGINE = export.engine_binary()
NAMES = ["seed002-cnn", "seed003-mlp"]


def t10k():
    for d in (datasets.shared_data_dir() / "mnist", pathlib.Path("/work/shared/data/mnist")):
        img, lab = d / "t10k-images-idx3-ubyte.gz", d / "t10k-labels-idx1-ubyte.gz"
        if img.is_file() and lab.is_file():
            return img, lab
    try:
        return datasets.mnist_files("test")
    except FileNotFoundError as e:
        pytest.skip(str(e))


def card_accuracy(name: str) -> tuple[float, int]:
    """(percent, correct) from the model's card in models/README.md: its 'test accuracy, engine' row."""
    text = (MODELS / "README.md").read_text()
    section = text.split(f"## {name}", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"\| test accuracy, engine[^|]*\| \**([0-9.]+)%\** \(([0-9,]+) ?/ ?10,?000\)", section)
    assert m, f"no 'test accuracy, engine' row in the card of {name}"
    return float(m.group(1)), int(m.group(2).replace(",", ""))


def available_backends() -> list[str]:
    proc = subprocess.run([str(ENGINE), "backends"], capture_output=True, text=True, timeout=60)
    names = [ln.split()[0] for ln in proc.stdout.splitlines()[1:] if " available" in ln and "not available" not in ln]
    assert "cpu" in names, proc.stdout
    return names


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory):
    """{(model, backend): (summary, outputs)} for the whole test set."""
    if ENGINE is None:
        pytest.skip("the engine is not built (build/engine, or $ENGINE_BIN)")
    images, labels = t10k()
    tmp = tmp_path_factory.mktemp("engine")
    runs = {}
    for name in NAMES:
        for backend in available_backends():
            out = tmp / f"{name}-{backend}.npy"
            proc = subprocess.run([str(ENGINE), "run", str(MODELS / f"{name}.json"), str(images), "--labels",
                                   str(labels), "--backend", backend, "--json", "--dump-outputs", str(out)],
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr
            runs[(name, backend)] = (json.loads(proc.stdout), np.load(out))
    return runs


@pytest.mark.parametrize("name", NAMES)
def test_engine_prints_the_cards_accuracy_on_every_backend(engine_runs, name):
    percent, correct = card_accuracy(name)
    for (model, backend), (summary, _) in engine_runs.items():
        if model == name:
            assert summary["images"] == 10000 and summary["correct"] == correct, (backend, summary["correct"])
            assert f"{100 * summary['accuracy']:.2f}" == f"{percent:.2f}"


@pytest.mark.parametrize("name", NAMES)
def test_engine_matches_reference_on_the_test_set(engine_runs, name):
    images, labels = t10k()
    x = datasets.read_idx(images)[:, None]
    y = datasets.read_idx(labels).astype(np.int64)
    model = mf.read_model(MODELS / f"{name}.json")
    with torch.no_grad():
        ref = mf.to_torch(model).eval().to(torch.float64)(torch.from_numpy(x)).numpy()
    for (m, backend), (_, out) in engine_runs.items():
        if m == name:
            assert np.abs(out - ref).max() <= 1e-5, backend
            assert (out.argmax(1) == ref.argmax(1)).all(), backend
    # The card's PyTorch figure is the reference interpreter's on the written files.
    percent, correct = card_accuracy(name)
    assert int((ref.argmax(1) == y).sum()) == correct


def test_cards_beat_the_seeds():
    assert card_accuracy("seed002-cnn")[0] > 94.85
    assert card_accuracy("seed003-mlp")[0] > 80.9


# --------------------------------------------------------------------------------------------------
# The same models as Keras files

def keras_files(name: str, model: mf.Model):
    """(model_config, weights) of the model as Keras would hold it: HWIO kernels, [in, out] Dense
    kernels, the first Dense reading Keras' NHWC flatten."""
    t = model.tensors
    if name == "seed002-cnn":
        layers = [kh.input_layer((28, 28, 1), "conv1_input"),
                  kh.conv2d("conv1", 4, (2, 2), padding="same", activation="relu"),
                  kh.conv2d("conv2", 4, (2, 2), padding="same", activation="relu"),
                  kh.pool2d("MaxPooling2D", "pool", (4, 4), strides=(4, 4)),
                  kh.flatten("flatten"), kh.dense("fc1", 128, activation="relu"),
                  kh.dense("fc2", 10, activation="softmax")]
        weights = {"conv1": [("conv1/kernel:0", kh.conv_kernel_from_oihw(t["conv1.weight"])),
                             ("conv1/bias:0", t["conv1.bias"])],
                   "conv2": [("conv2/kernel:0", kh.conv_kernel_from_oihw(t["conv2.weight"])),
                             ("conv2/bias:0", t["conv2.bias"])],
                   "fc1": [("fc1/kernel:0", kh.dense_kernel_after_flatten(t["fc1.weight"], 4, 7, 7)),
                           ("fc1/bias:0", t["fc1.bias"])]}
    else:
        layers = [kh.input_layer((784,), "fc1_input"), kh.dense("fc1", 500, activation="relu"),
                  kh.dense("fc2", 10, activation="softmax")]
        weights = {"fc1": [("fc1/kernel:0", np.ascontiguousarray(t["fc1.weight"].T)), ("fc1/bias:0", t["fc1.bias"])]}
    weights["fc2"] = [("fc2/kernel:0", np.ascontiguousarray(t["fc2.weight"].T)), ("fc2/bias:0", t["fc2.bias"])]
    return kh.sequential(layers), weights


@pytest.mark.parametrize("name", NAMES)
def test_keras_file_imports_to_the_committed_model(tmp_path, capsys, name):
    """Seed 002 was a Keras model: its Keras file (model.save layout) imports to exactly the model
    that was exported from PyTorch, graph and bits, the check running on real images."""
    committed = mf.read_model(MODELS / f"{name}.json")
    config, weights = keras_files(name, committed)
    src = tmp_path / f"{name}.h5"
    kh.save_model(src, config, weights, keras_version="2.15.0")
    out = tmp_path / f"{name}.json"
    images, _ = t10k()
    rc = export_cli.main(["keras", str(src), "--like", str(MODELS / f"{name}.json"), "-o", str(out),
                          "--description", committed.graph["description"], "--check-data", str(images),
                          "--check-count", "500"])
    o = capsys.readouterr()
    assert rc == 0, o.out + o.err
    assert "check passed" in o.out and "source (Keras NumPy NHWC reference)" in o.out
    imported = mf.read_model(out)
    assert imported.graph == {**committed.graph, "weights": imported.graph["weights"]}
    assert imported.tensors.keys() == committed.tensors.keys()
    for k, v in committed.tensors.items():
        np.testing.assert_array_equal(imported.tensors[k], v)
