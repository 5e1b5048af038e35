"""The CUDA probes (dev/probes/*.cu) still compile.

The probes run only on a GPU (dev/probes/README.md says what each measures); several include the
product's kernel headers instead of copies of them, so a change to those headers must keep them
building. Each probe is compiled here for sm_90 with nvcc, as its first comment says to build it.
"""
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PROBES = sorted((REPO / "dev" / "probes").glob("*.cu"))
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def test_the_probes_are_there():
    assert PROBES, "no dev/probes/*.cu"
    assert (REPO / "dev" / "probes" / "README.md").exists()


@pytest.mark.parametrize("probe", PROBES, ids=[p.stem for p in PROBES])
def test_probe_compiles(probe, tmp_path):
    if not pathlib.Path(NVCC).exists():
        pytest.skip("needs nvcc (the CUDA toolkit)")
    cmd = [NVCC, "-O3", "-arch=sm_90", "-std=c++17", f"-I{REPO}", str(probe), "-o", str(tmp_path / probe.stem)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
