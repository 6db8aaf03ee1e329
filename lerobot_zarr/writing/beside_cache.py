"""What the exports beside a store being recorded keep from one to the next (:func:`~.export.export_beside` with a
:class:`BesideCache`): each exported episode's part of the data files, and the data and video files the last export
wrote, so that exporting after each saved episode computes that episode's rows and stats only, links the files an
earlier export closed, and writes again the last (open) data file and the last video file of each camera (those grow
with the episodes they hold, up to their size limit), plus the metadata (which grows with the episode count)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pyarrow as pa

    from ..sampling.dataset import LeRobotZarrDataset

__all__ = ["BesideCache", "EpisodeRows", "DataFileRecord", "VideoFileRecord", "episode_keys", "linked_file",
           "linked_video"]


class BesideCache:
    """What the exports beside one store being recorded (:func:`export_beside` after each saved episode) keep from
    one to the next: each exported episode's part of the data files (its rows, as a table, while they are held
    within ``table_bytes``; its stats and tasks), keyed by the episode's place and the content hashes the store
    recorded for it, and the data and video files the last export wrote (the episodes or segments of each, whether it
    was closed, and its size, modification time and inode as written). One thread uses it (the recorder's: its
    ``save_episode`` gives hints and exports, then its ``finalize`` exports)."""

    def __init__(self, table_bytes: int = 256 << 20):
        self.table_bytes = table_bytes
        self.episodes: dict[tuple, EpisodeRows] = {}
        self.files: dict[str, DataFileRecord] = {}
        self.videos: dict[str, dict[str, VideoFileRecord]] = {}  # per camera, per file path
        self.hints: dict[int, dict[str, dict[str, np.ndarray]]] = {}
        self.limit = 0  # the data files' size limit (bytes) the files were written with

    def hint(self, episode: int, stats: Mapping[str, dict[str, np.ndarray]]) -> None:
        """The LeRobot stats of some features of the store's committed ``episode``, computed by its recorder (a
        camera's, from each frame's histogram as it was recorded): the export does not read those frames again.
        Dropped once an export computed the episode's stats (with or without it)."""
        self.hints[episode] = dict(stats)

    def take_hint(self, episode: int) -> dict[str, dict[str, np.ndarray]]:
        """The stats :meth:`hint` gave for ``episode`` (empty: none), removed."""
        return self.hints.pop(episode, {})

    def drop_hints(self, episodes: list[int]) -> None:
        """Forget the hints of ``episodes`` (exported: their stats are kept with their rows)."""
        for episode in episodes:
            self.hints.pop(episode, None)

    def rows(self, key: tuple | None) -> EpisodeRows | None:
        return None if key is None else self.episodes.get(key)

    def keep(self, key: tuple | None, rows: EpisodeRows) -> None:
        if key is None:
            return
        self.episodes[key] = rows
        held = sum(r.table.nbytes for r in self.episodes.values() if r.table is not None)
        for r in self.episodes.values():  # the oldest episodes' rows dropped first (their data file is closed)
            if held <= self.table_bytes:
                break
            if r.table is not None and r is not rows:
                held -= r.table.nbytes
                r.table = None


@dataclass
class EpisodeRows:
    """One exported episode's part of the data files: its rows (None: dropped to bound memory), stats, tasks."""

    table: pa.Table | None
    stats: dict[str, dict[str, np.ndarray]]
    tasks: list[str]


class _Written:
    """A file an export wrote beside the store, as written (its size, modification time and inode)."""

    size: int
    mtime_ns: int
    ino: int

    def stamp(self, path: Path) -> None:
        """Record the file at ``path`` as written."""
        st = path.stat()
        self.size, self.mtime_ns, self.ino = st.st_size, st.st_mtime_ns, st.st_ino

    def unchanged(self, path: Path) -> bool:
        """Whether the file at ``path`` is still the one recorded (:meth:`stamp`)."""
        try:
            st = path.stat()
        except OSError:
            return False
        return (st.st_size, st.st_mtime_ns, st.st_ino) == (self.size, self.mtime_ns, self.ino)


@dataclass
class DataFileRecord(_Written):
    """A data file an export wrote beside the store: its episodes' keys, whether a next file followed it, and its
    size, modification time and inode once written."""

    keys: list[tuple | None]
    closed: bool
    size: int = -1
    mtime_ns: int = -1
    ino: int = -1


@dataclass
class VideoFileRecord(_Written):
    """A video file an export wrote beside the store: its episodes' segment names (None: an episode without a
    recorded hash, never linked) and places (``chunk, file, from, to``), the size limit it was made with, whether a
    next file followed it, and its size, modification time and inode once written."""

    names: list[str | None]
    places: list[tuple[int, int, float, float]]
    limit: float
    closed: bool = False
    size: int = -1
    mtime_ns: int = -1
    ino: int = -1


def episode_keys(ds: LeRobotZarrDataset, selected: list[int], starts: list[int], columns: list[str]
                  ) -> list[tuple | None]:
    """What an exported episode's part of the data files depends on: its place (exported index, first frame), the
    columns, and the content hash the store recorded for each feature of it (None where one is not recorded: not
    cached). The features' info (a depth camera's unit) and the tasks' text are the store's, unchanged while it is
    recorded."""
    state = ds.gather_layout()["state"]
    names = sorted(ds.array_specs)
    hashes = np.stack([state.episode_hashes(k) for k in names]) if names else np.empty((0, 0))
    out: list[tuple | None] = []
    for e, src in enumerate(selected):
        crcs = tuple(int(h) for h in hashes[:, src])
        out.append(None if any(h < 0 for h in crcs) else
                   (e, starts[e], int(ds.meta.episode_length[src]), tuple(columns), tuple(zip(names, crcs))))
    return out


def linked_file(cache: BesideCache | None, root: Path, rel: str, keys: list[tuple | None], limit: int
                 ) -> list[EpisodeRows] | None:
    """The data file ``rel`` as the last export beside the store wrote it, hard linked into ``root`` (the new
    files), if that export closed it (files of ``limit`` bytes), it holds the first of ``keys``' episodes, unchanged,
    and it is still as written (size, modification time, inode); its episodes' parts (None: the file is written
    again)."""
    if cache is None:
        return None
    record = cache.files.get(rel) if cache.limit == limit else None
    if record is None or not record.closed or None in record.keys or record.keys != keys[:len(record.keys)]:
        return None
    parts = [cache.rows(key) for key in record.keys]
    if None in parts or not record.unchanged(root.parent / rel):
        return None
    _link(root, rel)
    return parts


def linked_video(cache: BesideCache, root: Path, rel: str, names: list[str | None], limit: float
                 ) -> VideoFileRecord | None:
    """The video file ``rel`` as the last export beside the store wrote it, hard linked into ``root`` (the new
    files), if that export closed it (files of ``limit`` raw bytes), it joined the first of ``names``' segments (the
    episodes' from here), and it is still as written; its record (None: the file is joined again)."""
    key = Path(rel).parts[1]  # videos/<camera>/chunk-*/file-*.mp4
    record = cache.videos.get(key, {}).get(rel)
    if record is None or not record.closed or record.limit != limit or None in record.names \
            or record.names != names[:len(record.names)] or not record.unchanged(root.parent / rel):
        return None
    _link(root, rel)
    return record


def _link(root: Path, rel: str) -> None:
    from ..utils.fileio import link_or_copy

    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    link_or_copy(root.parent / rel, root / rel)
