"""The Python package on the GPU backends: `engine run`'s outputs bit for bit from NumPy input, and
zero-copy input from a CUDA tensor through DLPack (torch; the same outputs as from host memory).
Skipped, saying why, where no GPU backend can run (or torch has no CUDA)."""
import pathlib

import numpy as np
import pytest

import cnnengine
import cnnengine.runtime  # noqa: F401

from test_package import LENET, engine_run_dump, mnist_images_file  # noqa: F401  (shared helpers)
from cnnengine import datasets

GPU_BACKENDS = [r["name"] for r in cnnengine.backends() if r["name"] in ("custom", "cudnn")]
AVAILABLE = {r["name"]: r for r in cnnengine.backends()}


def need(backend):
    r = AVAILABLE.get(backend)
    if r is None:
        pytest.skip(f"{backend} is not built in (no CUDA toolkit at build time)")
    if not r["available"]:
        pytest.skip(f"{backend} cannot run here: {r['detail']}")


def torch_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} has no usable CUDA (a CPU-only build or no GPU)")
    return torch


@pytest.fixture(scope="module")
def mnist():
    return datasets.read_idx(mnist_images_file())


@pytest.mark.parametrize("backend", ["custom", "cudnn"])
def test_gpu_bit_identical_to_engine_run(tmp_path, mnist, backend):
    need(backend)
    # The same batch capacity as the CLI plans for (--batch), so both compile the same executable.
    expected = engine_run_dump(tmp_path, backend, 10000, batch=2500)
    m = cnnengine.load(LENET, backend=backend, max_batch=2500)
    got = m.run(mnist)
    assert np.array_equal(got, expected), f"max |diff| {np.abs(got - expected).max()}"


@pytest.mark.parametrize("backend", ["custom", "cudnn"])
def test_cuda_tensor_zero_copy_matches_host_input(mnist, backend):
    need(backend)
    torch = torch_cuda()
    m = cnnengine.load(LENET, backend=backend, max_batch=1024)
    assert m._session.accepts_device_input
    images = mnist[:3000]
    host = m.run(images)
    on_gpu = torch.from_numpy(images).cuda()
    assert np.array_equal(m.run(on_gpu), host)                  # [N, H, W], 3 batches of 1024 and one of 952
    assert np.array_equal(m.run(on_gpu.unsqueeze(1)), host)     # [N, C, H, W]
    # N = 1 from an offset pointer, against the same single image from host memory: cuDNN and cuBLAS
    # pick their kernels by batch size, so the cudnn backend's bits for one image alone may differ in
    # the last place from the same image inside a batch of 1,024 (the custom backend's do not).
    assert np.array_equal(m.run(on_gpu[17:18]), m.run(images[17:18]))
    if backend == "custom":
        assert np.array_equal(m.run(on_gpu[17:18]), host[17:18])


def test_cuda_tensor_written_on_a_side_stream_is_read_after_the_write(mnist):
    backend = next((b for b in ("custom", "cudnn") if AVAILABLE.get(b, {}).get("available")), None)
    if backend is None:
        pytest.skip("no GPU backend can run here")
    torch = torch_cuda()
    m = cnnengine.load(LENET, backend=backend, max_batch=4096)
    images = np.ascontiguousarray(np.tile(mnist, (4, 1, 1)))  # 40,000 images: a copy that takes a while
    expected = m.run(images)
    src = torch.from_numpy(images).cuda()
    dst = torch.zeros_like(src)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keep the side stream busy, so the copy below lands late
        dst.copy_(src)
    # No synchronisation by the caller: the engine must wait for the producer's streams itself.
    assert np.array_equal(m.run(dst), expected)


def test_cuda_tensor_refusals(mnist):
    torch = torch_cuda()
    cpu = cnnengine.load(LENET, backend="cpu")
    with pytest.raises(ValueError, match="in GPU memory but backend cpu runs on the host"):
        cpu.run(torch.from_numpy(mnist[:4]).cuda())
    backend = next((b for b in ("custom", "cudnn") if AVAILABLE.get(b, {}).get("available")), None)
    if backend is None:
        pytest.skip("no GPU backend can run here")
    m = cnnengine.load(LENET, backend=backend, max_batch=64)
    # A non-contiguous CUDA tensor is made contiguous on the GPU, as a CPU one is read with its strides.
    transposed = torch.from_numpy(mnist[:4]).cuda().transpose(1, 2)
    assert np.array_equal(m.run(transposed), m.run(np.ascontiguousarray(mnist[:4].transpose(0, 2, 1))))
    # float32 is input already preprocessed: of the padded shape the first layer sees.
    with pytest.raises(ValueError, match=r"images have shape \(4, 28, 28\) but model 'lenet5' takes float32"):
        m.run(torch.zeros((4, 28, 28), device="cuda"))
    assert m.run(torch.from_numpy(mnist[:4]).cuda()).shape == (4, 10)  # still usable
