"""The tensor-core probe for issue 15 (tools/probes/lenet_fp16_mma.cu) on emulated warps.

The probe runs on a GPU only in a device session; its index logic (pixel orders by pool window, the
fragments' packing, the 16-image tiles, a partial last group, several groups per warp and several
blocks) is checked here: built for the host with -DLENET_EMULATE, each lane is a host thread and
ldmatrix / mma / shuffles are computed from all 32 lanes at a barrier, following the PTX ISA's
fragment layouts. The probe compares every probability of the images with a double reference
(within 2e-4) and exits non-zero otherwise; a mutated pooling shuffle must make it fail.
"""
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PROBE = REPO / "tools" / "probes" / "lenet_fp16_mma.cu"
CUDA_INCLUDE = pathlib.Path("/usr/local/cuda/include")


def build(source, out):
    cmd = ["g++", "-O1", "-std=c++17", "-pthread", "-DLENET_EMULATE", "-x", "c++", f"-I{CUDA_INCLUDE}", str(source),
           "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    if shutil.which("g++") is None or not (CUDA_INCLUDE / "cuda_fp16.h").exists():
        pytest.skip("needs g++ and the CUDA headers (cuda_fp16.h)")
    out = tmp_path_factory.mktemp("probe") / "lenet_emu"
    build(PROBE, out)
    return out


@pytest.mark.parametrize("images,blocks,version", [(5, 1, 1), (70, 1, 2), (37, 1, 3), (70, 1, 4)])
def test_lenet_fp16_probe_matches_the_reference_on_emulated_warps(emulator, images, blocks, version):
    # 5: one partial group; 37: three groups, the last partial (in v3/v4 one warp of its pair has no
    # image); 70: five groups, the fifth on the first warp (or pair) again (the input fetched across
    # groups). Versions: 1 one m-tile at a time, 2 two interleaved, 3 and 4 the same on warp pairs.
    proc = subprocess.run([str(emulator), str(images), str(blocks), str(version)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [line for line in proc.stdout.splitlines() if "check ok" in line and f"{images} images" in line]
    assert len(runs) == 1 and f"v{version}," in runs[0], proc.stdout


def test_lenet_fp16_probe_check_catches_a_wrong_pooling_partner(emulator, tmp_path):
    source = PROBE.read_text()
    wrong = source.replace("const float other = shfl_xor(mine, 4);", "const float other = shfl_xor(mine, 8);")
    assert wrong != source
    mutated = tmp_path / "mutated.cu"
    mutated.write_text(wrong)
    out = tmp_path / "mutated"
    build(mutated, out)
    proc = subprocess.run([str(out), "20", "1", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "check FAILED" in proc.stdout
