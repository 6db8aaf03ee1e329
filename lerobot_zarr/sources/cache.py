"""The store cache: what lies there (:func:`cache_info`: every store, where from, its size and use), and removing it
safely (``lerobot-zarr cache ls | rm | prune``, in the spirit of ``hf cache``).

Layout (see docs/guide.md): each kind of source keeps its stores in a folder of its own under :func:`~.home.cache_home`
(``hub/<org>--<name>/<commit>/``, ``local/<name>-<key>/``, ``buckets/<name>-<key>/``: the kind says which
(:attr:`~.base.Source.cache_folder`) and what its stores are); a store made with other camera choices (``storage=``,
``resize=``) is a folder of its own next to the plain one, ``<...>+<choices>``.

Removal never touches a store another process is writing (its ``.lock`` is taken, non-blocking, first), never
follows a symlink, and only removes folders inside the cache home that look like stores.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import StoreError, StoreLockedError
from ..store.cameras import kept_description, served_episodes
from ..store.state import CREATING_MARKER, read_state
from ..store.zarr_meta import ROOT
from .base import Source, origin
from .home import cache_home
from .registry import kinds

__all__ = ["CachedStore", "cache_info", "find_stores", "note_use", "prune_candidates", "remove_store", "disk_usage"]

log = logging.getLogger("lerobot_zarr")


# what lies there ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedStore:
    """One store of the cache."""

    path: Path
    kind: str  # the cache folder of its kind of source: "hub", "local", "buckets"
    source: str  # Hub repo id, or the LeRobot folder it was made from
    revision: str | None  # Hub commit (None for a local folder's store)
    refs: tuple[str, ...]  # revision names that last resolved to this commit (Hub)
    size_bytes: int
    episodes: int  # episodes held
    total_episodes: int
    last_used: float  # unix time: latest access or change the filesystem recorded (atime follows relatime)
    status: str  # "ok", "incomplete" (never committed), "edited" (changed in place), "unreadable: ..."
    variant: str = ""  # cameras kept otherwise than the source has them ("cam=jpeg:90, resized to 224x224")

    def to_json(self) -> dict:
        d = asdict(self)
        d["path"] = str(self.path)
        d["refs"] = list(self.refs)
        return d


def _store_summary(path: Path) -> tuple[dict, int, int, str]:
    """(source record, episodes held, total episodes, camera choices) of a committed store. The one place this
    module reads a store's metadata (the store format may change: adapt here)."""
    state = read_state(path, resolve=False)
    variant = "; ".join(f"{name}={kept_description(spec)}" for name, spec in state.arrays.items()
                        if not spec.is_text and (spec.resize or spec.storage != "raw"))
    return dict(state.source), int(served_episodes(state).sum()), len(state.table), variant


def note_use(store: str | os.PathLike) -> None:
    """Record that ``store`` is read now, for ``cache ls``'s "last use": the access time of its root ``zarr.json``
    set to now (its modification time, which readers use to see commits, kept), on the very file stat'ed. The
    filesystem's own access times cannot tell (``relatime`` updates them once a day, ``noatime`` never). Best
    effort: a read-only volume or a store of another user is left as it is."""
    try:
        fd = os.open(os.path.join(store, ROOT), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.utime(fd, ns=(time.time_ns(), os.fstat(fd).st_mtime_ns))
    except OSError:
        pass
    finally:
        os.close(fd)


def disk_usage(path: Path) -> tuple[int, float]:
    """Bytes on disk (allocated blocks, so sparse files count as what they take) and the latest atime/mtime."""
    total, last = 0, 0.0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if name in files:
                total += st.st_blocks * 512
            last = max(last, st.st_mtime, st.st_atime if name == "zarr.json" else 0.0)
    return total, last


def _candidates(home: Path) -> Iterator[tuple[type[Source], Path]]:
    for kind in kinds():
        if kind.cache_folder is not None:
            for path in kind.cached_stores(home / kind.cache_folder):
                yield kind, path


def cache_info(home: str | os.PathLike | None = None) -> list[CachedStore]:
    """Every store under the cache home (default :func:`~.home.cache_home`): where from, which revision, size,
    episodes held, last use. Folders that are not stores are not listed; stores whose first transcode never
    committed are listed as ``"incomplete"``."""
    home = Path(home) if home is not None else cache_home()
    out = []
    for kind, path in _candidates(home):
        committed = (path / "zarr.json").is_file()
        if not committed and not (path / CREATING_MARKER).exists():
            continue
        size, last = disk_usage(path)
        held = total = 0
        status, variant, record = "ok", "", None
        if committed:
            try:
                record, held, total, variant = _store_summary(path)
            except (StoreError, OSError, KeyError, ValueError) as exc:
                status = f"unreadable: {exc}"
            else:
                if record.get("kind") == "edited":
                    status = "edited"
                record = origin(record)
        else:
            status = "incomplete"
        source, revision, refs = kind.cache_entry(path, record)
        out.append(CachedStore(path, kind.cache_folder, source, revision, refs, size, held, total, last, status,
                               variant))
    return out


def find_stores(target: str, home: str | os.PathLike | None = None) -> list[CachedStore]:
    """Stores of the cache that ``target`` names: a store path, a Hub repo id (all its commits), ``repo@commit``
    (a commit prefix of at least 7 characters), a LeRobot folder or a bucket URL (the stores made from it)."""
    stores = cache_info(home)
    repo, _, rev = target.partition("@")
    path = Path(target).expanduser()
    if "://" not in target and path.exists():
        resolved = path.resolve()
        hits = [s for s in stores if s.path.resolve() == resolved]
        return hits or [s for s in stores if s.kind == "local" and Path(s.source).resolve() == resolved]
    if "://" in target:
        return [s for s in stores if s.source.rstrip("/") == target.rstrip("/")]
    if rev and len(rev) < 7:
        raise ValueError(f"{target!r}: give at least 7 characters of the commit")
    return [s for s in stores if s.kind == "hub" and s.source == repo and (not rev or (s.revision or "")
                                                                             .startswith(rev))]


def prune_candidates(home: str | os.PathLike | None = None) -> list[tuple[CachedStore, str]]:
    """Stores nothing points to any more, with why (each kind of source says: a Hub commit no revision name
    resolves to now, a store of a LeRobot folder that is gone or whose content changed), and stores whose first
    transcode never committed."""
    by_folder = {k.cache_folder: k for k in kinds() if k.cache_folder is not None}
    out = []
    for s in cache_info(home):
        if s.status == "incomplete":
            out.append((s, "never committed (an interrupted first transcode)"))
        elif s.status in ("ok", "edited"):
            try:
                record = origin(read_state(s.path, resolve=False).source)
            except (StoreError, OSError, KeyError, ValueError):
                continue
            why = by_folder[s.kind].prune_reason(s.path, record, s.refs)
            if why:
                out.append((s, why))
    return out


def remove_store(path: str | os.PathLike, *, home: str | os.PathLike | None = None) -> int:
    """Delete one store of the cache; returns the bytes freed.

    Refuses (``ValueError``) a path outside the cache home, a symlink, or a folder that is not a store; raises
    ``StoreLockedError`` if another process holds the store's writer lock. The folder is first renamed aside
    (atomically, while holding the lock), so no reader or writer ever opens a half-deleted store; Hub revision
    records pointing to a removed commit are dropped too.
    """
    home = (Path(home) if home is not None else cache_home()).resolve()
    path = Path(path).expanduser()
    if path.is_symlink():
        raise ValueError(f"{path}: is a symlink; remove the link itself, not through lerobot-zarr cache")
    resolved = path.resolve()
    kind = next((k for k in kinds() if k.cache_folder is not None and any(
        p == resolved for p in k.cached_stores(home / k.cache_folder))), None)
    if kind is None:
        raise ValueError(f"{path}: not a store of the cache at {home}")
    if not resolved.is_dir() or not ((resolved / "zarr.json").is_file() or (resolved / CREATING_MARKER).exists()):
        raise ValueError(f"{path}: not a lerobot_zarr store")
    for parent in [resolved, *resolved.parents]:
        if parent == home:
            break
        if parent.is_symlink():
            raise ValueError(f"{path}: {parent} is a symlink")
    size, _ = disk_usage(resolved)
    fd = os.open(resolved / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(f"{path}: another process is writing this store; not removed") from None
            raise
        trash = resolved.with_name(f".removing-{resolved.name}-{os.getpid()}-{time.monotonic_ns()}")
        os.rename(resolved, trash)
    finally:
        os.close(fd)
    shutil.rmtree(trash)
    log.info("removed store %s (%d bytes)", resolved, size)
    kind.removed(resolved)
    return size
