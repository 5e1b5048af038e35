"""cnnengine: the CNN engine from Python.

The engine itself (a compiled extension, installed by `pip install .`):

    import cnnengine
    cnnengine.backends()                       # what is built in, and whether each can run here
    m = cnnengine.load("models/lenet5.json")   # backend=None: the best available, as `engine run`
    probabilities = m.run(images)              # uint8 [N, H, W] or [N, C, H, W] -> float32 [N, classes]
    classes = m.predict(images)

and the pure-Python side, which needs no compiled code: model format v1 I/O (model_format), a
PyTorch reference interpreter, the seeds' LeNet-5, dataset readers, the exporters (export,
keras_import, onnx_import) and the inference server (serve, serving). The wheel's console scripts: `engine`
(the engine command shipped in cnnengine/bin), `cnnengine-export` and `cnnengine-serve`.
"""
_RUNTIME_NAMES = ("load", "backends", "Model", "EngineError")
__all__ = list(_RUNTIME_NAMES)


def __getattr__(name):
    # Loaded on first use: the exporters and the format tools import this package on machines (and
    # in environments) where the extension was never built.
    if name in _RUNTIME_NAMES:
        from . import runtime
        return getattr(runtime, name)
    raise AttributeError(f"module 'cnnengine' has no attribute {name!r}")
