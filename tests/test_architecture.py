"""The package's import graph: no cycles inside ``lerobot_zarr/`` (imports inside functions count: a deferred
import is still a dependency), and data flows one way, source -> transcode -> store -> sampler -> export."""

from __future__ import annotations

import ast
import os
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


#: the only upward imports: a dataset's convenience methods import their implementation when called (as xarray's
#: ``Dataset.to_zarr`` does); any other upward import makes a cycle and fails
UPWARD_CALLS = {
    ("lerobot_zarr.sampling.dataset", "lerobot_zarr.writing.export"),  # ds.to_lerobot, ds.push
    ("lerobot_zarr.sampling.dataset", "lerobot_zarr.writing.integrity"),  # ds.verify
    ("lerobot_zarr.sampling.dataset", "lerobot_zarr.integrations.xarray"),  # ds.to_xarray
}


def graph() -> dict[str, set[str]]:
    files = [p for p in PACKAGE.rglob("*.py")]
    modules = {module_name(p) for p in files}
    return {name: {m for m in imports_of(p, modules) - {"lerobot_zarr"} if (name, m) not in UPWARD_CALLS}
            for p in files for name in [module_name(p)]}


def test_upward_calls_import_when_called():
    """Each allowed upward import is inside a function of its module, never at its top level."""
    for module, target in UPWARD_CALLS:
        path = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                base = module.split(".")[:-node.level] if node.level else []
                assert ".".join(base + [node.module or ""]) != target, f"{module} imports {target} at its top level"


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
        "lerobot_zarr.store.state": {"dataset", "writer", "transcode", "source", "hub", "export", "api", "analysis"},
        "lerobot_zarr.lerobot.source": {"store", "dataset", "writer", "transcode", "export", "api"},
        "lerobot_zarr.hub.client": {"source", "store", "dataset", "writer", "transcode", "export", "api"},
        "lerobot_zarr.writing.transcode": {"dataset", "writer", "export", "api", "analysis"},
        "lerobot_zarr.sampling.dataset": {"api", "export", "analysis", "writer", "transcode", "source", "hub"},
        "lerobot_zarr.writing.writer": {"api", "export", "transcode", "source", "hub"},
        "lerobot_zarr.writing.export": {"api", "transcode"},
    }
    for module, layers in forbidden.items():
        bad = {m for m in g.get(module, ()) if m.rsplit(".", 1)[-1] in layers}
        assert not bad, f"{module} imports {sorted(bad)}, a layer built on it"


def test_heavy_imports_wait_until_needed(tmp_path):
    """``import lerobot_zarr``, and opening and sampling a store, import neither pyarrow (LeRobot sources and
    exports), Pillow (resizing, PNG), zarr nor huggingface_hub (the Hub): a DataLoader worker reading a store pays
    for none of them."""
    import subprocess
    import sys

    import numpy as np

    import lerobot_zarr

    store = tmp_path / "store"
    with lerobot_zarr.create(store, fps=10, features={"observation.state": {"dtype": "float32", "shape": [3]},
                                                      "cam": {"dtype": "image", "shape": [8, 8, 3]}}) as w:
        w.add_episode({"observation.state": np.zeros((5, 3), np.float32), "cam": np.zeros((5, 8, 8, 3), np.uint8)},
                      task="t")
    heavy = ["pyarrow", "PIL", "zarr", "huggingface_hub", "lerobot_zarr.lerobot.source"]
    code = (f"import sys, lerobot_zarr\nafter_import = [m for m in {heavy!r} if m in sys.modules]\n"
            f"ds = lerobot_zarr.open_dataset({str(store)!r}, delta_timestamps={{'observation.state': [-0.1, 0]}})\n"
            f"ds[2]; ds.get_batch([0, 1]); lerobot_zarr.inspect({str(store)!r}); next(iter(lerobot_zarr.stream("
            f"{str(store)!r})))\nprint(after_import, [m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)}).stdout
    assert out.strip() == "[] []", out
