"""How the store keeps cameras, beside the contract (:mod:`lerobot_zarr.store`): the mp4 index of a camera kept as
the source's mp4 files (``<camera>/mp4.json`` and ``<camera>/videos/``), the episodes this process can serve (a camera
kept as mp4 or not decoded yet needs PyAV), and a camera's storage in words.

An mp4 file of a local source is made part of the store by a hard link (no bytes copied): one file under two names,
so a tool rewriting the source's file in place (``ffmpeg -y`` onto it, a move across filesystems onto it) changes
the store's too. Its size and modification time when linked are recorded beside it (``.<file>.linked``) and
compared whenever a reader opens it (:func:`mp4_file`): a change is refused, naming the file and what changed,
never decoded as if it were the episode's (``verify`` finds it too, by its content hash)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from ..cameras.video import have_pyav, pyav_missing
from ..errors import CorruptStoreError
from ..utils.fileio import atomic_write, check_in_store, load_json, read_bounded
from .state import StoreState
from .tables import ArraySpec

__all__ = ["MP4_INDEX", "mp4_index_path", "read_mp4_index", "mp4_file", "record_link", "is_link_record",
           "cameras_needing_pyav", "served_episodes",
           "storage_name", "kept_description"]

MP4_INDEX = "mp4.json"


def mp4_index_path(root: str | os.PathLike, name: str) -> Path:
    """Where the mp4 index of camera ``name`` is: ``<camera>/mp4.json``."""
    return Path(root) / name / MP4_INDEX


def read_mp4_index(root: str | os.PathLike, name: str, n_episodes: int) -> dict[str, Any]:
    """The episode -> (file, from_timestamp, to_timestamp) table of a camera kept as mp4, checked: file names
    are relative paths inside ``<camera>/videos/``, timestamps finite and ordered, sizes bounded by the episodes."""
    path = mp4_index_path(root, name)
    where = f"{path}: mp4 index of camera {name!r}"
    try:
        doc = load_json(read_bounded(path, _MAX_INDEX_BYTES_PER_EPISODE * (n_episodes + 1) + (1 << 20), root=root,
                                     what="mp4 index"), where)
        if not isinstance(doc, dict) or not isinstance(doc.get("files"), list) \
                or not all(isinstance(f, str) for f in doc["files"]):
            raise TypeError("'files' must be a list of file names")
        files = list(doc["files"])
        columns = {}
        for key, dtype in (("file", np.int64), ("from_timestamp", np.float64), ("to_timestamp", np.float64)):
            values = doc.get(key)
            if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                       for v in values):
                raise TypeError(f"{key!r} must be a list of numbers")
            columns[key] = np.asarray(values, dtype=dtype)
    except FileNotFoundError:
        raise CorruptStoreError(f"{where} is missing", path=path, feature=name) from None
    except CorruptStoreError as exc:
        raise CorruptStoreError(str(exc), path=path, feature=name) from None
    except (OSError, ValueError, KeyError, TypeError, OverflowError) as exc:
        raise CorruptStoreError(f"{where}: unreadable ({exc})", path=path, feature=name) from None
    file_of, start, stop = columns["file"], columns["from_timestamp"], columns["to_timestamp"]
    if not len(file_of) == len(start) == len(stop) == n_episodes or (file_of >= len(files)).any() \
            or (file_of < -1).any():
        raise CorruptStoreError(f"{where}: it does not describe the store's {n_episodes} episodes", path=path,
                                feature=name)
    if not (np.isfinite(start).all() and np.isfinite(stop).all()) or (start < 0).any() or (stop < start).any():
        raise CorruptStoreError(f"{where}: from_timestamp/to_timestamp must be finite, non-negative and ordered",
                                path=path, feature=name)
    for f in files:
        parts = f.split("/")
        if not f or f.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in f or "\0" in f:
            raise CorruptStoreError(f"{where}: file name {f!r:.80} leaves the camera's folder", path=path,
                                    feature=name)
    return {"files": files, "file": file_of, "from_timestamp": start, "to_timestamp": stop}


_MAX_INDEX_BYTES_PER_EPISODE = 512  # an mp4 index takes ~60 bytes per episode, plus its file names


def mp4_file(root: str | os.PathLike, name: str, file: str, *, check_link: bool = True) -> str:
    """Path of a camera's mp4 file inside the store, checked: no folder from the store root down, nor the file
    itself, is a symbolic link (so a planted link can make neither reads nor publishing leave the store); a file
    hard-linked from the source has the size and modification time it had when linked (unless not
    ``check_link``: ``verify``, which compares its content hash)."""
    path = check_in_store(root, f"{os.fspath(root)}/{name}/videos/{file}")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise CorruptStoreError(f"{path}: the mp4 file of camera {name!r} is missing", path=path,
                                feature=name) from None
    if not stat.S_ISREG(st.st_mode):
        raise CorruptStoreError(f"{path}: the mp4 file of camera {name!r} is not a regular file (a symbolic link?)",
                                path=path, feature=name)
    if check_link:
        _check_link(root, path, name, st)
    return path


def _link_record(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(f".{path.name}.linked")


def is_link_record(name: str) -> bool:
    """Whether a file name is a hard link's record (``.<file>.linked``): this machine's bookkeeping of a local
    source's file, meaningless anywhere else (not published with the store)."""
    return name.startswith(".") and name.endswith(".linked") and len(name) > len("..linked")


def record_link(root: str | os.PathLike, path: str | os.PathLike, tmp: str | os.PathLike) -> None:
    """Before the file ``tmp`` goes into place as the store's mp4 file ``path``: if it is a hard link (shared with
    the source), record its size and modification time beside ``path``; else forget any record of an earlier
    file there."""
    st = os.stat(tmp, follow_symlinks=False)
    record = _link_record(path)
    if st.st_nlink > 1:
        doc = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}
        atomic_write(record, json.dumps(doc).encode(), durable=False, root=root)
    else:
        record.unlink(missing_ok=True)


def _check_link(root: str | os.PathLike, path: str, name: str, st: os.stat_result) -> None:
    record = _link_record(path)
    try:
        doc = load_json(read_bounded(record, 4096, root=root, what="mp4 link record"), str(record))
    except FileNotFoundError:
        return  # a copy, or a file of a store made before the records
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), int) for k in ("size", "mtime_ns", "inode")):
        raise CorruptStoreError(f"{record}: not a link record of camera {name!r}", path=record, feature=name)
    if st.st_ino != doc["inode"]:
        return  # another file was put in its place since (by the store: its record follows)
    changed = []
    if st.st_size != doc["size"]:
        changed.append(f"size {doc['size']} -> {st.st_size} bytes")
    if st.st_mtime_ns != doc["mtime_ns"]:
        changed.append(f"modified at {st.st_mtime_ns / 1e9:.3f}, linked when modified at {doc['mtime_ns'] / 1e9:.3f} "
                       f"(unix time)")
    if changed:
        raise CorruptStoreError(
            f"{path}: the mp4 file of camera {name!r} changed since the store linked it from the source "
            f"({'; '.join(changed)}): the store shares it with the source by a hard link, and a tool rewrote the "
            f"source's file in place; its frames may not be the episodes' any more. Make the store again from the "
            f"source, or restore the file (if verify finds its content unchanged, remove {record.name} to accept it)",
            path=path, feature=name)


def cameras_needing_pyav(state: StoreState) -> dict[str, str]:
    """Video cameras this process cannot serve in full because PyAV is not installed, with the reason: kept as
    mp4 (decoded on read), or with episodes not decoded yet. Empty where PyAV imports. A property of this process,
    never of the store: the store keeps such episodes as not decoded, and an open with PyAV decodes them."""
    names = [name for name, spec in state.arrays.items()
             if spec.kind == "video" and (spec.storage == "mp4" or not state.done_mask(name).all())]
    if not names or have_pyav():
        return {}
    return {name: f"{pyav_missing('reading a camera kept as mp4')}" if state.arrays[name].storage == "mp4" else
            f"{pyav_missing()}; until then its episodes stay not decoded in the store (the next open with PyAV "
            f"decodes them)" for name in names}


def served_episodes(state: StoreState, pending: dict[str, str] | None = None) -> np.ndarray:
    """Mask of the episodes this process can serve: done for every array but the cameras needing PyAV here
    (``pending``, default :func:`cameras_needing_pyav`), which are left out of samples instead."""
    return state.complete_episodes(skip=cameras_needing_pyav(state) if pending is None else pending)


def storage_name(spec: ArraySpec) -> str:
    """A camera's storage as ``storage=`` names it: ``raw``, ``mp4``, ``compact``, ``lossless``, ``jpeg:90``..."""
    if spec.storage != "compact":
        return spec.storage
    codec = spec.codec_spec
    name, level = codec.get("codec"), codec.get("level")
    if name in ("zstd", "delta-zstd"):
        short = "compact" if name == "zstd" else "lossless"
        return short if level == 3 else f"{name}:{level}"
    if name == "jpeg":
        return f"jpeg:{codec.get('quality')}"
    return str(name)


def kept_description(spec: ArraySpec | None) -> str:
    """How a store keeps a camera, in words: ``jpeg:90, resized to 224x224``."""
    if spec is None:
        return "not stored"
    size = spec.frame_shape[:2]
    return storage_name(spec) + (f", resized to {size[0]}x{size[1]}" if spec.resize else "")
