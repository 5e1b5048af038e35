#!/usr/bin/env python3
"""JAX/XLA side by side with `engine bench`: the same model file, the same cases, the same JSON.

The JAX peer of benchmarks/bench_torch.py. Loads MODEL (format v1) and builds the same forward function
in JAX (jax.lax.conv_general_dilated NCHW/OIHW with the spec's explicit 4-sided padding,
lax.reduce_window for the pools, jax.numpy for the rest), compiled ahead of time with jax.jit, and
measures what `engine bench` measures:

  compute  the nodes on a preprocessed input already on the device, probabilities left on the device;
  e2e      uint8 pixels in a host numpy array: jax.device_put, preprocessing + nodes, np.asarray of
           the probabilities (pageable host memory: that is how JAX moves data);

in one mode, `jit` (one XLA executable per batch size and scope). JAX exposes no CUDA events, so
every iteration is timed with the host clock (time.perf_counter) around a call that ends in
block_until_ready (compute) or np.asarray (e2e): per-iteration latencies include JAX's dispatch
and the synchronisation, as they would for a user of JAX. Compilation is done before the warm-up
and reported separately. Inputs rotate among a few sets so that caches do not flatter the numbers.

fp32 by default, without TF32 (precision=HIGHEST on every convolution and matrix product, and
NVIDIA_TF32_OVERRIDE=0 for the CUDA libraries), so both sides do the same arithmetic; `--dtype
fp32,bf16` adds a bfloat16 configuration (weights and activations bf16, preprocessing in float32 as
the spec fixes it, probabilities returned as float32), reported as mode `jit-bf16`.

Before timing, the JAX output on a few random images is compared with the reference interpreter
(cnnengine.model_format.to_torch on the CPU in float64; a float64 numpy implementation of the spec
when PyTorch is missing). fp32: more than 1e-4 of probability or an argmax flip that is not a
near-tie exits 1 before anything is timed.

With --engine BENCH.json (the output of `engine bench --json`), the settings (batches, warm-up,
iterations, duration, repetitions, percentiles) default to that run's and the report ends with
engine / JAX ratios of images/s in the compute scope (also written into the JSON, "ratios").

  python3 benchmarks/bench_jax.py models/lenet5.json --engine bench.json --json jax.json
  python3 benchmarks/bench_jax.py models/lenet5.json --dtype fp32,bf16 --json jax.json
  python3 benchmarks/bench_jax.py models/lenet5.json --device cpu --batch 1,64     # XLA on the CPU
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import pathlib
import platform
import struct
import sys
import time

# cuBLAS/cuDNN read this when they load, so it has to be set before JAX initialises CUDA: it makes
# sure no fp32 convolution or matrix product silently runs in TF32, whatever XLA picks.
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")

import numpy as np  # noqa: E402

from cnnengine import model_format as mf  # noqa: E402
# The statistics, the measurement loop and the report helpers are the peers' shared ones.
from peer_bench import (SCHEMA, git_commit, measure, parse_list, print_table, settings, si,  # noqa: E402
                        summary_line, write_json)

BACKEND = "jax"
CHECK_TOLERANCE = 1e-4       # max |probability difference| allowed against the float64 reference (fp32)
NEAR_TIE = 1e-5              # an argmax flip between two classes this close in the reference is rounding
INPUT_SETS = 3               # inputs rotate among this many sets (different random pixels)


# --------------------------------------------------------------------------------------------------
# Model loading without the safetensors package (the GPU machine's Python may not have it)

_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
              "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def parse_safetensors(blob: bytes, where: str) -> dict[str, np.ndarray]:
    """Tensors of a safetensors blob, parsed with numpy: an 8-byte little-endian header length, a JSON
    header {name: {dtype, shape, data_offsets}}, then the data. Other dtypes than F32 come back as
    they are (mf.validate names the tensor and rejects them); BF16 and other types numpy cannot hold
    are rejected here. The C++ loader stays the authority on byte-level rules."""
    def bad(msg):
        raise mf.ModelFormatError(f"{where}: not a valid safetensors file: {msg}")
    if len(blob) < 8:
        bad("shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        bad(f"header length {n} runs past the end of the file")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        bad(f"header is not JSON: {e}")
    if not isinstance(header, dict):
        bad("header is not a JSON object")
    data = memoryview(blob)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<")
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            bad(f"tensor {name!r}: dtype {info.get('dtype') if isinstance(info, dict) else info!r} "
                "unsupported or entry malformed")
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * dtype.itemsize:
            bad(f"tensor {name!r}: data_offsets {[begin, end]} do not fit shape {shape} and the file")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    return tensors


def read_model(path) -> mf.Model:
    """mf.read_model when the safetensors package is there; else the same checks in the same order
    (mf.validate without weights, the sha256, mf.validate with them) on weights parsed above."""
    try:
        import safetensors.numpy  # noqa: F401
        return mf.read_model(path)
    except ModuleNotFoundError:
        pass
    path = pathlib.Path(path)
    where = str(path)
    try:
        graph = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise mf.ModelFormatError(f"{where}: cannot read the graph file: {e}") from None
    if not isinstance(graph, dict):
        raise mf.ModelFormatError(f"{where}: the top level must be a JSON object")
    mf.validate(graph, None, where, shapes=False)
    wpath = path.parent / graph["weights"]["file"]
    try:
        blob = wpath.read_bytes()
    except OSError as e:
        raise mf.ModelFormatError(f"{where}: cannot read weights file {wpath}: {e.strerror}") from None
    sha = hashlib.sha256(blob).hexdigest()
    if sha != graph["weights"]["sha256"]:
        raise mf.ModelFormatError(f"{where}: weights file {wpath.name} has sha256 {sha}, "
                                  f"the graph says {graph['weights']['sha256']}")
    tensors = parse_safetensors(blob, str(wpath))
    mf.validate(graph, tensors, where)
    return mf.Model(graph, tensors, path)


# --------------------------------------------------------------------------------------------------
# The forward function in JAX, split as the engine splits it: preprocessing, then the nodes

def _window_attrs(attrs, op):
    kernel = tuple(attrs["kernel"])
    stride = tuple(attrs.get("stride", kernel if op != "conv2d" else [1, 1]))
    t, b, l, r = attrs.get("padding", [0, 0, 0, 0])
    return kernel, stride, ((t, b), (l, r))


def _inside_counts(hw, kernel, stride, pads):
    """Per output position, how many window positions fall inside the [H, W] input (numpy, static):
    the divisor of avgpool with count_include_pad false."""
    (t, b), (l, r) = pads
    ones = np.pad(np.ones(hw, np.float64), ((t, b), (l, r)))
    win = np.lib.stride_tricks.sliding_window_view(ones, kernel)[::stride[0], ::stride[1]]
    return win.sum(axis=(2, 3))


class JaxModel:
    """The graph as two pure functions of (params, input): `nodes` (preprocessed input -> first
    output) and `full` (raw input -> first output), in `dtype` ("fp32" or "bf16")."""

    def __init__(self, model: mf.Model, dtype: str, device):
        import jax
        import jax.numpy as jnp
        from jax import lax
        self.jax, self.jnp, self.lax = jax, jnp, lax
        graph = model.graph
        self.graph, self.dtype = graph, dtype
        self.cdtype = jnp.float32 if dtype == "fp32" else jnp.bfloat16
        # HIGHEST: true fp32 products on GPUs that would otherwise use TF32 (XLA's default on
        # Ampere and later). For bf16 the inputs are already bf16; DEFAULT lets XLA pick its kernels.
        self.precision = lax.Precision.HIGHEST if dtype == "fp32" else lax.Precision.DEFAULT
        self.shapes = mf.validate(graph, model.tensors, where=str(model.path or graph["name"]))
        self.input_name = graph["input"]["name"]
        self.order = [graph["nodes"][i] for i in mf.topological_order(graph["nodes"], self.input_name)]
        # Parameters are arguments of the compiled function, not constants folded into it: this is
        # how a JAX model is normally run, and it keeps compile times independent of the weights.
        self.params = {k: jax.device_put(np.asarray(v, np.float32).astype(self.cdtype), device)
                       for k, v in model.tensors.items()}
        # avgpool divisors when padded positions do not count: static, from the shapes.
        self.divisors = {}
        for n in self.order:
            if n["op"] == "avgpool" and not n["attrs"]["count_include_pad"]:
                kernel, stride, pads = _window_attrs(n["attrs"], "avgpool")
                in_shape = self.shapes[n["inputs"][0]]
                self.divisors[n["name"]] = _inside_counts(in_shape[1:], kernel, stride, pads)

    def preprocess(self, x):
        """The spec's preprocessing, float32 arithmetic whatever the compute dtype, then the cast."""
        jnp = self.jnp
        inp = self.graph["input"]
        if inp["dtype"] == "float32":
            return x.astype(self.cdtype)
        pre = inp["preprocess"]
        c = inp["shape"][0]
        mean = jnp.asarray(np.asarray(pre["mean"], np.float32).reshape(1, c, 1, 1))
        std = jnp.asarray(np.asarray(pre["std"], np.float32).reshape(1, c, 1, 1))
        y = (x.astype(jnp.float32) * np.float32(pre["scale"]) - mean) / std
        t, b, l, r = pre.get("pad", [0, 0, 0, 0])
        if any((t, b, l, r)):
            y = jnp.pad(y, ((0, 0), (0, 0), (t, b), (l, r)),
                        constant_values=np.float32(pre.get("pad_value", 0.0)))
        return y.astype(self.cdtype)

    def nodes(self, params, x):
        jnp, lax, prec = self.jnp, self.lax, self.precision
        values = {self.input_name: x}
        for n in self.order:
            op, attrs, roles = n["op"], n.get("attrs", {}), n.get("tensors", {})
            v = values[n["inputs"][0]]
            if op == "conv2d":
                _, stride, pads = _window_attrs(attrs, op)
                y = lax.conv_general_dilated(v, params[roles["weight"]], window_strides=stride, padding=pads,
                                             dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=prec)
                if "bias" in roles:
                    y = y + params[roles["bias"]][None, :, None, None]
            elif op in ("avgpool", "maxpool"):
                kernel, stride, pads = _window_attrs(attrs, op)
                dims, strides, padding = (1, 1) + kernel, (1, 1) + stride, ((0, 0), (0, 0)) + pads
                if op == "maxpool":
                    # Padded positions never win: they are -inf.
                    y = lax.reduce_window(v, jnp.array(-jnp.inf, v.dtype), lax.max, dims, strides, padding)
                else:
                    s = lax.reduce_window(v, jnp.array(0, v.dtype), lax.add, dims, strides, padding)
                    if attrs["count_include_pad"]:
                        y = s / np.asarray(kernel[0] * kernel[1], v.dtype)
                    else:
                        y = s / jnp.asarray(self.divisors[n["name"]], v.dtype)[None, None]
            elif op == "relu":
                y = jnp.maximum(v, jnp.array(0, v.dtype))
            elif op == "tanh":
                y = jnp.tanh(v)
            elif op == "sigmoid":
                y = self.jax.nn.sigmoid(v)
            elif op == "flatten":
                y = v.reshape(v.shape[0], -1)   # row-major: CHW order
            elif op == "dense":
                # weight [units, K]: y = x W^T + b (PyTorch's Linear layout).
                y = jnp.matmul(v, params[roles["weight"]].T, precision=prec)
                if "bias" in roles:
                    y = y + params[roles["bias"]][None, :]
            elif op == "softmax":
                y = self.jax.nn.softmax(v, axis=1)
            elif op == "add":
                y = v + values[n["inputs"][1]]
            elif op == "scale_shift":
                view = (1, -1) + (1,) * (v.ndim - 2)
                y = v * params[roles["scale"]].reshape(view) + params[roles["shift"]].reshape(view)
            elif op == "concat":
                y = jnp.concatenate([values[i] for i in n["inputs"]], axis=1)
            else:  # pragma: no cover - mf.OPS and this chain are kept in step
                raise AssertionError(op)
            values[n["name"]] = y
        # The first output, as float32 whatever the compute dtype: what the engine hands back.
        return values[self.graph["outputs"][0]].astype(jnp.float32)

    def full(self, params, x):
        return self.nodes(params, self.preprocess(x))

    def compile(self, fn, *example):
        """Ahead-of-time compiled `fn` for these argument shapes; (executable, trace s, compile s)."""
        t0 = time.perf_counter()
        # Belt and braces for any product not given precision= explicitly; "float32" is the name
        # both old (0.4) and new JAX accept for HIGHEST.
        ctx = (self.jax.default_matmul_precision("float32") if self.dtype == "fp32"
               else contextlib.nullcontext())
        with ctx:
            lowered = self.jax.jit(fn).lower(*example)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        return compiled, t1 - t0, t2 - t1


# --------------------------------------------------------------------------------------------------
# The reference: to_torch in float64 on the CPU, or the numpy implementation of the spec below

def numpy_reference(model: mf.Model, x: np.ndarray) -> np.ndarray:
    """The spec's semantics in float64 numpy (preprocessing float32 as the spec fixes it): the first
    output for raw input `x`. Used when PyTorch is missing; written from formats/model-format-v1.md."""
    graph = model.graph
    input_name = graph["input"]["name"]
    values = {input_name: mf.preprocess_numpy(graph, x).astype(np.float64)}
    swv = np.lib.stride_tricks.sliding_window_view
    for i in mf.topological_order(graph["nodes"], input_name):
        n = graph["nodes"][i]
        op, attrs, roles = n["op"], n.get("attrs", {}), n.get("tensors", {})
        v = values[n["inputs"][0]]
        if op in ("conv2d", "avgpool", "maxpool"):
            kernel, stride, ((t, b), (l, r)) = _window_attrs(attrs, op)
            fill = -np.inf if op == "maxpool" else 0.0
            p = np.pad(v, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=fill)
            win = swv(p, kernel, axis=(2, 3))[:, :, ::stride[0], ::stride[1]]   # [N, C, OH, OW, kh, kw]
            if op == "conv2d":
                w = model.tensors[roles["weight"]].astype(np.float64)
                y = np.einsum("nchwpq,ocpq->nohw", win, w, optimize=True)
                if "bias" in roles:
                    y = y + model.tensors[roles["bias"]].astype(np.float64)[None, :, None, None]
            elif op == "maxpool":
                y = win.max(axis=(4, 5))
            elif attrs["count_include_pad"]:
                y = win.sum(axis=(4, 5)) / (kernel[0] * kernel[1])
            else:
                y = win.sum(axis=(4, 5)) / _inside_counts(v.shape[2:], kernel, stride, ((t, b), (l, r)))
        elif op == "relu":
            y = np.maximum(v, 0.0)
        elif op == "tanh":
            y = np.tanh(v)
        elif op == "sigmoid":
            y = 1.0 / (1.0 + np.exp(-v))
        elif op == "flatten":
            y = v.reshape(v.shape[0], -1)
        elif op == "dense":
            y = v @ model.tensors[roles["weight"]].astype(np.float64).T
            if "bias" in roles:
                y = y + model.tensors[roles["bias"]].astype(np.float64)
        elif op == "softmax":
            e = np.exp(v - v.max(axis=1, keepdims=True))
            y = e / e.sum(axis=1, keepdims=True)
        elif op == "add":
            y = v + values[n["inputs"][1]]
        else:  # pragma: no cover
            raise AssertionError(op)
        values[n["name"]] = y
    return values[graph["outputs"][0]]


def torch_reference(model: mf.Model, x: np.ndarray) -> np.ndarray:
    import torch
    gm = mf.to_torch(model).eval().double()
    with torch.inference_mode():
        out = gm(torch.from_numpy(np.ascontiguousarray(x)))
    out = out[0] if isinstance(out, tuple) else out
    return out.numpy().astype(np.float64)


def reference(model, x, which):
    """(first output in float64, the reference's name)."""
    if which in ("auto", "torch"):
        try:
            return torch_reference(model, x), "cnnengine.model_format.to_torch, float64, CPU"
        except ImportError as e:
            if which == "torch":
                sys.exit(f"error: --reference torch but PyTorch cannot be imported ({e})")
    return numpy_reference(model, x), "numpy implementation of the spec in benchmarks/bench_jax.py, float64"


def check_against_reference(jm: JaxModel, model, device, images, which, log):
    """Max |dp| and argmax agreement of JAX (this dtype) against the float64 reference on `images`
    random inputs. Returns a dict for the JSON; "ok" is False on a failure in fp32."""
    rng = np.random.default_rng(99)
    host = random_input(model.graph["input"], images, rng)
    fn, _, _ = jm.compile(jm.full, jm.params, jm.jax.device_put(host, device))
    got = np.asarray(fn(jm.params, jm.jax.device_put(host, device))).astype(np.float64).reshape(images, -1)
    ref, ref_name = reference(model, host, which)
    ref = ref.reshape(images, -1)
    diff = float(np.max(np.abs(got - ref)))
    ref_arg, got_arg = ref.argmax(axis=1), got.argmax(axis=1)
    flips = []
    for i in np.nonzero(ref_arg != got_arg)[0]:
        top2 = np.sort(ref[i])[-2:]
        flips.append({"image": int(i), "reference": int(ref_arg[i]), "jax": int(got_arg[i]),
                      "reference_gap": float(top2[1] - top2[0])})
    hard_flips = [f for f in flips if f["reference_gap"] >= NEAR_TIE]
    finite = bool(np.isfinite(got).all())
    ok = finite and diff <= CHECK_TOLERANCE and not hard_flips
    result = {"reference": ref_name, "images": images, "dtype": jm.dtype, "max_abs_diff": diff,
              "argmax_agree": int(images - len(flips)), "argmax_flips": flips, "finite": finite,
              "tolerance": CHECK_TOLERANCE if jm.dtype == "fp32" else None,
              "ok": ok if jm.dtype == "fp32" else None}
    log(f"check {jm.dtype}: max |dp| {diff:.3g} against {ref_name} on {images} random inputs, "
        f"argmax {images - len(flips)}/{images} agree"
        + ("" if jm.dtype == "fp32" else " (bf16: reported, not enforced)"))
    return result


# --------------------------------------------------------------------------------------------------
# Cases and timing

def random_input(spec, n, rng):
    shape = (n,) + tuple(spec["shape"])
    if spec["dtype"] == "uint8":
        # Never all zeros: random pixels over the whole range.
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return rng.random(shape, dtype=np.float32)


class Case:
    """One batch size of one dtype: the compiled executables and the rotating input sets."""

    def __init__(self, jm: JaxModel, graph, device, n):
        jax = jm.jax
        self.jm, self.jax, self.device, self.n = jm, jax, device, n
        self.host_in = [random_input(graph["input"], n, np.random.default_rng(1234 + k)) for k in range(INPUT_SETS)]
        dev0 = jax.device_put(self.host_in[0], device)
        self.full_fn, t_full, c_full = jm.compile(jm.full, jm.params, dev0)
        pre_fn, _, _ = jm.compile(jm.preprocess, dev0)
        # The compute scope's inputs: each set preprocessed once, on the device.
        self.pre = [pre_fn(jax.device_put(h, device)).block_until_ready() for h in self.host_in]
        self.nodes_fn, t_nodes, c_nodes = jm.compile(jm.nodes, jm.params, self.pre[0])
        self.compile_s = {"compute": {"trace_s": t_nodes, "compile_s": c_nodes},
                          "e2e": {"trace_s": t_full, "compile_s": c_full}}
        del dev0

    def outputs_finite(self):
        out = np.asarray(self.full_fn(self.jm.params, self.jax.device_put(self.host_in[0], self.device)))
        return bool(np.isfinite(out).all())


def one_iteration(case, scope, i, samples):
    k = i % INPUT_SETS
    params = case.jm.params
    if scope == "compute":
        t0 = time.perf_counter()
        out = case.nodes_fn(params, case.pre[k])
        t1 = time.perf_counter()               # dispatch returned: JAX runs asynchronously
        out.block_until_ready()
        t2 = time.perf_counter()
    else:
        t0 = time.perf_counter()
        dev = case.jax.device_put(case.host_in[k], case.device)
        out = case.full_fn(params, dev)
        t1 = time.perf_counter()
        np.asarray(out)                        # waits for the upload and the forward pass, then copies back
        t2 = time.perf_counter()
    samples["latency"].append((t2 - t0) * 1e3)
    samples["enqueue"].append((t1 - t0) * 1e3)


def bench_case(case, scope, s, mode, log):
    """peer_bench.measure with host-clock samples; the iteration index rotates the input sets."""
    counter = iter(range(1 << 62))
    measured = measure(case.n, s, ("latency", "enqueue"),
                       lambda samples: one_iteration(case, scope, next(counter), samples))
    measured.pop("samples")
    reps = measured.pop("repetitions")
    result = {
        "backend": BACKEND, "batch": case.n, "scope": scope, "mode": mode, "dtype": case.jm.dtype,
        "device": "gpu" if case.device.platform in ("gpu", "cuda", "rocm") else "cpu",
        "timing": "host clock around block_until_ready" if scope == "compute"
                  else "host clock around device_put + forward + np.asarray",
        **measured,
        "compile": case.compile_s[scope],
    }
    result["repetitions"] = reps
    log(summary_line(f"jax {mode:8s} batch {case.n:6d} {scope:7s}", result))
    return result


# --------------------------------------------------------------------------------------------------
# Engine / JAX ratios (compute scope: e2e differs in host memory, pinned on the engine's side,
# pageable numpy arrays on JAX's, so it is reported but not divided)

def ratios(engine_json, jax_results):
    fp32 = [r for r in jax_results if r["dtype"] == "fp32" and r["scope"] == "compute"]
    by_batch = {r["batch"]: r for r in fp32}
    want_device = fp32[0]["device"] if fp32 else None
    out = []
    for r in engine_json.get("results", []):
        if r.get("device") != want_device or r.get("scope") != "compute":
            continue
        j = by_batch.get(r["batch"])
        if j is None:
            continue
        out.append({"backend": r["backend"], "batch": r["batch"], "scope": r["scope"], "mode": r["mode"],
                    "engine_images_per_s": r["images_per_s"], "jax_mode": j["mode"],
                    "jax_images_per_s": j["images_per_s"], "ratio": r["images_per_s"] / j["images_per_s"]})
    return out


def print_ratios(rows, out=sys.stdout):
    if not rows:
        print("no engine compute-scope results on the same device to compare with", file=out)
        return
    header = ["backend", "batch", "scope", "mode", "engine img/s", "jax img/s", "engine/jax"]
    table = [[r["backend"], str(r["batch"]), r["scope"], f"{r['mode']}~{r['jax_mode']}",
              si(r["engine_images_per_s"]), si(r["jax_images_per_s"]), f"{r['ratio']:.2f}x"] for r in rows]
    print_table("engine / JAX fp32, images/s (compute scope, same batch; > 1: the engine is faster)", header, table,
                out)


# --------------------------------------------------------------------------------------------------

def device_json(jax, device):
    d = {"available": device.platform in ("gpu", "cuda", "rocm"), "platform": device.platform,
         "name": device.device_kind}
    try:
        d["platform_version"] = device.client.platform_version   # e.g. the CUDA version XLA runs on
    except AttributeError:
        pass
    cc = getattr(device, "compute_capability", None)               # CUDA devices only
    if cc is not None:
        d["compute_capability"] = str(cc)
    if getattr(device, "core_count", None):                         # SMs on a GPU
        d["multiprocessors"] = device.core_count
    try:
        mem = device.memory_stats() or {}
        if "bytes_limit" in mem:
            d["memory_limit_gib"] = mem["bytes_limit"] / 2**30
    except Exception:  # not every backend reports memory (the CPU raises or returns None)
        pass
    return d


def main(argv=None):
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="format-v1 graph file (.json)")
    ap.add_argument("--engine", help="engine bench --json output: default settings and the ratios")
    ap.add_argument("--device", default=None, help="gpu (default when JAX has one) or cpu")
    ap.add_argument("--dtype", default="fp32", help="fp32, bf16 or fp32,bf16 (default fp32)")
    ap.add_argument("--batch", help="batch sizes, comma-separated (default: the engine run's, else 1,1024,4096,65536)")
    ap.add_argument("--warmup", type=float, help="warm-up per case, ms (default 200)")
    ap.add_argument("--iterations", type=int, help="at least this many iterations per repetition (default 10)")
    ap.add_argument("--duration", type=float, help="at least this many seconds per repetition (default 1)")
    ap.add_argument("--repetitions", type=int, help="repetitions per case (default 3)")
    ap.add_argument("--percentile", help="latency percentiles, comma-separated (default 90,99)")
    ap.add_argument("--no-data-transfers", action="store_true", help="compute scope only")
    ap.add_argument("--max-batch", type=int, default=None,
                    help="skip larger batches (default: none on a GPU, 4096 on the CPU)")
    ap.add_argument("--check-images", type=int, default=8, help="random inputs for the reference check (default 8)")
    ap.add_argument("--reference", choices=("auto", "torch", "numpy", "none"), default="auto",
                    help="reference of the check: to_torch float64 (auto: when PyTorch is installed), "
                         "numpy float64, or none (no check)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    dtypes = parse_list(args.dtype, str)
    if not dtypes or any(d not in ("fp32", "bf16") for d in dtypes):
        ap.error(f"--dtype takes fp32, bf16 or both, comma-separated: {args.dtype!r}")
    try:
        import jax
        import jaxlib
    except ImportError as e:
        sys.exit(f"error: JAX is not installed for {sys.executable} ({e}); "
                 "install jax (jax[cuda12] on a GPU machine, jax[cpu] elsewhere)")

    s, engine = settings(args, default_batches=[1, 1024, 4096, 65536])

    if args.device:
        want = {"gpu": "gpu", "cuda": "gpu", "cpu": "cpu"}.get(args.device)
        if want is None:
            ap.error(f"--device takes gpu or cpu: {args.device!r}")
        try:
            device = jax.devices(want)[0]
        except RuntimeError as e:
            sys.exit(f"error: --device {args.device} but JAX has no such device: {str(e).splitlines()[0]}")
    else:
        device = jax.devices()[0]     # JAX puts a GPU first when it has one
    on_gpu = device.platform in ("gpu", "cuda", "rocm")
    scopes = ["compute"] + ([] if args.no_data_transfers else ["e2e"])
    max_batch = args.max_batch if args.max_batch is not None else (None if on_gpu else 4096)

    try:
        model = read_model(args.model)
    except mf.ModelFormatError as e:
        sys.exit(f"error: {e}")

    checks, results, skipped, jms = [], [], [], {}
    for dtype in dtypes:
        jms[dtype] = JaxModel(model, dtype, device)
        if args.reference != "none":
            c = check_against_reference(jms[dtype], model, device, args.check_images, args.reference, log)
            checks.append(c)
            if c["ok"] is False:
                why = []
                if not c["finite"]:
                    why.append("non-finite outputs")
                if c["max_abs_diff"] > CHECK_TOLERANCE:
                    why.append(f"max |dp| {c['max_abs_diff']:.3g} > {CHECK_TOLERANCE:g}")
                for f in c["argmax_flips"]:
                    if f["reference_gap"] >= NEAR_TIE:
                        why.append(f"image {f['image']}: argmax {f['jax']} but the reference says "
                                   f"{f['reference']} (gap {f['reference_gap']:.3g})")
                print(f"error: JAX {dtype} disagrees with the reference ({c['reference']}): " + "; ".join(why),
                      file=sys.stderr)
                return 1

    for n in s["batches"]:
        if max_batch is not None and n > max_batch:
            skipped.append({"backend": BACKEND, "batch": n, "reason": f"batch > --max-batch {max_batch}"})
            continue
        for dtype in dtypes:
            mode = "jit" if dtype == "fp32" else f"jit-{dtype}"
            case = None
            try:
                case = Case(jms[dtype], model.graph, device, n)
                finite = case.outputs_finite()
                for scope in scopes:
                    r = bench_case(case, scope, s, mode, log)
                    r["outputs_finite"] = finite
                    results.append(r)
            except (RuntimeError, MemoryError) as e:  # XLA's RESOURCE_EXHAUSTED (out of memory) is a RuntimeError
                reason = f"{mode}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                skipped.append({"backend": BACKEND, "batch": n, "reason": reason})
                log(f"jax {mode} batch {n}: skipped: {reason}")
            del case     # frees the device buffers before the next batch

    out = {
        "schema": SCHEMA, "tool": "benchmarks/bench_jax.py", "framework": "jax",
        "command": " ".join([sys.executable] + sys.argv),
        "git_commit": git_commit(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": {"name": model.name, "path": args.model, "parameters": model.parameter_count()},
        "device": device_json(jax, device),
        "host": {"cpu": platform.processor() or platform.machine(), "threads": os.cpu_count()},
        "jax": {"version": jax.__version__, "jaxlib": jaxlib.__version__, "numpy": np.__version__,
                "python": platform.python_version(), "backend": device.platform, "device": str(device),
                "dtypes": dtypes, "matmul_precision": {"fp32": "HIGHEST", "bf16": "DEFAULT"},
                "nvidia_tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
                "timing": "host wall clock (time.perf_counter) per iteration around block_until_ready "
                          "(compute) or device_put + forward + np.asarray (e2e); JAX has no user CUDA "
                          "events, so latencies include dispatch and synchronisation",
                "input_sets": INPUT_SETS,
                "module": "benchmarks/bench_jax.py JaxModel: lax.conv_general_dilated (NCHW/OIHW, explicit "
                          "padding), lax.reduce_window pools, jnp.matmul dense; jax.jit AOT per batch"},
        "settings": dict(s, dtypes=dtypes, no_data_transfers=args.no_data_transfers, max_batch=max_batch),
        "check": checks, "results": results, "skipped": skipped,
    }

    print(f"JAX {jax.__version__} (jaxlib {jaxlib.__version__}) on {device.platform} ({device.device_kind})"
          f", model {model.name} ({args.model})")
    for c in checks:
        print(f"  check {c['dtype']}: max |dp| {c['max_abs_diff']:.3g}, argmax {c['argmax_agree']}/{c['images']} "
              f"agree, against {c['reference']}")
    header = (["batch", "mode", "scope", "images/s", "±%", "median ms"] + [f"p{p:g} ms" for p in s["percentiles"]]
              + ["compile s"])
    rows = [header]
    for r in results:
        lat = r["latency_ms"]
        rows.append([str(r["batch"]), r["mode"], r["scope"], si(r["images_per_s"]), f"{r['spread_pct']:.1f}",
                     f"{lat['median']:.4f}"] + [f"{lat[f'p{p:g}']:.4f}" for p in s["percentiles"]]
                    + [f"{r['compile']['trace_s'] + r['compile']['compile_s']:.2f}"])
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    for row in rows:
        print("  " + "  ".join(cell.ljust(w) if c in (1, 2) else cell.rjust(w)
                               for c, (cell, w) in enumerate(zip(row, widths))))
    for sk in skipped:
        print(f"  skipped batch {sk['batch']}: {sk['reason']}")
    print("  (latency: host clock around block_until_ready / np.asarray; compile s: trace + XLA compile, "
          "not in the timings)")
    if engine is not None:
        out["engine_json"] = args.engine
        out["ratios"] = ratios(engine, results)
        print_ratios(out["ratios"])
    out["run_s"] = time.perf_counter() - t_start
    print(f"  total run time {out['run_s']:.1f} s")
    if args.json:
        write_json(args.json, out, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
