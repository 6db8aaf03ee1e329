"""The package's architecture: the layers are the folders, and imports point down them.

- ``lerobot_zarr/`` holds at most 8 top-level modules and at least 5 subpackages besides ``testing/``, each with an
  ``__init__.py`` whose ``__all__`` is its face; no module is over 800 lines.
- No import hook: nothing in the package touches ``sys.meta_path`` / ``sys.path_hooks`` (zarr finds our codecs
  through the entry points ``pyproject.toml`` declares).
- A *part* is a subpackage or a top-level module. Parts import only parts of lower layers (or of their own), in the
  order of ``LAYERS``, and the parts form no cycle. Every import counts: at module level, inside a function (a
  deferred import is still a dependency) and under ``if TYPE_CHECKING:`` (a type is a dependency too). The faces
  (``FACES``: top-level modules that only re-export) are a layer of their own, above what they gather. The only
  exceptions are named, with their reasons: the convenience methods that reach a higher layer through an import
  inside the method (``UPWARD_CALLS``).
- Heavy imports wait until they are needed.
"""

from __future__ import annotations

import ast
import importlib
import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lerobot_zarr"
REPO = PACKAGE.parent

MAX_TOP_MODULES = 8
MIN_SUBPACKAGES = 5  # besides testing/
MAX_LINES = 800

# The faces: top-level modules that only gather and re-export names for users. They sit above every part they
# gather from and below the parts that use the public API (testing, cli); no other part imports them (import the
# module that defines the name).
FACES = {
    "lerobot_zarr": "the package's public names (lerobot_zarr.__all__)",
    "torch": "import lerobot_zarr.torch, as the README shows it (integrations.torch)",
    "rl": "import lerobot_zarr.rl (integrations.rl)",
    "frame_codecs": "import lerobot_zarr.frame_codecs, the codecs' public home (cameras.frame_codecs)",
}

# Lowest first; parts on one line are one layer (they may import each other, without a cycle).
LAYERS = [
    ("errors",),
    ("utils",),
    ("cameras",),
    ("lerobot",),
    ("hub", "store", "cloud"),
    ("sources",),  # where a dataset comes from: each kind of source (streams, the transcode ask them)
    ("sampling",),
    ("writing",),
    ("api",),
    ("mixtures", "integrations"),
    tuple(FACES),
    ("testing",),
    ("cli",),
    ("__main__",),
]

# (method, module it imports) -> why. A dataset's convenience method may reach a higher layer with an import
# inside the method (as xarray's Dataset.to_zarr does), so that a reader never loads the writer, the Hub
# publisher or xarray until it is asked to.
UPWARD_CALLS = {
    ("to_lerobot", "lerobot_zarr.writing.export"): "ds.to_lerobot(path): the exporter is built on the reader",
    ("push", "lerobot_zarr.writing.export"): "ds.push(repo_id): exports and publishes, built on the reader",
    ("to_xarray", "lerobot_zarr.integrations.xarray"): "ds.to_xarray(): the xarray view is built on the reader",
    ("verify", "lerobot_zarr.writing.integrity"): "ds.verify(): re-reads the store and may repair it (a writer)",
    ("push_store", "lerobot_zarr.writing.sync"): "ds.push_store(url): publishes the store to a bucket",
}

# Finer than the layers, for what a module costs or means: a reader never loads the LeRobot source reader
# (pyarrow), the Hub client or a writer; the writer does not transcode or export; the transcoder does not use the
# reader or the writer. Imports under TYPE_CHECKING are left out here (they load nothing).
APART = {
    "lerobot_zarr.store.state": ("lerobot_zarr.lerobot.source", "lerobot_zarr.hub"),
    "lerobot_zarr.hub.files": ("lerobot_zarr.lerobot.source", "lerobot_zarr.store"),
    "lerobot_zarr.hub.http": ("lerobot_zarr.lerobot.source", "lerobot_zarr.store"),
    "lerobot_zarr.hub.revisions": ("lerobot_zarr.lerobot.source", "lerobot_zarr.store"),
    "lerobot_zarr.sampling.dataset": ("lerobot_zarr.lerobot.source", "lerobot_zarr.hub"),
    "lerobot_zarr.writing.writer": ("lerobot_zarr.lerobot.source", "lerobot_zarr.hub", "lerobot_zarr.writing.transcode",
                                    "lerobot_zarr.writing.export"),
    "lerobot_zarr.writing.transcode": ("lerobot_zarr.sampling.dataset", "lerobot_zarr.writing.writer",
                                       "lerobot_zarr.writing.export"),
    "lerobot_zarr.writing.export": ("lerobot_zarr.writing.transcode",),
}

HOOKS = {"meta_path", "path_hooks", "path_importer_cache"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


FILES = sorted(PACKAGE.rglob("*.py"))
MODULES = {module_name(p): p for p in FILES}


def part_of(module: str) -> str:
    """``lerobot_zarr.store.state`` -> ``store``; ``lerobot_zarr.api`` -> ``api``; the package itself -> its name."""
    names = module.split(".")
    return names[1] if len(names) > 1 else names[0]


def rank(part: str) -> int | None:
    """The layer of a part (0 lowest), None for a part in no layer."""
    return next((i for i, layer in enumerate(LAYERS) if part in layer), None)


def layer_name(part: str) -> str:
    return ", ".join(LAYERS[rank(part)])  # type: ignore[index]


@dataclass(frozen=True)
class Import:
    path: Path
    line: int
    code: str  # the import statement as written
    module: str  # the importing module
    target: str  # the package module imported
    function: str | None  # the enclosing function's qualified name (a deferred import), else None
    type_checking: bool  # under ``if TYPE_CHECKING:``

    def where(self) -> str:
        kind = ("under TYPE_CHECKING" if self.type_checking else "") or (
            f"inside {self.function}()" if self.function else "at module level")
        code = self.code if len(self.code) <= 100 else self.code[:96] + " ..."
        return f"{self.path.relative_to(REPO)}:{self.line}: `{code}` ({kind})"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.AST, package: str) -> list[str]:
    """The package modules an import statement (or ``importlib.import_module("lerobot_zarr...")``) loads; a name
    imported from a package is the submodule when one exists, else the package."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")[:len(package.split(".")) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        subs = [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in MODULES]
        names = subs if len(subs) == len(node.names) else [source, *subs]
    elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str) and (
              (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
              or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
        names = [node.args[0].value]
    else:
        return []
    out = []
    for name in names:
        while name and name not in MODULES:  # `import lerobot_zarr.x.y` of a name that is no module: its module
            name = name.rpartition(".")[0]
        if name.startswith("lerobot_zarr"):
            out.append(name)
    return out


def imports_of(path: Path, source: str | None = None) -> list[Import]:
    """Every import of a package module in ``path`` (or in ``source``, as if it were that file), wherever it is
    written."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    source = path.read_text() if source is None else source
    out: list[Import] = []

    def visit(node: ast.AST, scope: list[str], function: str | None, type_checking: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, scope, function, True)
            for child in node.orelse:
                visit(child, scope, function, type_checking)
            return
        for target in _targets(node, package):
            if target != module:
                code = " ".join((ast.get_source_segment(source, node) or ast.unparse(node)).split())
                out.append(Import(path, node.lineno, code, module, target, function, type_checking))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
            if not isinstance(node, ast.ClassDef):
                function = ".".join(scope)
        for child in ast.iter_child_nodes(node):
            visit(child, scope, function, type_checking)

    visit(ast.parse(source, str(path)), [], None, False)
    return out


IMPORTS = [i for p in FILES for i in imports_of(p)]


def upward_call(i: Import) -> str | None:
    """The reason an import is an allowed upward call, or None."""
    if i.function is None or i.type_checking:
        return None
    for (method, target), why in UPWARD_CALLS.items():
        if i.function.rpartition(".")[2] == method and (i.target == target or i.target.startswith(target + ".")):
            return why
    return None


def find_cycles(edges: dict[str, dict[str, list[Import]]]) -> list[str]:
    """One line per cycle found by a depth-first walk, then the imports behind each of its arrows."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, {})):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    lines = []
    for cycle in cycles:
        lines.append("cycle: " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            shown = edges[a][b]
            lines.extend(f"    {a} -> {b}: {i.where()}" for i in shown[:3])
            if len(shown) > 3:
                lines.append(f"    {a} -> {b}: ... and {len(shown) - 3} more")
    return lines


def test_at_most_eight_top_level_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, (f"lerobot_zarr/ holds {len(top)} top-level modules (at most "
                                         f"{MAX_TOP_MODULES}): {top}; move some into the subpackage of their layer")


def test_subpackages_have_a_face():
    """At least five subpackages besides testing/, each with an ``__init__.py`` that defines ``__all__``, whose
    names all exist."""
    packages = sorted(p.parent for p in PACKAGE.glob("*/__init__.py"))
    folders = sorted(p for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py")))
    problems = [f"lerobot_zarr/{f.name}/ has no __init__.py" for f in folders if f not in packages]
    assert len([p for p in packages if p.name != "testing"]) >= MIN_SUBPACKAGES, (
        f"only {[p.name for p in packages]}: at least {MIN_SUBPACKAGES} subpackages besides testing/")
    for folder in packages:
        if folder.name == "testing":
            continue
        init = folder / "__init__.py"
        tree = ast.parse(init.read_text())
        defined = any(isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and "__all__" in [
            t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)]
            for n in tree.body)
        if not defined:
            problems.append(f"{init.relative_to(REPO)} does not define __all__ (its face: what the part offers)")
            continue
        face = importlib.import_module(module_name(init))
        missing = []
        for name in face.__all__:
            try:
                getattr(face, name)
            except ImportError:  # a lazy name whose optional extra is not installed: it exists
                pass
            except AttributeError:
                missing.append(name)
        if missing:
            problems.append(f"{init.relative_to(REPO)}: __all__ names {missing}, which it does not define")
    assert not problems, "\n".join(problems)


def test_no_module_over_800_lines():
    long = {p: len(p.read_text().splitlines()) for p in FILES}
    over = [f"{p.relative_to(REPO)}: {n} lines" for p, n in sorted(long.items()) if n > MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines (split them, one job per module):\n" + "\n".join(over)


def test_no_import_hook():
    """Nothing patches Python's import system (``sys.meta_path``, ``sys.path_hooks``): zarr loads our codecs through
    the ``zarr.codecs`` entry points, and importing lerobot_zarr changes nothing else."""
    found = []
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in HOOKS and (
                    isinstance(node.value, ast.Name) and node.value.id == "sys"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: sys.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "sys":
                hooks = sorted(HOOKS & {a.name for a in node.names})
                found.extend(f"{path.relative_to(REPO)}:{node.lineno}: from sys import {h}" for h in hooks)
    assert not found, "an import hook in the package:\n" + "\n".join(found)


def test_every_part_has_a_layer():
    unknown = sorted({part_of(m) for m in MODULES if rank(part_of(m)) is None})
    assert not unknown, f"parts in no layer: {unknown} (put them in LAYERS, or in the part they belong to)"


def test_imports_point_down_the_layers():
    """A part imports only parts of its own layer or below (every import counts, deferred and TYPE_CHECKING ones
    too); the few allowed upward calls are the named ones."""
    bad = []
    for i in IMPORTS:
        src, dst = part_of(i.module), part_of(i.target)
        if None in (rank(src), rank(dst)):
            continue  # test_every_part_has_a_layer names it
        elif src != dst and rank(dst) > rank(src) and not upward_call(i):
            face = f" (a face: {FACES[dst]}; import the module that defines the name)" if dst in FACES else ""
            bad.append(f"{i.where()}: {src} (layer '{layer_name(src)}') imports {i.target} (layer "
                       f"'{layer_name(dst)}'), a layer above it{face}")
    assert not bad, f"{len(bad)} imports point up the layers:\n" + "\n".join(bad)


def test_no_import_cycle_between_parts():
    """The parts' import graph (the named upward calls left out) has no cycle, counting every import."""
    edges: dict[str, dict[str, list[Import]]] = {}
    for i in IMPORTS:
        src, dst = part_of(i.module), part_of(i.target)
        if src == dst or upward_call(i):
            continue
        edges.setdefault(src, {}).setdefault(dst, []).append(i)
    lines = find_cycles(edges)
    assert not lines, "import cycles between parts:\n" + "\n".join(lines)


def test_no_import_cycle_between_modules():
    """Inside a part too, modules form no cycle, counting every import but the named upward calls (a cycle hidden
    behind TYPE_CHECKING is a design knot all the same: two modules that need each other are one job, or miss a
    third module)."""
    edges: dict[str, dict[str, list[Import]]] = {}
    for i in IMPORTS:
        if upward_call(i):
            continue
        edges.setdefault(i.module, {}).setdefault(i.target, []).append(i)
    lines = find_cycles(edges)
    assert not lines, "import cycles between modules:\n" + "\n".join(lines)


def test_modules_kept_apart():
    """The finer rules of ``APART`` (module-level and deferred imports; each module named there exists)."""
    bad = [f"APART names {m}, which is no module any more: update the rule" for m in APART if m not in MODULES]
    for i in IMPORTS:
        for far in APART.get(i.module, ()):
            if not i.type_checking and (i.target == far or i.target.startswith(far + ".")):
                bad.append(f"{i.where()}: {i.module} must not load {far}")
    assert not bad, "\n".join(bad)



def test_the_import_finder_sees_every_kind_of_import():
    """The finder the tests above rely on: relative, submodule, TYPE_CHECKING, deferred and importlib imports are
    found, with their line and enclosing function."""
    text = ("from typing import TYPE_CHECKING\nfrom .. import errors\nfrom ..store import state, StoreState\n"
            "if TYPE_CHECKING:\n    from ..writing.writer import WritableDataset\n"
            "class D:\n    def push(self):\n        from ..writing.export import push\n"
            "def f():\n    import lerobot_zarr.api\n    importlib.import_module('lerobot_zarr.sources.resolve')\n")
    imports = imports_of(PACKAGE / "sampling" / "probe.py", text)
    found = [(i.line, i.target, i.function, i.type_checking) for i in imports]
    assert [i.line for i in imports if upward_call(i)] == [8]  # D.push's export; f's imports are no named call
    assert found == [
        (2, "lerobot_zarr.errors", None, False), (3, "lerobot_zarr.store", None, False),
        (3, "lerobot_zarr.store.state", None, False), (5, "lerobot_zarr.writing.writer", None, True),
        (8, "lerobot_zarr.writing.export", "D.push", False), (10, "lerobot_zarr.api", "f", False),
        (11, "lerobot_zarr.sources.resolve", "f", False)]


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
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.strip() == "[] []", out

