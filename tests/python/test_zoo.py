"""The model zoo's import is faithful: benchmarks/zoo/build_zoo.py builds a few zoo models into a
temporary folder (MNIST ones trained on a few thousand images, a CIFAR-shaped one with its seeded
random weights), and the engine's `reference` and `cpu` backends, fed the uint8 images, give
PyTorch's class (the module of models.py with the weights of torch.pt, fed the preprocessed
images): on MNIST's 10,000 test images on `cpu` (the first 300 on the slower `reference`), on
the CIFAR set's 1,000 random images on `cpu` (the first 100 on `reference`). Only a near-tie
(PyTorch's top two within 1e-5) may go either way. The float32-input variant of the CIFAR model,
run by `engine run` on the IDX float32 file, gives the uint8 model's outputs.

A subset of the zoo keeps this under a minute on two cores; the full zoo builds the same way.
"""
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from cnnengine import datasets, export

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "zoo"))
import build_zoo  # noqa: E402
import models  # noqa: E402

MNIST = ["mlp-128", "lenet5-relu-pad2", "concat-branches"]
CIFAR = ["resnet20"]
NEAR_TIE = 1e-5


@pytest.fixture(scope="module")
def mnist_dir():
    import os
    d = pathlib.Path(os.environ["CNN_SHARED_DATA"]) / "mnist"
    if not (d / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST not in {d}")
    return d


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, mnist_dir):
    out = tmp_path_factory.mktemp("zoo")
    rc = build_zoo.main(["--out", str(out), "--models", ",".join(MNIST + CIFAR), "--mnist", str(mnist_dir),
                         "--max-train-images", "2048", "--check-count", "32"])
    assert rc == 0
    return out


def torch_probs(name, zoo, x_uint8):
    module = models.load(name, zoo / name / "torch.pt")
    with torch.no_grad():
        return module(build_zoo.preprocess(x_uint8, models.REGISTRY[name].preprocess)).numpy()


def assert_same_classes(want_probs, got_probs, what):
    top2 = np.sort(want_probs, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > NEAR_TIE
    differ = (want_probs.argmax(1) != got_probs.argmax(1)) & clear
    assert not differ.any(), \
        f"{what}: {int(differ.sum())} images classed differently, e.g. {np.flatnonzero(differ)[:5]}"
    assert np.isfinite(got_probs).all(), what


@pytest.mark.parametrize("name", MNIST)
def test_mnist_models_classify_as_pytorch(zoo, mnist_dir, name):
    import cnnengine
    x = datasets.read_idx(mnist_dir / "t10k-images-idx3-ubyte.gz")[:, None]
    labels = datasets.read_idx(mnist_dir / "t10k-labels-idx1-ubyte.gz")
    want = torch_probs(name, zoo, x)
    assert (want.argmax(1) == labels).mean() > 0.5, f"{name}: even on 2,048 images the model learns MNIST"
    cpu = cnnengine.load(str(zoo / name / "model.json"), backend="cpu").run(x)
    assert_same_classes(want, cpu, f"{name} cpu")
    ref = cnnengine.load(str(zoo / name / "model.json"), backend="reference").run(x[:300])
    assert_same_classes(want[:300], ref, f"{name} reference")


@pytest.mark.parametrize("name", CIFAR)
def test_cifar_models_classify_as_pytorch(zoo, name):
    import cnnengine
    x = np.load(zoo / name / "test-images.npy")
    assert x.dtype == np.uint8 and x.shape[1:] == (3, 32, 32)
    want = torch_probs(name, zoo, x)
    assert len(set(want.argmax(1).tolist())) >= 5, f"{name}: random images should fall into several classes"
    for backend, count in (("cpu", len(x)), ("reference", 100)):
        got = cnnengine.load(str(zoo / name / "model.json"), backend=backend).run(x[:count])
        assert_same_classes(want[:count], got, f"{name} {backend}")


@pytest.mark.parametrize("name", CIFAR)
def test_cifar_float_variant_runs_in_the_engine_command(zoo, tmp_path, name):
    import cnnengine
    engine = export.engine_binary()
    if engine is None:
        pytest.skip("engine command not built")
    out = tmp_path / "out.npy"
    proc = subprocess.run([str(engine), "run", str(zoo / name / "model-float.json"),
                           str(zoo / name / "test-images-float.idx"), "--backend", "cpu", "--dump-outputs", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    x = np.load(zoo / name / "test-images.npy")
    uint8_model = cnnengine.load(str(zoo / name / "model.json"), backend="cpu").run(x)
    np.testing.assert_allclose(np.load(out), uint8_model, atol=1e-5)


def test_torch_state_dicts_load_with_weights_only(zoo):
    for name in MNIST + CIFAR:
        sd = torch.load(zoo / name / "torch.pt", weights_only=True)
        assert all(isinstance(v, torch.Tensor) for v in sd.values()), name
