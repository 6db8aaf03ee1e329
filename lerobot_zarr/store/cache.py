"""The store cache: where stores go (:func:`cache_home`, the folder of each source), what lies there, and removing
it safely.

Layout (see docs/guide.md): ``hub/<org>--<name>/<commit>/`` (one store per Hub commit, ``refs/`` records which
commit each revision name resolved to, for ``HF_HUB_OFFLINE``) and ``local/<name>-<key>/`` (one store per LeRobot
folder and content); a store made with other camera choices (``storage=``, ``resize=``) is a folder of its own next
to the plain one, ``<commit>+<choices>`` / ``<name>-<key>+<choices>``. ``lerobot-zarr cache ls | rm | prune`` is
the command line for it, in the spirit of ``hf cache``.

Removal never touches a store another process is writing (its ``.lock`` is taken, non-blocking, first), never
follows a symlink, and only removes folders inside the cache home that look like stores.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from ..errors import StoreError, StoreLockedError
from .cameras import kept_description, served_episodes
from .state import CREATING_MARKER, read_state
from .zarr_meta import ROOT

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource

__all__ = ["CACHE_ENV", "cache_home", "store_path_for", "hub_store_path", "variant_path", "ref_path", "read_ref",
           "record_ref", "CachedStore", "cache_info", "find_stores", "note_use", "prune_candidates", "remove_store"]

CACHE_ENV = "LEROBOT_ZARR_HOME"
log = logging.getLogger("lerobot_zarr")


# where stores go ----------------------------------------------------------------------------------------------
def cache_home() -> Path:
    """Where stores go when no ``root`` is given: ``$LEROBOT_ZARR_HOME``, else ``$HF_HOME/lerobot_zarr``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "lerobot_zarr"


def store_path_for(source: LeRobotSource) -> Path:
    """Cache location of a local source's store, keyed by its path and content fingerprint.

    A source folder whose metadata or data files change gets a new store; two sources never share one.
    """
    record = source.record()
    key = hashlib.sha256(f"{record['path']}\0{record['fingerprint']}".encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", source.files.name) or "dataset"
    return cache_home() / "local" / f"{name}-{key}"


def _hub_home(repo_id: str) -> Path:
    return cache_home() / "hub" / repo_id.replace("/", "--")


def hub_store_path(repo_id: str, commit: str) -> Path:
    """Cache location of the store of a Hub repo at ``commit``."""
    return _hub_home(repo_id) / commit


def variant_path(store: Path, key: str | None) -> Path:
    """The store of a source kept with other camera choices (``key``, a digest of them; None: the plain store): a
    folder of its own next to the plain one, so that ``storage=``/``resize=`` never change what plain opens read."""
    return store if key is None else store.with_name(f"{store.name}+{key}")


def ref_path(repo_id: str, revision: str | None) -> Path:
    """The record of the commit a revision name (None: the default) last resolved to, for ``HF_HUB_OFFLINE``. The
    name is quoted: ``"../x"`` stays one file name inside the cache."""
    return _hub_home(repo_id) / "refs" / quote(revision or "_default", safe="")


def read_ref(repo_id: str, revision: str | None) -> str | None:
    """The commit ``revision`` last resolved to on this machine, or None if it never was."""
    path = ref_path(repo_id, revision)
    return path.read_text().strip() if path.is_file() else None


def record_ref(repo_id: str, revision: str | None, commit: str) -> None:
    """Record (atomically) that ``revision`` resolves to ``commit`` now."""
    path = ref_path(repo_id, revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(commit)
    os.replace(tmp, path)


# what lies there ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedStore:
    """One store of the cache."""

    path: Path
    kind: str  # "hub" or "local"
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
    state = read_state(path)
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


def _candidates(home: Path) -> Iterator[tuple[str, Path]]:
    hub = home / "hub"
    if hub.is_dir():
        for repo in sorted(hub.iterdir()):
            if repo.is_dir() and not repo.is_symlink():
                for entry in sorted(repo.iterdir()):
                    if entry.name != "refs" and entry.is_dir() and not entry.is_symlink():
                        yield "hub", entry
    local = home / "local"
    if local.is_dir():
        for entry in sorted(local.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                yield "local", entry


def _refs(repo_dir: Path) -> dict[str, list[str]]:
    """commit -> revision names whose last resolution it was."""
    out: dict[str, list[str]] = {}
    refs = repo_dir / "refs"
    if refs.is_dir():
        for f in sorted(refs.iterdir()):
            if f.is_file() and not f.is_symlink():
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    name = unquote(f.name)
                    out.setdefault(f.read_text().strip(), []).append("default" if name == "_default" else name)
    return out


def cache_info(home: str | os.PathLike | None = None) -> list[CachedStore]:
    """Every store under the cache home (default :func:`cache_home`): where from, which revision, size, episodes
    held, last use. Folders that are not stores are not listed; stores whose first transcode never committed are
    listed as ``"incomplete"``."""
    home = Path(home) if home is not None else cache_home()
    out = []
    refs_of: dict[Path, dict[str, list[str]]] = {}
    for kind, path in _candidates(home):
        committed = (path / "zarr.json").is_file()
        if not committed and not (path / CREATING_MARKER).exists():
            continue
        size, last = disk_usage(path)
        source, revision, refs = "", None, ()
        held = total = 0
        status, variant = "ok", ""
        if kind == "hub":
            org, _, name = path.parent.name.partition("--")
            commit = path.name.partition("+")[0]  # <commit>+<choices>: a store of other camera choices
            source, revision = f"{org}/{name}", commit
            refs = tuple(refs_of.setdefault(path.parent, _refs(path.parent)).get(commit, ()))
        if committed:
            try:
                record, held, total, variant = _store_summary(path)
            except (StoreError, OSError, KeyError, ValueError) as exc:
                status = f"unreadable: {exc}"
            else:
                if record.get("kind") == "edited":
                    status = "edited"
                    record = record.get("from", {})
                if record.get("kind") == "local":
                    source = str(record.get("path", source))
                elif record.get("kind") == "hub":
                    source, revision = record.get("repo_id", source), record.get("commit", revision)
        else:
            status = "incomplete"
        out.append(CachedStore(path, kind, source, revision, refs, size, held, total, last, status, variant))
    return out


def find_stores(target: str, home: str | os.PathLike | None = None) -> list[CachedStore]:
    """Stores of the cache that ``target`` names: a store path, a Hub repo id (all its commits), ``repo@commit``
    (a commit prefix of at least 7 characters), or a LeRobot folder (the stores made from it)."""
    stores = cache_info(home)
    repo, _, rev = target.partition("@")
    path = Path(target).expanduser()
    if path.exists():
        resolved = path.resolve()
        hits = [s for s in stores if s.path.resolve() == resolved]
        return hits or [s for s in stores if s.kind == "local" and Path(s.source).resolve() == resolved]
    if rev and len(rev) < 7:
        raise ValueError(f"{target!r}: give at least 7 characters of the commit")
    return [s for s in stores if s.kind == "hub" and s.source == repo and (not rev or (s.revision or "")
                                                                             .startswith(rev))]


def prune_candidates(home: str | os.PathLike | None = None) -> list[tuple[CachedStore, str]]:
    """Stores nothing points to any more, with why: Hub commits no revision name resolves to now (an older
    commit of a branch or tag), stores of LeRobot folders that are gone or whose content changed (a new store
    was made for the new content), and stores whose first transcode never committed."""
    from ..lerobot.source import LeRobotSource, is_lerobot_folder

    out = []
    for s in cache_info(home):
        if s.status == "incomplete":
            out.append((s, "never committed (an interrupted first transcode)"))
        elif s.kind == "hub" and not s.refs:
            out.append((s, "no revision name resolves to this commit any more"))
        elif s.kind == "local" and s.status in ("ok", "edited"):
            origin = Path(s.source)
            if not is_lerobot_folder(origin):
                out.append((s, f"its source folder {origin} is gone"))
                continue
            try:
                current = store_path_for(LeRobotSource(origin))
            except (OSError, ValueError) as exc:
                out.append((s, f"its source folder {origin} is unreadable ({exc})"))
                continue
            if current.name != s.path.name.partition("+")[0]:
                out.append((s, f"its source folder {origin} changed since (now {current.name})"))
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
    if resolved.parent != home / "local" and resolved.parent.parent != home / "hub":
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
    if resolved.parent.parent == home / "hub":
        repo_dir = resolved.parent
        refs = repo_dir / "refs"
        if refs.is_dir():
            for f in refs.iterdir():
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    if f.is_file() and not f.is_symlink() and f.read_text().strip() == resolved.name:
                        f.unlink()
            with contextlib.suppress(OSError):
                refs.rmdir()
        with contextlib.suppress(OSError):
            repo_dir.rmdir()
    return size
