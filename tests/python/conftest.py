"""Shared fixtures: the repository root, the test machine's thread count. The package under test is
the installed cnnengine (scripts/setup.sh installs it into .venv); nothing here edits sys.path.

Defaults for the checkout: the shared data folder is ../shared/data (where the project keeps MNIST)
and the engine under test is build/engine when built (else the package's own copy)."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
os.environ.setdefault("CNN_SHARED_DATA", str(REPO.parent / "shared" / "data"))
if (REPO / "build" / "engine").is_file():
    os.environ.setdefault("ENGINE_BIN", str(REPO / "build" / "engine"))


@pytest.fixture(scope="session")
def repo() -> pathlib.Path:
    return REPO


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    # Tests share the machine with builds; two threads is what the project's machines have.
    import torch
    torch.set_num_threads(min(2, torch.get_num_threads()))
