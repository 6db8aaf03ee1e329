"""One answer to "what is this source?": a store, a LeRobot dataset folder, or a Hub repo id.

``open_dataset``, ``inspect``, ``stream``, ``view`` and the command line all take the same ``source`` argument;
:func:`resolve_source` decides once what it names, with the same errors everywhere. It makes no network request:
a Hub source's revision is resolved by whoever reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import ArgumentError, SourceNotFoundError
from .hub.http import REPO_ID, parse_repo_id
from .lerobot.source_files import is_lerobot_folder
from .store.state import has_commit_point

__all__ = ["ResolvedSource", "resolve_source"]


@dataclass(frozen=True)
class ResolvedSource:
    """What a ``source`` argument names: ``kind`` is ``"store"``, ``"folder"`` or ``"hub"``."""

    kind: str
    path: Path | None = None  # store or folder
    repo_id: str | None = None  # Hub
    revision: str | None = None
    token: str | bool | None = None

    def __str__(self) -> str:
        if self.kind == "hub":
            return self.repo_id + (f"@{self.revision}" if self.revision else "")
        return str(self.path)


HUB_PREFIX = "hf://datasets/"  # the Hub's own spelling of a dataset repo, for a repo id that looks like a local path
_NOT_ORGS = frozenset({"api", "datasets", "models", "spaces"})  # namespaces the Hub reserves: such a name is a path


def resolve_source(source: str | os.PathLike, *, revision: str | None = None, token: str | bool | None = None,
                   hub_first: bool = False) -> ResolvedSource:
    """Decide whether ``source`` is a store (a folder with a root ``zarr.json``), a LeRobot dataset folder
    (``meta/info.json``) or a Hub dataset repo id ``org/name`` (or ``hf://datasets/org/name``); a local path wins
    over a repo id of the same name. ``org/name`` that does not exist but is one typo away from a local folder
    (``datasets/G1-policy-trian`` next to ``datasets/G1-policy-train``), or whose ``org`` is a namespace the Hub
    reserves (``datasets``...), is a mistyped path: "no such folder; did you mean ...", never a Hub lookup.

    Raises ``SourceNotFoundError`` for an existing path that is neither, or a string that is neither an existing
    path nor a repo id; ``ArgumentError`` (a ``ValueError``) for ``revision=`` on a local folder or store, and
    ``ValueError`` for a malformed repo id given with a revision or token, or with ``hub_first`` (for callers whose
    source is usually a repo id, like ``inspect``).
    """
    if isinstance(source, str) and source.startswith(HUB_PREFIX):
        return ResolvedSource("hub", repo_id=parse_repo_id(source[len(HUB_PREFIX):]), revision=revision, token=token)
    path = Path(source).expanduser()
    kind = "store" if has_commit_point(path) else "folder" if is_lerobot_folder(path) else None
    if kind is not None:
        if revision is not None:
            raise ArgumentError(f"{path}: revision={revision!r} applies to Hub repositories, not to a local {kind}")
        return ResolvedSource(kind, path=path, token=token)
    if path.exists():
        raise SourceNotFoundError(f"{path}: neither a LeRobot dataset folder (meta/info.json) nor a lerobot_zarr store")
    if isinstance(source, str) and REPO_ID.match(source) and ".." not in source:
        org = source.split("/")[0]
        if org in _NOT_ORGS:
            raise SourceNotFoundError(f"{source}: no such folder{_near_miss(path)} (and not a Hub repo id: "
                                      f"{org!r} is not an organisation on the Hub)")
        near = _near_miss(path)
        if not near:
            return ResolvedSource("hub", repo_id=source, revision=revision, token=token)
        raise SourceNotFoundError(f"{source}: no such folder{near} (taken for a mistyped path, not looked up on "
                                  f"the Hub; for the Hub repo write {HUB_PREFIX}{source})")
    local = not isinstance(source, str) or source.startswith(("/", ".", "~"))  # written as a path
    if not local and (hub_first or revision is not None or token is not None):  # meant as a Hub repo
        parse_repo_id(str(source))
    if local or path.parent.is_dir() and path.parent != Path("."):
        raise SourceNotFoundError(f"{source}: no such folder{_near_miss(path)}")
    raise SourceNotFoundError(f"{source}: no such folder, and not a Hub repo id of the form 'org/name'")


def _near_miss(path: Path) -> str:
    """``"; did you mean X?"`` for a folder next to ``path`` whose name is close to its name, else ``""``."""
    import difflib

    try:
        names = [entry.name for entry in os.scandir(path.parent) if entry.is_dir()]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.75)
    return f"; did you mean {path.parent / close[0]}?" if close else ""
