"""torch.nn.Module that interprets a format-v1 graph (see model_format.to_torch).

Kept apart from model_format so that reading and writing models does not import torch; the module
is given the graph already validated and ordered (model_format.to_torch does that), so it imports
nothing of model_format.
Native torch ops are used wherever their padding rules coincide with the spec's (symmetric padding
of at most half the kernel), so the module is a fair PyTorch baseline for benchmarks; the other
cases pad explicitly first, which is exact for every file the spec admits.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


def _native_padding(kernel, padding):
    """(ph, pw) when torch's own symmetric padding gives the spec's result, else None."""
    t, b, l, r = padding
    if t == b and l == r and t <= kernel[0] // 2 and l <= kernel[1] // 2:
        return (t, l)
    return None


class Conv2d(nn.Module):
    def __init__(self, attrs, weight, bias):
        super().__init__()
        self.stride = tuple(attrs.get("stride", [1, 1]))
        self.padding = list(attrs.get("padding", [0, 0, 0, 0]))
        self.weight = nn.Parameter(torch.from_numpy(weight.copy()), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(torch.from_numpy(bias.copy()), requires_grad=False)

    def forward(self, x):
        t, b, l, r = self.padding
        if t == b and l == r:
            return F.conv2d(x, self.weight, self.bias, self.stride, (t, l))
        return F.conv2d(F.pad(x, (l, r, t, b)), self.weight, self.bias, self.stride)


class Dense(nn.Module):
    def __init__(self, weight, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.from_numpy(weight.copy()), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(torch.from_numpy(bias.copy()), requires_grad=False)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class AvgPool(nn.Module):
    def __init__(self, attrs):
        super().__init__()
        self.kernel = tuple(attrs["kernel"])
        self.stride = tuple(attrs.get("stride", attrs["kernel"]))
        self.padding = list(attrs.get("padding", [0, 0, 0, 0]))
        self.count_include_pad = bool(attrs["count_include_pad"])
        self.native = _native_padding(self.kernel, self.padding)

    def forward(self, x):
        if self.native is not None:
            return F.avg_pool2d(x, self.kernel, self.stride, self.native,
                                count_include_pad=self.count_include_pad)
        t, b, l, r = self.padding
        mean = F.avg_pool2d(F.pad(x, (l, r, t, b)), self.kernel, self.stride)
        if self.count_include_pad:
            return mean
        # Divide the window sum by the number of window positions inside the input.
        ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
        inside = F.avg_pool2d(F.pad(ones, (l, r, t, b)), self.kernel, self.stride)
        return mean / inside


class MaxPool(nn.Module):
    def __init__(self, attrs):
        super().__init__()
        self.kernel = tuple(attrs["kernel"])
        self.stride = tuple(attrs.get("stride", attrs["kernel"]))
        self.padding = list(attrs.get("padding", [0, 0, 0, 0]))
        self.native = _native_padding(self.kernel, self.padding)

    def forward(self, x):
        if self.native is not None:
            return F.max_pool2d(x, self.kernel, self.stride, self.native)
        t, b, l, r = self.padding
        return F.max_pool2d(F.pad(x, (l, r, t, b), value=float("-inf")), self.kernel, self.stride)


class Elementwise(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, *xs):
        op, x = self.op, xs[0]
        if op == "identity":
            return x
        if op == "relu":
            return torch.relu(x)
        if op == "tanh":
            return torch.tanh(x)
        if op == "sigmoid":
            return torch.sigmoid(x)
        if op == "flatten":
            return x.reshape(x.shape[0], -1)
        if op == "softmax":
            return torch.softmax(x, dim=1)
        if op == "add":
            return x + xs[1]
        if op == "concat":
            return torch.cat(xs, dim=1)  # the first per-sample dimension: channels or features
        raise AssertionError(op)

    def extra_repr(self):
        return self.op


class ScaleShift(nn.Module):
    """y = x * scale[c] + shift[c], c the first per-sample dimension (dim 1 of the batch)."""

    def __init__(self, scale, shift):
        super().__init__()
        self.scale = nn.Parameter(torch.from_numpy(scale.copy()), requires_grad=False)
        self.shift = nn.Parameter(torch.from_numpy(shift.copy()), requires_grad=False)

    def forward(self, x):
        view = (1, -1) + (1,) * (x.dim() - 2)
        return x * self.scale.reshape(view) + self.shift.reshape(view)


class Preprocess(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.is_uint8 = spec["dtype"] == "uint8"
        if self.is_uint8:
            pre = spec["preprocess"]
            c = spec["shape"][0]
            self.scale = float(pre["scale"])
            # Kept as float32 values in buffers so that .to(device) moves them; .double() would
            # widen them, which is exact, and forward narrows them back.
            self.register_buffer("mean", torch.tensor(pre["mean"], dtype=torch.float32).reshape(1, c, 1, 1))
            self.register_buffer("std", torch.tensor(pre["std"], dtype=torch.float32).reshape(1, c, 1, 1))
            t, b, l, r = pre.get("pad", [0, 0, 0, 0])
            self.pad = (l, r, t, b)
            self.pad_value = float(torch.tensor(pre.get("pad_value", 0.0), dtype=torch.float32))
        # Follows the module's dtype under .to()/.double(), so forward knows what to widen to.
        self.register_buffer("probe", torch.zeros((), dtype=torch.float32))

    absolute = False  # magnitude_copy: the absolute values of the preprocessed input

    def forward(self, x):
        if not self.is_uint8:
            return (x.abs() if self.absolute else x).to(self.probe.dtype)
        # The spec fixes this arithmetic as float32, whatever the compute dtype of the nodes.
        y = (x.to(torch.float32) * self.scale - self.mean.float()) / self.std.float()
        if any(self.pad):
            y = F.pad(y, self.pad, value=self.pad_value)
        return (y.abs() if self.absolute else y).to(self.probe.dtype)


class GraphModule(nn.Module):
    def __init__(self, graph: dict, tensors: dict, value_shapes: dict, order: list[int]):
        """`graph` and `tensors` validated (`value_shapes`: validate's result), `order` the nodes'
        topological order."""
        super().__init__()
        self.value_shapes = value_shapes
        self.input_name = graph["input"]["name"]
        self.output_names = list(graph["outputs"])
        self.preprocess = Preprocess(graph["input"])
        self.node_names, self.node_inputs = [], []
        layers = []
        for i in order:
            n = graph["nodes"][i]
            op, attrs, roles = n["op"], n.get("attrs", {}), n.get("tensors", {})
            weight = tensors[roles["weight"]] if "weight" in roles else None
            bias = tensors[roles["bias"]] if "bias" in roles else None
            if op == "conv2d":
                layers.append(Conv2d(attrs, weight, bias))
            elif op == "dense":
                layers.append(Dense(weight, bias))
            elif op == "avgpool":
                layers.append(AvgPool(attrs))
            elif op == "maxpool":
                layers.append(MaxPool(attrs))
            elif op == "scale_shift":
                layers.append(ScaleShift(tensors[roles["scale"]], tensors[roles["shift"]]))
            else:
                layers.append(Elementwise(op))
            self.node_names.append(n["name"])
            self.node_inputs.append(list(n["inputs"]))
        self.layers = nn.ModuleList(layers)
        # Values no later node reads are dropped as soon as possible, as an engine's arena would.
        last_use = {}
        for k, ins in enumerate(self.node_inputs):
            for v in ins:
                last_use[v] = k
        self._free_after = [[v for v in set(ins) if last_use[v] == k and v not in self.output_names]
                            for k, ins in enumerate(self.node_inputs)]

    def forward(self, x):
        values = {self.input_name: self.preprocess(x)}
        for layer, name, ins, free in zip(self.layers, self.node_names, self.node_inputs, self._free_after):
            values[name] = layer(*[values[v] for v in ins])
            for v in free:
                del values[v]
        outs = tuple(values[o] for o in self.output_names)
        return outs[0] if len(outs) == 1 else outs

    def magnitude_copy(self) -> "GraphModule":
        """A float64 copy that computes, for each output, the magnitude its sums reach: sum |w| |x|
        over every product (|preprocessed input|, |weights|, |biases|; activations and softmax pass
        magnitudes through, as their slopes are at most 1). fp32 rounding error grows with it."""
        m = copy.deepcopy(self).to(torch.float64)
        with torch.no_grad():
            for layer in m.layers:
                for p in layer.parameters():
                    p.abs_()
                if isinstance(layer, Elementwise) and layer.op in ("relu", "tanh", "sigmoid", "softmax"):
                    layer.op = "identity"
        m.preprocess.absolute = True
        return m

    def forward_values(self, x) -> dict:
        """Every value of the graph (for debugging a parity failure node by node)."""
        values = {self.input_name: self.preprocess(x)}
        for layer, name, ins in zip(self.layers, self.node_names, self.node_inputs):
            values[name] = layer(*[values[v] for v in ins])
        return values
