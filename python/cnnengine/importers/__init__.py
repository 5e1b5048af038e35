"""The importers' per-op handlers: `onnx_ops` (one function per ONNX op type) and `keras_layers`
(one per Keras layer class), each a registry that onnx_import and keras_import walk the source
graph with, and `layout` for what both share (padding, weight layouts, affine folding)."""
