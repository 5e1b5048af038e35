"""tools/export onnx: models written by torch.onnx (the real exporter, with its Shape/Gather/Concat
arithmetic around F.pad and x.view(x.size(0), -1)), checked against the ONNX model run by the NumPy
ONNX evaluator (onnx 1.12 has no onnx.reference), the engine's CPU backend, and the PyTorch module
itself; every unsupported op or attribute is an error naming the op and the node."""
import pathlib
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from cnnengine import datasets, export, export_cli, onnx_reference
from cnnengine import model_format as mf

ENGINE = export.engine_binary()
SCALE = float(np.float32(1 / 255))


PREPROCESSING_OPTIONS = ("--preset", "--transforms", "--scale", "--mean", "--std", "--like", "--check-labels", "--help")


def stated(argv) -> list:
    """argv with `--preset unit` (x/255, what these tests' models take) unless it states the
    preprocessing or takes it from --like: an export never assumes it."""
    argv = [str(a) for a in argv]
    return argv if any(a in PREPROCESSING_OPTIONS for a in argv) else argv + ["--preset", "unit"]


def run(capsys, *argv):
    rc = export_cli.main(stated(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_checked(rc, out, err):
    assert rc == 0, out + err
    assert "check passed" in out and "source (ONNX, " in out
    if ENGINE is not None:
        assert "engine cpu vs reference f64" in out


def to_onnx(module, path, shape, opset=None, dynamic=True):
    kwargs = {"opset_version": opset} if opset else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), torch.zeros(shape), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}} if dynamic else None, **kwargs)
    return path


def mnist_t10k():
    p = pathlib.Path("/work/shared/data/mnist/t10k-images-idx3-ubyte.gz")
    if p.is_file():
        return p
    try:
        return datasets.mnist_files("test")[0]
    except FileNotFoundError as e:
        pytest.skip(str(e))


class EveryOp(nn.Module):
    """Conv, Relu, MaxPool, Pad (leading and folded), AveragePool, Tanh, Sigmoid, Flatten, Gemm,
    MatMul + Add, Add of two values, Reshape via x.view(x.size(0), -1), Softmax."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = nn.Conv2d(1, 4, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(4, 6, 2)
        self.pool = nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False)
        self.fc = nn.Linear(6 * 9 * 9, 12)
        self.w = nn.Parameter(torch.randn(12, 12) * 0.3)
        self.b = nn.Parameter(torch.randn(12) * 0.1)
        self.out = nn.Linear(12, 10)

    def forward(self, x):
        x = nn.functional.pad(x, (1, 2, 0, 1))                        # leading: the input's pad
        x = torch.relu(self.c1(x))                                    # 29x31 -> 15x16
        x = nn.functional.max_pool2d(x, 2, padding=1)                 # -> 8x9
        x = torch.tanh(self.c2(nn.functional.pad(x, (0, 0, 1, 0))))   # folded into c2 -> 8x8
        x = torch.sigmoid(self.pool(x))                               # -> 9x9
        x = x.view(x.size(0), -1)
        h = torch.tanh(self.fc(x))
        h = h + torch.relu(h @ self.w + self.b)                       # MatMul + Add, then Add of values
        return torch.softmax(self.out(h), dim=1)


class Net002(nn.Module):
    """Seed 002's CNN as a PyTorch user writes it: forward with x.view(x.size(0), -1)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv1 = nn.Conv2d(1, 4, 2)
        self.conv2 = nn.Conv2d(4, 4, 2)
        self.fc1 = nn.Linear(196, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(nn.functional.pad(x, (0, 1, 0, 1))))
        x = torch.relu(self.conv2(nn.functional.pad(x, (0, 1, 0, 1))))
        x = nn.functional.max_pool2d(x, 4)
        x = x.view(x.size(0), -1)
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=1)


def test_evaluator_matches_torch():
    """The NumPy ONNX evaluator (the check's source) computes what the PyTorch module computes."""
    m = Net002().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import io
        f = io.BytesIO()
        torch.onnx.export(m, torch.zeros(2, 1, 28, 28), f, input_names=["x"], dynamic_axes={"x": {0: "N"}})
    model = onnx.load_from_string(f.getvalue())
    x = np.random.default_rng(0).random((5, 1, 28, 28), dtype=np.float32)
    with torch.no_grad():
        want = m(torch.from_numpy(x)).numpy()
    got = onnx_reference.run(model, {"x": x})[0]
    assert np.abs(got - want).max() < 1e-6


@pytest.mark.parametrize("opset", [9, 11, 13, None])
def test_torch_onnx_every_op(tmp_path, capsys, opset):
    """Every supported op as torch.onnx writes it, across opsets (Pad's pads an attribute before 11,
    Softmax's axis semantics before 13, Unsqueeze's axes an input from 13; None: torch's default)."""
    m = EveryOp().eval()
    src = to_onnx(m, tmp_path / "every.onnx", (2, 1, 28, 28), opset)
    out = tmp_path / "every.json"
    rc, o, e = run(capsys, "onnx", src, "-o", out, "--check-count", "64", "--labels", ",".join("0123456789"))
    assert_checked(rc, o, e)
    model = mf.read_model(out)
    ops = [n["op"] for n in model.graph["nodes"]]
    assert ops == ["conv2d", "relu", "maxpool", "conv2d", "tanh", "avgpool", "sigmoid", "flatten", "dense", "tanh",
                   "dense", "relu", "add", "dense", "softmax"]
    assert model.graph["input"]["preprocess"]["pad"] == [0, 1, 1, 2]
    convs = [n for n in model.graph["nodes"] if n["op"] == "conv2d"]
    assert convs[0]["attrs"]["padding"] == [1, 1, 1, 1] and convs[1]["attrs"]["padding"] == [1, 0, 0, 0]
    # Independently of the check: the written model reproduces the PyTorch module.
    x = np.random.default_rng(1).integers(0, 256, (16, 1, 28, 28), dtype=np.uint8)
    with torch.no_grad():
        want = m(torch.from_numpy(x).float() * SCALE)
        got = mf.to_torch(model)(torch.from_numpy(x))
    assert (want - got).abs().max().item() <= 1e-6


def test_seed002_style_with_real_images(tmp_path, capsys):
    src = to_onnx(Net002(), tmp_path / "net.onnx", (1, 1, 28, 28))
    out = tmp_path / "net.json"
    rc, o, e = run(capsys, "onnx", src, "-o", out, "--check-data", mnist_t10k(), "--check-count", "300")
    assert_checked(rc, o, e)
    assert "check on 300 samples" in o
    g = mf.read_model(out).graph
    # The first F.pad becomes the input's pad; the second is folded into conv2 as Keras' 'same'.
    assert g["input"]["preprocess"]["pad"] == [0, 1, 0, 1]
    assert [n["attrs"]["padding"] for n in g["nodes"] if n["op"] == "conv2d"] == [[0, 0, 0, 0], [0, 1, 0, 1]]


def test_static_batch_and_flat_input(tmp_path, capsys):
    """An MLP exported with a fixed batch of 4 and a [N, 784] input: the input becomes the uint8
    image plus a flatten node; the check runs the ONNX model in slices of 4."""
    torch.manual_seed(2)
    m = nn.Sequential(nn.Linear(784, 50), nn.ReLU(), nn.Linear(50, 10), nn.Softmax(dim=1))
    src = to_onnx(m, tmp_path / "mlp.onnx", (4, 784), dynamic=False)
    out = tmp_path / "mlp.json"
    rc, o, e = run(capsys, "onnx", src, "-o", out, "--check-data", mnist_t10k(), "--check-count", "10")
    assert_checked(rc, o, e)
    g = mf.read_model(out).graph
    assert g["input"]["shape"] == [1, 28, 28]
    assert [n["op"] for n in g["nodes"]] == ["flatten", "dense", "relu", "dense", "softmax"]


def _helper_model(tmp_path):
    """Forms torch.onnx does not write: auto_pad SAME_UPPER/SAME_LOWER, Gemm with transB=0, alpha
    and beta, AveragePool counting its pads, an Identity, initializers also listed as inputs."""
    rng = np.random.default_rng(3)
    inits = {"w1": rng.standard_normal((3, 1, 2, 2)).astype(np.float32),
             "w2": rng.standard_normal((2, 3, 3, 3)).astype(np.float32) * 0.3,
             "b2": rng.standard_normal(2).astype(np.float32),
             "g": rng.standard_normal((2 * 4 * 4, 5)).astype(np.float32) * 0.2,
             "gc": rng.standard_normal((1, 5)).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv_upper", auto_pad="SAME_UPPER"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv_lower", auto_pad="SAME_LOWER",
                         strides=[2, 2]),
        helper.make_node("Identity", ["c2"], ["i2"], name="identity"),
        helper.make_node("AveragePool", ["i2"], ["p"], name="avg", kernel_shape=[3, 3], strides=[1, 1],
                         pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "g", "gc"], ["y"], name="gemm", alpha=0.5, beta=2.0),
    ]
    graph = helper.make_graph(
        nodes, "helper", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])] +
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inits.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    path = tmp_path / "helper.onnx"
    onnx.save(model, str(path))
    return path


def test_hand_built_forms(tmp_path, capsys):
    out = tmp_path / "h.json"
    rc, o, e = run(capsys, "onnx", _helper_model(tmp_path), "-o", out, "--check-count", "64", "--scale", "0.01")
    assert_checked(rc, o, e)
    g = mf.read_model(out).graph
    nodes = {n["name"]: n for n in g["nodes"]}
    assert nodes["conv_upper"]["attrs"]["padding"] == [0, 1, 0, 1]      # the odd extra at the end
    assert nodes["conv_lower"]["attrs"]["padding"] == [1, 0, 1, 0]      # ... at the beginning
    assert nodes["avg"]["attrs"]["count_include_pad"] is True
    assert g["input"]["preprocess"]["scale"] == float(np.float32(0.01))


# --------------------------------------------------------------------------------------------------
# Unsupported ops and attributes: a clear error naming the op and the node, nothing written

class Unsupported(nn.Module):
    def __init__(self, kind):
        super().__init__()
        torch.manual_seed(4)
        self.kind = kind
        self.conv = nn.Conv2d(1, 4, 3, groups=1)
        self.grouped = nn.Conv2d(4, 4, 3, groups=2)

    def forward(self, x):
        x = self.conv(x)
        k = self.kind
        if k == "LeakyRelu":
            x = nn.functional.leaky_relu(x, 0.1)
        elif k == "RDiv":
            x = torch.tensor(2.0) / (torch.relu(x) + 1.0)  # a Div with the constant first
        elif k == "cat_rows":
            x = torch.cat([x, torch.relu(x)], 2)
        elif k == "Resize":
            x = nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        elif k == "group":
            x = self.grouped(x)
        elif k == "ceil_mode":
            x = nn.functional.max_pool2d(x, 2, ceil_mode=True)
        elif k == "reflect":
            x = nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
        elif k == "reshape4d":
            x = x.reshape(x.size(0), 2, 2, -1)
        return x.flatten(1)


@pytest.mark.parametrize("kind,want", [
    ("LeakyRelu", "(op LeakyRelu, output '/LeakyRelu_output_0'): op LeakyRelu is not supported"),
    ("RDiv", "(op Div, output '/Div_output_0'): a constant divided by a computed value is not supported"),
    ("cat_rows", "(op Concat, output '/Concat_output_0'): concatenates per-sample [[4, 6, 6], [4, 6, 6]] along "
                 "axis 2; format v1's concat joins channels"),
    ("Resize", "op Resize is not supported"),
    ("group", "(op Conv, output '/grouped/Conv_output_0'): group=2 is not supported"),
    ("ceil_mode", "(op MaxPool, output '/MaxPool_output_0'): ceil_mode=1 is not supported"),
    ("reflect", "op Pad, output '/Pad_output_0'): mode 'reflect' is not supported"),
    ("reshape4d", "op Reshape, output '/Reshape_output_0'): reshape of per-sample [4, 6, 6] to [N, 2, 2, -1]"),
])
def test_unsupported_ops_are_named(tmp_path, capsys, kind, want):
    src = to_onnx(Unsupported(kind), tmp_path / f"{kind}.onnx", (1, 1, 8, 8), opset=13)
    out = tmp_path / "x.json"
    rc, o, e = run(capsys, "onnx", src, "-o", out)
    assert rc == 1 and "ONNX node '" in e and want in e, e
    assert not out.exists() and not (tmp_path / "x.safetensors").exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_not_onnx(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a protobuf at all\xff" * 10)
    rc, o, e = run(capsys, "onnx", bad, "-o", tmp_path / "x.json")
    assert rc == 1 and "not a readable ONNX model" in e


# --------------------------------------------------------------------------------------------------
# Channels-last graphs (tf2onnx, keras2onnx) and constants folded into the node before them

def _channels_last_model(rng, no_channel=False, extra=None):
    """tf2onnx's pattern: [N, 6, 6, 1] -> Transpose(0,3,1,2) -> Conv (no bias) -> Add [C,1,1]
    (CNTK's separate bias) -> Relu -> Transpose(0,2,3,1) -> Reshape [N, -1] from Shape/Gather/
    Unsqueeze/Concat -> MatMul -> Add. `no_channel`: a [1, 6, 6] input Reshaped to [1, 6, 6, 1]."""
    w = (rng.standard_normal((3, 1, 3, 3)) * 0.5).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"),
             numpy_helper.from_array((rng.standard_normal((3, 1, 1)) * 0.1).astype(np.float32), "B"),
             numpy_helper.from_array((rng.standard_normal((4 * 4 * 3, 5)) * 0.3).astype(np.float32), "D"),
             numpy_helper.from_array((rng.standard_normal(5) * 0.1).astype(np.float32), "DB"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(np.array([1, 6, 6, 1], np.int64), "nhwc1")]
    nodes, src = [], "x"
    if no_channel:
        nodes.append(helper.make_node("Reshape", ["x", "nhwc1"], ["x4"], name="reshape_in"))
        src = "x4"
    nodes += [helper.make_node("Transpose", [src], ["t"], perm=[0, 3, 1, 2], name="to_nchw"),
              helper.make_node("Conv", ["t", "W"], ["c"], kernel_shape=[3, 3], name="conv"),
              helper.make_node("Add", ["c", "B"], ["cb"], name="conv_bias"),
              helper.make_node("Relu", ["cb"], ["r"], name="relu")]
    last = "r"
    if extra == "bn_after_relu":
        inits += [numpy_helper.from_array(np.full(3, v, np.float32), n) for v, n in
                  ((1.5, "g"), (0.1, "b"), (0.2, "m"), (2.0, "v"))]
        nodes.append(helper.make_node("BatchNormalization", ["r", "g", "b", "m", "v"], ["bn"], name="bn"))
        last = "bn"
    nodes += [helper.make_node("Transpose", [last], ["h"], perm=[0, 2, 3, 1], name="to_nhwc"),
              helper.make_node("Shape", ["h"], ["s"], name="shape"),
              helper.make_node("Gather", ["s", "zero"], ["n"], axis=0, name="batch"),
              helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0], name="unsq"),
              helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0, name="target"),
              helper.make_node("Reshape", ["h", "target"], ["f"], name="flatten"),
              helper.make_node("MatMul", ["f", "D"], ["mm"], name="dense"),
              helper.make_node("Add", ["mm", "DB"], ["y"], name="dense_bias")]
    shape = [1, 6, 6] if no_channel else ["N", 6, 6, 1]
    g = helper.make_graph(nodes, "nhwc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape[0], 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)], producer_name="tf2onnx"), inits


@pytest.mark.parametrize("no_channel", [False, True])
def test_channels_last_graph(tmp_path, capsys, no_channel):
    model, inits = _channels_last_model(np.random.default_rng(30), no_channel)
    src = tmp_path / "nhwc.onnx"
    onnx.save(model, src)
    out = tmp_path / "nhwc.json"
    rc, o, e = run(capsys, "onnx", src, "-o", out, "--check-count", "64")
    assert_checked(rc, o, e)
    m = mf.read_model(out)
    assert m.graph["input"]["shape"] == [1, 6, 6]
    assert [n["op"] for n in m.graph["nodes"]] == ["conv2d", "relu", "flatten", "dense"]
    arrays = {t.name: numpy_helper.to_array(t) for t in inits}
    np.testing.assert_array_equal(m.tensors["conv.bias"], arrays["B"].reshape(-1))   # the Add became the bias
    perm = np.arange(4 * 4 * 3).reshape(4, 4, 3).transpose(2, 0, 1).reshape(-1)
    np.testing.assert_array_equal(m.tensors["dense.weight"], arrays["D"].T[:, perm])  # NHWC columns reordered
    assert not np.array_equal(m.tensors["dense.weight"], arrays["D"].T)


def test_batchnorm_that_cannot_fold_becomes_scale_shift(tmp_path, capsys):
    """A BatchNormalization after a Relu has no Conv/Gemm to fold into: a scale_shift node, its
    scale and shift computed in float64 (scale = g / sqrt(v + eps), shift = b - m * scale)."""
    model, _ = _channels_last_model(np.random.default_rng(31), extra="bn_after_relu")
    src = tmp_path / "bn.onnx"
    onnx.save(model, src)
    out = tmp_path / "bn.json"
    rc, o, e = run(capsys, "onnx", src, "-o", out, "--check-count", "64")
    assert_checked(rc, o, e)
    m = mf.read_model(out)
    assert [n["op"] for n in m.graph["nodes"]] == ["conv2d", "relu", "scale_shift", "flatten", "dense"]
    scale = 1.5 / np.sqrt(np.float64(np.float32(2.0)) + 1e-5)
    np.testing.assert_array_equal(m.tensors["bn.scale"], np.full(3, scale, np.float32))
    np.testing.assert_array_equal(m.tensors["bn.shift"],
                                  np.full(3, np.float64(np.float32(0.1)) - np.float64(np.float32(0.2)) * scale,
                                          np.float32))


class Branches(nn.Module):
    """torch.cat of two conv branches along channels, max pooling, BatchNorm2d (no Conv before it),
    a padded conv, a scalar Mul and Add (a scale_shift each), BatchNorm1d after Flatten."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.a, self.b = nn.Conv2d(1, 3, 3, padding=1), nn.Conv2d(1, 2, 1)
        self.bn = nn.BatchNorm2d(5)
        self.c = nn.Conv2d(5, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm1d(4 * 4 * 4)
        self.fc = nn.Linear(4 * 4 * 4, 6)
        for bn in (self.bn, self.bn1):  # running statistics other than the defaults
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        x = torch.cat([torch.relu(self.a(x)), torch.tanh(self.b(x))], 1)
        x = self.bn(torch.max_pool2d(x, 2))
        x = torch.relu(self.c(x)) * 0.5 + 0.25
        return self.fc(self.bn1(torch.flatten(x, 1)))


@pytest.mark.parametrize("opset", [9, 13])
def test_concat_and_batchnorm_after_pooling(tmp_path, capsys, opset):
    src = to_onnx(Branches(), tmp_path / "branches.onnx", (1, 1, 8, 8), opset=opset)
    out = tmp_path / "branches.json"
    rc, o, e = run(capsys, "onnx", src, "-o", out, "--check-count", "64")
    assert_checked(rc, o, e)
    ops = [n["op"] for n in mf.read_model(out).graph["nodes"]]
    assert ops.count("concat") == 1 and ops.count("scale_shift") == 4, ops
    assert ops.index("concat") < ops.index("maxpool") < ops.index("scale_shift")
