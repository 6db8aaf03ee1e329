"""``meta/lerobot_zarr_index.json``: our index of a LeRobot v3.0 dataset we exported, and its one reader.

Why: opening a dataset from the Hub otherwise reads ``meta/info.json``, ``meta/episodes/*.parquet`` (footer, then
columns), ``meta/tasks.parquet``, ``meta/stats.json`` and then each touched data file's footer (a guessed tail,
then the rest). With the index, :class:`~lerobot_zarr.lerobot.source.LeRobotSource` gets all the metadata in one
request, and the data files' footers inline (no request) or their exact sizes (one exact range request per data file).

Written by :func:`write_index` (``to_lerobot`` and ``push``) next to LeRobot's files; read by :func:`read_index`
for sources that can check file identities (``SourceFiles.matches``: a Hub repo). LeRobot ignores the file.

Contract (format 2; one compact JSON object):

- ``format_version``: 2. An index of any other version is ignored (the dataset is read from LeRobot's files).
- ``files``: ``{path: {"sha256": hex, "git_sha1": hex}}`` of every file the index stands for: all of ``meta/``
  (but the index itself), ``data/`` and ``videos/``. The index is used only if the repo lists every one of them
  with that id (sha256 for LFS files, git blob sha1 for the others); a repo changed by another tool after our
  push is read from LeRobot's files instead.
- ``info``, ``stats``: the contents of ``meta/info.json`` and ``meta/stats.json``; ``tasks``: task strings in
  ``task_index`` order (``meta/tasks.parquet``).
- ``data_files``: data file paths; ``video_files``: video file paths.
- ``episodes``: per episode, in ``episode_index`` order: ``length`` (frames), ``data_file`` (index into
  ``data_files``), ``file_row`` (row of its first frame in that file), ``tasks`` (indices into ``tasks``) and
  ``videos``: ``{video key: {"file": [index into video_files], "from_timestamp": [seconds]}}``, one entry per
  episode for every video feature of ``info``.
- ``footer_bytes``: ``{data file: length of its parquet footer (metadata + 8 bytes)}`` for every data file;
  ``footers``: ``{data file: base64 of those bytes}`` for every data file while they total at most
  ``INLINE_FOOTERS_MAX`` bytes, else empty (the index stays small for big datasets).

Every path is checked with ``safe_relpath`` before use; an index whose files match but whose content breaks this
contract raises :class:`~lerobot_zarr.errors.CorruptSourceError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CorruptSourceError
from ..utils.fileio import load_json

if TYPE_CHECKING:  # pyarrow is imported where the index is read
    import pyarrow.parquet as pq

__all__ = ["INDEX_FILE", "INLINE_FOOTERS_MAX", "HubIndex", "write_index", "read_index"]

INDEX_FILE = "meta/lerobot_zarr_index.json"
MAX_INDEX_BYTES = 512 << 20  # an index larger than this (or than the files it describes) is not read
log = logging.getLogger("lerobot_zarr")
FORMAT_VERSION = 2
INLINE_FOOTERS_MAX = 2 * 2**20
_COVERED = ("meta/", "data/", "videos/")


@dataclass(frozen=True)
class HubIndex:
    """A checked index: what :class:`~lerobot_zarr.lerobot.source.LeRobotSource` takes from it."""

    info: dict
    tasks: list[str]
    stats: dict
    length: np.ndarray  # int64 (E,)
    data_file: list[str]  # per episode
    file_row: np.ndarray  # int64 (E,)
    episode_tasks: list[list[str]]
    videos: dict[str, list[tuple[str, float]]]  # per video key and episode: (mp4 path, from_timestamp)
    footer_bytes: dict[str, int]
    footers: dict[str, pq.FileMetaData]


def identity(path: Path) -> dict[str, str]:
    """The ids the Hub lists a file by: sha256 (LFS files) and git blob sha1 (regular files)."""
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha256.update(chunk)
            sha1.update(chunk)
    return {"sha256": sha256.hexdigest(), "git_sha1": sha1.hexdigest()}


def footer_bytes(path: Path) -> bytes:
    """A parquet file's footer as stored at its end (FileMetaData, its length, ``PAR1``): enough to read any row
    group by range."""
    with open(path, "rb") as f:
        f.seek(-8, os.SEEK_END)
        length = int.from_bytes(f.read(4), "little")
        f.seek(-8 - length, os.SEEK_END)
        return f.read(length + 8)


def write_index(root: Path, *, info: dict, tasks: Sequence[str], stats: dict, length: Sequence[int],
                data_file: Sequence[str], file_row: Sequence[int], episode_tasks: Sequence[Sequence[str]],
                videos: Mapping[str, Sequence[tuple[str, float]]]) -> None:
    """Write ``root/meta/lerobot_zarr_index.json`` for the LeRobot v3.0 folder ``root`` (its other files written
    already). Per episode: ``length``, ``data_file``, ``file_row``, ``episode_tasks``; ``videos``: per video key,
    each episode's (mp4 path, from_timestamp)."""
    covered = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                     if p.is_file() and p.relative_to(root).as_posix().startswith(_COVERED))
    covered = [rel for rel in covered if rel != INDEX_FILE]
    data_files = sorted(set(data_file))
    video_files = sorted({rel for refs in videos.values() for rel, _ in refs})
    task_number = {task: i for i, task in enumerate(tasks)}
    data_number = {rel: i for i, rel in enumerate(data_files)}
    video_number = {rel: i for i, rel in enumerate(video_files)}
    footers = {rel: footer_bytes(root / rel) for rel in data_files}
    inline = sum(map(len, footers.values())) <= INLINE_FOOTERS_MAX
    document = {
        "format_version": FORMAT_VERSION,
        "files": {rel: identity(root / rel) for rel in covered},
        "info": info,
        "tasks": list(tasks),
        "stats": stats,
        "data_files": data_files,
        "video_files": video_files,
        "episodes": {
            "length": [int(n) for n in length],
            "data_file": [data_number[rel] for rel in data_file],
            "file_row": [int(r) for r in file_row],
            "tasks": [[task_number[t] for t in ts] for ts in episode_tasks],
            "videos": {key: {"file": [video_number[rel] for rel, _ in refs],
                             "from_timestamp": [float(t) for _, t in refs]} for key, refs in videos.items()},
        },
        "footer_bytes": {rel: len(footers[rel]) for rel in data_files},
        "footers": {rel: base64.b64encode(footers[rel]).decode() for rel in data_files} if inline else {},
    }
    path = root / INDEX_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, separators=(",", ":"), ensure_ascii=False), encoding="utf-8")


def read_index(files: Any) -> HubIndex | None:
    """The index of ``files`` (a :class:`~lerobot_zarr.lerobot.source_files.SourceFiles`) if it has one that still
    describes its files, else None. One request: the index file."""
    import pyarrow as pa

    from .source_files import safe_relpath

    if not files.sizes or not files.exists(INDEX_FILE):
        return None  # a source that cannot tell whether the index still describes its files (a local folder)
    where = files.location(INDEX_FILE)
    sizes = files.sizes
    described = sum(n for rel, n in sizes.items() if rel != INDEX_FILE and not rel.startswith("videos/"))
    if sizes.get(INDEX_FILE, 0) > min(MAX_INDEX_BYTES, described + (1 << 20)):
        # checked before it is read: it holds metadata and footers of the other files, never more than they do
        log.warning("%s: %d bytes, more than the files it describes; ignored (LeRobot's files are read instead)",
                    where, sizes[INDEX_FILE])
        return None
    doc = load_json(files.read_bytes(INDEX_FILE), where, error=CorruptSourceError)
    if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
        return None  # another version: LeRobot's files are read instead
    ids = doc.get("files")
    if not isinstance(ids, dict) or not all(isinstance(v, dict) and files.matches(rel, v) for rel, v in ids.items()):
        return None  # written for other files (the repo was changed by another tool): ignore it
    try:
        return _parse(doc, where, lambda rel, what: safe_relpath(files.location(), rel, what))
    except CorruptSourceError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OSError, binascii.Error,
            pa.ArrowException) as exc:
        raise CorruptSourceError(f"{where}: unreadable index ({exc!r})") from exc


def _parse(doc: dict, where: str, safe: Any) -> HubIndex:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def bad(what: str) -> CorruptSourceError:
        return CorruptSourceError(f"{where}: {what}")

    def ints(values: Any, what: str, low: int) -> np.ndarray:
        if not isinstance(values, list) or not all(type(v) is int and v >= low for v in values):
            raise bad(f"{what} must be a list of integers >= {low}")
        return np.asarray(values, dtype=np.int64).reshape(-1)

    info, stats, tasks = doc["info"], doc["stats"], doc["tasks"]
    if not isinstance(info, dict) or not isinstance(stats, dict):
        raise bad("info and stats must be JSON objects")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise bad("tasks must be a list of strings")
    listed = set(doc["files"])
    data_files = [safe(rel, "index data") for rel in doc["data_files"]]
    video_files = [safe(rel, "index video") for rel in doc["video_files"]]
    if not set(data_files) | set(video_files) <= listed:
        raise bad("names data or video files its 'files' does not list")
    episodes = doc["episodes"]
    length = ints(episodes["length"], "episode lengths", 1)
    n = len(length)
    data_index, file_row = ints(episodes["data_file"], "data_file", 0), ints(episodes["file_row"], "file_row", 0)
    if len(data_index) != n or len(file_row) != n or (n and data_index.max() >= len(data_files)):
        raise bad("episode columns disagree in length or name no data file")
    task_lists = episodes["tasks"]
    if not isinstance(task_lists, list) or len(task_lists) != n:
        raise bad("episode tasks must be a list per episode")
    episode_tasks = [[tasks[int(i)] for i in ints(ts, "episode tasks", 0)] for ts in task_lists]
    videos: dict[str, list[tuple[str, float]]] = {}
    for key, refs in episodes["videos"].items():
        which = ints(refs["file"], f"videos of {key!r}", 0)
        starts = refs["from_timestamp"]
        if (len(which) != n or not isinstance(starts, list) or len(starts) != n
                or not all(type(t) in (int, float) and math.isfinite(t) and t >= 0 for t in starts)
                or (n and which.max() >= len(video_files))):
            raise bad(f"videos of {key!r} must give each episode a video file and a from_timestamp >= 0")
        videos[key] = [(video_files[int(i)], float(t)) for i, t in zip(which, starts, strict=True)]
    sizes = doc["footer_bytes"]
    if set(sizes) != set(data_files) or not all(type(v) is int and v >= 8 for v in sizes.values()):
        raise bad("footer_bytes must give every data file its footer length")
    inline = doc["footers"]
    if inline and set(inline) != set(data_files):
        raise bad("footers must be given for every data file or none")
    footers = {}
    for rel, text in inline.items():
        raw = base64.b64decode(text, validate=True)
        if len(raw) != sizes[rel] or raw[-4:] != b"PAR1":
            raise bad(f"the footer of {rel} is not a parquet footer of {sizes[rel]} bytes")
        footers[rel] = pq.read_metadata(pa.BufferReader(b"PAR1" + raw))
    return HubIndex(info, list(tasks), stats, length, [data_files[int(i)] for i in data_index], file_row,
                    episode_tasks, videos, dict(sizes), footers)
