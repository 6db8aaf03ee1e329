"""The package's import graph: no cycles inside ``lerobot_zarr/`` (imports inside functions count: a deferred
import is still a dependency), and data flows one way, source -> transcode -> store -> sampler -> export."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lerobot_zarr"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" or (
        isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere but under ``if TYPE_CHECKING:``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("lerobot_zarr"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("lerobot_zarr"):
                out.add(target)
                out.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in out if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    files = [p for p in PACKAGE.rglob("*.py")]
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) - {"lerobot_zarr"} for p in files}


def test_the_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_data_flows_one_way():
    """Lower layers never import higher ones (the package's ``__init__`` may import anything)."""
    g = graph()
    forbidden = {
        "lerobot_zarr.store": {"dataset", "writer", "transcode", "source", "hub", "export", "api", "analysis"},
        "lerobot_zarr.source": {"store", "dataset", "writer", "transcode", "export", "api"},
        "lerobot_zarr.hub": {"source", "store", "dataset", "writer", "transcode", "export", "api"},
        "lerobot_zarr.transcode": {"dataset", "writer", "export", "api", "analysis"},
        "lerobot_zarr.dataset": {"api", "export", "analysis", "writer", "transcode", "source", "hub"},
        "lerobot_zarr.writer": {"api", "export", "transcode", "source", "hub"},
        "lerobot_zarr.export": {"api", "transcode"},
    }
    for module, layers in forbidden.items():
        bad = {m for m in g.get(module, ()) if m.rsplit(".", 1)[-1] in layers}
        assert not bad, f"{module} imports {sorted(bad)}, a layer built on it"
