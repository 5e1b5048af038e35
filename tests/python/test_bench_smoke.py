"""CPU-only smoke of the benchmarks: `engine bench MODEL`, `engine bench ops`, benchmarks/bench_torch.py and
benchmarks/plot_bench.py run, exit 0 and write JSON with sane fields. No timing assertions: the numbers
depend on the machine; only their consistency is checked (min <= median <= max, rates > 0, ...).

A small LeNet-shaped model with random weights is written by the test itself, so nothing committed is
needed. The engine is export.engine_binary()'s ($ENGINE_BIN, build/engine by conftest); skipped
when none is built. Kept short (a few seconds): tiny batches, durations of tens of milliseconds.
"""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from cnnengine import export
from cnnengine import model_format as mf

REPO = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
PROFILING = REPO / "dev" / "profiling"  # the profiling helpers: ncu_pass.py, ncu_source_stalls.py, plot_ab.py
# Files recorded on a GPU machine by the tools these tests read back (inputs of known shape, not figures).
RECORDINGS = pathlib.Path(__file__).resolve().parent / "data" / "device-recordings"
FAST = ["--warmup", "5", "--iterations", "2", "--duration", "0.02", "--repetitions", "2"]


@pytest.fixture(scope="module")
def engine():
    path = export.engine_binary()
    if path is None:
        pytest.skip("engine not built: set $ENGINE_BIN or build build/engine (looked at "
                    + ", ".join(export.ENGINE_CANDIDATES) + ")")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """uint8 [1, 12, 12] -> conv 4@3x3 + tanh -> avgpool 2 -> flatten -> dense 10 -> softmax."""
    rng = np.random.default_rng(7)
    graph = {
        "name": "bench-smoke",
        "input": {"name": "image", "dtype": "uint8", "shape": [1, 12, 12],
                  "preprocess": {"scale": float(np.float32(1 / 255)), "mean": [0.0], "std": [1.0],
                                 "pad": [1, 1, 1, 1]}},
        "nodes": [
            {"name": "c1", "op": "conv2d", "inputs": ["image"], "attrs": {"out_channels": 4, "kernel": [3, 3]},
             "tensors": {"weight": "c1.w", "bias": "c1.b"}},
            {"name": "t1", "op": "tanh", "inputs": ["c1"]},
            {"name": "p1", "op": "avgpool", "inputs": ["t1"], "attrs": {"kernel": [2, 2], "count_include_pad": True}},
            {"name": "flat", "op": "flatten", "inputs": ["p1"]},
            {"name": "f1", "op": "dense", "inputs": ["flat"], "attrs": {"units": 10},
             "tensors": {"weight": "f1.w", "bias": "f1.b"}},
            {"name": "prob", "op": "softmax", "inputs": ["f1"]},
        ],
        "outputs": ["prob"],
    }
    tensors = {"c1.w": rng.normal(0, 0.3, (4, 1, 3, 3)), "c1.b": rng.normal(0, 0.1, (4,)),
               "f1.w": rng.normal(0, 0.1, (10, 144)), "f1.b": rng.normal(0, 0.1, (10,))}
    path = tmp_path_factory.mktemp("bench") / "smoke.json"
    mf.write_model(path, graph, tensors)
    return path


def run(cmd, timeout=120):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def check_stats(s, where):
    assert s["count"] >= 1, where
    assert 0 <= s["min"] <= s["median"] <= s["max"], (where, s)
    assert s["min"] <= s["mean"] <= s["max"], (where, s)
    for p in ("p90", "p99"):
        assert s["median"] <= s[p] <= s["max"], (where, p, s)


@pytest.fixture(scope="module")
def bench_json(engine, model, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-out") / "bench.json"
    proc = run([engine, "bench", model, "--backend", "all", "--batch", "1,8", "--profile", "--cuda-graph",
                "--json", out] + FAST)
    assert "summary" in proc.stdout
    return json.loads(out.read_text()), proc.stdout, out


def test_model_bench_json(bench_json):
    doc, stdout, _ = bench_json
    assert doc["schema"] == "cnn-engine-bench/1"
    assert doc["model"]["name"] == "bench-smoke"
    # conv: 4 x 12 x 12 outputs x 9 multiply-adds; dense: 144 x 10
    assert doc["model"]["multiply_adds_per_image"] == 4 * 12 * 12 * 9 + 144 * 10
    assert doc["model"]["flops_per_image"] == 2 * doc["model"]["multiply_adds_per_image"]
    assert doc["git_commit"] and doc["timestamp"]
    assert doc["host"]["threads"] >= 1 and doc["host"]["fp32_rate_gflops_one_thread"] > 0
    assert "available" in doc["device"]
    results = doc["results"]
    cpu = [r for r in results if r["backend"] == "cpu"]
    assert {(r["batch"], r["scope"]) for r in cpu} == {(1, "compute"), (1, "e2e"), (8, "compute"), (8, "e2e")}
    for r in results:
        where = f"{r['backend']} batch {r['batch']} {r['scope']} {r['mode']}"
        assert r["outputs_finite"], where
        assert r["images_per_s"] > 0 and r["wall_images_per_s"] > 0, where
        assert len(r["repetitions"]) == 2, where
        assert all(rep["iterations"] >= 2 for rep in r["repetitions"]), where
        check_stats(r["latency_ms"], where)
        if r["scope"] == "e2e":
            for k in ("h2d_ms", "compute_ms", "d2h_ms"):
                check_stats(r[k], f"{where} {k}")
        assert r["ceiling_images_per_s"] > 0 and r["fraction_of_ceiling"] > 0, where
    # Without a GPU the GPU backends are reported, not run; with one they ran.
    if not doc["device"]["available"]:
        names = {s["backend"] for s in doc["skipped"]}
        assert {"custom", "cudnn"} <= names or all(r["backend"] in ("cpu", "reference") for r in results)
        assert "not available" in stdout or "not available" in json.dumps(doc["skipped"])
    # --profile: one table per backend run, a row per node.
    assert doc["profiles"], "no --profile table"
    for p in doc["profiles"]:
        layers = [row["layer"] for row in p["layers"] if not row["layer"].startswith("(")]
        assert layers == ["c1", "t1", "p1", "flat", "f1", "prob"], layers


def test_model_bench_rejects_bad_arguments(engine, model):
    proc = subprocess.run([str(engine), "bench", str(model), "--backend", "nosuch"], capture_output=True, text=True)
    assert proc.returncode != 0 and "nosuch" in proc.stderr
    proc = subprocess.run([str(engine), "bench"], capture_output=True, text=True)
    assert proc.returncode == 2


def test_ops_bench_json(engine, tmp_path):
    out = tmp_path / "ops.json"
    run([engine, "bench", "ops", "--n", "16,48", "--sweep-n", "64", "--min-time", "1", "--min-iterations", "2",
         "--json", out])
    doc = json.loads(out.read_text())
    assert doc["schema"] == "cnn-engine-bench-ops/1"
    rows = [r for r in doc["results"] if "ms" in r]
    for op, flops in (("add", lambda n: n * n), ("matmul", lambda n: 2 * n ** 3)):
        for n in (16, 48):
            cpu1 = [r for r in rows if r["op"] == op and r["n"] == n and r["impl"] == "cpu-1t"]
            assert cpu1, (op, n)
            r = cpu1[0]
            assert r["flops"] == flops(n) and r["bytes"] == 12 * n * n
            assert r["all_written"] and r["rel_error"] < 1e-5, r
            check_stats(dict(r["ms"], p99=r["ms"]["max"]), f"{op} {n}")
    gpu_rows = [r for r in rows if not r["impl"].startswith("cpu")]
    if doc["device"]["available"]:
        assert gpu_rows and all(r["all_written"] and r["rel_error"] < 1e-4 for r in gpu_rows)
        assert set(doc["crossover"]) == {"add", "matmul"}
    else:
        assert not gpu_rows


def test_torch_side_by_side_and_plots(bench_json, model, tmp_path):
    pytest.importorskip("torch")
    _, _, bench_path = bench_json
    out = tmp_path / "torch.json"
    proc = run([sys.executable, BENCHMARKS / "bench_torch.py", model, "--engine", bench_path, "--device", "cpu",
                "--json", out] + FAST, timeout=300)
    doc = json.loads(out.read_text())
    assert doc["schema"] == "cnn-engine-bench/1"
    assert {(r["batch"], r["scope"], r["mode"]) for r in doc["results"]} == {
        (1, "compute", "eager"), (1, "e2e", "eager"), (8, "compute", "eager"), (8, "e2e", "eager")}
    for r in doc["results"]:
        assert r["outputs_finite"] and r["images_per_s"] > 0
        check_stats(r["latency_ms"], f"pytorch {r['batch']} {r['scope']}")
    assert doc["ratios"] and all(x["ratio"] > 0 for x in doc["ratios"])
    assert "engine / PyTorch" in proc.stdout

    pytest.importorskip("matplotlib")
    figs = tmp_path / "figs"
    run([sys.executable, BENCHMARKS / "plot_bench.py", "--bench", bench_path, "--torch", out, "-o", figs])
    for name in ("throughput.png", "latency.png"):
        assert (figs / name).stat().st_size > 1000


def test_model_bench_precision(engine, model, tmp_path):
    """--precision P reaches every backend: the reference emulates fp16 (it runs, and the JSON says
    which precision), the cpu backend does not compute it (skipped with its refusal, the run still
    exits 0); an unknown precision is a usage error."""
    out = tmp_path / "fp16.json"
    proc = run([engine, "bench", model, "--backend", "reference,cpu", "--batch", "2", "--precision", "fp16",
                "--no-data-transfers", "--json", out] + FAST)
    doc = json.loads(out.read_text())
    assert doc["precision"] == "fp16"
    assert {r["backend"] for r in doc["results"]} == {"reference"}
    assert all(r["outputs_finite"] for r in doc["results"])
    skipped = [s for s in doc["skipped"] if s["backend"] == "cpu"]
    assert skipped and "does not compute fp16" in skipped[0]["reason"], (doc["skipped"], proc.stdout)
    bad = subprocess.run([str(engine), "bench", str(model), "--precision", "fp8"], capture_output=True, text=True)
    assert bad.returncode == 2 and "fp8" in bad.stderr


def test_torch_reduced_precision_configurations(model, tmp_path, monkeypatch):
    """benchmarks/bench_torch.py --dtype fp32,bf16: one result per dtype, channels_last for the reduced one,
    and ratios pair an engine run only with PyTorch's same precision (none here: the engine JSON says
    fp32 and only bf16 is asked for)."""
    pytest.importorskip("torch")
    out = tmp_path / "torch.json"
    run([sys.executable, BENCHMARKS / "bench_torch.py", model, "--device", "cpu", "--batch", "2",
         "--dtype", "fp32,bf16", "--no-data-transfers", "--json", out] + FAST, timeout=300)
    doc = json.loads(out.read_text())
    got = {(r["dtype"], r["memory_format"]) for r in doc["results"]}
    assert got == {("fp32", "contiguous"), ("bf16", "channels_last")}, got
    assert all(r["outputs_finite"] for r in doc["results"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # a script's module, with its sibling peer_bench
    import bench_torch
    engine_doc = {"precision": "fp16", "results": [{"backend": "cudnn", "batch": 2, "scope": "compute", "mode": "plain",
                                                    "device": "cpu", "images_per_s": 1.0}]}
    assert bench_torch.ratios(engine_doc, doc["results"]) == []  # no fp16 PyTorch result to pair with
    bad = subprocess.run([sys.executable, BENCHMARKS / "bench_torch.py", model, "--device", "cpu", "--dtype", "fp8"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "fp8" in bad.stderr


def test_precision_figure_and_ncu_pass_from_recorded_device_files(tmp_path):
    """Files recorded on a GPU (engine bench --json per precision, bench_torch.py, an Nsight Compute
    CSV) stay readable by the precision figure and the kernel-pass table."""
    pytest.importorskip("matplotlib")
    data = RECORDINGS
    png = tmp_path / "precision.png"
    run([sys.executable, BENCHMARKS / "plot_precision.py", "--dir", data, "-o", png])
    assert png.stat().st_size > 10_000
    import gzip
    csv = tmp_path / "ncu.csv"
    csv.write_bytes(gzip.decompress((data / "precision-ncu.csv.gz").read_bytes()))
    proc = run([sys.executable, PROFILING / "ncu_pass.py", csv])
    heads = [line for line in proc.stdout.splitlines() if line.startswith("==")]
    assert heads[0].startswith("== fp32: pass of 26 kernels") and heads[1].startswith("== fp16: pass of 28 kernels"), heads
    assert "from_f32_kernel" in proc.stdout and "to_f32_kernel" in proc.stdout


def test_ab_figure_from_fused_variants_text(tmp_path, monkeypatch):
    """plot_ab.py --variants reads dev/profiling/fused_variants.sh's lines (a recorded device file among
    them): one line per variant, the median of repeated rounds, and a
    clear error for a file without such lines."""
    pytest.importorskip("matplotlib")
    monkeypatch.syspath_prepend(str(PROFILING))
    import plot_ab
    text = tmp_path / "ab.txt"
    text.write_text("a              batch      1     0.060 M images/s      16.60 us\n"
                    "b              batch      1     0.050 M images/s      20.00 us\n"
                    "a              batch      1     0.062 M images/s      16.10 us\n"
                    "a              batch      1     0.061 M images/s      16.40 us\n"
                    "bench b failed\n")
    lines = plot_ab.variant_series([text])
    assert list(lines) == ["a", "b"]
    assert lines["a"] == ([1], [pytest.approx(0.061e6)]) and lines["b"] == ([1], [pytest.approx(0.05e6)])
    committed = plot_ab.variant_series([RECORDINGS / "fused-variants-ab.txt"])
    assert set(committed) == {"final", "before"} and committed["final"][0] == [1, 4, 8, 16, 32, 64, 256, 1024]
    png = tmp_path / "ab.png"
    run([sys.executable, PROFILING / "plot_ab.py", "--variants", text, "-o", png])
    assert png.stat().st_size > 10_000
    empty = tmp_path / "empty.txt"
    empty.write_text("nothing here\n")
    bad = subprocess.run([sys.executable, PROFILING / "plot_ab.py", "--variants", empty, "-o", tmp_path / "x.png"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no fused_variants.sh lines" in bad.stderr and not (tmp_path / "x.png").exists()


def test_ncu_source_stalls_sums_reports_by_cuda_line(tmp_path, monkeypatch):
    """ncu_source_stalls.py: samples of several reports matched by the instruction's offset
    (each process loads the module elsewhere) and added per CUDA line of the mixed export; a file
    that is not such an export is refused with exit 2 and a message."""
    monkeypatch.syspath_prepend(str(PROFILING))
    import ncu_source_stalls
    mixed = tmp_path / "mixed.csv"
    mixed.write_text('"File Path","/src/k.cu"\n'
                     '"Line No","Source","Address","Source"\n'
                     '"10","a = b;","-","-"\n'
                     '"","","0x1000","LDS R0, [R1]"\n'
                     '"","","0x1010","FFMA R2, R0, R0, R2"\n'
                     '"12","c = d;","-","-"\n'
                     '"","","0x1020","BRA 0x1000"\n')
    header = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
              '"stall_long_sb","stall_no_inst","stall_long_sb (Not Issued)"\n')
    one = tmp_path / "s1.csv"
    one.write_text('"Kernel Name","k"\n' + header + '"0x7000","LDS","3","32","3","0","3"\n'
                   '"0x7010","FFMA","1","32","0","1","0"\n"0x7020","BRA","5","8","0","5","0"\n')
    two = tmp_path / "s2.csv"
    two.write_text(header + '"0x9000","LDS","2","32","2","0","2"\n"0x9010","FFMA","0","32","0","0","0"\n'
                   '"0x9020","BRA","1","8","0","1","0"\n')
    samples, executed, reasons = ncu_source_stalls.summarize(mixed, [one, two])
    line10 = ("k.cu", 10, "a = b;")
    line12 = ("k.cu", 12, "c = d;")
    assert samples[line10] == 6 and samples[line12] == 6
    assert executed[line10] == 128 and executed[line12] == 16
    assert reasons[line10] == {"long_sb": 5, "no_inst": 1} and reasons[line12] == {"no_inst": 6}
    out = run([sys.executable, PROFILING / "ncu_source_stalls.py", "--mixed", mixed, one, two]).stdout
    assert "12 samples in 2 report(s)" in out and "by reason: no_inst 7, long_sb 5" in out
    bad = subprocess.run([sys.executable, PROFILING / "ncu_source_stalls.py", "--mixed", one, one],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "no SASS rows under CUDA lines" in bad.stderr
