"""`engine train` as a user runs it: architecture-only graphs, bad data refused before the first
step with one clear line and nothing written, determinism (runs, thread counts), early stopping,
checkpoints, the curve files, and the trained model accepted by `engine run` and the Python reader."""
from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib

import numpy as np
import pytest

from cnnengine import model_format as mf

from _train_support import ENGINE, run_engine, write_idx_images, write_idx_labels

pytestmark = pytest.mark.skipif(ENGINE is None, reason="the engine is not built (build/engine, or $ENGINE_BIN)")
REPO = pathlib.Path(__file__).resolve().parents[2]
MLP = REPO / "models" / "architectures" / "seed003-mlp.json"


@pytest.fixture
def digits(tmp_path):
    """600 synthetic 28x28 'images' whose class is which horizontal band is bright: learnable in
    one epoch, so a test can tell training from noise."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 600).astype(np.uint8)
    images = rng.integers(0, 40, (600, 28, 28)).astype(np.uint8)
    for i, c in enumerate(labels):
        images[i, 2 * c + 4:2 * c + 7, :] = 230
    img = write_idx_images(tmp_path / "train-images-idx3-ubyte", images)
    write_idx_labels(tmp_path / "train-labels-idx1-ubyte", labels)
    val = write_idx_images(tmp_path / "val-images-idx3-ubyte", images[:200])
    write_idx_labels(tmp_path / "val-labels-idx1-ubyte", labels[:200])
    return img, val


def sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train(model, data, out, *extra, check=True, env=None):
    return run_engine("train", model, "--data", data, "--batch", 32, "--no-plot", "-o", out, *extra, check=check,
                      env=env)


def test_architecture_only_graph_info_run_and_train(tmp_path, digits):
    img, val = digits
    info = run_engine("info", MLP)
    assert "architecture-only" in info.stdout
    run = run_engine("run", MLP, img, check=False)
    assert run.returncode == 1
    assert f"{MLP}: is an architecture-only graph" in run.stderr
    assert run.stderr.count("\n") == 1 + run.stderr.count("info:")

    out = tmp_path / "mlp.json"
    proc = train(MLP, img, out, "--val", val, "--epochs", 2, "--optimizer", "adam")
    curve = json.loads((tmp_path / "mlp.curve.json").read_text())
    assert [e["epoch"] for e in curve["epochs"]] == [1, 2]
    assert curve["epochs"][-1]["val_accuracy"] > 0.9, proc.stderr
    assert len(curve["steps"]["loss"]) == 2 * 19
    csv = (tmp_path / "mlp.curve.csv").read_text().splitlines()
    assert csv[0].startswith("epoch,loss,accuracy,val_loss,val_accuracy") and len(csv) == 3
    for e in (1, 2):
        assert (tmp_path / "mlp.checkpoints" / f"epoch-{e:03d}.json").is_file()
        mf.read_model(tmp_path / "mlp.checkpoints" / f"epoch-{e:03d}.json")
    # The output is a plain format v1 model: the Python reader and engine run take it.
    mf.read_model(out)
    result = json.loads(run_engine("run", out, val, "--json").stdout)
    assert result["accuracy"] == pytest.approx(curve["epochs"][-1]["val_accuracy"], abs=1e-9)
    assert not list(tmp_path.glob("*.tmp"))


def test_same_seed_same_bits_any_thread_count(tmp_path, digits):
    img, _ = digits
    outs = []
    for i, threads in enumerate([1, 2, 1]):
        out = tmp_path / f"m{i}.json"
        seed = 5 if i < 2 else 6
        train(MLP, img, out, "--seed", seed, "--threads", threads, "--no-checkpoints")
        outs.append(sha(out.with_suffix(".safetensors")))
    assert outs[0] == outs[1], "thread count changed the trained weights"
    assert outs[0] != outs[2], "the seed changed nothing"


def test_augmentation_and_cosine_schedule(tmp_path, digits):
    """--augment draws from the seed (same seed, same bits), changes what is learnt, and the curve's
    learning rates follow the warm-up + cosine formula of docs/design/training.md."""
    img, val = digits
    recipe = ("--optimizer", "adam", "--lr", "0.002", "--lr-schedule", "cosine", "--warmup-epochs", 1, "--epochs", 3,
              "--val", val, "--no-checkpoints")
    outs = {}
    for name, extra in [("a", ("--augment", "shift=2,flip")), ("b", ("--augment", "shift=2,flip")), ("plain", ())]:
        out = tmp_path / f"{name}.json"
        train(MLP, img, out, *recipe, *extra)
        outs[name] = sha(out.with_suffix(".safetensors"))
    assert outs["a"] == outs["b"], "augmentation is not reproducible from the seed"
    assert outs["a"] != outs["plain"], "--augment changed nothing"
    curve = json.loads((tmp_path / "a.curve.json").read_text())
    assert curve["run"]["augment"] == "shift=2,flip" and curve["run"]["lr_schedule"] == "cosine"
    lrs = curve["steps"]["lr"]
    w, total = 19, 3 * 19  # 600 samples, batch 32: 19 steps per epoch
    assert len(lrs) == total
    for t, lr in enumerate(lrs):
        want = 0.002 * (t + 1) / w if t < w else 0.002 * 0.5 * (1 + math.cos(math.pi * (t - w) / (total - w)))
        assert lr == pytest.approx(want, rel=1e-12, abs=1e-18), t
    # (No accuracy check on the augmented runs: these digits' class is a band's row, which a vertical
    # shift moves onto its neighbour's.) The schedule itself trains:
    assert json.loads((tmp_path / "plain.curve.json").read_text())["epochs"][-1]["val_accuracy"] > 0.9


def test_val_split_holds_out_the_last_samples(tmp_path, digits):
    img, _ = digits
    out = tmp_path / "vs.json"
    proc = train(MLP, img, out, "--val-split", 100, "--epochs", 2, "--optimizer", "adam", "--no-checkpoints")
    curve = json.loads((tmp_path / "vs.curve.json").read_text())
    assert "the last 100 samples of" in curve["run"]["validation"]
    assert len(curve["steps"]["loss"]) == 2 * 16  # 500 training samples, batch 32
    assert curve["epochs"][-1]["val_accuracy"] > 0.9, proc.stderr
    # The held-out samples are the validation set: engine run on them gives the same accuracy.
    images = np.frombuffer(img.read_bytes(), np.uint8)[16:].reshape(600, 28, 28)
    labels = np.frombuffer((img.parent / "train-labels-idx1-ubyte").read_bytes(), np.uint8)[8:]
    held = write_idx_images(tmp_path / "held-images-idx3-ubyte", images[500:])
    write_idx_labels(tmp_path / "held-labels-idx1-ubyte", labels[500:])
    result = json.loads(run_engine("run", out, held, "--json").stdout)
    assert result["accuracy"] == pytest.approx(curve["epochs"][-1]["val_accuracy"], abs=1e-9)


def test_reference_and_cpu_train_alike(tmp_path, digits):
    img, val = digits
    acc = {}
    for backend in ("reference", "cpu"):
        out = tmp_path / f"{backend}.json"
        train(MLP, img, out, "--backend", backend, "--val", val, "--optimizer", "sgd", "--lr", "0.1", "--momentum",
              "0.9", "--no-checkpoints")
        acc[backend] = json.loads((tmp_path / f"{backend}.curve.json").read_text())["epochs"][0]
    assert acc["cpu"]["loss"] == pytest.approx(acc["reference"]["loss"], rel=1e-4)


def test_early_stopping_keeps_the_best_epoch(tmp_path, digits):
    img, val = digits
    out = tmp_path / "es.json"
    # A learning rate far too high: validation loss soon stops improving.
    train(MLP, img, out, "--val", val, "--epochs", 8, "--optimizer", "sgd", "--lr", "2.0", "--early-stopping", 2,
          "--no-checkpoints")
    curve = json.loads((tmp_path / "es.curve.json").read_text())
    losses = [e["val_loss"] for e in curve["epochs"]]
    best = curve["best_epoch"]
    assert losses[best - 1] == min(losses)
    assert len(losses) == min(8, best + 2)
    kept = json.loads(run_engine("run", out, val, "--json").stdout)["accuracy"]
    assert kept == pytest.approx(curve["epochs"][best - 1]["val_accuracy"], abs=1e-9)


def test_init_reinitialises_a_full_model_and_fine_tuning_starts_from_it(tmp_path, digits):
    img, _ = digits
    full = REPO / "models" / "seed003-mlp.json"
    a, b = tmp_path / "tuned.json", tmp_path / "fresh.json"
    train(full, img, a, "--optimizer", "sgd", "--lr", "1e-6", "--no-checkpoints")
    train(full, img, b, "--init", "--optimizer", "sgd", "--lr", "1e-6", "--no-checkpoints")
    start = mf.read_model(full).tensors["fc1.weight"]
    tuned, fresh = mf.read_model(a).tensors["fc1.weight"], mf.read_model(b).tensors["fc1.weight"]
    assert np.abs(tuned - start).max() < 1e-4
    assert np.abs(fresh - start).max() > 0.01
    assert np.abs(fresh).max() <= 1 / np.sqrt(784) + 1e-6  # kaiming_uniform(a=sqrt(5)) bound


def test_png_curve_when_python_can_draw_and_a_warning_when_not(tmp_path, digits):
    img, _ = digits
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.json"
    run_engine("train", MLP, "--data", img, "-o", out, "--no-checkpoints")
    assert (tmp_path / "p.curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # No Python that can draw (ENGINE_PYTHON names the only interpreter to try): a warning, and
    # the CSV/JSON curve all the same.
    out2 = tmp_path / "q.json"
    proc = run_engine("train", MLP, "--data", img, "-o", out2, "--no-checkpoints",
                      env=dict(os.environ, ENGINE_PYTHON=str(tmp_path / "no-python")))
    assert (tmp_path / "q.curve.csv").is_file() and (tmp_path / "q.curve.json").is_file()
    assert not (tmp_path / "q.curve.png").exists()
    assert "warning: no PNG curve" in proc.stderr and "q.curve.csv" in proc.stderr


BAD = {
    "label_out_of_range": "label 10 of sample 3 is not one of the model's 10 classes",
    "count_mismatch": "599 labels, but",
    "wrong_image_size": "images are 1x20x20 (CxHxW) but model 'seed003-mlp' expects 1x28x28",
    "labels_not_idx": "",
    "no_labels": "no labels file given and none found beside it",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_data_is_one_clear_error_before_the_first_step(tmp_path, case):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, (600, 28, 28)).astype(np.uint8)
    labels = rng.integers(0, 10, 600).astype(np.uint8)
    labels_path = tmp_path / "train-labels-idx1-ubyte"
    if case == "label_out_of_range":
        labels[3] = 10
    if case == "count_mismatch":
        labels = labels[:599]
    if case == "wrong_image_size":
        images = images[:, :20, :20]
    img = write_idx_images(tmp_path / "train-images-idx3-ubyte", images)
    if case == "labels_not_idx":
        labels_path.write_bytes(b"not an idx file at all")
    elif case != "no_labels":
        write_idx_labels(labels_path, labels)
    out = tmp_path / "out" / "m.json"
    out.parent.mkdir()
    proc = train(MLP, img, out, check=False)
    assert proc.returncode == 1
    errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert BAD[case] in errors[0]
    assert (str(labels_path) if case in ("label_out_of_range", "count_mismatch", "labels_not_idx") else str(img)) in errors[0]
    assert "epoch" not in proc.stderr, "training started before the data was checked"
    assert list(out.parent.iterdir()) == [], "something was written for a run that failed"


def test_a_batch_larger_than_memory_is_a_clear_error(tmp_path):
    # 60,000 images of 28x28 in a batch of 60,000 is fine; the LeNet-sized activations of a huge
    # synthetic set are not: the limit is checked when the trainer is compiled, before any step.
    images = np.zeros((65536, 28, 28), np.uint8)
    img = write_idx_images(tmp_path / "train-images-idx3-ubyte", images)
    write_idx_labels(tmp_path / "train-labels-idx1-ubyte", np.zeros(65536, np.uint8))
    graph = json.loads((REPO / "models" / "architectures" / "lenet5.json").read_text())
    for n in graph["nodes"]:
        if n["name"] == "c1":
            n["attrs"]["out_channels"] = 4000  # 4000 x 28 x 28 floats per image
    arch = tmp_path / "wide.json"
    arch.write_text(json.dumps(graph))
    proc = run_engine("train", arch, "--data", img, "--batch", 65536, "-o", tmp_path / "m.json", check=False)
    assert proc.returncode == 1
    assert "use a smaller --batch" in proc.stderr


def test_defaults_are_adam_and_learn_in_one_epoch(tmp_path, digits):
    img, val = digits
    out = tmp_path / "m.json"
    proc = train(MLP, img, out, "--val", val, "--epochs", 1)
    run = json.loads((tmp_path / "m.curve.json").read_text())["run"]
    assert (run["optimizer"], run["lr"]) == ("adam", 0.001)
    assert "1 epoch of 19 steps" in proc.stderr and "1 epochs" not in proc.stderr
    epoch = json.loads((tmp_path / "m.curve.json").read_text())["epochs"][0]
    assert epoch["val_accuracy"] > 0.5  # chance is 0.1; the data is learnable in one epoch


def test_progress_lines_without_a_terminal(tmp_path, digits):
    img, _ = digits
    proc = train(MLP, img, tmp_path / "m.json", "--no-checkpoints", "--progress-every", "1e-6")
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("info: epoch 1/1: ") and "/600 images" in ln]
    assert len(lines) >= 2, proc.stderr
    assert "\r" not in proc.stderr
    quiet = train(MLP, img, tmp_path / "q.json", "--no-checkpoints")  # the default: every 10 s, none in this run
    assert "/600 images" not in quiet.stderr


@pytest.mark.parametrize("optimizer", [["--optimizer", "adam"], ["--optimizer", "sgd", "--momentum", "0.9"]])
def test_resume_equals_the_uninterrupted_run_bit_for_bit(tmp_path, digits, optimizer):
    img, val = digits
    common = ["--epochs", 3, "--augment", "shift=2", "--seed", 5, "--val", val, *optimizer]
    whole, resumed = tmp_path / "whole.json", tmp_path / "resumed.json"
    train(MLP, img, whole, *common)
    ckpt = tmp_path / "whole.checkpoints" / "epoch-001.json"
    assert (tmp_path / "whole.checkpoints" / "epoch-001.optimizer.safetensors").exists()
    proc = train(MLP, img, resumed, *common, "--resume", ckpt)
    assert "resuming from" in proc.stderr and "epoch 1/3" not in proc.stderr
    assert sha(whole.with_suffix(".safetensors")) == sha(resumed.with_suffix(".safetensors"))
    for name in ("epoch-003.safetensors", "epoch-003.optimizer.safetensors"):
        assert sha(tmp_path / "whole.checkpoints" / name) == sha(tmp_path / "resumed.checkpoints" / name)
    curve = json.loads((tmp_path / "resumed.curve.json").read_text())
    assert [e["epoch"] for e in curve["epochs"]] == [2, 3]
    # A checkpoint is itself a model engine run accepts.
    run_engine("run", ckpt, val, "--backend", "cpu")


def test_resume_refuses_what_cannot_continue(tmp_path, digits):
    img, _ = digits
    first = tmp_path / "a.json"
    train(MLP, img, first, "--epochs", 1)
    ckpt = tmp_path / "a.checkpoints" / "epoch-001.json"
    cases = [
        (["--epochs", 2, "--optimizer", "sgd", "--resume", ckpt], "its optimiser state is adam's"),
        (["--epochs", 1, "--resume", ckpt], "the checkpoint has done 1 epoch already; --epochs 1"),
        (["--epochs", 2, "--limit", 300, "--resume", ckpt], "trained on 600 samples per epoch, this one has 300"),
        (["--epochs", 2, "--resume", first], "no optimiser state beside it"),
        (["--epochs", 2, "--resume", tmp_path / "none.json"], "none.json"),
    ]
    for args, message in cases:
        proc = train(MLP, img, tmp_path / "b.json", *args, check=False)
        assert proc.returncode == 1, args
        assert message in proc.stderr, (args, proc.stderr)
        assert not (tmp_path / "b.json").exists()
    other = REPO / "models" / "architectures" / "lenet5.json"
    proc = train(other, img, tmp_path / "b.json", "--epochs", 2, "--resume", ckpt, check=False)
    assert proc.returncode == 1 and "is not a checkpoint of model" in proc.stderr


@pytest.mark.parametrize("args,message", [
    # Every built-in backend trains now (custom and cudnn on a GPU): a backend that does not exist is
    # refused by name, before anything is written.
    (["--backend", "nosuch"], "unknown backend 'nosuch'"),
    (["--early-stopping", "2"], "--early-stopping watches the validation loss"),
    (["--optimizer", "adam", "--momentum", "0.9"], "--momentum applies to --optimizer sgd only"),
    (["--augment", "rotate"], "--augment rotate: unknown transform 'rotate'"),
    (["--val-split", "100", "--val", "x.idx"], "--val-split and --val both name a validation set"),
    (["--val-split", "600"], "--val-split 600: the training set has only 600 samples"),
    (["--augment", "shift=40"], "a shift of 40 pixels moves a 28x28 image out of its frame"),
    (["--warmup-epochs", "1"], "--warmup-epochs goes with --lr-schedule cosine"),
    (["--lr-schedule", "cosine", "--lr-decay", "1e-4"], "--lr-decay is the inverse-time schedule's"),
])

def test_bad_options_are_refused(tmp_path, digits, args, message):
    img, _ = digits
    out = tmp_path / "o" / "m.json"
    out.parent.mkdir()
    proc = train(MLP, img, out, *args, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("name,message", [("missing/m.json", "missing does not exist"),
                                          ("m.txt", "the output must be a .json graph file")])
def test_bad_output_path_is_refused_before_training(tmp_path, digits, name, message):
    img, _ = digits
    proc = run_engine("train", MLP, "--data", img, "-o", tmp_path / name, check=False)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "epoch" not in proc.stderr


def test_a_model_whose_output_is_not_a_softmax_cannot_train(tmp_path, digits):
    img, _ = digits
    graph = json.loads(MLP.read_text())
    graph["outputs"] = ["fc2"]
    arch = tmp_path / "logits.json"
    arch.write_text(json.dumps(graph))
    proc = train(arch, img, tmp_path / "m.json", check=False)
    assert proc.returncode == 1
    assert "its first output 'fc2' must be a softmax node" in proc.stderr


def test_devices_on_a_host_backend_is_one_clear_error(tmp_path, digits):
    """--devices picks GPUs for data-parallel training; the host backends refuse it rather than
    train on the CPU where a GPU run was meant."""
    img, _ = digits
    out = tmp_path / "out" / "m.json"
    out.parent.mkdir()
    proc = train(MLP, img, out, "--backend", "cpu", "--devices", "0,1", check=False)
    assert proc.returncode == 1
    errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "--devices: backend 'cpu' runs on the host, not on GPUs" in errors[0]
    assert "epoch" not in proc.stderr
    assert list(out.parent.iterdir()) == []
