"""What the READMEs state and a reader acts on: the commands they show work as written, and the
lists they give match the repository."""
import re
import shlex

import torch

from cnnengine import lenet5
from test_export import run_export


def readme_commands(path, prefix):
    """The lines of the README's code blocks that start with `prefix`, comments removed."""
    lines = []
    for block in re.findall(r"```(?:sh)?\n(.*?)```", path.read_text(), flags=re.S):
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
