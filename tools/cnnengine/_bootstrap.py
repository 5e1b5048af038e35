"""Lets the thin scripts run from any shell: when the running Python lacks the tools' packages and
the repository's .venv has them, re-executes the script with the venv's Python."""
import os
import pathlib
import sys


def ensure_venv(script: str, needs=("numpy", "safetensors", "torch")) -> None:
    """`needs`: the modules the script imports; the first one missing triggers the re-exec."""
    import importlib
    try:
        for module in needs:
            importlib.import_module(module)
        return
    except ImportError as e:
        missing = e.name
    venv = pathlib.Path(script).resolve().parent.parent / ".venv"
    venv_python = venv / "bin" / "python"
    # sys.prefix, not the executable, tells a venv apart: its python is a link to the system one.
    if venv_python.exists() and pathlib.Path(sys.prefix).resolve() != venv.resolve() \
            and not os.environ.get("CNNENGINE_REEXEC"):
        os.environ["CNNENGINE_REEXEC"] = "1"  # one attempt only, never a loop
        os.execv(str(venv_python), [str(venv_python), script, *sys.argv[1:]])
    sys.exit(f"{pathlib.Path(script).name}: Python package '{missing}' is missing; run tools/setup.sh "
             f"or pip install -r tools/requirements.txt")
