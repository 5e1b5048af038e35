"""tools/export keras: HDF5 files in Keras' exact layout (written with h5py by _keras_h5, as Keras
2.2 and tf.keras 2.3-2.15 write them), checked against the NumPy NHWC Keras reference and the
engine's CPU backend; the NHWC flatten permutation; every error path names the layer."""
import os
import pathlib
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

import _keras_h5 as kh
from cnnengine import datasets, export, export_cli, import_common, keras_import, keras_reference, lenet5
from cnnengine import model_format as mf

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENGINE = export.engine_binary()


def mnist_t10k():
    for d in (datasets.shared_data_dir() / "mnist", pathlib.Path("/work/shared/data/mnist")):
        if (d / "t10k-images-idx3-ubyte.gz").is_file():
            return d / "t10k-images-idx3-ubyte.gz"
    try:
        return datasets.mnist_files("test")[0]
    except FileNotFoundError as e:
        pytest.skip(str(e))


PREPROCESSING_OPTIONS = ("--preset", "--transforms", "--scale", "--mean", "--std", "--like", "--check-labels", "--help")


def stated(argv) -> list:
    """argv with `--preset unit` (x/255, what these tests' models take) unless it states the
    preprocessing or takes it from --like: an export never assumes it."""
    argv = [str(a) for a in argv]
    return argv if any(a in PREPROCESSING_OPTIONS for a in argv) else argv + ["--preset", "unit"]


def run(capsys, *argv):
    return run_as_given(capsys, *stated(argv))


def run_as_given(capsys, *argv):
    rc = export_cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_checked(rc, out, err, label="Keras NumPy NHWC reference"):
    assert rc == 0, out + err
    assert "check passed" in out
    assert f"source ({label}) vs reference f64" in out
    if ENGINE is not None:
        assert "engine cpu vs reference f64" in out


def rand(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def conv_weights(rng, name, kh_, kw, cin, cout):
    return [(f"{name}/kernel:0", rand(rng, kh_, kw, cin, cout)), (f"{name}/bias:0", rand(rng, cout, scale=0.1))]


def dense_weights(rng, name, k, units):
    return [(f"{name}/kernel:0", rand(rng, k, units)), (f"{name}/bias:0", rand(rng, units, scale=0.1))]


# --------------------------------------------------------------------------------------------------
# Full-model files

def every_layer_model(rng):
    layers = [
        kh.input_layer((12, 11, 1), "input_1"),
        kh.zero_padding("zp0", ((1, 1), (2, 2))),            # leading: becomes the input's pad
        kh.conv2d("conv_a", 4, (3, 3), strides=(2, 2), padding="same", activation="relu"),
        kh.zero_padding("zp1", ((1, 0), (0, 1))),            # folded into conv_b's padding
        kh.conv2d("conv_b", 5, (2, 2), padding="valid", activation="tanh"),
        kh.pool2d("AveragePooling2D", "avg", (2, 2), strides=(1, 1), padding="same"),
        kh.pool2d("MaxPooling2D", "mx", (2, 2)),
        kh.flatten("flatten"),
        kh.dropout("drop"),
        kh.dense("fc1", 16),
        kh.activation("act", "sigmoid"),
        kh.layer("ReLU", "relu_layer", max_value=None, negative_slope=0.0, threshold=0.0),
        kh.dense("fc2", 5, activation="softmax"),
    ]
    weights = {"conv_a": conv_weights(rng, "conv_a", 3, 3, 1, 4), "conv_b": conv_weights(rng, "conv_b", 2, 2, 4, 5),
               "fc1": dense_weights(rng, "fc1", 3 * 4 * 5, 16), "fc2": dense_weights(rng, "fc2", 16, 5)}
    return kh.sequential(layers), weights


def test_full_model_every_layer_through_the_script(tmp_path):
    """tf.keras 2.15 layout, run through tools/export itself (the engine reads one-channel images;
    the channels that matter for the layouts come from the convolutions)."""
    config, weights = every_layer_model(np.random.default_rng(0))
    src = tmp_path / "every.h5"
    kh.save_model(src, config, weights)
    out = tmp_path / "every.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "tools"))
    r = subprocess.run([sys.executable, str(REPO / "tools" / "export"), "keras", str(src), "-o", str(out),
                        "--input-shape", "1,12,11", "--scale", "0.00392156862745098", "--mean", "0.5", "--std", "0.25",
                        "--labels", "a,b,c,d,e", "--check-count", "64"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert_checked(r.returncode, r.stdout, r.stderr)
    model = mf.read_model(out)
    g = model.graph
    assert g["input"]["shape"] == [1, 12, 11] and g["input"]["preprocess"]["std"] == [0.25]
    assert g["input"]["preprocess"]["pad"] == [1, 1, 2, 2]
    nodes = {n["name"]: n for n in g["nodes"]}
    assert [n["op"] for n in g["nodes"]] == ["conv2d", "relu", "conv2d", "tanh", "avgpool", "maxpool", "flatten",
                                            "dense", "sigmoid", "relu", "dense", "softmax"]
    # 14x15 after zp0; 3x3 stride 2 'same': 1 extra row at the bottom, one column each side.
    assert nodes["conv_a"]["attrs"]["padding"] == [0, 1, 1, 1]
    assert nodes["conv_b"]["attrs"]["padding"] == [1, 0, 0, 1]
    assert nodes["avg"]["attrs"] == {"kernel": [2, 2], "stride": [1, 1], "padding": [0, 1, 0, 1],
                                     "count_include_pad": False}
    np.testing.assert_array_equal(model.tensors["conv_a.weight"], weights["conv_a"][0][1].transpose(3, 2, 0, 1))
    np.testing.assert_array_equal(model.tensors["fc2.weight"], weights["fc2"][0][1].T)
    assert g["outputs"] == ["fc2_softmax"] and g["labels"] == list("abcde")


def lenet_keras(rng, keras22):
    """The seeds' LeNet-5 as a Keras user writes it: 32x32 input (MNIST padded by the user's code)."""
    n = (lambda base, i: f"{base}_{i}") if keras22 else (lambda base, i: base if i == 1 else f"{base}_{i - 1}")
    c1, c2, d1, d2, d3 = n("conv2d", 1), n("conv2d", 2), n("dense", 1), n("dense", 2), n("dense", 3)
    p1, p2, fl = n("average_pooling2d", 1), n("average_pooling2d", 2), n("flatten", 1)
    first = kh.conv2d(c1, 6, (5, 5), activation="tanh", batch_input_shape=(32, 32, 1) if keras22 else None)
    layers = ([] if keras22 else [kh.input_layer((32, 32, 1), "conv2d_input")]) + [
        first, kh.pool2d("AveragePooling2D", p1, (2, 2)),
        kh.conv2d(c2, 16, (5, 5), activation="tanh"), kh.pool2d("AveragePooling2D", p2, (2, 2)),
        kh.flatten(fl), kh.dense(d1, 120, activation="tanh"), kh.dense(d2, 84, activation="tanh"),
        kh.dense(d3, 10, activation="softmax")]
    weights = {c1: conv_weights(rng, c1, 5, 5, 1, 6), c2: conv_weights(rng, c2, 5, 5, 6, 16),
               d1: dense_weights(rng, d1, 400, 120), d2: dense_weights(rng, d2, 120, 84),
               d3: dense_weights(rng, d3, 84, 10)}
    return kh.sequential(layers, "sequential_1" if keras22 else "sequential"), weights


def test_keras22_full_model_with_real_images(tmp_path, capsys):
    """Keras 2.2 layout (no InputLayer, fixed-length byte-string attributes, groups in model order,
    conv2d_1/kernel:0); the 32x32 input gets pad 2 from the 28x28 images by default."""
    config, weights = lenet_keras(np.random.default_rng(1), keras22=True)
    src = tmp_path / "lenet22.h5"
    kh.save_model(src, config, weights, keras_version="2.2.4", keras22=True)
    with h5py.File(src) as f:  # the layout really is Keras'
        assert "conv2d_1/kernel:0" in f["model_weights/conv2d_1"]
        assert isinstance(f.attrs["model_config"], (bytes, np.bytes_))
        assert f["model_weights"].attrs["layer_names"].dtype.kind == "S"  # fixed-length, as h5py 2 wrote
    out = tmp_path / "lenet22.json"
    rc, o, e = run(capsys, "keras", src, "-o", out, "--check-data", mnist_t10k(), "--check-count", "200")
    assert_checked(rc, o, e)
    assert "check on 200 samples" in o
    g = mf.read_model(out).graph
    assert g["input"]["shape"] == [1, 28, 28] and g["input"]["preprocess"]["pad"] == [2, 2, 2, 2]
    assert "Keras 2.2.4" in g["description"]
    assert [n["name"] for n in g["nodes"]][:3] == ["conv2d_1", "conv2d_1_tanh", "average_pooling2d_1"]


def test_mlp_flat_input_reads_the_image(tmp_path, capsys):
    rng = np.random.default_rng(2)
    config = kh.sequential([kh.input_layer((784,), "dense_input"), kh.dense("dense", 32, activation="relu"),
                            kh.dense("dense_1", 10, activation="softmax")])
    weights = {"dense": dense_weights(rng, "dense", 784, 32), "dense_1": dense_weights(rng, "dense_1", 32, 10)}
    src = tmp_path / "mlp.h5"
    kh.save_model(src, config, weights)
    out = tmp_path / "mlp.json"
    rc, o, e = run(capsys, "keras", src, "-o", out, "--check-data", mnist_t10k(), "--check-count", "100")
    assert_checked(rc, o, e)
    g = mf.read_model(out).graph
    assert g["input"]["shape"] == [1, 28, 28]
    assert [n["op"] for n in g["nodes"]] == ["flatten", "dense", "relu", "dense", "softmax"]


def test_chunked_layer_names(tmp_path, capsys):
    """Keras splits long attributes into layer_names0, layer_names1, ...; they are read back in order."""
    config, weights = lenet_keras(np.random.default_rng(3), keras22=False)
    src = tmp_path / "chunked.h5"
    kh.save_model(src, config, weights, chunk_limit=48)
    with h5py.File(src) as f:
        assert "layer_names" not in f["model_weights"].attrs and "layer_names2" in f["model_weights"].attrs
    rc, o, e = run(capsys, "keras", src, "-o", tmp_path / "c.json", "--check-count", "32")
    assert_checked(rc, o, e)


# --------------------------------------------------------------------------------------------------
# The NHWC flatten

def test_reference_flattens_in_nhwc_order():
    """The reference is Keras: Flatten of a channels-last map orders inputs as (h, w, c)."""
    cfg = kh.sequential([kh.input_layer((2, 3, 4)), kh.flatten()])
    x = np.random.default_rng(4).standard_normal((2, 2, 3, 4)).astype(np.float32)
    y = keras_reference.predict(cfg, [], x)
    for i in range(2):
        for j in range(3):
            for k in range(4):
                assert y[1, (i * 3 + j) * 4 + k] == x[1, i, j, k]


def test_first_dense_after_flatten_is_permuted(tmp_path, capsys):
    """Conv (3 channels) -> Flatten -> Dense: the engine flattens (c, h, w), Keras (h, w, c); the
    imported weight's columns follow the engine's order, and the conversion without that
    permutation (the classic bug) fails the check instead of going unnoticed."""
    rng = np.random.default_rng(5)
    H, W, C = 4, 5, 3
    config = kh.sequential([kh.input_layer((H + 1, W + 1, 1)), kh.conv2d("conv", C, (2, 2), activation="relu"),
                            kh.flatten(), kh.dense("fc", 7), kh.dense("out", 4, activation="softmax")])
    weights = {"conv": conv_weights(rng, "conv", 2, 2, 1, C), "fc": dense_weights(rng, "fc", H * W * C, 7),
               "out": dense_weights(rng, "out", 7, 4)}
    src = tmp_path / "perm.h5"
    kh.save_model(src, config, weights)
    out = tmp_path / "perm.json"
    rc, o, e = run(capsys, "keras", src, "-o", out, "--input-shape", f"1,{H + 1},{W + 1}", "--check-count", "64")
    assert_checked(rc, o, e)
    model = mf.read_model(out)
    kernel = weights["fc"][0][1]
    got = model.tensors["fc.weight"]
    for k in range(C):
        for i in range(H):
            for j in range(W):
                np.testing.assert_array_equal(got[:, (k * H + i) * W + j], kernel[(i * W + j) * C + k])
    assert not np.array_equal(got, kernel.T)

    # The naive conversion: same graph, kernel merely transposed.
    naive = dict(model.tensors)
    naive["fc.weight"] = np.ascontiguousarray(kernel.T)
    kf = keras_import.KerasFile(src)
    source = keras_import.keras_source(kf.config, kf.weights_list(), model.graph["input"], [0, 0, 0, 0], 3, "Keras")
    batch = export.check_batch(model.graph, 64)
    with pytest.raises(import_common.ImportFailure, match="numerical check failed"):
        import_common.export_checked(tmp_path / "naive.json", model.graph, naive, source, lambda g: batch,
                                     log=lambda s: None)
    assert not (tmp_path / "naive.json").exists()


def test_reference_matches_torch_on_lenet():
    """The Keras reference computes what PyTorch computes when the weights are moved to Keras'
    layouts by hand (HWIO kernels, NHWC rows of the first dense kernel)."""
    torch.manual_seed(6)
    m = lenet5.build_module().eval()
    sd = {k: v.numpy() for k, v in m.state_dict().items()}
    config, _ = lenet_keras(np.random.default_rng(0), keras22=False)
    weights = [[kh.conv_kernel_from_oihw(sd["c1.weight"]), sd["c1.bias"]],
               [kh.conv_kernel_from_oihw(sd["c3.weight"]), sd["c3.bias"]],
               [kh.dense_kernel_after_flatten(sd["f5.weight"], 16, 5, 5), sd["f5.bias"]],
               [sd["f6.weight"].T, sd["f6.bias"]], [sd["f7.weight"].T, sd["f7.bias"]]]
    x = np.random.default_rng(7).random((8, 1, 28, 28), dtype=np.float32)
    with torch.no_grad():
        want = m(torch.from_numpy(x)).numpy()
    got = keras_reference.predict(config, weights, np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2))).transpose(0, 2, 3, 1))
    assert np.abs(got - want).max() < 1e-6


# --------------------------------------------------------------------------------------------------
# Weights-only files

def test_weights_only_with_keras_json_functional(tmp_path, capsys):
    rng = np.random.default_rng(8)
    config = kh.functional([kh.input_layer((10, 10, 1), "input_1"),
                            kh.conv2d("conv2d", 3, (3, 3), padding="same", activation="sigmoid"),
                            kh.pool2d("MaxPooling2D", "max_pooling2d", (3, 3), strides=(2, 2), padding="same"),
                            kh.flatten("flatten"), kh.dense("dense", 6, activation="softmax")])
    weights = {"conv2d": conv_weights(rng, "conv2d", 3, 3, 1, 3), "dense": dense_weights(rng, "dense", 5 * 5 * 3, 6)}
    src = tmp_path / "w.h5"
    kh.save_weights(src, config, weights)  # layer_names include input_1, with no weights
    arch = tmp_path / "model.json"
    arch.write_text(kh.to_json(config))
    rc, o, e = run(capsys, "keras", src, "--arch", arch, "-o", tmp_path / "w.json", "--input-shape", "1,10,10",
                   "--check-count", "64")
    assert_checked(rc, o, e)
    g = mf.read_model(tmp_path / "w.json").graph
    # TensorFlow: 10 rows, 3x3 window, stride 2 -> 5 outputs need 1 padded row, at the bottom.
    assert g["nodes"][2]["attrs"] == {"kernel": [3, 3], "stride": [2, 2], "padding": [0, 1, 0, 1]}


def test_weights_only_with_like_graph(tmp_path, capsys):
    """Weights of a Keras-trained LeNet-5 into the project's LeNet-5 graph (--like): matched by
    order and shape; the result is exactly the PyTorch-layout model the Keras weights encode."""
    torch.manual_seed(9)
    like_path = tmp_path / "lenet5.json"
    graph, tensors = export.graph_from_torch_module(lenet5.build_module(), lenet5.input_spec(), name="lenet5",
                                                    labels=lenet5.labels_for("mnist"))
    mf.write_model(like_path, graph, tensors)
    trained = {k: v.numpy() for k, v in lenet5.build_module().state_dict().items()}  # other weights
    config, _ = lenet_keras(np.random.default_rng(0), keras22=False)
    keras_w = {"conv2d": [("conv2d/kernel:0", kh.conv_kernel_from_oihw(trained["c1.weight"])),
                          ("conv2d/bias:0", trained["c1.bias"])],
               "conv2d_1": [("conv2d_1/kernel:0", kh.conv_kernel_from_oihw(trained["c3.weight"])),
                            ("conv2d_1/bias:0", trained["c3.bias"])],
               "dense": [("dense/kernel:0", kh.dense_kernel_after_flatten(trained["f5.weight"], 16, 5, 5)),
                         ("dense/bias:0", trained["f5.bias"])],
               "dense_1": [("dense_1/kernel:0", trained["f6.weight"].T.copy()), ("dense_1/bias:0", trained["f6.bias"])],
               "dense_2": [("dense_2/kernel:0", trained["f7.weight"].T.copy()), ("dense_2/bias:0", trained["f7.bias"])]}
    src = tmp_path / "keras_lenet_weights.h5"
    kh.save_weights(src, config, keras_w)
    out = tmp_path / "from_keras.json"
    rc, o, e = run(capsys, "keras", src, "--like", like_path, "-o", out, "--name", "lenet5-keras",
                   "--check-count", "64")
    assert_checked(rc, o, e, label="Keras NumPy NHWC reference, layers of --like")
    model = mf.read_model(out)
    assert model.name == "lenet5-keras"
    assert model.graph["nodes"] == graph["nodes"] and model.graph["input"] == graph["input"]
    for k, v in trained.items():
        np.testing.assert_array_equal(model.tensors[k], v)


# --------------------------------------------------------------------------------------------------
# Errors: named, and nothing written

def _error_case(tmp_path, kind):
    rng = np.random.default_rng(10)
    config, weights = lenet_keras(rng, keras22=False)
    layers = config["config"]["layers"]
    argv = []
    if kind == "layernorm":
        layers.insert(2, kh.layer("LayerNormalization", "layer_normalization", axis=-1))
        weights["layer_normalization"] = [(f"layer_normalization/{n}:0", np.ones(6, np.float32))
                                          for n in ("gamma", "beta")]
        want = "layer 'layer_normalization' (LayerNormalization): no format-v1 op"
    elif kind == "batchnorm_axis":
        layers.insert(2, kh.layer("BatchNormalization", "batch_normalization", axis=1, momentum=0.99,
                                  epsilon=1e-3, center=True, scale=True))
        weights["batch_normalization"] = [(f"batch_normalization/{n}:0", np.ones(6, np.float32))
                                          for n in ("gamma", "beta", "moving_mean", "moving_variance")]
        want = "layer 'batch_normalization' (BatchNormalization): normalizes axis 1"
    elif kind == "activation":
        layers[-1]["config"]["activation"] = "elu"
        want = "activation 'elu'"
    elif kind == "channels_first":
        layers[1]["config"]["data_format"] = "channels_first"
        want = "channels_first"
    elif kind == "extra_weights":
        config["config"]["layers"] = layers[:-1]
        want = "holds weights for 5 layers, the architecture uses 4"
    elif kind == "kernel_shape":
        weights["conv2d_1"][0] = ("conv2d_1/kernel:0", rand(rng, 3, 3, 6, 16))
        want = "layer 'conv2d_1' (Conv2D): kernel has shape [3, 3, 6, 16]"
    elif kind == "weights_only":
        src = tmp_path / "w.h5"
        kh.save_weights(src, config, weights)
        return src, argv, "--arch MODEL.json"
    elif kind == "not_keras":
        src = tmp_path / "plain.h5"
        with h5py.File(src, "w") as f:
            f.create_dataset("x", data=np.zeros(3))
        return src, argv, "not a Keras HDF5 file"
    src = tmp_path / f"{kind}.h5"
    kh.save_model(src, config, weights, layer_names=kh.model_layer_names(config) +
                  (["dense_2"] if kind == "extra_weights" else []))
    return src, argv, want


@pytest.mark.parametrize("kind", ["layernorm", "batchnorm_axis", "activation", "channels_first", "extra_weights", "kernel_shape",
                                  "weights_only", "not_keras"])
def test_errors_name_the_problem(tmp_path, capsys, kind):
    src, argv, want = _error_case(tmp_path, kind)
    out = tmp_path / "x.json"
    rc, o, e = run(capsys, "keras", src, "-o", out, *argv)
    assert rc == 1 and want in e, e
    assert not out.exists() and not (tmp_path / "x.safetensors").exists()


def _bn_weights(rng, name, channels):
    return [(f"{name}/gamma:0", (1 + 0.2 * rng.standard_normal(channels)).astype(np.float32)),
            (f"{name}/beta:0", (0.1 * rng.standard_normal(channels)).astype(np.float32)),
            (f"{name}/moving_mean:0", (0.1 * rng.standard_normal(channels)).astype(np.float32)),
            (f"{name}/moving_variance:0", (1 + np.abs(0.2 * rng.standard_normal(channels))).astype(np.float32))]


def test_batchnorm_that_cannot_fold_becomes_scale_shift(tmp_path, capsys):
    """After conv2d's tanh and before another tanh no linear layer can take the scale and shift: a
    scale_shift node with scale = gamma / sqrt(var + eps), shift = beta - mean * scale."""
    rng = np.random.default_rng(10)
    config, weights = lenet_keras(rng, keras22=False)
    layers = config["config"]["layers"]
    layers.insert(2, kh.layer("BatchNormalization", "batch_normalization", axis=-1, momentum=0.99,
                              epsilon=1e-3, center=True, scale=True))
    layers.insert(3, kh.activation("bn_tanh", "tanh"))
    weights["batch_normalization"] = _bn_weights(rng, "batch_normalization", 6)
    src = tmp_path / "bn.h5"
    kh.save_model(src, config, weights, layer_names=kh.model_layer_names(config))
    out = tmp_path / "bn.json"
    rc, o, e = run(capsys, "keras", src, "-o", out, "--check-count", "64")
    assert_checked(rc, o, e)
    model = mf.read_model(out)
    ops = [n["op"] for n in model.graph["nodes"]]
    assert ops[:4] == ["conv2d", "tanh", "scale_shift", "tanh"], ops
    gamma, beta, mean, var = (a.astype(np.float64) for _, a in weights["batch_normalization"])
    scale = gamma / np.sqrt(var + 1e-3)
    np.testing.assert_array_equal(model.tensors["batch_normalization.scale"], scale.astype(np.float32))
    np.testing.assert_array_equal(model.tensors["batch_normalization.shift"], (beta - mean * scale).astype(np.float32))


def test_functional_concatenate_and_batchnorm_after_pooling(tmp_path, capsys):
    """Two conv branches joined by Concatenate (axis -1: channels), max pooling, BatchNormalization
    before a 'same' Conv2D (a scale_shift), checked against the NumPy NHWC reference (a Keras 2 file)."""
    rng = np.random.default_rng(12)
    config = kh.functional([kh.input_layer((10, 10, 1), "input_1"),
                            kh.conv2d("conv_a", 3, (3, 3), padding="same", activation="relu"),
                            kh.conv2d("conv_b", 2, (1, 1), activation="tanh"),
                            kh.layer("Concatenate", "concatenate", axis=-1),
                            kh.pool2d("MaxPooling2D", "pool", (2, 2)),
                            kh.layer("BatchNormalization", "bn", axis=-1, epsilon=1e-3, center=True, scale=True),
                            kh.conv2d("conv_c", 4, (3, 3), padding="same", activation="relu"),
                            kh.flatten("flatten"), kh.dense("dense", 5, activation="softmax")])
    by_name = {lay["name"]: lay for lay in config["config"]["layers"]}
    by_name["conv_b"]["inbound_nodes"] = [[["input_1", 0, 0, {}]]]
    by_name["concatenate"]["inbound_nodes"] = [[["conv_a", 0, 0, {}], ["conv_b", 0, 0, {}]]]
    weights = {"conv_a": conv_weights(rng, "conv_a", 3, 3, 1, 3), "conv_b": conv_weights(rng, "conv_b", 1, 1, 1, 2),
               "bn": _bn_weights(rng, "bn", 5), "conv_c": conv_weights(rng, "conv_c", 3, 3, 5, 4),
               "dense": dense_weights(rng, "dense", 5 * 5 * 4, 5)}
    src = tmp_path / "branches.h5"
    kh.save_model(src, config, weights, layer_names=kh.model_layer_names(config))
    out = tmp_path / "branches.json"
    rc, o, e = run(capsys, "keras", src, "-o", out, "--input-shape", "1,10,10", "--check-count", "64")
    assert_checked(rc, o, e)
    g = mf.read_model(out).graph
    nodes = {n["name"]: n for n in g["nodes"]}
    assert nodes["concatenate"]["op"] == "concat"
    assert nodes["concatenate"]["inputs"] == ["conv_a_relu", "conv_b_tanh"]
    assert nodes["bn"]["op"] == "scale_shift" and nodes["bn"]["inputs"] == ["pool"]
    assert nodes["conv_c"]["inputs"] == ["bn"]


def test_concatenate_along_height_is_refused(tmp_path, capsys):
    rng = np.random.default_rng(13)
    config = kh.functional([kh.input_layer((6, 6, 1), "input_1"),
                            kh.conv2d("conv_a", 2, (3, 3), padding="same"),
                            kh.conv2d("conv_b", 2, (3, 3), padding="same"),
                            kh.layer("Concatenate", "concatenate", axis=1),
                            kh.flatten("flatten"), kh.dense("dense", 3)])
    by_name = {lay["name"]: lay for lay in config["config"]["layers"]}
    by_name["conv_b"]["inbound_nodes"] = [[["input_1", 0, 0, {}]]]
    by_name["concatenate"]["inbound_nodes"] = [[["conv_a", 0, 0, {}], ["conv_b", 0, 0, {}]]]
    weights = {"conv_a": conv_weights(rng, "conv_a", 3, 3, 1, 2), "conv_b": conv_weights(rng, "conv_b", 3, 3, 1, 2),
               "dense": dense_weights(rng, "dense", 12 * 6 * 2, 3)}
    src = tmp_path / "rows.h5"
    kh.save_model(src, config, weights, layer_names=kh.model_layer_names(config))
    rc, o, e = run(capsys, "keras", src, "-o", tmp_path / "rows.json", "--input-shape", "1,6,6")
    assert rc == 1 and "layer 'concatenate' (Concatenate): concatenates along axis 1" in e, e
    assert not (tmp_path / "rows.json").exists()


# --------------------------------------------------------------------------------------------------
# Keras 3 files, written by hand in Keras 3's layout (the corpus, test_import_corpus.py, has real ones)

def _k3_layer(cls, name, **config):
    policy = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
    return {"module": "keras.layers", "class_name": cls, "config": {"name": name, "trainable": True,
                                                                    "dtype": policy, **config},
            "registered_name": None}


def keras3_zip(path, rng, with_weights=True):
    """Keras 3 model.save('m.keras') of a notebook's third model: config names carry suffixes
    (conv2d_12), the weights file uses Keras 3's class-and-position paths (layers/conv2d), and an
    optimizer group sits beside the layers."""
    import io
    import json
    import zipfile
    layers = [{"module": "keras.layers", "class_name": "InputLayer",
               "config": {"batch_shape": [None, 784], "dtype": "float32", "sparse": False, "name": "input_layer_3"},
               "registered_name": None},
              _k3_layer("Reshape", "reshape_2", target_shape=[28, 28, 1]),
              _k3_layer("Rescaling", "rescaling_2", scale=1 / 255, offset=0.0),
              _k3_layer("Conv2D", "conv2d_12", filters=4, kernel_size=[3, 3], strides=[1, 1], padding="valid",
                        data_format="channels_last", dilation_rate=[1, 1], groups=1, activation="linear",
                        use_bias=True),
              _k3_layer("BatchNormalization", "batch_normalization_5", axis=-1, epsilon=1e-3, center=True,
                        scale=True),
              _k3_layer("Activation", "activation_3", activation="relu"),
              _k3_layer("MaxPooling2D", "max_pooling2d_4", pool_size=[2, 2], strides=[2, 2], padding="valid",
                        data_format="channels_last"),
              _k3_layer("Dropout", "dropout_9", rate=0.5),
              _k3_layer("Flatten", "flatten_6", data_format="channels_last"),
              _k3_layer("Dense", "dense_7", units=10, activation="softmax", use_bias=True)]
    config = {"module": "keras", "class_name": "Sequential",
              "config": {"name": "sequential_3", "trainable": True, "layers": layers}, "registered_name": None}
    weights = {"conv2d": [rand(rng, 3, 3, 1, 4), rand(rng, 4, scale=0.1)],
               "batch_normalization": [1 + rand(rng, 4, scale=0.2), rand(rng, 4, scale=0.1), rand(rng, 4, scale=0.1),
                                       1 + np.abs(rand(rng, 4, scale=0.2))],
               "dense": [rand(rng, 13 * 13 * 4, 10, scale=0.1), rand(rng, 10, scale=0.1)]}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_group("vars")
        for key in ("reshape", "rescaling", "conv2d", "batch_normalization", "activation", "max_pooling2d",
                    "dropout", "flatten", "dense"):
            g = f.create_group(f"layers/{key}/vars")
            for i, arr in enumerate(weights.get(key, []) if with_weights or key != "dense" else []):
                g.create_dataset(str(i), data=arr)
        opt = f.create_group("optimizer/vars")
        opt.create_dataset("0", data=np.zeros((), np.int64))
        opt.create_dataset("1", data=np.zeros((3, 3, 1, 4), np.float32))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.4.1", "date_saved": "2024-07-01@10:00:00"}))
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", buf.getvalue())
    return config, weights


def test_keras3_zip_weights_by_class_paths(tmp_path, capsys):
    rng = np.random.default_rng(20)
    config, weights = keras3_zip(tmp_path / "m.keras", rng)
    out = tmp_path / "m.json"
    # No preprocessing option: the model's Rescaling states it.
    rc, o, e = run_as_given(capsys, "keras", tmp_path / "m.keras", "-o", out, "--check-count", "64")
    assert rc == 0 and "check passed" in o, o + e
    model = mf.read_model(out)
    g = model.graph
    # The flat 784 input is the raw [1, 28, 28] image; Rescaling(1/255) is the input's scale (the
    # model's users feed raw pixels, so the user's own scale defaults to 1).
    assert g["input"]["shape"] == [1, 28, 28]
    assert g["input"]["preprocess"]["scale"] == float(np.float32(1 / 255))
    assert [n["op"] for n in g["nodes"]] == ["conv2d", "relu", "maxpool", "flatten", "dense", "softmax"]
    # BatchNormalization folded into conv2d_12: w * s, b * s + t.
    gamma, beta, mean, var = (w.astype(np.float64) for w in weights["batch_normalization"])
    s = gamma / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(model.tensors["conv2d_12.weight"],
                               weights["conv2d"][0].transpose(3, 2, 0, 1) * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(model.tensors["conv2d_12.bias"], weights["conv2d"][1] * s + beta - mean * s,
                               rtol=1e-5, atol=1e-7)
    # The dense rows reordered from Keras' NHWC flatten to the engine's CHW flatten.
    np.testing.assert_array_equal(model.tensors["dense_7.weight"],
                                  weights["dense"][0][keras_import.nhwc_to_chw_rows(13, 13, 4)].T)


def test_keras3_zip_missing_weights_is_named(tmp_path, capsys):
    keras3_zip(tmp_path / "m.keras", np.random.default_rng(21), with_weights=False)
    rc, o, e = run(capsys, "keras", tmp_path / "m.keras", "-o", tmp_path / "m.json")
    assert rc == 1 and "layer 'dense_7' (Dense) has weights but" in e, e
    assert not (tmp_path / "m.json").exists()


def test_keras3_weight_paths_follow_class_and_position():
    config = {"class_name": "Sequential", "config": {"layers": [
        {"class_name": "InputLayer", "config": {"name": "input_layer_4"}},
        {"class_name": "Conv2D", "config": {"name": "conv2d_9"}},
        {"class_name": "Conv2D", "config": {"name": "conv2d_10"}},
        {"class_name": "MaxPooling2D", "config": {"name": "max_pooling2d_1"}},
        {"class_name": "Dense", "config": {"name": "dense_3"}}]}}
    layers = config["config"]["layers"]
    assert keras_import.keras3_weight_paths(config, layers) == [None, "conv2d", "conv2d_1", "max_pooling2d", "dense"]
    functional = {"class_name": "Functional", "config": {"layers": layers}}
    assert keras_import.keras3_weight_paths(functional, layers)[0] == "input_layer"
