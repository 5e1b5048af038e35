"""The importers on the corpus of real framework files (tests/python/corpus/make_import_corpus.py): each file is
exported with tools/export (whose own check compares the graph with the source framework), then the
engine's reference backend runs the exported model on the first 2,000 MNIST test images and its
outputs are compared with what the framework itself computed when it saved the file (and the fast
`cpu` backend's outputs with the reference's: same class, within 1e-5):
  - argmax agreement on at least 99.95 % of the images (at most 1 of 2,000 may differ), and
  - max |engine - framework| <= BOUND * max(1, max |framework|), the importers' relative bound.
Files made to exercise scale_shift and concat (BatchNormalization that no layer can take, branches
joined along channels) must also export to those ops (the manifest's expect_ops).
The corpus is generated into build-corpus/ (git-ignored) on first use and regenerated when the
generator changes; it needs Keras 3 and JAX (scripts/requirements-import.txt, installed by
scripts/setup.sh), PyTorch and onnx."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from cnnengine import datasets, export, export_cli

REPO = pathlib.Path(__file__).resolve().parents[2]
CORPUS = pathlib.Path(os.environ.get("IMPORT_CORPUS_DIR", REPO / "build-corpus"))
BOUND = export.DEFAULT_TOLERANCE
MIN_AGREEMENT = 0.9995

sys.path.insert(0, str(REPO / "tests" / "python" / "corpus"))  # the generator beside its test
import make_import_corpus  # noqa: E402


def _missing_framework() -> str | None:
    for mod in ("keras", "jax", "torch", "onnx"):
        try:
            __import__(mod)
        except Exception as e:  # ImportError, or a backend that cannot start
            return f"{mod} is not importable ({type(e).__name__}: {e}); install scripts/requirements-import.txt"
    import keras
    if not keras.__version__.startswith("3"):
        return f"Keras {keras.__version__} is installed; the corpus needs Keras 3"
    return None


@pytest.fixture(scope="session")
def corpus() -> dict:
    why = _missing_framework()
    if why:
        pytest.skip(why)
    try:
        datasets.mnist_files("test")
        datasets.mnist_files("train")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    manifest = CORPUS / "manifest.json"
    fresh = manifest.is_file() and json.loads(manifest.read_text()).get("version") == make_import_corpus.VERSION
    if not fresh:
        r = subprocess.run([sys.executable, str(REPO / "tests" / "python" / "corpus" / "make_import_corpus.py"), str(CORPUS)],
                           capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads(manifest.read_text())
    return {e["file"]: e for e in data["entries"]} | {"__ref_count__": data["ref_count"]}


@pytest.fixture(scope="session")
def test_images(tmp_path_factory, corpus) -> pathlib.Path:
    images = datasets.read_idx(datasets.mnist_files("test")[0])[:corpus["__ref_count__"]]
    path = tmp_path_factory.mktemp("corpus_data") / "t2000.idx"
    datasets.write_idx(path, images)
    return path


@pytest.mark.parametrize("file", make_import_corpus.entry_files())
def test_corpus_file(file, corpus, test_images, tmp_path, capsys):
    entry = corpus[file]
    out = tmp_path / "model.json"
    # A model fed pixels / 255 ("scaled") states it; a "raw" one rescales its own input.
    stated = ["--preset", "unit"] if entry.get("input") == "scaled" else []
    rc = export_cli.main([entry["kind"], str(CORPUS / file), "-o", str(out), *entry["args"], *stated,
                          "--check-data", str(datasets.mnist_files("test")[0]), "--check-count", "256"])
    o = capsys.readouterr()
    if "expect_error" in entry:
        assert rc == 1 and entry["expect_error"] in o.err, o.out + o.err
        assert not out.exists()
        return
    assert rc == 0, o.out + o.err
    assert "check passed" in o.out
    # The kinds made for them must come out as format v1's scale_shift / concat nodes.
    ops = {n["op"] for n in json.loads(out.read_text())["nodes"]}
    for op in entry.get("expect_ops", []):
        assert op in ops, f"{file}: the export has no {op} node (ops: {sorted(ops)})"
    engine = export.engine_binary()
    if engine is None:
        pytest.skip("the engine is not built (no $ENGINE_BIN nor build/engine)")
    dump = tmp_path / "out.npy"
    export.run_engine(engine, out, test_images, dump)
    got = np.load(dump).reshape(-1, 10)
    ref = np.load(CORPUS / f"{file}.ref.npy")
    assert got.shape == ref.shape
    agree = float((got.argmax(1) == ref.argmax(1)).mean())
    diff = float(np.abs(got.astype(np.float64) - ref).max())
    bound = BOUND * max(1.0, float(np.abs(ref).max()))
    print(f"{file}: argmax agreement {agree:.4%} on {len(ref)} images, max |diff| {diff:.3e} (bound {bound:.2e})")
    assert agree >= MIN_AGREEMENT, f"{file}: argmax agrees on {agree:.4%} of {len(ref)} images"
    assert diff <= bound, f"{file}: max |diff| {diff:.3e} > {bound:.2e}"

    # The fast `cpu` backend on the same imported model: the reference's class on every image and
    # outputs within 1e-5 of the reference's (relative to the output's scale for logits).
    fast_dump = tmp_path / "fast.npy"
    export.run_engine(engine, out, test_images, fast_dump, backend="cpu")
    fast = np.load(fast_dump).reshape(-1, 10)
    fast_diff = float(np.abs(fast.astype(np.float64) - got).max())
    fast_bound = 1e-5 * max(1.0, float(np.abs(got).max()))
    assert (fast.argmax(1) == got.argmax(1)).all(), f"{file}: cpu and reference disagree on a class"
    assert fast_diff <= fast_bound, f"{file}: cpu vs reference max |diff| {fast_diff:.3e} > {fast_bound:.2e}"
