"""Where a dataset comes from is asked of its source (lerobot_zarr.sources), never switched on elsewhere: outside
sources/ (and hub/, the Hub's own I/O), no comparison of a source's kind with a kind's name, no Hub reader built,
no revision resolved, no HF_HUB_OFFLINE rule applied, no import of the Hub's reader or revisions."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "lerobot_zarr"
SOURCE_KINDS = {"hub", "local", "folder", "store", "bucket"}  # kinds and the record kinds they write
OWN = ("sources", "hub")  # the parts that may know the kinds and the Hub's reader
CALLS = {"HubFiles", "resolve_revision", "is_offline_mode", "read_ref", "record_ref"}
MODULES = ("lerobot_zarr.hub.files", "lerobot_zarr.hub.revisions", ".hub.files", ".hub.revisions", "..hub.files",
           "..hub.revisions")


def _mentions_kind(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "kind" or isinstance(sub, ast.Name) and sub.id == "kind":
            return True
        if isinstance(sub, ast.Constant) and sub.value == "kind":
            return True
    return False


def _kind_names(node: ast.AST) -> set[str]:
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {v.value for v in values if isinstance(v, ast.Constant) and v.value in SOURCE_KINDS}


def switches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = set().union(*(_kind_names(s) for s in sides))
            if names and any(_mentions_kind(s) for s in sides):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: compares a kind with {sorted(names)}")
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in CALLS:
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: calls {name}")
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if module in MODULES or any(f"{module}.{a.name}" in MODULES for a in node.names):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: imports {module}")
    return out


def test_no_kind_switch_outside_sources():
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).parts[0] not in OWN for hit in switches(path)]
    assert not found, "ask the source (lerobot_zarr.sources) instead:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for(tmp_path):
    probe = PACKAGE / "writing" / "probe_kinds.py"
    text = ("from ..hub.files import HubFiles\n"
            "def f(state, src):\n"
            "    if state.source.get('kind') in ('hub', 'local'):\n"
            "        return HubFiles('a/b', 'c' * 40)\n"
            "    return src.kind == 'folder' or resolve_revision('a/b')\n"
            "def g(spec):\n"
            "    return spec.kind == 'numeric'\n")
    probe.write_text(text)
    try:
        hits = switches(probe)
    finally:
        probe.unlink()
    assert [h.split(": ", 1)[1] for h in hits] == [
        "imports ..hub.files", "compares a kind with ['hub', 'local']", "calls HubFiles",
        "compares a kind with ['folder']", "calls resolve_revision"], hits
