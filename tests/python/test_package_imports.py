"""The cnnengine modules import one another without cycles: every relative import, at module level
or inside a function, is an edge of the graph checked here."""
import ast
import pathlib

import cnnengine

PACKAGE = pathlib.Path(cnnengine.__file__).resolve().parent


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["cnnengine", *parts])


def _imports(path: pathlib.Path, name: str, modules: set[str]) -> set[str]:
    """The package modules `path` imports (any relative or absolute import of cnnengine)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from . import x` names a submodule (the package's own __init__ runs for any
            # submodule, so it is no edge); `from .mod import x` the module, and x may be one too.
            if node.module and target in modules:
                out.add(target)
            out |= {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules}
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path, name, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "cnnengine._torch_graph" in graph["cnnengine.model_format"]  # to_torch imports it lazily
    assert "cnnengine.keras_import" in graph["cnnengine.export_cli"]


def test_no_import_cycles():
    assert cycles(import_graph()) == []
