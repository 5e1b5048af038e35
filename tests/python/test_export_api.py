"""The exporters' preprocessing (never guessed: from the source, the user, or scored on labelled data),
the Python export API (cnnengine.export.from_torch / from_onnx) for any nn.Module, and the check's
bound scaled by the magnitude the sums reach."""
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from torch import nn  # noqa: E402

from cnnengine import datasets, export, export_cli, preprocessing  # noqa: E402
from cnnengine import model_format as mf  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


def run(capsys, *argv):
    rc = export_cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def to_onnx(module, path, shape=(1, 1, 28, 28)):
    torch.onnx.export(module.eval(), torch.zeros(shape), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=13)
    return path


class Net(nn.Module):
    """Subclassed, with BatchNorm and a functional forward: no nn.Sequential walk can export it."""

    def __init__(self, scales_itself=False):
        super().__init__()
        self.scales_itself = scales_itself
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        if self.scales_itself:
            x = (x / 255.0 - 0.1307) / 0.3081
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


def net(scales_itself=False):
    torch.manual_seed(5)
    m = Net(scales_itself)
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
    return m.eval()


def test_presets_are_the_documented_ones():
    assert preprocessing.preset("mnist", 1) == {"scale": float(np.float32(1 / 255)), "mean": [0.1307], "std": [0.3081]}
    assert preprocessing.preset("raw", 3) == {"scale": 1.0, "mean": [0.0] * 3, "std": [1.0] * 3}
    assert preprocessing.preset("symmetric", 1)["mean"] == [1.0]
    assert preprocessing.preset("imagenet", 3)["std"] == [0.229, 0.224, 0.225]
    with pytest.raises(preprocessing.PreprocessingError, match="3 values for 1 channel"):
        preprocessing.preset("imagenet", 1)


def test_torchvision_transforms_as_written():
    mnist = preprocessing.preset("mnist", 1)
    got = preprocessing.from_torchvision("transforms.Compose([transforms.ToTensor(), "
                                         "transforms.Normalize((0.1307,), (0.3081,))])", 1)
    assert got["scale"] == mnist["scale"] and got["mean"] == pytest.approx([0.1307]) and got["std"] == pytest.approx([0.3081])
    got = preprocessing.from_torchvision("ToTensor(), Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])", 3)
    assert got == {"scale": float(np.float32(1 / 255)), "mean": [0.5] * 3, "std": [0.5] * 3}
    # Two Normalize steps compose: ((v - 1) / 2 - 3) / 4 = (v - 7) / 8.
    assert preprocessing.from_torchvision("PILToTensor(), Normalize(1, 2), Normalize(3, 4)", 1) == \
        {"scale": 1.0, "mean": [7.0], "std": [8.0]}
    with pytest.raises(preprocessing.PreprocessingError, match="Resize is not per-pixel arithmetic"):
        preprocessing.from_torchvision("Resize(32), ToTensor()", 1)


def test_cli_transforms_state_the_preprocessing(tmp_path, capsys):
    src = to_onnx(net(), tmp_path / "net.onnx")
    rc, out, err = run(capsys, "onnx", src, "-o", tmp_path / "t.json", "--no-engine", "--check-count", "32",
                       "--transforms", "ToTensor(), Normalize((0.1307,), (0.3081,))")
    assert rc == 0, out + err
    assert "(preset mnist)" in out  # the same arithmetic as the preset, said so
    rc, out, err = run(capsys, "onnx", src, "-o", tmp_path / "t.json", "--no-engine", "--preset", "unit",
                       "--transforms", "ToTensor()")
    assert rc == 1 and "--transforms and --preset both state the preprocessing" in err


def test_export_without_preprocessing_is_refused_in_one_line(tmp_path, capsys):
    src = to_onnx(net(), tmp_path / "net.onnx")
    rc, out, err = run(capsys, "onnx", src, "-o", tmp_path / "x.json", "--no-engine")
    assert rc == 1 and not (tmp_path / "x.json").exists()
    assert err.count("\n") == 1 and "does not record how raw pixels become its input: pass --preset " in err
    rc, out, err = run(capsys, "onnx", src, "-o", tmp_path / "x.json", "--no-engine", "--mean", "0.5")
    assert rc == 1 and "--mean without --scale" in err


def test_a_leading_div_sub_is_the_models_own_preprocessing(tmp_path, capsys):
    src = to_onnx(net(scales_itself=True), tmp_path / "own.onnx")
    rc, out, err = run(capsys, "onnx", src, "-o", tmp_path / "own.json", "--check-count", "64")
    assert rc == 0, out + err
    g = mf.read_model(tmp_path / "own.json").graph
    pre = g["input"]["preprocess"]
    # (x / 255 - 0.1307) / 0.3081 moved into the input: no scale_shift node is left.
    assert pre["scale"] == 1.0 and pre["mean"][0] == pytest.approx(0.1307 * 255) and pre["std"][0] == pytest.approx(0.3081 * 255)
    assert "scale_shift" not in {n["op"] for n in g["nodes"]}


def test_check_labels_picks_the_preset_that_scores_best(tmp_path, capsys):
    try:
        images, labels = datasets.mnist_files("test")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    # The seed LeNet-5 (trained on x/255, padded to 32x32) as a module of the padded float input.
    module = mf.to_torch(mf.read_model(REPO / "models" / "lenet5.json")).eval()
    module.preprocess = nn.Identity()
    src = to_onnx(module, tmp_path / "lenet.onnx", (1, 1, 32, 32))
    rc, out, err = run(capsys, "onnx", src, "-o", tmp_path / "lenet.json", "--check-data", images,
                       "--check-labels", labels, "--check-count", "300")
    assert rc == 0, out + err
    assert "preprocessing: picked preset unit (x/255)" in out
    assert mf.read_model(tmp_path / "lenet.json").graph["input"]["preprocess"]["scale"] == float(np.float32(1 / 255))


def test_from_torch_takes_a_subclassed_module_with_batchnorm(tmp_path):
    m = net()
    exported = export.from_torch(m, torch.zeros(1, 1, 28, 28), preset="mnist", check_count=64, log=lambda s: None)
    assert exported.report.ok
    ops = [n["op"] for n in exported.graph["nodes"]]
    assert "scale_shift" not in ops and ops.count("conv2d") == 1  # BatchNorm folded into the conv
    saved = exported.save(tmp_path / "net.json")
    assert (tmp_path / "net.safetensors").is_file()
    x = np.random.default_rng(0).integers(0, 256, (16, 1, 28, 28), dtype=np.uint8)
    ref = mf.to_torch(mf.read_model(saved.path))(torch.from_numpy(x)).detach().numpy()
    pre = preprocessing.preset("mnist", 1)
    want = m(torch.from_numpy((x.astype(np.float32) * np.float32(pre["scale"]) - np.float32(0.1307))
                              / np.float32(0.3081))).detach().numpy()
    np.testing.assert_allclose(ref, want, atol=1e-4)
    with pytest.raises(export.ExportError, match="PyTorch module Net does not record .* pass preset="):
        export.from_torch(m, torch.zeros(1, 1, 28, 28), log=lambda s: None)


@pytest.mark.parametrize("kind", ["raw_pixels", "sigmoid"])
def test_check_bound_follows_the_magnitude_of_the_sums(tmp_path, capsys, kind):
    """A raw-pixel MLP (sums of 0..255 inputs) and a sigmoid output behind large logits: the fp32
    evaluations differ from float64 by more than 1e-5 while within the bound their sums allow."""
    torch.manual_seed(11)
    layers = [nn.Flatten(), nn.Linear(784, 64), nn.Tanh() if kind == "sigmoid" else nn.ReLU(), nn.Linear(64, 10)]
    mlp = nn.Sequential(*layers, *([nn.Sigmoid()] if kind == "sigmoid" else [])).eval()
    if kind == "sigmoid":
        with torch.no_grad():
            for p in mlp.parameters():
                p.mul_(8)
    src = to_onnx(mlp, tmp_path / f"{kind}.onnx")
    preset = "raw" if kind == "raw_pixels" else "unit"
    rc, out, err = run(capsys, "onnx", src, "-o", tmp_path / "m.json", "--preset", preset, "--check-count", "128")
    assert rc == 0, out + err
    assert "max(1, sum |w.x|" in out and "check passed" in out
    batch = export.check_batch(mf.read_model(tmp_path / "m.json").graph, 128)
    model = mf.read_model(tmp_path / "m.json")
    module = mf.to_torch(model)
    with torch.no_grad():
        f32 = module(torch.from_numpy(batch)).numpy()
        magnitude = module.magnitude_copy()(torch.from_numpy(batch)).numpy()
        f64 = module.to(torch.float64)(torch.from_numpy(batch)).numpy()
    assert (magnitude >= np.abs(f64) - 1e-9).all()
    c = export.compare("f32", f32, f64, 1e-5, magnitude)
    assert c.ok and c.bound > 1e-5
