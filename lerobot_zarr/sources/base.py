"""Where a dataset comes from: the interface every kind of source implements, and their registry.

A *source* is what the ``source`` argument of ``open_dataset``, ``inspect``, ``stream`` and the command line names:
a store (a folder on this machine, or a folder of a bucket), or a LeRobot dataset (a folder, a Hub repo, a folder
of a bucket) that is transcoded into a store of the cache. Each kind is a :class:`Source` subclass, as xarray's
``BackendEntrypoint`` is for file formats: it says whether it can open a spec (:meth:`Source.guess_can_open`,
without the network), opens it (:meth:`Source.open`: revision, token and options checked), resolves it (Hub: the
revision to a commit, under the ``HF_HUB_OFFLINE`` rule), gives what it holds (:meth:`Source.store`,
:meth:`Source.remote`, :meth:`Source.files`, :meth:`Source.dataset` and whether it was read,
:meth:`Source.held_dataset`; offline, :meth:`Source.held_store`), writes and reads its identity record in a store
(:meth:`Source.from_record`, :meth:`Source.describe`, :meth:`Source.same`), and names its store
in the cache (:meth:`Source.cache_path`, with its folder there and what the cache commands say of it).

Kinds are registered in order (:func:`register`; a local path wins over a Hub repo id of the same name; the
built-in ones and those of the ``lerobot_zarr.sources`` entry point group are loaded by :mod:`.registry`): a new
kind is one module and one line. ``lerobot_zarr.testing.source_tests`` is the suite every kind passes.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ArgumentError, NotMaterializedError
from ..store.state import has_commit_point

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource
    from ..lerobot.source_files import SourceFiles
    from .remote_store import RemoteStore

__all__ = ["Source", "register", "registered", "origin"]

_KINDS: list[type[Source]] = []


class Source(ABC):
    """One place a dataset comes from (see the module docstring). Instances are made by :meth:`open` (or
    :meth:`from_record`) and say what they are in ``str()``."""

    #: the kind's name (``"store"``, ``"folder"``, ``"hub"``, ``"bucket"``...)
    kind: ClassVar[str]
    #: the ``kind`` of the record it writes into a store made from it (None: it makes no store)
    record_kind: ClassVar[str | None] = None
    #: its folder in the cache home (None: its stores are not in the cache)
    cache_folder: ClassVar[str | None] = None

    # what it can open -------------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def guess_can_open(cls, spec: str | os.PathLike) -> bool:
        """Whether ``spec`` names a source of this kind, judged without the network (a local path that exists
        with the right files, a URL of the right scheme, a repo id)."""

    @classmethod
    @abstractmethod
    def open(cls, spec: str | os.PathLike, *, revision: str | None = None, token: str | bool | None = None,
             options: Mapping[str, Any] | None = None) -> Source:
        """The source ``spec`` names (its arguments checked: ``revision`` only where there are revisions...);
        no network request yet."""

    # what it holds ----------------------------------------------------------------------------------------
    def store(self) -> Path | None:
        """The store this source is, when it is one on this machine (opened as it is); else None."""
        return None

    def remote(self, *, cache_bytes: int | None = None, root_doc: bytes | None = None) -> RemoteStore | None:
        """The store this source is, when it is one elsewhere (read through a local mirror); else None."""
        return None

    def files(self) -> SourceFiles:
        """The LeRobot dataset's files (resolving the source first: the Hub's revision, a bucket's listing).
        Raises :class:`~lerobot_zarr.errors.NotMaterializedError` where the files cannot be read now
        (``HF_HUB_OFFLINE``)."""
        raise ArgumentError(f"{self}: is a store, not a LeRobot dataset")

    def offline(self) -> str | None:
        """Why this source's files cannot be read now (``HF_HUB_OFFLINE`` for the Hub), None if they can."""
        return None

    def held_store(self) -> Path | None:
        """Where this source's files cannot be read now (:meth:`offline`), the store this machine holds for it (its
        cache store), whose metadata ``inspect`` gives instead; None where they can be read. Raises
        :class:`~lerobot_zarr.errors.NotMaterializedError` (the Hub: ``HubError`` for a revision never resolved
        here) when none is held."""
        why = self.offline()
        if not why:
            return None
        store = self.cache_path()
        if not has_commit_point(store):
            raise NotMaterializedError(f"{self}: {why} and no local store holds its metadata (it was never opened "
                                       f"on this machine)")
        return store

    def dataset(self) -> LeRobotSource:
        """The LeRobot dataset's reader over :meth:`files` (made once: its metadata is read once)."""
        reader = self.held_dataset()
        if reader is None:
            from ..lerobot.source import LeRobotSource

            reader = self._dataset = LeRobotSource(self.files())
        return reader

    def held_dataset(self) -> LeRobotSource | None:
        """The reader :meth:`dataset` made, if it made one (its metadata read whole already), else None; asks
        nothing. A transcode of a few episodes reuses it rather than locate them anew."""
        return getattr(self, "_dataset", None)

    # identity and the cache -------------------------------------------------------------------------------
    def known_record(self) -> dict | None:
        """The record a store made from this source holds, when it is known without reading the source's files (a
        Hub commit): a store holding what is asked is then opened without a request. None otherwise."""
        return None

    def cache_path(self) -> Path:
        """The cache's store of this source (of its content now: a folder whose files changed gets another)."""
        raise ArgumentError(f"{self}: its stores are not kept in the cache")

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, token: str | bool | None = None) -> Source:
        """The source a store's record names (to fetch more of its episodes); raises
        :class:`~lerobot_zarr.errors.NotMaterializedError` when it cannot be reached from here."""
        raise NotMaterializedError(f"a store made from {cls.describe(record)} cannot fetch from it")

    @classmethod
    def describe(cls, record: Mapping[str, Any]) -> str:
        """A record of this kind in words, for messages (never a credential)."""
        return f"a {record.get('kind', 'unknown')} source"

    @classmethod
    def same(cls, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        """Whether two records of this kind name the same data (a store is only reused for the same)."""
        return dict(a) == dict(b)

    @classmethod
    def cached_stores(cls, folder: Path) -> Iterator[Path]:
        """The store folders of this kind under its cache folder (one level by default)."""
        if folder.is_dir():
            for entry in sorted(folder.iterdir()):
                if entry.is_dir() and not entry.is_symlink():
                    yield entry

    @classmethod
    def cache_entry(cls, path: Path, record: Mapping[str, Any] | None) -> tuple[str, str | None, tuple[str, ...]]:
        """``(source, revision, revision names)`` that ``cache ls`` shows for a store of this kind at ``path``
        (``record``: its source record, None when unreadable)."""
        return (cls.describe(record) if record else path.name), None, ()

    @classmethod
    def prune_reason(cls, path: Path, record: Mapping[str, Any], refs: tuple[str, ...]) -> str | None:
        """Why ``cache prune`` may remove this kind's store at ``path``, None to keep it."""
        return None

    @classmethod
    def removed(cls, path: Path) -> None:
        """A store of this kind was removed from the cache (its bookkeeping there follows)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


def register(cls: type[Source], *, before: str | None = None) -> type[Source]:
    """Add a kind of source (usable as a class decorator), last or before the kind named ``before``."""
    if not (isinstance(cls, type) and issubclass(cls, Source)):
        raise ArgumentError(f"{cls!r} is not a Source subclass")
    if any(k.kind == cls.kind for k in _KINDS):
        raise ArgumentError(f"a source kind named {cls.kind!r} is registered already")
    at = next((i for i, k in enumerate(_KINDS) if k.kind == before), len(_KINDS))
    _KINDS.insert(at, cls)
    return cls


def registered() -> list[type[Source]]:
    """The kinds registered so far, in order (:func:`~.registry.kinds` registers the built-in ones first)."""
    return list(_KINDS)


def origin(record: Mapping[str, Any]) -> dict:
    """A store's source record through the ``edited`` wrapper a writer adds (``{}`` if there is none)."""
    while isinstance(record, Mapping) and record.get("kind") == "edited":
        record = record.get("from")
    return dict(record) if isinstance(record, Mapping) else {}
