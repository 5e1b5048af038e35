"""How raw pixels become a model's input: the named presets, and the rule that it is never guessed.

Image files and most model files do not record it, and the wrong choice costs accuracy without any
error, so an exporter takes it from the source where the source holds it (a Keras Rescaling layer,
a leading Div/Sub/Mul in ONNX, a --like graph), else from the user (a preset or scale/mean/std),
else finds it by scoring the model on labelled data under each preset; otherwise it refuses.

The engine computes (u * scale - mean[c]) / std[c] in float32 for a uint8 pixel u of channel c.
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Preset:
    formula: str
    scale: float
    mean: tuple[float, ...]  # one value (every channel) or one per channel
    std: tuple[float, ...]


PRESETS: dict[str, Preset] = {
    "mnist": Preset("(x/255 - 0.1307) / 0.3081", 1 / 255, (0.1307,), (0.3081,)),
    "imagenet": Preset("(x/255 - (0.485, 0.456, 0.406)) / (0.229, 0.224, 0.225)", 1 / 255,
                       (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "unit": Preset("x/255", 1 / 255, (0.0,), (1.0,)),
    "raw": Preset("x", 1.0, (0.0,), (1.0,)),
    "symmetric": Preset("x/127.5 - 1", 1 / 127.5, (1.0,), (1.0,)),
}


class PreprocessingError(ValueError):
    """Preprocessing that is missing, contradictory or does not fit the model's channels."""


def _per_channel(values, channels: int, what: str) -> list[float]:
    vals = [float(v) for v in values]
    if len(vals) == 1:
        vals = vals * channels
    if len(vals) != channels:
        raise PreprocessingError(f"{what} has {len(vals)} values for {channels} channel(s)")
    return vals


def preset(name: str, channels: int) -> dict:
    """The preprocess object ({scale, mean, std}) of a named preset for `channels` channels."""
    if name not in PRESETS:
        raise PreprocessingError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    p = PRESETS[name]
    return {"scale": float(np.float32(p.scale)), "mean": _per_channel(p.mean, channels, f"preset {name!r} mean"),
            "std": _per_channel(p.std, channels, f"preset {name!r} std")}


def stated(channels: int, *, preset_name=None, scale=None, mean=None, std=None, transforms=None,
           names=None) -> dict | None:
    """The preprocessing the user stated: a preset, or scale with mean (default 0) and std (default
    1); None when nothing was. mean or std without scale is refused: the scale is the choice that
    matters most (raw 0..255 values or x/255) and is never assumed. `names` maps 'preset', 'scale',
    'mean', 'std', 'transforms' to how the caller spells them in errors."""
    names = names or {k: k for k in ("preset", "scale", "mean", "std", "transforms")}
    explicit = [k for k, v in (("scale", scale), ("mean", mean), ("std", std)) if v is not None]
    if transforms is not None:
        if preset_name is not None or explicit:
            others = [names[k] for k in (["preset"] if preset_name is not None else []) + explicit]
            raise PreprocessingError(f"{names['transforms']} and {', '.join(others)} both state the preprocessing; "
                                     "give one")
        return from_torchvision(transforms, channels)
    if preset_name is not None:
        if explicit:
            raise PreprocessingError(f"{names['preset']} and {', '.join(names[k] for k in explicit)} both state "
                                     "the preprocessing; give one or the other")
        return preset(preset_name, channels)
    if not explicit:
        return None
    if scale is None:
        raise PreprocessingError(f"{', '.join(names[k] for k in explicit)} without {names['scale']}: state the "
                                 f"scale too ({names['scale']} 1 for raw 0..255 values, 0.00392156862745098 "
                                 "for x/255)")
    return {"scale": float(np.float32(scale)),
            "mean": _per_channel([0.0] if mean is None else mean, channels, names["mean"]),
            "std": _per_channel([1.0] if std is None else std, channels, names["std"])}


def from_torchvision(text: str, channels: int) -> dict:
    """{scale, mean, std} of a torchvision transform pipeline as written in Python, e.g.
    "Compose([ToTensor(), Normalize((0.1307,), (0.3081,))])" or "ToTensor(), Normalize(mean, std)":
    ToTensor / ConvertImageDtype(torch.float) divide by 255, Normalize subtracts and divides (several
    compose); PILToTensor keeps raw values. Other steps (resizing, cropping, augmentation) are refused:
    they are not per-pixel arithmetic the engine applies."""
    import ast
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise PreprocessingError(f"transforms {text!r}: not a Python expression ({e.msg})") from None
    calls: list[ast.Call] = []

    def collect(node) -> None:
        if isinstance(node, ast.Tuple) or isinstance(node, ast.List):
            for item in node.elts:
                collect(item)
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "?")
            if name == "Compose":
                for arg in node.args:
                    collect(arg)
            else:
                calls.append(node)
        else:
            raise PreprocessingError(f"transforms {text!r}: expected calls such as ToTensor() and Normalize(mean, std)")

    collect(tree.body)
    scale, mean, std, scaled = 1.0, np.zeros(channels), np.ones(channels), False
    for call in calls:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "?")
        if name in ("ToTensor", "ConvertImageDtype"):
            if scaled or np.any(mean) or np.any(std != 1):
                raise PreprocessingError(f"transforms {text!r}: {name} must come first")
            scale, scaled = 1 / 255, True
        elif name == "PILToTensor":
            continue
        elif name == "Normalize":
            kw = {k.arg: k.value for k in call.keywords}
            nodes = list(call.args) + [kw.get("mean"), kw.get("std")][len(call.args):]
            try:
                m, sd = (np.atleast_1d(np.asarray(ast.literal_eval(v), np.float64)) for v in nodes[:2])
            except (ValueError, TypeError, SyntaxError):
                raise PreprocessingError(f"transforms {text!r}: Normalize needs numbers for mean and std") from None
            m = np.asarray(_per_channel(m, channels, "Normalize mean"))
            sd = np.asarray(_per_channel(sd, channels, "Normalize std"))
            mean, std = mean + m * std, std * sd  # ((v - mean) / std - m) / sd
        else:
            raise PreprocessingError(f"transforms {text!r}: {name} is not per-pixel arithmetic the engine applies; "
                                     "give ToTensor/ConvertImageDtype and Normalize only")
    return {"scale": float(np.float32(scale)), "mean": [float(x) for x in mean], "std": [float(x) for x in std]}


def describe(pre: dict) -> str:
    """'scale 0.00392157, mean [0.1307], std [0.3081] (preset mnist)' for a preprocess object."""
    mean, std = [round(m, 6) for m in pre["mean"]], [round(s, 6) for s in pre["std"]]
    text = f"scale {pre['scale']:.6g}, mean {mean}, std {std}"
    for name in PRESETS:
        try:
            p = preset(name, len(pre["mean"]))
        except PreprocessingError:
            continue
        if p == {k: pre[k] for k in ("scale", "mean", "std")}:
            return f"{text} (preset {name})"
    return text


def missing_message(source: str, *, cli: bool) -> str:
    """The one line that refuses an export whose preprocessing nobody stated."""
    if cli:
        how = ("pass --preset " + "|".join(PRESETS) + ", --scale/--mean/--std, --transforms 'ToTensor(), "
               "Normalize(...)', or --check-data IMAGES --check-labels LABELS to pick the preset that scores best")
    else:
        how = ("pass preset=" + "|".join(repr(p) for p in PRESETS) + ", scale=/mean=/std=, or transforms=")
    return f"{source} does not record how raw pixels become its input: {how}"


def accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    """Share of rows whose argmax is the label."""
    return float((np.asarray(outputs).reshape(len(outputs), -1).argmax(1) == labels).mean()) if len(labels) else 0.0
