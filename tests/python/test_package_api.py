"""cnnengine.load and Model.run as a user of ONNX Runtime or PyTorch expects: float32 preprocessed
input, any node's output by name (logits from a softmax model), single images, torch tensors of any
strides, .onnx files loaded on the fly, and the package's own surface (__version__, __all__, dir,
help, errors in Python's words). Needs the extension (scripts/setup.sh installs it)."""
import inspect
import pathlib

import numpy as np
import pytest

import cnnengine
from cnnengine import datasets, preprocessing

REPO = pathlib.Path(__file__).resolve().parents[2]
LENET = REPO / "models" / "lenet5.json"


@pytest.fixture(scope="module")
def model():
    return cnnengine.load(LENET, backend="cpu")


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(7)
    return rng.integers(0, 256, size=(37, 28, 28), dtype=np.uint8)  # an odd count: a partial batch


def preprocess(model, raw: np.ndarray) -> np.ndarray:
    """The model's preprocessing in float32, as the spec states it (scale, normalise, pad)."""
    pre = model.preprocess
    c = model.input_shape[0]
    x = raw.reshape((len(raw), c) + raw.shape[-2:]).astype(np.float32) * np.float32(pre["scale"])
    x = (x - np.asarray(pre["mean"], np.float32).reshape(1, c, 1, 1)) / np.asarray(pre["std"], np.float32).reshape(1, c, 1, 1)
    t, b, l, r = pre["pad"]
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=np.float32(pre["pad_value"])).astype(np.float32)


def test_float32_preprocessed_input_gives_the_uint8_results(model, images):
    x = preprocess(model, images)
    assert x.shape[1:] == model.preprocessed_shape == (1, 32, 32)
    out = np.full((len(images), 10), np.nan, np.float32)  # poisoned: every row must be written
    out[:] = model.run(x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, model.run(images), rtol=0, atol=1e-6)


def test_logits_and_named_outputs(model, images):
    import torch
    probabilities = model.run(images)
    logits = model.run(images, outputs="logits")
    assert logits.shape == (len(images), 10) and not np.allclose(logits, probabilities)
    np.testing.assert_allclose(torch.softmax(torch.from_numpy(logits), 1).numpy(), probabilities, atol=1e-6)
    first, logits_again, conv = model.run(images, outputs=[model.outputs[0], "logits", model.nodes[0]])
    assert np.array_equal(first, probabilities) and np.array_equal(logits_again, logits)
    assert conv.shape == (len(images), 6, 28, 28)
    with pytest.raises(ValueError, match="has no output 'nope'; outputs= takes node names"):
        model.run(images, outputs=["nope"])


def test_single_image_and_torch_strides(model, images):
    import torch
    one = model.run(images[3])
    assert one.shape == (10,) and np.array_equal(one, model.run(images[3:4])[0])
    assert int(model.predict(images[3])) == int(model.predict(images[3:4])[0])
    t = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 2, 1))).transpose(1, 2)  # non-contiguous
    assert not t.is_contiguous()
    assert np.array_equal(model.run(t), model.run(images))
    assert np.array_equal(model.run(images[:, ::-1, :]), model.run(np.ascontiguousarray(images[:, ::-1, :])))


def test_package_surface():
    assert isinstance(cnnengine.__version__, str) and cnnengine.__version__
    assert {"load", "backends", "Model", "EngineError", "export", "preprocessing", "__version__"} <= set(cnnengine.__all__)
    for name in cnnengine.__all__:
        assert getattr(cnnengine, name) is not None
    assert "load" in dir(cnnengine) and "pkgutil" not in dir(cnnengine)
    shown = str(inspect.signature(cnnengine.load))
    assert "\"'" not in shown and "'\"" not in shown and "''" not in shown, shown


def test_errors_name_python_keywords():
    unavailable = [b["name"] for b in cnnengine.backends() if not b["available"]] or ["nope"]
    with pytest.raises(cnnengine.EngineError) as err:
        cnnengine.load(LENET, backend=unavailable[0])
    assert "--backend" not in str(err.value)
    with pytest.raises(ValueError, match="a format v1 model records its own preprocessing; preset="):
        cnnengine.load(LENET, preset="mnist")


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 3, 5), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(3 * 24 * 24, 10), torch.nn.Softmax(1)).eval()
    path = tmp_path_factory.mktemp("onnx") / "net.onnx"
    torch.onnx.export(net, torch.zeros(1, 1, 28, 28), str(path), input_names=["x"], output_names=["p"],
                      dynamic_axes={"x": {0: "n"}, "p": {0: "n"}}, opset_version=13)
    return path, net


def test_load_onnx_needs_and_takes_the_preprocessing(onnx_file, images):
    import torch
    path, net = onnx_file
    with pytest.raises(ValueError, match=r"does not record how raw pixels become its input: pass preset="):
        cnnengine.load(path, backend="cpu")
    m = cnnengine.load(path, backend="cpu", preset="mnist")
    assert m.export_report.ok and m.preprocess["mean"] == pytest.approx([0.1307])
    x = preprocessing.preset("mnist", 1)
    expected = net(torch.from_numpy(((images[:, None] * np.float32(x["scale"]) - np.float32(0.1307))
                                     / np.float32(0.3081)).astype(np.float32))).detach().numpy()
    np.testing.assert_allclose(m.run(images), expected, atol=1e-5)
    logits = m.run(images, outputs="logits")
    np.testing.assert_allclose(torch.softmax(torch.from_numpy(logits), 1).numpy(), m.run(images), atol=1e-6)
    with pytest.raises(ValueError, match="scale="):
        cnnengine.load(path, backend="cpu", mean=[0.5])


def test_accuracy_on_mnist_from_float32_input(model):
    try:
        raw = datasets.read_idx(datasets.mnist_files("test")[0])[:500]
        labels = datasets.read_idx(datasets.mnist_files("test")[1])[:500]
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert np.array_equal(model.predict(preprocess(model, raw)), model.predict(raw))
    assert (model.predict(raw) == labels).mean() > 0.95


def test_load_keras_h5_with_a_rescaling_layer(tmp_path, images):
    """A Keras file whose Rescaling layer states the preprocessing loads without keywords."""
    pytest.importorskip("h5py")
    import _keras_h5 as kh
    rng = np.random.default_rng(4)
    config = kh.sequential([kh.input_layer((28, 28, 1), "image"),
                            kh.layer("Rescaling", "rescale", scale=1 / 255, offset=0.0),
                            kh.flatten("flatten"), kh.dense("dense", 10, activation="softmax")])
    kernel = rng.standard_normal((784, 10)).astype(np.float32) * 0.05
    bias = rng.standard_normal(10).astype(np.float32) * 0.1
    src = tmp_path / "rescaled.h5"
    kh.save_model(src, config, {"dense": [("dense/kernel:0", kernel), ("dense/bias:0", bias)]})
    m = cnnengine.load(src, backend="cpu")
    assert m.preprocess["scale"] == pytest.approx(1 / 255) and m.export_report.ok
    x = images.reshape(len(images), -1).astype(np.float32) / np.float32(255)  # NHWC flatten of one channel
    z = x @ kernel + bias
    expected = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(m.run(images), expected / expected.sum(1, keepdims=True), atol=1e-5)
