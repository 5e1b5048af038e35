"""What the READMEs state and a reader acts on: the commands they show work as written, and the
lists they give match the repository."""
import json
import re
import shlex
import shutil
import struct
import subprocess

import numpy as np
import torch

from cnnengine import lenet5
from test_export import run_export
from test_malformed_inputs import engine  # noqa: F401  (the fixture: $ENGINE_BIN or a built engine)


def readme_commands(path, prefix):
    """The lines of the README's code blocks that start with `prefix`, comments removed."""
    lines = []
    # Any fence language: a ```python block must not shift which fences open and which close.
    for block in re.findall(r"```[\w-]*\n(.*?)```", path.read_text(), flags=re.S):
        lines += [line.split(" #")[0].strip() for line in block.splitlines() if line.startswith(prefix)]
    return lines


def test_readme_torch_export_of_a_saved_module_works_as_written(repo, tmp_path):
    # The first torch command is the one for a module saved with torch.save(model).
    command = readme_commands(repo / "README.md", "tools/export torch ")[0]
    args = shlex.split(command)[1:]
    assert args[:2] == ["torch", "model.pt"], command
    torch.save(lenet5.build_module(), tmp_path / "model.pt")
    args = [str(tmp_path / a) if a in ("model.pt", "out.json") else a for a in args]
    r = run_export(*args)
    assert r.returncode == 0, command + "\n" + r.stderr
    assert (tmp_path / "out.json").exists() and (tmp_path / "out.safetensors").exists()


def test_models_readme_covers_every_model(repo):
    text = (repo / "models" / "README.md").read_text()
    models = sorted(p.stem for p in (repo / "models").glob("*.json"))
    for name in models:
        assert re.search(rf"^## {re.escape(name)}(\s|$)", text, flags=re.M), f"models/README.md has no section for {name}"
    # The opening sentence counts them.
    count = {2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six"}[len(models)]
    assert text.split("\n\n")[1].startswith(f"{count} trained models"), text.split("\n\n")[1]


def test_formats_readme_float32_idx_recipe_feeds_a_float32_model(repo, tmp_path, engine):
    # The NumPy one-liner formats/README.md gives for IDX float32, run as written, feeds the fuzz
    # seeds' float32-input model (dense 20 -> sigmoid); the engine's outputs match NumPy's.
    text = (repo / "formats" / "README.md").read_text()
    recipe = re.search(r"NumPy writes one with\s+`([^`]+)`", text).group(1)
    seeds = repo / "tests" / "fuzz" / "seeds"
    shutil.copy(seeds / "graph" / "float-input.json", tmp_path / "float-input.json")
    shutil.copy(seeds / "float-input.safetensors", tmp_path / "float-input.safetensors")
    a = np.random.default_rng(0).normal(size=(3, 20)).astype(np.float32)
    path = tmp_path / "samples.idx"
    exec(recipe, {"struct": struct, "a": a, "path": path})
    out = tmp_path / "out.npy"
    r = subprocess.run([str(engine), "run", str(tmp_path / "float-input.json"), str(path), "--backend", "cpu",
                        "--dump-outputs", str(out), "-q"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    blob = (tmp_path / "float-input.safetensors").read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    tensors = {name: np.frombuffer(blob[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]], "<f4")
               .reshape(t["shape"]) for name, t in header.items() if name != "__metadata__"}
    node = json.loads((tmp_path / "float-input.json").read_text())["nodes"][0]
    w = tensors[node["tensors"]["weight"]]
    b = tensors[node["tensors"]["bias"]] if "bias" in node["tensors"] else 0.0  # the seed has none
    want = 1 / (1 + np.exp(-(a.astype(np.float64) @ w.T.astype(np.float64) + b)))
    np.testing.assert_allclose(np.load(out), want, atol=1e-6)


def documentation_files(repo):
    """The markdown a reader follows: the README, docs/, and the READMEs of formats/, models/, tests/."""
    return ([repo / "README.md"] + sorted((repo / "docs").rglob("*.md")) + sorted((repo / "formats").glob("*.md"))
            + [repo / "models" / "README.md"] + sorted((repo / "tests").rglob("README.md")))


def test_docs_relative_links_resolve(repo):
    broken = []
    for path in documentation_files(repo):
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file = target.split("#")[0]
            if not (path.parent / file).exists():
                broken.append(f"{path.relative_to(repo)}: {target}")
    assert not broken, "\n".join(broken)


def test_docs_state_current_truth_in_short_files(repo):
    # Design notes say what is and why; no lab-notebook numbering, and each file stays readable.
    for path in documentation_files(repo):
        text = path.read_text()
        assert not re.search(r"(session|issue|call) [0-9]", text, flags=re.I), path
        if path.is_relative_to(repo / "docs"):
            assert len(text.splitlines()) <= 400, path
    assert sum(p.stat().st_size for p in (repo / "docs").rglob("*") if p.is_file()) < 1_500_000
