"""cnnengine-export (tools/export): the PyTorch walk, state_dict + --like, and the check that guards every export."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import _modules
from cnnengine import export, lenet5
from cnnengine import model_format as mf

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXPORT_MAIN = "import sys; from cnnengine.export_cli import main; sys.exit(main())"


PREPROCESSING_OPTIONS = ("--preset", "--transforms", "--scale", "--mean", "--std", "--like", "--check-labels", "--help")


def stated(argv) -> list:
    """argv with `--preset unit` (x/255, what these tests' models take) unless it states the
    preprocessing or takes it from --like: an export never assumes it."""
    argv = [str(a) for a in argv]
    return argv if any(a in PREPROCESSING_OPTIONS for a in argv) else argv + ["--preset", "unit"]


def run_export(*args, engine=None, env_extra=None):
    args = tuple(stated(args)) if args[:1] == ("torch",) else args
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    if engine is None:
        args = args + ("--no-engine",)
    else:
        env["ENGINE_BIN"] = str(engine)
    env.update(env_extra or {})
    # cnnengine-export, run by this interpreter (the console script's own entry point).
    return subprocess.run([sys.executable, "-c", EXPORT_MAIN, *args],
                          capture_output=True, text=True, env=env, timeout=300)


def every_layer_module():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.ZeroPad2d((1, 2, 0, 1)),                       # left, right, top, bottom -> input pad
        nn.Conv2d(3, 4, 4, padding="same"),               # even kernel: one more at bottom/right
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
        nn.ZeroPad2d(1),                                  # folded into the next conv
        nn.Conv2d(4, 5, 3, stride=(2, 1), padding=(0, 1)),
        nn.Sigmoid(),
        nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False),
        nn.Dropout(0.5),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(5 * 4 * 9, 7),
        nn.Softmax(dim=1),
    )


@pytest.fixture
def pickled(tmp_path):
    def save(module, name="m.pt"):
        path = tmp_path / name
        torch.save(module, path)
        return path
    return save


@pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")
def test_every_layer_round_trip(tmp_path, pickled):
    module = every_layer_module().eval()
    src = pickled(module)
    out = tmp_path / "every.json"
    r = run_export("torch", str(src), "-o", str(out), "--allow-pickle", "--input-shape", "3,10,9",
                   "--scale", "0.00392156862745098", "--mean", "0.5,0.4,0.3", "--std", "0.2,0.25,0.3", "--labels", "a,b,c,d,e,f,g")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "check passed" in r.stdout
    model = mf.read_model(out)
    nodes = {n["name"]: n for n in model.graph["nodes"]}
    assert model.graph["input"]["preprocess"]["pad"] == [0, 1, 1, 2]
    assert nodes["conv2d_1"]["attrs"]["padding"] == [1, 2, 1, 2]
    assert nodes["conv2d_5"]["attrs"]["padding"] == [1, 1, 2, 2]
    assert [n["op"] for n in model.graph["nodes"]] == [
        "conv2d", "relu", "maxpool", "conv2d", "sigmoid", "avgpool", "tanh", "flatten", "dense", "softmax"]
    # Independently of the exporter's own check: the file reproduces the module.
    x = np.random.default_rng(5).integers(0, 256, (16, 3, 10, 9), dtype=np.uint8)
    pre = (torch.from_numpy(x).float() * float(np.float32(1 / 255))
           - torch.tensor([0.5, 0.4, 0.3]).reshape(1, 3, 1, 1)) / torch.tensor([0.2, 0.25, 0.3]).reshape(1, 3, 1, 1)
    with torch.no_grad():
        want = module(pre)
        got = mf.to_torch(model)(torch.from_numpy(x))
    assert (want - got).abs().max().item() <= 1e-6


def test_lenet5_names_and_input_pad(tmp_path, pickled):
    torch.manual_seed(1)
    src = pickled(lenet5.build_module())
    out = tmp_path / "lenet5.json"
    r = run_export("torch", str(src), "-o", str(out), "--allow-pickle", "--input-shape", "1,28,28",
                   "--labels", ",".join(str(i) for i in range(10)))
    assert r.returncode == 0, r.stderr + r.stdout
    model = mf.read_model(out)
    assert [n["name"] for n in model.graph["nodes"]] == [
        "c1", "c1_tanh", "s2", "c3", "c3_tanh", "s4", "flatten", "f5", "f5_tanh", "f6", "f6_tanh", "f7", "prob"]
    assert model.graph["input"]["preprocess"] == {"scale": float(np.float32(1 / 255)), "mean": [0.0],
                                                  "std": [1.0], "pad": [2, 2, 2, 2], "pad_value": 0.0}
    assert model.parameter_count() == lenet5.PARAMETERS
    assert model.graph["weights"]["file"] == "lenet5.safetensors"


def test_nested_modules(tmp_path, pickled):
    """Sequentials inside a Sequential are walked (the layers keep their names); a module class
    holding them is traced."""
    walked = tmp_path / "walked.json"
    r = run_export("torch", str(pickled(nn.Sequential(_modules.Wrapped().features, _modules.Wrapped().head))),
                   "-o", str(walked), "--allow-pickle", "--input-shape", "1,8,8")
    assert r.returncode == 0, r.stderr + r.stdout
    names = [n["name"] for n in mf.read_model(walked).graph["nodes"]]
    assert names == ["conv2d_0_0", "relu_0_1", "maxpool_0_2", "flatten_1_0", "dense_1_1", "softmax_1_2"], names
    traced = tmp_path / "traced.json"
    r = run_export("torch", str(pickled(_modules.Wrapped())), "-o", str(traced), "--allow-pickle", "--input-shape", "1,8,8")
    assert r.returncode == 0, r.stderr + r.stdout
    assert [n["op"] for n in mf.read_model(traced).graph["nodes"]] == \
        ["conv2d", "relu", "maxpool", "flatten", "dense", "softmax"]


def test_state_dict_with_like(tmp_path, pickled):
    torch.manual_seed(2)
    like = tmp_path / "like.json"
    assert run_export("torch", str(pickled(lenet5.build_module())), "-o", str(like), "--allow-pickle",
                      "--input-shape", "1,28,28").returncode == 0
    torch.manual_seed(3)
    trained = lenet5.build_module()
    sd_path = tmp_path / "sd.pt"
    torch.save({"state_dict": trained.state_dict(), "epoch": 7}, sd_path)
    out = tmp_path / "from_sd.json"
    r = run_export("torch", str(sd_path), "--like", str(like), "-o", str(out), "--name", "lenet5-sd")
    assert r.returncode == 0, r.stderr + r.stdout
    model = mf.read_model(out)
    assert model.name == "lenet5-sd"
    for k, v in trained.state_dict().items():
        np.testing.assert_array_equal(model.tensors[k], v.numpy())
    like_model = mf.read_model(like)
    assert model.graph["nodes"] == like_model.graph["nodes"]
    assert model.graph["input"] == like_model.graph["input"]


def test_state_dict_mismatch_fails_and_writes_nothing(tmp_path, pickled):
    torch.manual_seed(2)
    like = tmp_path / "like.json"
    assert run_export("torch", str(pickled(lenet5.build_module())), "-o", str(like), "--allow-pickle",
                      "--input-shape", "1,28,28").returncode == 0
    sd = lenet5.build_module().state_dict()
    sd["c3.weight"] = torch.zeros(16, 6, 3, 3)
    torch.save(sd, tmp_path / "bad.pt")
    r = run_export("torch", str(tmp_path / "bad.pt"), "--like", str(like), "-o", str(tmp_path / "bad.json"))
    assert r.returncode == 1
    assert "c3.weight" in r.stderr and "[16, 6, 5, 5]" in r.stderr
    del sd["f7.bias"]
    torch.save(sd, tmp_path / "short.pt")
    r = run_export("torch", str(tmp_path / "short.pt"), "--like", str(like), "-o", str(tmp_path / "bad.json"))
    assert r.returncode == 1 and "holds 9 tensors" in r.stderr
    assert not (tmp_path / "bad.json").exists() and not (tmp_path / "bad.safetensors").exists()


def test_state_dict_needs_like(tmp_path):
    torch.save(lenet5.build_module().state_dict(), tmp_path / "sd.pt")
    r = run_export("torch", str(tmp_path / "sd.pt"), "-o", str(tmp_path / "x.json"))
    assert r.returncode == 1 and "--like" in r.stderr


def test_non_sequential_module_is_traced(tmp_path, pickled):
    """A forward with a skip connection that no walk of the children sees: traced through
    torch.onnx, its Add is in the graph and the check against the module passes."""
    out = tmp_path / "ns.json"
    r = run_export("torch", str(pickled(_modules.NotSequential())), "-o", str(out), "--allow-pickle",
                   "--input-shape", "1,4,4")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "source (PyTorch NotSequential) vs reference f64" in r.stdout
    assert "add" in {n["op"] for n in json.loads(out.read_text())["nodes"]}


def test_batchnorm_in_a_sequential_is_folded(tmp_path, pickled):
    torch.manual_seed(2)
    module = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten()).eval()
    with torch.no_grad():
        module[1].running_var.uniform_(0.5, 2.0)
        module[1].running_mean.uniform_(-1, 1)
    out = tmp_path / "bn.json"
    r = run_export("torch", str(pickled(module)), "-o", str(out), "--allow-pickle", "--input-shape", "1,5,5")
    assert r.returncode == 0, r.stderr + r.stdout
    assert [n["op"] for n in json.loads(out.read_text())["nodes"]] == ["conv2d", "flatten"]


def test_unsupported_layer_is_named(tmp_path, pickled):
    module = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ELU(), nn.Flatten())
    r = run_export("torch", str(pickled(module)), "-o", str(tmp_path / "x.json"), "--allow-pickle",
                   "--input-shape", "1,5,5")
    assert r.returncode == 1 and "op Elu is not supported" in r.stderr, r.stderr


def test_a_class_from_the_saving_script_needs_its_code(tmp_path):
    script = tmp_path / "train_net.py"
    script.write_text(
        "import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(16, 3)\n\n"
        "    def forward(self, x):\n        return torch.tanh(self.fc(x.flatten(1)))\n\n\n"
        "if __name__ == '__main__':\n    torch.manual_seed(0)\n    torch.save(Net(), 'net.pt')\n")
    subprocess.run([sys.executable, str(script)], cwd=tmp_path, check=True, timeout=120)
    args = ("torch", str(tmp_path / "net.pt"), "-o", str(tmp_path / "net.json"), "--allow-pickle",
            "--input-shape", "1,4,4")
    r = run_export(*args)
    assert r.returncode == 1 and "Can't get attribute 'Net'" in r.stderr and "--code FILE.py" in r.stderr
    r = run_export(*args, "--code", str(script))
    assert r.returncode == 0, r.stderr + r.stdout


def test_pickled_module_needs_consent(tmp_path, pickled):
    r = run_export("torch", str(pickled(lenet5.build_module())), "-o", str(tmp_path / "x.json"),
                   "--input-shape", "1,28,28")
    assert r.returncode == 1 and "--allow-pickle" in r.stderr


def test_pickle_refusal_says_why_and_what_else_works(tmp_path, pickled):
    r = run_export("torch", str(pickled(lenet5.build_module())), "-o", str(tmp_path / "x.json"),
                   "--input-shape", "1,28,28")
    assert r.returncode == 1
    assert "runs code from the file" in r.stderr and "if you trust the file" in r.stderr, r.stderr
    assert "--like" in r.stderr, r.stderr


def test_missing_or_damaged_source_is_not_a_pickle_question(tmp_path):
    missing = tmp_path / "absent.pt"
    r = run_export("torch", str(missing), "-o", str(tmp_path / "x.json"), "--input-shape", "1,28,28")
    assert r.returncode == 1
    assert r.stderr.strip() == f"cnnengine-export: error: {missing}: no such file", r.stderr
    junk = tmp_path / "junk.pt"
    junk.write_text("not a torch file")
    r = run_export("torch", str(junk), "-o", str(tmp_path / "x.json"), "--input-shape", "1,28,28")
    assert r.returncode == 1
    assert f"{junk}: not a file torch.load can read" in r.stderr and "pickle" not in r.stderr, r.stderr
    assert not (tmp_path / "x.json").exists()


def test_input_shape_required_without_like(tmp_path, pickled):
    r = run_export("torch", str(pickled(lenet5.build_module())), "-o", str(tmp_path / "x.json"),
                   "--allow-pickle")
    assert r.returncode == 1 and "--input-shape" in r.stderr


def fake_engine(tmp_path):
    wrapper = tmp_path / "engine"
    wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{HERE / 'fake_engine.py'}' \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_check_runs_the_engine_and_fails_loudly(tmp_path, pickled):
    engine = fake_engine(tmp_path)
    src = pickled(lenet5.build_module())
    ok = run_export("torch", str(src), "-o", str(tmp_path / "ok.json"), "--allow-pickle",
                    "--input-shape", "1,28,28", "--check-count", "32", engine=engine)
    assert ok.returncode == 0, ok.stderr + ok.stdout
    assert "engine cpu vs reference f64" in ok.stdout and str(engine) in ok.stdout
    bad = run_export("torch", str(src), "-o", str(tmp_path / "bad.json"), "--allow-pickle",
                     "--input-shape", "1,28,28", "--check-count", "32", engine=engine,
                     env_extra={"FAKE_ENGINE_OFFSET": "5e-2"})
    assert bad.returncode == 1 and "CHECK FAILED" in bad.stdout
    assert not (tmp_path / "bad.json").exists()


def test_check_on_real_images(tmp_path, pickled):
    from cnnengine import datasets
    try:
        images, _ = datasets.mnist_files("test")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    r = run_export("torch", str(pickled(lenet5.build_module())), "-o", str(tmp_path / "x.json"),
                   "--allow-pickle", "--input-shape", "1,28,28", "--check-data", str(images),
                   "--check-count", "100")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "check on 100 samples" in r.stdout


def test_compare_ignores_argmax_flips_at_near_ties():
    ref = np.array([[0.5, 0.5 - 1e-7, 0.0], [0.1, 0.9, 0.0]])
    got = np.array([[0.5 - 1e-7, 0.5, 0.0], [0.1, 0.9, 0.0]])
    c = export.compare("x", got, ref, 1e-5)
    assert c.argmax_agree == 1 and c.true_disagreements == 0


def test_bound_scales_with_the_magnitude_of_the_sums():
    """Each element's bound is tolerance * max(1, the magnitude its sums reach): large sums carry
    large fp32 rounding, small ones get the absolute tolerance."""
    ref = np.array([[30.0, -12.0, 3.0], [-25.0, 4.0, 1.0]])
    magnitude = np.array([[300.0, 20.0, 0.5], [50.0, 40.0, 0.2]])
    ok = export.compare("logits", ref + np.array([[2.9e-3, 1.9e-4, 0.9e-5], [4.9e-4, 3.9e-4, 0.9e-5]]), ref, 1e-5,
                        magnitude)
    assert ok.ok and ok.bound == pytest.approx(3e-3) and ok.worst < 1
    # The same 2e-5 that a sum of 300 allows breaks an element whose sums stay below 1.
    assert not export.compare("small", ref + np.array([[0, 0, 2e-5], [0, 0, 0]]), ref, 1e-5, magnitude).ok
    probs = np.array([[0.7, 0.2, 0.1]])
    assert export.compare("p", probs + 2e-5, probs, 1e-5).bound == pytest.approx(1e-5)
    assert not export.compare("p", probs + 2e-5, probs, 1e-5).ok
    report = export.CheckReport([ok], 2, "skipped", 1e-5)
    assert "1e-05 * max(1, sum |w.x|" in report.text() and "bounds up to 3.00e-03" in report.text()


def test_help_names_the_console_script():
    r = run_export("--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: cnnengine-export "), r.stdout
