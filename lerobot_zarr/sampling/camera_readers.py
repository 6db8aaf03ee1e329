"""Readers of cameras that are not memory-mapped raw frames: compact packs (one encoded frame per zarr inner chunk,
decoded in parallel) and cameras kept as the source's mp4 files (decoded on read, containers kept open).

Both answer ``read(episodes, frames)``: the frames ``frames[k]`` (episode-local) of ``episodes[k]``, as a new
``(n, H, W, C)`` uint8 array. They are made for one committed state and given what they need of it: the episode
table's pack and row of each episode (compact), the stored timestamps of frames (mp4).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..cameras.frame_codecs import decode_batch, frame_codec
from ..errors import CorruptStoreError, NotMaterializedError
from ..store.cameras import mp4_file, read_mp4_index
from ..store.packs import open_pack, read_shard_index
from ..store.state import chunk_path, retired_path
from ..store.tables import ArraySpec, PackLayout
from ..store.text import decode_text, text_value
from .maps import PackMaps

__all__ = ["CodecFrames", "TextFrames", "VideoFrames", "Timestamps", "stored_timestamps"]

Timestamps = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (episodes, episode-local frames) -> stored seconds


def stored_timestamps(maps: PackMaps, chunk: np.ndarray, offset: np.ndarray) -> Timestamps:
    """The stored ``timestamp`` of episode-local frames, read through the raw maps (episode e is at row
    ``offset[e]`` of pack ``chunk[e]``): what a camera kept as mp4 is decoded at."""
    def times(episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
        rows = maps.base_rows("timestamp")[chunk[episodes]] + offset[episodes] + frames
        return maps.views["timestamp"][rows].astype(np.float64)

    return times


class CodecFrames:
    """A compact camera: each pack a zarr shard, mapped read-only (at most ``max_open`` at once), its index read
    once, frames decoded with the array's frame codec straight into the output, in parallel for big batches."""

    def __init__(self, root: str | os.PathLike, name: str, spec: ArraySpec, packs: PackLayout, chunk: np.ndarray,
                 offset: np.ndarray, max_open: int):
        self.root, self.name, self.spec, self.packs = os.fspath(root), name, spec, packs
        self.chunk, self.offset = chunk, offset  # pack and first row of each episode (the episode table's)
        self.codec = None if spec.is_text else frame_codec(spec.codec_spec, spec.frame_shape)
        self.max_open = max(1, max_open)
        self.open: dict[int, tuple[mmap.mmap, np.ndarray]] = {}  # pack -> (map, index), oldest first
        self._finalizer = weakref.finalize(self, _close_all, self.open)

    def _pack(self, pack: int) -> tuple[mmap.mmap, np.ndarray]:
        entry = self.open.pop(pack, None)
        if entry is None:
            rows = int(self.packs.rows[pack])
            fd = open_pack(chunk_path(self.root, self.name, pack, self.spec.ndim), -1, root=self.root,
                           retired=retired_path(self.root, self.name, pack),
                           what=f"pack {pack} of feature {self.name!r}", feature=self.name)
            try:
                index = read_shard_index(fd, self.spec, rows, 0, rows, f"pack {pack} of feature {self.name!r}",
                                         allow_empty=True)
                entry = (mmap.mmap(fd, 0, prot=mmap.PROT_READ), index)
            finally:
                os.close(fd)
            while len(self.open) >= self.max_open:
                self.open.pop(next(iter(self.open)))[0].close()
        self.open[pack] = entry  # most recently used last
        return entry

    def read_rows(self, packs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Frames at ``rows`` of ``packs`` (equal-length arrays), decoded."""
        out = np.empty((len(rows), *self.spec.frame_shape), dtype=np.uint8)
        blobs: list[memoryview] = []
        try:
            for pack, row in zip(np.asarray(packs).tolist(), np.asarray(rows).tolist(), strict=True):
                data, index = self._pack(pack)
                offset, nbytes = index[row]
                if offset < 0:
                    raise CorruptStoreError(f"{self.root}: pack {pack} of {self.name!r} has no frame at row {row}")
                blobs.append(memoryview(data)[offset:offset + nbytes])
            decode_batch(self.codec, blobs, out,
                         where=lambda k: f"{self.name!r} pack {int(packs[k])} row {int(rows[k])}")
        finally:  # views of the maps must not outlive this call (an error's traceback would keep them)
            for blob in blobs:
                blob.release()
        return out

    def read(self, episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
        return self.read_rows(self.chunk[episodes], self.offset[episodes] + frames)

    def close(self) -> None:
        _close_all(self.open)


class TextFrames(CodecFrames):
    """A text array (:mod:`lerobot_zarr.store.text`): packs like a compact camera's, each frame one string. ``read``
    gives the values items hold (``str``; a language column's Python value, new each time), ``read_stored`` the
    stored strings, both as 1-D object arrays."""

    def read_stored(self, episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
        packs, rows = self.chunk[episodes], self.offset[episodes] + frames
        out = np.empty(len(rows), dtype=object)
        last: tuple[int, int, str] | None = None  # frames sharing their bytes (equal neighbours) decode once
        for k, (pack, row) in enumerate(zip(np.asarray(packs).tolist(), np.asarray(rows).tolist(), strict=True)):
            data, index = self._pack(pack)
            offset, nbytes = index[row]
            if offset < 0:
                raise CorruptStoreError(f"{self.root}: pack {pack} of {self.name!r} has no frame at row {row}")
            if last is None or last[:2] != (pack, offset):
                where = f"{self.root}: {self.name!r} pack {pack} row {row}"
                with memoryview(data)[offset:offset + nbytes] as blob:
                    last = (pack, offset, decode_text(blob, where))
            out[k] = last[2]
        return out

    def read(self, episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
        out = self.read_stored(episodes, frames)
        if self.spec.kind == "language":
            for k, text in enumerate(out.tolist()):
                out[k] = text_value("language", text, f"{self.root}: {self.name!r}")
        return out


def _close_all(open_packs: dict) -> None:
    for data, _ in open_packs.values():
        with contextlib.suppress(BufferError):  # a view still held elsewhere: the map goes with its last view
            data.close()
    open_packs.clear()


class VideoFrames:
    """A camera kept as mp4: frames decoded on read at the stored timestamps (LeRobot's nearest frame within
    1e-4 s) by :class:`~lerobot_zarr.cameras.video_reader.Mp4Frames`, which plans each batch by file and keyframe
    interval, decodes in parallel threads and keeps containers open across batches (bounded; closed by
    :meth:`close`); resized after decoding if the camera is. ``opener``: a file key to what the decoder reads (a
    store in a bucket: a file object over byte ranges); by default the store's file."""

    def __init__(self, root: str | os.PathLike, name: str, spec: ArraySpec, n_episodes: int, timestamps: Timestamps,
                 opener: Callable[[str], str | BinaryIO] | None = None):
        from ..cameras.video_reader import Mp4Frames

        self.root, self.name, self.spec, self.timestamps = Path(root), name, spec, timestamps
        self.index = read_mp4_index(root, name, n_episodes)
        resize = spec.resize_spec
        source_shape = tuple(resize["from"]) if resize else spec.frame_shape
        store = self.root  # not self: a reader referring back to its owner would only be freed by the collector
        self.reader = Mp4Frames(source_shape, opener=opener or (lambda key: mp4_file(store, name, key)),
                                depth=spec.dtype == np.uint16)  # a depth map's 12-bit codes

    def read(self, episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
        file_of = self.index["file"][episodes]
        if (file_of < 0).any():
            e = int(episodes[np.argmax(file_of < 0)])
            raise NotMaterializedError(f"{self.root}: episode {e} has no video of {self.name!r}", episode=e,
                                       feature=self.name)
        times = self.index["from_timestamp"][episodes] + self.timestamps(episodes, frames)
        files = [self.index["files"][f] for f in file_of.tolist()]
        decoded = self.reader.read_many(files, times)
        resize = self.spec.resize_spec
        if not resize:
            return decoded
        from ..cameras.resize import resize_frames

        return resize_frames(decoded, resize["size"], crop=resize.get("crop"),
                             interpolation=resize.get("interpolation", "bilinear"))

    def close(self) -> None:
        self.reader.close()
