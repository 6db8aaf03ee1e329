"""One camera's mp4 files of an export (:mod:`.export`): as LeRobot's recorder makes them, each episode encoded on its
own (or its segment taken from the store, :mod:`.segments`) and the episodes' mp4s joined without re-encoding. Beside
a store being recorded (a :class:`~.beside_cache.BesideCache`), a video file an earlier export closed, of the same
segments, is hard linked from the files beside instead of joined again."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cameras.video import Mp4Joiner
from ..lerobot.format import CHUNKS_SIZE, video_file_rel
from ..utils.progress import progress_bar
from .beside_cache import BesideCache, VideoFileRecord, linked_video
from .segments import camera_encodings, episode_hashes, find_segment, make_segment

if TYPE_CHECKING:
    from ..sampling.dataset import LeRobotZarrDataset

__all__ = ["VideoFiles", "write_videos"]

_AV1_RATIO = 20  # raw camera bytes per byte of LeRobot's AV1 (crf 30), roughly: sizes video files


def write_videos(ds: LeRobotZarrDataset, root: Path, key: str, selected: list[int], size_mb: int,
                 progress: bool, encoder_threads: int | None = None, link: bool = False,
                 cache: BesideCache | None = None, encode: bool = True
                 ) -> list[tuple[int, int, float, float]] | None:
    """One camera's mp4 files; per episode its ``(chunk_index, file_index, from_timestamp, to_timestamp)``. As
    LeRobot's recorder makes them: each episode encoded on its own (or its segment made in the background taken
    from the store, :mod:`.segments`), the episodes' mp4s joined without re-encoding; with ``link``, a file of one
    episode is its segment hard-linked (files beside the store only: a file elsewhere that a tool rewrites in place
    must not change the store's segment). ``cache`` (``root`` a folder beside the store): a file an earlier export
    closed, of the same segments and still as written, is hard linked from beside the store, not joined again (only
    the last, open file is); the files written are recorded in it. ``encode=False``: nothing is encoded; None if an
    episode lacks a valid segment. One camera at a time: two live SVT-AV1 encoders in a process were seen to hang
    (2 Dec, before their threads were taken off real-time priority, :mod:`lerobot_zarr.utils.sched`: ~80 threads
    at SCHED_FIFO 99 on 2 cores); the recording's encoder process runs one per camera in threads since (60 episodes
    x 3 cameras beside two busy processes: none hung), the export was left as it was."""
    spec = ds.array_specs[key]
    if spec.storage == "mp4" and not spec.resize:  # the source's bytes, unchanged
        return _copy_mp4(ds, root, key, selected)
    encoding = camera_encodings(ds, [key], encoder_threads)[key]
    lengths = ds.meta.episode_length[selected].tolist()
    hashes = episode_hashes(ds, key)
    names = [encoding.name(int(hashes[src]), n) if int(hashes[src]) >= 0 else None
             for src, n in zip(selected, lengths, strict=True)]
    out = VideoFiles(root, key, float(ds.meta.info["fps"]), spec.frame_bytes, size_mb)
    places: list[tuple[int, int, float, float]] = []
    records: dict[str, VideoFileRecord] = {}
    alone = out.alone(lengths) if link else [False] * len(lengths)
    closes = out.closes(lengths)
    try:
        with progress_bar(sum(lengths), f"encoding {key}", progress) as bar, \
                tempfile.TemporaryDirectory(prefix="lerobot_zarr-episode-mp4-") as tmp:
            e = 0
            while e < len(selected):
                rel = video_file_rel(key, *divmod(out.number, CHUNKS_SIZE))
                if out.joiner is None and cache is not None:  # a new file: the one an earlier export closed?
                    record = linked_video(cache, root, rel, names[e:], out.limit)
                    if record is not None:
                        records[rel] = record
                        places.extend(record.places)
                        bar.update(sum(lengths[e:e + len(record.places)]))
                        e += len(record.places)
                        out.number += 1
                        continue
                src, n, single = selected[e], lengths[e], alone[e]
                segment = find_segment(ds, encoding, src, hashes)
                if segment is None and not encode:
                    return None
                segment = segment or _kept_segment(ds, encoding, src, hashes)
                if segment is not None and single:  # the file is that one episode's mp4: no bytes copied
                    places.append(out.link(segment, n))
                else:
                    if segment is None:
                        segment = make_segment(ds, encoding, src, Path(tmp) / "episode.mp4")
                    places.append(out.add(segment, n))
                record = records.setdefault(rel, VideoFileRecord([], [], out.limit))
                record.names.append(names[e])
                record.places.append(places[-1])
                record.closed = closes[e]  # full: no episode will be added to it
                bar.update(n)
                e += 1
    finally:
        out.close()
    if cache is not None:
        for rel, record in records.items():
            record.stamp(root / rel)
        cache.videos[key] = records
    return places


def _kept_segment(ds: LeRobotZarrDataset, encoding: Any, episode: int, hashes: np.ndarray) -> Path | None:
    """The episode encoded as the store's segment (:func:`~.segments.make_segment`: from frames checked against
    their recorded hash), so that the next export of the unchanged episode joins it instead of encoding it again;
    None where the store cannot keep one (no hash, a folder it cannot write: a read-only store)."""
    try:
        return make_segment(ds, encoding, episode, hashes=hashes)
    except OSError:
        return None


def _copy_mp4(ds: LeRobotZarrDataset, root: Path, key: str,
              selected: list[int]) -> list[tuple[int, int, float, float]]:
    """A camera kept as mp4: the files holding the exported episodes copied unchanged (renumbered as LeRobot's
    ``file-NNN``), each episode at the same seconds of its file."""
    from ..store.cameras import mp4_file, read_mp4_index
    from ..utils.fileio import copy_file

    index = read_mp4_index(ds.root, key, ds.meta.total_episodes)
    numbers: dict[int, int] = {}
    places = []
    for src in selected:
        f = int(index["file"][src])
        if f not in numbers:
            numbers[f] = len(numbers)
            target = root / video_file_rel(key, *divmod(numbers[f], CHUNKS_SIZE))
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_file(mp4_file(ds.root, key, index["files"][f]), target)  # never a file outside the store
        chunk, file = divmod(numbers[f], CHUNKS_SIZE)
        places.append((chunk, file, float(index["from_timestamp"][src]), float(index["to_timestamp"][src])))
    return places


class VideoFiles:
    """One camera's mp4 files: episodes' mp4s joined into the current file until it is estimated to pass the size
    limit. The estimate (raw frame bytes / ``_AV1_RATIO``) keeps exports byte-deterministic: the encoder's own
    threads make the size of a file still being written vary from run to run."""

    def __init__(self, root: Path, key: str, fps: float, frame_bytes: int, size_mb: int):
        self.root, self.key, self.fps, self.frame_bytes = root, key, fps, frame_bytes
        self.limit = size_mb * 2**20 * _AV1_RATIO
        self.number = 0
        self.raw = 0
        self.joiner: Mp4Joiner | None = None

    def closes(self, lengths: Sequence[int]) -> list[bool]:
        """For episodes of ``lengths`` frames added in turn from an empty file: whether the file is full after each
        (the size estimate depends on frame counts only, so this is known before any is added)."""
        out, raw = [], 0
        for n in lengths:
            raw += n * self.frame_bytes
            out.append(raw >= self.limit)
            raw = 0 if out[-1] else raw
        return out

    def alone(self, lengths: Sequence[int]) -> list[bool]:
        """For episodes of ``lengths`` frames added in turn from an empty file: whether each is the only one of its
        file."""
        files = [0]
        for full in self.closes(lengths):
            files[-1] += 1
            if full:
                files.append(0)
        return [count == 1 for count in files for _ in range(count)]

    def link(self, segment: Path, frames: int) -> tuple[int, int, float, float]:
        """One episode's mp4 as a file of its own (a hard link where the filesystem allows, else a copy); the
        caller made sure the episode is alone in its file (:meth:`alone`)."""
        from fractions import Fraction

        from ..utils.fileio import link_or_copy

        assert self.joiner is None
        chunk, file = divmod(self.number, CHUNKS_SIZE)
        path = self.root / video_file_rel(self.key, chunk, file)
        path.parent.mkdir(parents=True, exist_ok=True)
        link_or_copy(segment, path)
        self.number += 1
        return chunk, file, 0.0, float(Fraction(frames) / Fraction(self.fps).limit_denominator(1001))

    def add(self, segment: Path, frames: int) -> tuple[int, int, float, float]:
        """Join one episode's mp4 (``frames`` frames); its ``(chunk_index, file_index, from_timestamp,
        to_timestamp)``."""
        chunk, file = divmod(self.number, CHUNKS_SIZE)
        if self.joiner is None:
            path = self.root / video_file_rel(self.key, chunk, file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.joiner = Mp4Joiner(path, self.fps)
        start, stop = self.joiner.add(segment, frames)
        self.raw += frames * self.frame_bytes
        if self.raw >= self.limit:
            self.close()
        return chunk, file, start, stop

    def close(self) -> None:
        if self.joiner is not None:
            self.joiner.close()
            self.joiner = None
            self.number += 1
            self.raw = 0


