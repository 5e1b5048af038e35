"""cnnengine: the CNN engine from Python.

    import cnnengine
    cnnengine.backends()                        # what is built in, and whether each can run here
    m = cnnengine.load("models/lenet5.json")    # backend=None: the best available, as `engine run`
    m = cnnengine.load("net.onnx", preset="mnist")  # .onnx/.keras/.h5: imported and checked on the fly
    probabilities = m.run(images)               # uint8 [N, H, W] / [N, C, H, W] / [H, W], or float32 preprocessed
    logits = m.run(images, outputs="logits")    # any node by name; a list of names gives a list
    classes = m.predict(images)

The pure-Python side needs no compiled code: model format v1 I/O (model_format), the exporters
(export: from_torch, from_onnx, from_keras), the preprocessing presets (preprocessing), dataset
readers (datasets) and the inference server (serve, serving). The wheel's console scripts: `engine`
(the engine command shipped in cnnengine/bin), `cnnengine-export` and `cnnengine-serve`.
"""
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("cnnengine")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

_RUNTIME_NAMES = ("load", "backends", "Model", "EngineError")
_SUBMODULES = ("export", "preprocessing", "model_format", "datasets")
__all__ = [*_RUNTIME_NAMES, *_SUBMODULES, "__version__"]


def __getattr__(name):
    # Loaded on first use: the exporters and the format tools import this package on machines (and
    # in environments) where the extension was never built.
    if name in _RUNTIME_NAMES:
        from . import runtime
        return getattr(runtime, name)
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'cnnengine' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
