"""The cpu backend when the system cannot start the threads asked for: one clear error naming the
count, never a hang (its thread pool stops the workers that did start)."""
import os
import pathlib
import resource
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MNIST = REPO.parent / "shared" / "data" / "mnist" / "t10k-images-idx3-ubyte.gz"


def _engine():
    found = os.environ.get("ENGINE_BIN") or str(REPO / "build" / "engine")
    if not pathlib.Path(found).is_file():
        pytest.skip("engine not built")
    return found


def _small_address_space():
    # 4 GiB of address space: far less than 1,200 threads' stacks (8 MiB each by default).
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_threads_the_system_cannot_start_are_an_error_not_a_hang():
    if not MNIST.is_file():
        pytest.skip(f"{MNIST} missing")
    r = subprocess.run([_engine(), "run", str(REPO / "models" / "lenet5.json"), str(MNIST), "--backend", "cpu",
                        "--threads", "1200", "--limit", "10"],
                       capture_output=True, text=True, timeout=120, preexec_fn=_small_address_space)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "could not start its 1200 threads" in r.stderr, r.stderr
    assert "--threads" in r.stderr
