"""Sources on this machine: a store folder (opened as it is) and a LeRobot dataset folder (transcoded into the
cache's ``local/<name>-<key>`` store, keyed by its path and a fingerprint of its files: a folder whose files change
gets a new store)."""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..cloud.urls import is_bucket_url
from ..errors import ArgumentError, NotMaterializedError
from ..lerobot.source_files import LocalFiles, is_lerobot_folder
from ..store.state import has_commit_point
from .base import Source, register
from .home import cache_home

__all__ = ["StoreSource", "FolderSource", "near_miss", "is_url", "keyed_cache_path"]


def is_url(spec: Any) -> bool:
    """Whether ``spec`` is written as a URL (``scheme://``) rather than a path."""
    return isinstance(spec, str) and "://" in spec


def _local_path(spec: str | os.PathLike) -> Path | None:
    return None if is_url(spec) or is_bucket_url(spec) else Path(spec).expanduser()


def near_miss(path: Path) -> str:
    """``"; did you mean X?"`` for a folder next to ``path`` whose name is close to its name, else ``""``."""
    try:
        names = [entry.name for entry in os.scandir(path.parent) if entry.is_dir()]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.75)
    return f"; did you mean {path.parent / close[0]}?" if close else ""


def keyed_cache_path(folder: str, record: Mapping[str, Any], where: str) -> Path:
    """``<cache>/<folder>/<name>-<key>``: the store of a source whose record names it by ``record[where]`` (a path,
    a URL) and its content by ``record["fingerprint"]``: a source whose files change gets a new store, two sources
    never share one."""
    key = hashlib.sha256(f"{record[where]}\0{record['fingerprint']}".encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(record[where]).rstrip("/").rsplit("/", 1)[-1]) or "dataset"
    return cache_home() / folder / f"{name}-{key}"


def _no_revision(path: Path, revision: str | None, what: str) -> None:
    if revision is not None:
        raise ArgumentError(f"{path}: revision={revision!r} applies to Hub repositories, not to a local {what}")


@register
class StoreSource(Source):
    """A store folder on this machine."""

    kind = "store"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()

    @classmethod
    def guess_can_open(cls, spec: str | os.PathLike) -> bool:
        path = _local_path(spec)
        return path is not None and has_commit_point(path)

    @classmethod
    def open(cls, spec, *, revision=None, token=None, options=None) -> StoreSource:
        source = cls(spec)
        _no_revision(source.path, revision, "store")
        return source

    def store(self) -> Path:
        return self.path

    def __str__(self) -> str:
        return str(self.path)


@register
class FolderSource(Source):
    """A LeRobot dataset folder (v3.x or v2.x: ``meta/info.json``) on this machine."""

    kind = "folder"
    record_kind = "local"
    cache_folder = "local"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()

    @classmethod
    def guess_can_open(cls, spec: str | os.PathLike) -> bool:
        path = _local_path(spec)
        return path is not None and is_lerobot_folder(path)

    @classmethod
    def open(cls, spec, *, revision=None, token=None, options=None) -> FolderSource:
        source = cls(spec)
        _no_revision(source.path, revision, "folder")
        return source

    def files(self) -> LocalFiles:
        return LocalFiles(self.path)

    def cache_path(self) -> Path:
        return keyed_cache_path(self.cache_folder, self.dataset().record(), "path")

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, token: str | bool | None = None) -> FolderSource:
        path = Path(str(record.get("path", "")))
        if not is_lerobot_folder(path):
            raise NotMaterializedError(f"the source folder {record.get('path')!r} of this store is not available "
                                       f"(moved or deleted) to transcode more of its episodes")
        return cls(path)

    @classmethod
    def describe(cls, record: Mapping[str, Any]) -> str:
        return f"LeRobot folder {record.get('path')}"

    @classmethod
    def cache_entry(cls, path, record):
        return (str(record.get("path", "")) if record else ""), None, ()

    @classmethod
    def prune_reason(cls, path: Path, record: Mapping[str, Any], refs: tuple[str, ...]) -> str | None:
        from ..lerobot.source import LeRobotSource

        folder = Path(str(record.get("path", "")))
        if not is_lerobot_folder(folder):
            return f"its source folder {folder} is gone"
        try:
            current = keyed_cache_path(cls.cache_folder, LeRobotSource(folder).record(), "path")
        except (OSError, ValueError) as exc:
            return f"its source folder {folder} is unreadable ({exc})"
        if current.name != path.name.partition("+")[0]:
            return f"its source folder {folder} changed since (now {current.name})"
        return None

    def __str__(self) -> str:
        return str(self.path)
