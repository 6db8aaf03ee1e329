"""One answer to "what is this source?", with the same errors everywhere.

``open_dataset``, ``inspect``, ``stream``, ``view`` and the command line all take the same ``source`` argument;
:func:`resolve_source` asks the registered kinds (:func:`~.base.kinds`) in order which can open it (a store folder,
a LeRobot folder, a bucket URL, a Hub repo id: a local path wins over a repo id of the same name) and opens it.
It makes no network request: a Hub revision, a bucket's content, are resolved by whoever reads them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SourceNotFoundError
from ..hub.http import REPO_ID, parse_repo_id
from .base import Source
from .hub import HUB_PREFIX, NOT_ORGS
from .local import is_url, near_miss
from .registry import kinds

__all__ = ["resolve_source"]


def resolve_source(source: str | os.PathLike | Source, *, revision: str | None = None,
                   token: str | bool | None = None, options: Mapping[str, Any] | None = None,
                   hub_first: bool = False) -> Source:
    """The :class:`~.base.Source` that ``source`` names: a store (a folder with a root ``zarr.json``), a LeRobot
    dataset folder (``meta/info.json``), a folder of a bucket (``s3://``, ``gs://``, ``az://``,
    ``hf://buckets/...``), or a Hub dataset repo id ``org/name`` (or ``hf://datasets/org/name``). ``org/name``
    that does not exist but is one typo away from a local folder (``datasets/G1-policy-trian`` next to
    ``datasets/G1-policy-train``), or whose ``org`` is a namespace the Hub reserves (``datasets``...), is a mistyped
    path: "no such folder; did you mean ...", never a Hub lookup.

    Raises ``SourceNotFoundError`` for an existing path that is none of these, or a string that is neither an
    existing path nor a repo id; ``ArgumentError`` (a ``ValueError``) for ``revision=`` where there are no
    revisions, and ``ValueError`` for a malformed repo id given with a revision or token, or with ``hub_first``
    (for callers whose source is usually a repo id, like ``inspect``)."""
    if isinstance(source, Source):
        return source
    for kind in kinds():
        if kind.guess_can_open(source):
            return kind.open(source, revision=revision, token=token, options=options)
    path = Path(source).expanduser()
    if is_url(source):
        raise SourceNotFoundError(f"{source}: not a source this lerobot_zarr reads (a folder, a Hub repo id "
                                  f"'org/name' or {HUB_PREFIX}org/name, or a bucket URL: s3://, gs://, az://, "
                                  f"hf://buckets/)")
    if path.exists():
        raise SourceNotFoundError(f"{path}: neither a LeRobot dataset folder (meta/info.json) nor a lerobot_zarr store")
    if isinstance(source, str) and REPO_ID.match(source) and ".." not in source:
        org = source.split("/")[0]
        if org in NOT_ORGS:
            raise SourceNotFoundError(f"{source}: no such folder{near_miss(path)} (and not a Hub repo id: "
                                      f"{org!r} is not an organisation on the Hub)")
        raise SourceNotFoundError(f"{source}: no such folder{near_miss(path)} (taken for a mistyped path, not "
                                  f"looked up on the Hub; for the Hub repo write {HUB_PREFIX}{source})")
    local = not isinstance(source, str) or source.startswith(("/", ".", "~"))  # written as a path
    if not local and (hub_first or revision is not None or token is not None):  # meant as a Hub repo
        parse_repo_id(str(source))
    if local or path.parent.is_dir() and path.parent != Path("."):
        raise SourceNotFoundError(f"{source}: no such folder{near_miss(path)}")
    raise SourceNotFoundError(f"{source}: no such folder, and not a Hub repo id of the form 'org/name'")
