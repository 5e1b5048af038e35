"""Exporters to format v1, and the numerical check every export runs.

Each source framework has its own `graph_from_*` function that yields (graph, tensors); `check`
and `export_checked` are shared, so a Keras or ONNX importer only adds its own walk. The PyTorch
walk treats a module as nn.Sequential: its leaf layers in registration order. A module whose
forward does something else exports a wrong graph, which is why every export is checked by running
the source next to the exported graph.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from typing import Callable

import numpy as np

from . import datasets
from .model_format import Model, ModelFormatError, preprocess_numpy, read_model, topological_order, \
    write_model

DEFAULT_TOLERANCE = 1e-5


class ExportError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------------
# PyTorch module -> graph

def _pair(v) -> list[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(x) for x in v]


def _leaves(module, prefix=""):
    """(qualified name, leaf module) in registration order; containers are opened recursively."""
    children = list(module.named_children())
    if not children:
        yield prefix, module
        return
    for name, child in children:
        yield from _leaves(child, f"{prefix}.{name}" if prefix else name)


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or name_2, name_3, ... if taken; the result is added to `taken`."""
    base, k = name, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _node_name(qualified: str, op: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", qualified)
    # nn.Sequential without names numbers its layers; '3' alone says nothing about the layer.
    if not name or name[0].isdigit():
        name = f"{op}_{name}" if name else op
    return unique_name(name, taken)


def graph_object(name: str, description: str | None, spec: dict, labels, nodes: list, outputs: list) -> dict:
    """A format v1 graph as the exporters and importers write it (the weights' sha256 is filled in when written)."""
    graph = {"name": name}
    if description:
        graph["description"] = description
    graph.update({"weights": {"file": f"{name}.safetensors", "sha256": "0" * 64}, "input": spec})
    if labels is not None:
        graph["labels"] = list(labels)
    graph.update({"nodes": nodes, "outputs": outputs})
    return graph


def graph_from_torch_module(module, input_spec: dict, *, name: str, labels: list[str] | None = None,
                            description: str | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """Walks `module` as nn.Sequential. `input_spec` is the graph's `input` object; leading
    ZeroPad2d/ConstantPad2d layers become its preprocess pad, so the module itself consumes
    the preprocessed tensor before padding."""
    from torch import nn

    input_spec = dict(input_spec)
    pre = dict(input_spec["preprocess"]) if "preprocess" in input_spec else None
    nodes: list[dict] = []
    tensors: dict[str, np.ndarray] = {}
    taken = {input_spec["name"]}
    current = input_spec["name"]
    pending_pad = None  # (top, bottom, left, right) of a ZeroPad2d waiting for the next layer
    input_pad = [0, 0, 0, 0]
    input_pad_value = None

    def param(t) -> np.ndarray:
        return t.detach().to("cpu").contiguous().numpy().astype(np.float32)

    def add(qualified, op, attrs=None, params=None):
        nonlocal current
        nname = _node_name(qualified, op, taken)
        node = {"name": nname, "op": op, "inputs": [current]}
        if attrs:
            node["attrs"] = attrs
        if params:
            node["tensors"] = {}
            for role, t in params.items():
                if t is None:
                    continue
                tname = f"{nname}.{role}"
                node["tensors"][role] = tname
                tensors[tname] = param(t)
        nodes.append(node)
        current = nname

    def where(q, layer):
        return f"layer '{q}' ({type(layer).__name__})"

    for q, layer in _leaves(module):
        if isinstance(layer, (nn.Identity, nn.Dropout)):
            continue  # identities at inference
        if isinstance(layer, (nn.ZeroPad2d, nn.ConstantPad2d)):
            left, right, top, bottom = (int(p) for p in layer.padding)
            value = float(getattr(layer, "value", 0.0))
            if min(left, right, top, bottom) < 0:
                raise ExportError(f"{where(q, layer)}: negative padding (cropping) is not supported")
            if not nodes and pending_pad is None:
                if pre is None:
                    raise ExportError(f"{where(q, layer)}: a float32 input has no preprocess pad to hold it")
                input_pad = [a + b for a, b in zip(input_pad, (top, bottom, left, right))]
                if input_pad_value is not None and input_pad_value != value:
                    raise ExportError(f"{where(q, layer)}: two leading pads with different values")
                input_pad_value = value
                continue
            if value != 0.0:
                raise ExportError(f"{where(q, layer)}: only zero padding can be folded into a later layer")
            if pending_pad is not None:
                raise ExportError(f"{where(q, layer)}: two padding layers in a row are not supported")
            pending_pad = [top, bottom, left, right]
            continue

        pad_here = pending_pad
        pending_pad = None
        if isinstance(layer, nn.Conv2d):
            if layer.groups != 1 or _pair(layer.dilation) != [1, 1] or layer.padding_mode != "zeros":
                raise ExportError(f"{where(q, layer)}: only groups=1, dilation=1, padding_mode='zeros' are supported")
            kernel, stride = _pair(layer.kernel_size), _pair(layer.stride)
            if isinstance(layer.padding, str):
                if layer.padding == "valid":
                    padding = [0, 0, 0, 0]
                else:  # 'same' (stride 1): torch puts the odd extra row/column at the bottom/right
                    th, tw = kernel[0] - 1, kernel[1] - 1
                    padding = [th // 2, th - th // 2, tw // 2, tw - tw // 2]
            else:
                ph, pw = _pair(layer.padding)
                padding = [ph, ph, pw, pw]
            if pad_here:
                padding = [a + b for a, b in zip(padding, pad_here)]
            add(q, "conv2d", {"out_channels": int(layer.out_channels), "kernel": kernel, "stride": stride,
                              "padding": padding}, {"weight": layer.weight, "bias": layer.bias})
            continue
        if isinstance(layer, nn.AvgPool2d):
            if layer.ceil_mode or layer.divisor_override is not None:
                raise ExportError(f"{where(q, layer)}: ceil_mode and divisor_override are not supported")
            kernel = _pair(layer.kernel_size)
            stride = _pair(layer.stride if layer.stride is not None else layer.kernel_size)
            ph, pw = _pair(layer.padding)
            padding = [ph, ph, pw, pw]
            if pad_here:
                if not layer.count_include_pad:
                    raise ExportError(f"{where(q, layer)}: a zero pad before count_include_pad=False "
                                      "average pooling cannot be folded")
                padding = [a + b for a, b in zip(padding, pad_here)]
            add(q, "avgpool", {"kernel": kernel, "stride": stride, "padding": padding,
                               "count_include_pad": bool(layer.count_include_pad)})
            continue
        if pad_here:
            raise ExportError(f"{where(q, layer)}: a zero pad can only precede a Conv2d or an AvgPool2d")
        if isinstance(layer, nn.MaxPool2d):
            if layer.ceil_mode or layer.return_indices or _pair(layer.dilation) != [1, 1]:
                raise ExportError(f"{where(q, layer)}: ceil_mode, return_indices and dilation are not supported")
            kernel = _pair(layer.kernel_size)
            stride = _pair(layer.stride if layer.stride is not None else layer.kernel_size)
            ph, pw = _pair(layer.padding)
            add(q, "maxpool", {"kernel": kernel, "stride": stride, "padding": [ph, ph, pw, pw]})
        elif isinstance(layer, nn.Linear):
            add(q, "dense", {"units": int(layer.out_features)}, {"weight": layer.weight, "bias": layer.bias})
        elif isinstance(layer, nn.Flatten):
            if layer.start_dim != 1 or layer.end_dim != -1:
                raise ExportError(f"{where(q, layer)}: only Flatten(start_dim=1, end_dim=-1) is supported")
            add(q, "flatten")
        elif isinstance(layer, nn.Softmax):
            if layer.dim not in (1, -1):
                raise ExportError(f"{where(q, layer)}: only Softmax over dim 1 of [N, K] is supported")
            add(q, "softmax")
        elif isinstance(layer, (nn.ReLU, nn.Tanh, nn.Sigmoid)):
            add(q, {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid"}[type(layer)])
        else:
            raise ExportError(f"{where(q, layer)}: no format-v1 op for this layer")
    if pending_pad is not None:
        raise ExportError("the module ends with a padding layer")
    if not nodes:
        raise ExportError("the module has no layers to export")

    if pre is not None:
        # The module must hold its own input padding, since the check feeds it unpadded data.
        module_pad = input_pad
        spec_pad = list(pre.get("pad", [0, 0, 0, 0]))
        if any(spec_pad) and spec_pad != module_pad:
            raise ExportError(f"the input spec pads by {spec_pad} but the module's leading padding "
                              f"layers pad by {module_pad}; the module must begin with that padding")
        pre.pop("pad", None)
        pre.pop("pad_value", None)
        if any(module_pad):
            pre["pad"] = module_pad
            pre["pad_value"] = input_pad_value if input_pad_value is not None else 0.0
        input_spec["preprocess"] = pre
    return graph_object(name, description, input_spec, labels, nodes, [current]), tensors


def graph_from_state_dict(state_dict, like: Model, *, name: str | None = None,
                          description: str | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """`like`'s graph with its tensors replaced by the state_dict's, matched by order and shape."""
    import torch
    sd = [(k, v) for k, v in state_dict.items() if isinstance(v, torch.Tensor)]
    graph = like.graph
    slots = []  # (tensor name, shape, where) in execution order, weight before bias
    for i in topological_order(graph["nodes"], graph["input"]["name"]):
        n = graph["nodes"][i]
        for role in ("weight", "bias"):
            if role in n.get("tensors", {}):
                tname = n["tensors"][role]
                slots.append((tname, tuple(like.tensors[tname].shape), f"node '{n['name']}' {role}"))
    if len(sd) != len(slots):
        raise ExportError(
            f"the state_dict holds {len(sd)} tensors ({', '.join(k for k, _ in sd)}) but the graph "
            f"needs {len(slots)} ({', '.join(s[0] for s in slots)})")
    tensors = {}
    for (key, value), (tname, shape, where) in zip(sd, slots):
        if tuple(value.shape) != shape:
            raise ExportError(f"state_dict tensor '{key}' has shape {list(value.shape)}, "
                              f"{where} ('{tname}') needs {list(shape)}")
        if not value.is_floating_point():
            raise ExportError(f"state_dict tensor '{key}' is {value.dtype}, not floating point")
        tensors[tname] = value.detach().to("cpu", torch.float32).contiguous().numpy()
    new = {k: v for k, v in graph.items()}
    if name:
        new["name"] = name
    if description is not None:
        new["description"] = description
    return new, tensors


# --------------------------------------------------------------------------------------------------
# The check

# Where the engine command is looked for, in order, when $ENGINE_BIN is unset.
ENGINE_CANDIDATES = ("the package's own copy (cnnengine/bin/engine)", "`engine` on PATH")


def engine_binary() -> pathlib.Path | None:
    """$ENGINE_BIN, else the engine command installed with this package, else `engine` on PATH;
    None if none is there."""
    env = os.environ.get("ENGINE_BIN")
    if env:
        return pathlib.Path(env) if pathlib.Path(env).is_file() else None
    from .engine_command import engine_path
    own = engine_path()
    if own.is_file() and os.access(own, os.X_OK):
        return own
    on_path = shutil.which("engine")
    return pathlib.Path(on_path) if on_path else None


def run_engine(engine: pathlib.Path, model_path: pathlib.Path, data_path: pathlib.Path,
               out_npy: pathlib.Path, backend: str = "reference", extra: list[str] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [str(engine), "run", str(model_path), str(data_path), "--backend", backend,
           "--dump-outputs", str(out_npy)] + list(extra or [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise ExportError(f"engine failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                          f"{proc.stdout}{proc.stderr}")
    return proc


@dataclasses.dataclass
class Comparison:
    name: str
    max_abs: float
    argmax_agree: int
    argmax_total: int
    true_disagreements: int  # argmax differs although the reference's top-2 gap exceeds the bound
    bound: float = DEFAULT_TOLERANCE  # the largest per-element bound (see `element_bounds`)
    worst: float = 0.0  # the largest |diff| / bound over the elements: passes at <= 1

    @property
    def ok(self) -> bool:
        return self.worst <= 1.0 and self.true_disagreements == 0

    def line(self) -> str:
        agree = (f"argmax {self.argmax_agree}/{self.argmax_total}" if self.argmax_total else "argmax n/a")
        return (f"  {self.name:<38} max |diff| {self.max_abs:.3e} (bounds up to {self.bound:.2e}, "
                f"worst |diff|/bound {self.worst:.3f})   {agree}")


def element_bounds(magnitude: np.ndarray, tolerance: float) -> np.ndarray:
    """tolerance * max(1, m) per output element, m the magnitude its sums reach (sum |w.x| over
    every product, GraphModule.magnitude_copy): fp32 rounding error grows with m, so a raw-pixel
    (0..255) model or a large logit behind a sigmoid gets a bound its own float32 evaluation can
    meet, and a small sum an absolute one."""
    return tolerance * np.maximum(1.0, np.asarray(magnitude, np.float64))


def compare(name: str, got: np.ndarray, ref: np.ndarray, tolerance: float,
            magnitude: np.ndarray | None = None) -> Comparison:
    got = np.asarray(got, np.float64).reshape(len(got), -1)
    ref = np.asarray(ref, np.float64).reshape(len(ref), -1)
    if got.shape != ref.shape:
        raise ExportError(f"{name}: shape {got.shape} vs reference {ref.shape}")
    mag = np.abs(ref) if magnitude is None else np.asarray(magnitude, np.float64).reshape(ref.shape)
    bounds = element_bounds(mag, tolerance)
    diff = np.abs(got - ref)
    max_abs = float(diff.max()) if got.size else 0.0
    worst = float((diff / bounds).max()) if got.size else 0.0
    bound = float(bounds.max()) if got.size else tolerance
    if ref.shape[1] > 1:
        ga, ra = got.argmax(1), ref.argmax(1)
        srt = np.sort(ref, axis=1)
        gap = srt[:, -1] - srt[:, -2]
        agree = int((ga == ra).sum())
        true_dis = int(((ga != ra) & (gap > 2 * bounds.max(axis=1))).sum())
        return Comparison(name, max_abs, agree, len(ga), true_dis, bound, worst)
    return Comparison(name, max_abs, 0, 0, 0, bound, worst)


@dataclasses.dataclass
class CheckReport:
    comparisons: list[Comparison]
    samples: int
    engine: str  # path used, or why it was skipped
    tolerance: float

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.comparisons)

    def text(self) -> str:
        lines = [f"check on {self.samples} samples against the graph evaluated in float64; bound per output element: "
                 f"|diff| <= {self.tolerance:g} * max(1, sum |w.x| its sums reach), and argmax equal wherever the "
                 f"reference's top-2 gap exceeds twice that; engine: {self.engine}"]
        lines += [c.line() for c in self.comparisons]
        lines.append("check passed" if self.ok else "CHECK FAILED")
        return "\n".join(lines)


def check_batch(graph: dict, count: int = 256, seed: int = 0, data: str | None = None) -> np.ndarray:
    """Inputs for the check: the first `count` samples of an IDX file, else seeded random ones."""
    shape = tuple(graph["input"]["shape"])
    if data:
        x = datasets.read_idx(data)[:count]
        x = x.reshape((len(x),) + shape)
        return x
    rng = np.random.default_rng(seed)
    if graph["input"]["dtype"] == "uint8":
        return rng.integers(0, 256, size=(count,) + shape, dtype=np.uint8)
    return rng.standard_normal((count,) + shape).astype(np.float32)


def check(model_path: pathlib.Path, batch: np.ndarray, source: Callable[[np.ndarray], np.ndarray] | None,
          *, tolerance: float = DEFAULT_TOLERANCE, use_engine: bool = True) -> CheckReport:
    """Runs the source (if any), the reference interpreter in float32 and float64, and the engine's
    reference backend (if built) on `batch`; compares each float32 result of the first output with
    the float64 one, bounded per element by the magnitude its sums reach (`element_bounds`)."""
    import torch
    model = read_model(model_path)
    ref_module = model_to_torch(model)
    with torch.no_grad():
        xt = torch.from_numpy(np.ascontiguousarray(batch))
        ref32 = _first(ref_module(xt)).numpy()
        mag = _first(ref_module.magnitude_copy()(xt)).numpy()
        ref64 = _first(ref_module.to(torch.float64)(xt)).numpy()
    comps = [compare("reference f32 vs reference f64", ref32, ref64, tolerance, mag)]
    if source is not None:
        src = source(batch)
        comps.insert(0, compare("source (PyTorch) vs reference f64", src, ref64, tolerance, mag))
    engine_note = "skipped (--no-engine)"
    if use_engine:
        engine = engine_binary()
        if engine is None:
            engine_note = f"not built (no $ENGINE_BIN, nor any of {', '.join(ENGINE_CANDIDATES)}): skipped"
        elif model.graph["input"]["dtype"] != "uint8":
            engine_note = f"{engine}: skipped, it reads uint8 data files and this input is float32"
        else:
            with tempfile.TemporaryDirectory() as tmp:
                data = pathlib.Path(tmp) / "batch.idx"
                c = batch.shape[1]
                datasets.write_idx(data, batch[:, 0] if c == 1 else batch)
                out = pathlib.Path(tmp) / "out.npy"
                run_engine(engine, model_path, data, out)
                eng = np.load(out)
            comps.append(compare("engine cpu vs reference f64", eng, ref64, tolerance, mag))
            engine_note = str(engine)
    return CheckReport(comps, len(batch), engine_note, tolerance)


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def model_to_torch(model: Model):
    from .model_format import to_torch
    return to_torch(model).eval()


def torch_source(module, graph: dict) -> Callable[[np.ndarray], np.ndarray]:
    """Runs `module` the way the exported graph sees data: preprocess without the pad (the module's
    leading padding layers add it), in float32 on the CPU."""
    import torch
    unpadded = dict(graph)
    if graph["input"]["dtype"] == "uint8":
        inp = dict(graph["input"])
        pre = dict(inp["preprocess"])
        pre["pad"] = [0, 0, 0, 0]
        inp["preprocess"] = pre
        unpadded["input"] = inp

    def run(batch: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(preprocess_numpy(unpadded, batch))
        with torch.no_grad():
            return _first(module.eval()(x)).to(torch.float32).numpy()
    return run


def check_export(graph: dict, tensors: dict[str, np.ndarray], source: Callable[[np.ndarray], np.ndarray] | None,
                 batch_for: Callable[[dict], np.ndarray], *, tolerance: float = DEFAULT_TOLERANCE,
                 use_engine: bool = True, producer: str = "tools/export", log=print) -> CheckReport:
    """Writes the model into a scratch folder and checks it there (the report is logged). A source
    runner with a `label` attribute (import_common.labeled) is named by it instead of PyTorch."""
    with tempfile.TemporaryDirectory() as tmp:
        scratch = pathlib.Path(tmp) / f"{graph['name']}.json"
        graph = dict(graph, weights={"file": scratch.with_suffix(".safetensors").name, "sha256": "0" * 64})
        try:
            write_model(scratch, graph, tensors, producer=producer)
        except ModelFormatError as e:
            raise ExportError(f"the exported graph is not valid format v1: {e}") from None
        report = check(scratch, batch_for(graph), source, tolerance=tolerance, use_engine=use_engine)
    label = getattr(source, "label", None)
    if label:
        for c in report.comparisons:
            c.name = c.name.replace("(PyTorch)", f"({label})")
    log(report.text())
    return report


def export_checked(out_path: str | os.PathLike, graph: dict, tensors: dict[str, np.ndarray],
                   source: Callable[[np.ndarray], np.ndarray] | None, batch_for: Callable[[dict], np.ndarray],
                   *, tolerance: float = DEFAULT_TOLERANCE, use_engine: bool = True,
                   producer: str = "tools/export", log=print) -> tuple[Model, CheckReport]:
    """Checks the model (check_export) and only when the check passes writes it to `out_path` (so a
    failed export leaves any earlier model in place)."""
    out_path = pathlib.Path(out_path)
    graph = dict(graph)
    graph["weights"] = {"file": out_path.with_suffix(".safetensors").name, "sha256": "0" * 64}
    report = check_export(graph, tensors, source, batch_for, tolerance=tolerance, use_engine=use_engine,
                          producer=producer, log=log)
    if not report.ok:
        raise ExportError(f"numerical check failed; {out_path} was not written")
    model = write_model(out_path, graph, tensors, producer=producer)
    return model, report
