"""Shared fixtures: tools/ on sys.path, the repository root, the engine binary if built."""
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))


@pytest.fixture(scope="session")
def repo() -> pathlib.Path:
    return REPO


@pytest.fixture(scope="session", autouse=True)
def _torch_threads():
    # Tests share the machine with builds; two threads is what the project's machines have.
    import torch
    torch.set_num_threads(min(2, torch.get_num_threads()))
