"""The `engine` console script: runs the engine command installed inside this package
(cnnengine/bin/engine, the build's own `engine`), with the same arguments.

The command draws `engine train`'s learning curve with `python -m cnnengine.plot_training`; it is
told this interpreter through ENGINE_PYTHON (unless the caller chose one), so the curve is drawn by
the Python that has the package installed."""
from __future__ import annotations

import os
import pathlib
import sys


def engine_path() -> pathlib.Path:
    """Where the wheel puts the engine command (it may be absent in a build without it)."""
    return pathlib.Path(__file__).resolve().parent / "bin" / "engine"


def main() -> int:
    engine = engine_path()
    if not engine.is_file():
        print(f"engine: {engine} is not installed with this package (reinstall cnnengine)", file=sys.stderr)
        return 127
    os.environ.setdefault("ENGINE_PYTHON", sys.executable)
    os.execv(str(engine), [str(engine), *sys.argv[1:]])
    return 127  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
