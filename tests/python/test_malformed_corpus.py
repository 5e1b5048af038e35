"""The engine CLI on the malformed corpus (tests/python/corpus/make_malformed_corpus.py): over a thousand broken
models, weights, data, labels and image files derived from the real ones.

Every case must end the way formats/README.md and the CLI's contract say: exit code 1, one
"error: ..." line on stderr, no signal (crash, abort, OOM kill), no sanitizer report, and within
the time limit (no hang). The intact inputs the cases come from ("controls") must succeed, so a
corpus that fails for a trivial reason (a missing weights file, a broken engine) cannot pass.

Environment:
  ENGINE_BIN          the engine to test (.ci/hardening.sh passes the ASan+UBSan build's); else the
                      first built of build/engine, build/bin/engine, build-cpu/..., build-asan/...
  MALFORMED_CORPUS    an already generated corpus folder (with manifest.json); else one is
                      generated into pytest's tmp folder
  MALFORMED_TIMEOUT   seconds per case (default 60; sanitized builds are several times slower)
  MALFORMED_JOBS      parallel engine processes (default: the CPU count)
  MALFORMED_ALL=1     every case (.ci/hardening.sh sets it); otherwise an even sample of about 200
                      cases that includes every category, so the plain pytest run stays quick on an
                      engine whose start-up probes for a GPU
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
CANDIDATES = ("build/engine", "build/bin/engine", "build-cpu/engine", "build-cpu/bin/engine",
              "build-asan/engine", "build-asan/bin/engine")
SANITIZER_MARKERS = ("Sanitizer", "runtime error:", "AddressSanitizer", "LeakSanitizer", "==ERROR")


def engine_binary() -> pathlib.Path | None:
    env = os.environ.get("ENGINE_BIN")
    if env:
        return pathlib.Path(env)
    for rel in CANDIDATES:
        path = REPO / rel
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


@pytest.fixture(scope="module")
def engine() -> pathlib.Path:
    path = engine_binary()
    if path is None:
        pytest.skip("no engine built (set ENGINE_BIN or build build/engine)")
    if not path.is_file():
        pytest.fail(f"ENGINE_BIN={path} does not exist")
    return path.resolve()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> pathlib.Path:
    given = os.environ.get("MALFORMED_CORPUS")
    if given and (pathlib.Path(given) / "manifest.json").is_file():
        return pathlib.Path(given).resolve()
    out = pathlib.Path(given) if given else tmp_path_factory.mktemp("malformed") / "corpus"
    subprocess.run([sys.executable, str(REPO / "tests" / "python" / "corpus" / "make_malformed_corpus.py"), str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    return out.resolve()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    # Sanitized builds: any report fails the process with a distinctive exit code, leaks included;
    # an allocation the engine did not bound is a report, not a bad_alloc it could turn into text.
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=1", "exitcode=86",
                                                 "allocator_may_return_null=0", "handle_abort=1"]))
    env["UBSAN_OPTIONS"] = ":".join(filter(None, [env.get("UBSAN_OPTIONS"), "print_stacktrace=1",
                                                  "halt_on_error=1", "exitcode=87"]))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run(engine: pathlib.Path, corpus: pathlib.Path, args: list[str], timeout: float):
    try:
        proc = subprocess.run([str(engine), *args], cwd=corpus, capture_output=True, timeout=timeout,
                              env=child_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    return proc


def problem_with(proc, timeout: float) -> str | None:
    """Why this run breaks the contract for a malformed input, or None."""
    if proc is None:
        return f"no answer within {timeout:g} s (hang?)"
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode < 0:
        return f"killed by signal {-proc.returncode}: {err[-400:]}"
    if any(marker in err for marker in SANITIZER_MARKERS):
        return f"sanitizer report (exit {proc.returncode}): {err[:1500]}"
    if proc.returncode != 1:
        return f"exit code {proc.returncode}, expected 1; stderr: {err[-400:]!r}"
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if len(errors) != 1:
        return f"expected one 'error:' line on stderr, got {len(errors)}: {err[-400:]!r}"
    if len(errors[0]) < len("error: ") + 10:
        return f"error message says nothing: {errors[0]!r}"
    return None


def manifest(corpus: pathlib.Path) -> dict:
    return json.loads((corpus / "manifest.json").read_text())


def test_corpus_is_large_and_varied(corpus):
    m = manifest(corpus)
    files = [p for p in (corpus / "cases").rglob("*") if p.is_file()]
    assert len(files) >= 1000, f"only {len(files)} files"
    categories = {c["category"] for c in m["cases"]}
    for needed in ("graph-truncated", "graph-flipped", "graph-semantic", "graph-absurd", "weights-truncated",
                   "weights-flipped", "weights-dtype", "weights-shape", "weights-swapped", "weights-semantic",
                   "idx", "gzip", "labels", "png", "pgm", "data"):
        assert needed in categories, f"no {needed} cases"
    assert any("cycle" in c["description"] for c in m["cases"])


def test_controls_succeed(engine, corpus):
    timeout = float(os.environ.get("MALFORMED_TIMEOUT", "60"))
    for args in manifest(corpus)["controls"]:
        proc = run(engine, corpus, args, timeout)
        assert proc is not None, f"control {args} timed out"
        err = proc.stderr.decode("utf-8", "replace")
        assert proc.returncode == 0, f"control {args} failed ({proc.returncode}): {err[-1000:]}"
        assert not any(marker in err for marker in SANITIZER_MARKERS), err[:2000]


def selected_cases(corpus: pathlib.Path) -> list[dict]:
    cases = manifest(corpus)["cases"]
    if os.environ.get("MALFORMED_ALL") == "1" or len(cases) <= 200:
        return cases
    step = -(-len(cases) // 200)
    first_of_category = {}
    for i, case in enumerate(cases):
        first_of_category.setdefault(case["category"], i)
    keep = set(range(0, len(cases), step)) | set(first_of_category.values())
    return [cases[i] for i in sorted(keep)]


def test_every_malformed_input_is_a_clean_error(engine, corpus):
    cases = selected_cases(corpus)
    timeout = float(os.environ.get("MALFORMED_TIMEOUT", "60"))
    jobs = int(os.environ.get("MALFORMED_JOBS", str(os.cpu_count() or 2)))
    failures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run, engine, corpus, case["args"], timeout): case for case in cases}
        for future in concurrent.futures.as_completed(futures):
            case = futures[future]
            problem = problem_with(future.result(), timeout)
            if problem:
                failures.append(f"{case['id']} ({case['description']}): engine {' '.join(case['args'])}\n    {problem}")
    failures.sort()
    assert not failures, f"{len(failures)} of {len(cases)} cases broke the contract:\n" + "\n".join(failures[:40])
