"""Python side of the CNN engine: model format v1 I/O, a PyTorch reference interpreter, the
seeds' LeNet-5, dataset readers and the exporters. Imports nothing from the C++ build."""
