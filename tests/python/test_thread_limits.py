"""The cpu backend when the system cannot start the threads asked for: one clear error naming the
count, never a hang (its thread pool stops the workers that did start)."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MNIST = REPO.parent / "shared" / "data" / "mnist" / "t10k-images-idx3-ubyte.gz"


def _engine():
    found = os.environ.get("ENGINE_BIN") or str(REPO / "build" / "engine")
    if not pathlib.Path(found).is_file():
        pytest.skip("engine not built")
    return found


def test_threads_the_system_cannot_start_are_an_error_not_a_hang():
    if not MNIST.is_file():
        pytest.skip(f"{MNIST} missing")
    # 4 GiB of address space (ulimit -v, in KiB), far less than 1,200 threads' stacks (8 MiB each by
    # default); set by a shell rather than preexec_fn, which is unsafe in a process with threads.
    r = subprocess.run(["sh", "-c", 'ulimit -v 4194304 && exec "$0" "$@"', _engine(), "run", str(REPO / "models" / "lenet5.json"), str(MNIST), "--backend", "cpu",
                        "--threads", "1200", "--limit", "10"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "could not start its 1200 threads" in r.stderr, r.stderr
    assert "--threads" in r.stderr


def test_threads_are_bounded_on_the_cli_and_in_python():
    # 4 GiB of address space (ulimit -v, in KiB), far less than 1,200 threads' stacks (8 MiB each by
    # default); set by a shell rather than preexec_fn, which is unsafe in a process with threads.
    r = subprocess.run(["sh", "-c", 'ulimit -v 4194304 && exec "$0" "$@"', _engine(), "run", str(REPO / "models" / "lenet5.json"), str(MNIST), "--threads", "4097"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--threads" in r.stderr and "4096" in r.stderr, r.stderr
    cnnengine = pytest.importorskip("cnnengine")
    with pytest.raises(ValueError, match="threads must be 0 .* to 4096, not 5000"):
        cnnengine.load(str(REPO / "models" / "lenet5.json"), backend="cpu", threads=5000)
