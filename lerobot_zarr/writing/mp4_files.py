"""Cameras a store keeps as the source's mp4 files (``storage="mp4"``): the episode -> (file, from, to timestamp)
index written with the store, and each episode's mp4 file made part of the store (a hard link or a copy of a
local file, the whole file from a Hub repo), once, with its content hash."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..cameras.video import VideoUnavailable
from ..store.cameras import mp4_index_path, record_link
from ..utils.fileio import atomic_write, check_in_store, disk_error, link_or_copy, replace_file
from ..utils.hashing import Crc32c, crc32c

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource

__all__ = ["write_mp4_index", "keep_mp4"]


def write_mp4_index(source: LeRobotSource, root: Path, name: str) -> int:
    """The episode -> (file, from, to timestamp) table of a camera kept as mp4 (fixed with the store); returns
    its content hash."""
    source.episodes.check_located(range(len(source.episodes)), source.files.location())
    refs = source.episodes.videos.get(name, [])
    files = sorted({ref[0] for ref in refs if ref is not None})
    number = {f: i for i, f in enumerate(files)}
    lengths = source.episodes.length
    doc = {"files": files,
           "file": [number[ref[0]] if ref is not None else -1 for ref in refs],
           "from_timestamp": [ref[1] if ref is not None else 0.0 for ref in refs],
           "to_timestamp": [(ref[1] if ref is not None else 0.0) + int(n) / source.fps
                            for ref, n in zip(refs, lengths.tolist(), strict=True)]}
    path = mp4_index_path(root, name)
    check_in_store(root, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(doc).encode()
    atomic_write(path, data, durable=False, root=root)
    return crc32c(data)



_copy_locks: dict[str, threading.Lock] = {}
_copy_guard = threading.Lock()


def keep_mp4(source: LeRobotSource, root: Path, e: int, name: str) -> int:
    """Make the mp4 file holding episode ``e`` of camera ``name`` part of the store (a hard link or a copy of a
    local file, the whole file from a Hub repo), once; return the file's content hash. A missing or unreadable
    file makes the episode's camera unavailable."""
    ref = source.episodes.videos.get(name, [None] * (e + 1))[e]
    if ref is None:
        raise VideoUnavailable(f"episode {e}, camera {name!r}: meta/episodes lists no video file")
    rel = ref[0]
    if not source.files.exists(rel):
        raise VideoUnavailable(f"episode {e}, camera {name!r}: video file {source.files.location(rel)} not found")
    target = Path(check_in_store(root, root / name / "videos" / rel))
    with _copy_guard:
        lock = _copy_locks.setdefault(str(target), threading.Lock())
    with lock:
        if target.is_file() and not target.is_symlink():
            known = _mp4_hashes.get(str(target))
            return known if known is not None else _file_crc(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            local = source.files.local_path(rel)
            if local is not None:
                link_or_copy(local, tmp)
                crc = _file_crc(tmp)
            else:
                hash_ = Crc32c()
                with source.files.open(rel) as f, open(tmp, "wb") as out:
                    try:
                        while chunk := f.read(8 << 20):
                            out.write(chunk)
                            hash_.update(chunk)
                    except OSError as exc:
                        raise disk_error(exc, target) from None  # a full disk named; other errors as they are
                crc = hash_.value
            if not _decodable(tmp):
                raise VideoUnavailable(f"episode {e}, camera {name!r}: {source.files.location(rel)} has no "
                                       f"decodable video stream")
            record_link(root, target, tmp)  # (a hard link: its size and time, checked whenever it is opened)
            replace_file(tmp, target)
            _mp4_hashes[str(target)] = crc
            return crc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


_mp4_hashes: dict[str, int] = {}  # mp4 files this process put into a store: their content hash


def _file_crc(path: Path) -> int:
    """Content hash of a whole file (opened without following a link)."""
    from ..utils.fileio import open_nofollow

    hash_ = Crc32c()
    fd = open_nofollow(path, os.O_RDONLY)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            while chunk := f.read(8 << 20):
                hash_.update(chunk)
    finally:
        os.close(fd)
    return hash_.value


def _decodable(path: Path) -> bool:
    import av

    try:
        with av.open(str(path)) as container:
            return bool(container.streams.video)
    except (av.error.FFmpegError, OSError, ValueError):
        return False
