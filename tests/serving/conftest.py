"""The serving suites' fixtures, from harness.py."""
from harness import expected, images, server  # noqa: F401 - fixtures
