"""Readers of cameras that are not memory-mapped raw frames: compact packs (one encoded frame per zarr inner chunk,
decoded in parallel) and cameras kept as the source's mp4 files (decoded on read, containers kept open).

Both answer ``read(ds, episodes, frames)``: the frames ``frames[k]`` (episode-local) of ``episodes[k]``, as a new
``(n, H, W, C)`` uint8 array; the dataset passes itself for the episode table and the stored timestamps.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..utils.fileio import check_in_store, load_json, read_bounded
from ..store.packs import open_pack, read_shard_index
from ..errors import CorruptStoreError, NotMaterializedError
from ..cameras.frame_codecs import decode_batch, frame_codec
from ..store.state import ArraySpec, PackLayout, StoreState, chunk_path, retired_path
from ..cameras.video import have_pyav, pyav_missing

if TYPE_CHECKING:
    from .dataset import LeRobotZarrDataset

__all__ = ["CodecFrames", "VideoFrames", "MP4_INDEX", "mp4_index_path", "read_mp4_index", "mp4_file",
           "cameras_needing_pyav", "served_episodes"]

MP4_INDEX = "mp4.json"


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


class CodecFrames:
    """A compact camera: each pack a zarr shard, mapped read-only (at most ``max_open`` at once), its index read
    once, frames decoded with the array's frame codec straight into the output, in parallel for big batches."""

    def __init__(self, root: str | os.PathLike, name: str, spec: ArraySpec, packs: PackLayout, max_open: int):
        self.root, self.name, self.spec, self.packs = os.fspath(root), name, spec, packs
        self.codec = frame_codec(spec.codec_spec, spec.frame_shape)
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

    def read(self, ds: LeRobotZarrDataset, episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
        return self.read_rows(ds._chunk[episodes], ds._offset[episodes] + frames)

    def close(self) -> None:
        _close_all(self.open)


def _close_all(open_packs: dict) -> None:
    for data, _ in open_packs.values():
        with contextlib.suppress(BufferError):  # a view still held elsewhere: the map goes with its last view
            data.close()
    open_packs.clear()


def mp4_index_path(root: str | os.PathLike, name: str) -> Path:
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


def mp4_file(root: str | os.PathLike, name: str, file: str) -> str:
    """Path of a camera's mp4 file inside the store, checked: no folder from the store root down, nor the file
    itself, is a symbolic link (so a planted link can make neither reads nor publishing leave the store)."""
    path = check_in_store(root, f"{os.fspath(root)}/{name}/videos/{file}")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise CorruptStoreError(f"{path}: the mp4 file of camera {name!r} is missing", path=path,
                                feature=name) from None
    if not stat.S_ISREG(mode):
        raise CorruptStoreError(f"{path}: the mp4 file of camera {name!r} is not a regular file (a symbolic link?)",
                                path=path, feature=name)
    return path


class VideoFrames:
    """A camera kept as mp4: frames decoded on read at the dataset's timestamps (LeRobot's nearest frame within
    1e-4 s) by :class:`~lerobot_zarr.cameras.video_reader.Mp4Frames`, which keeps containers open, seeks to keyframes only
    when needed and caches the frames it decoded; resized after decoding if the camera is."""

    def __init__(self, root: str | os.PathLike, name: str, spec: ArraySpec, n_episodes: int):
        from ..cameras.video_reader import Mp4Frames

        self.root, self.name, self.spec = Path(root), name, spec
        self.index = read_mp4_index(root, name, n_episodes)
        resize = spec.resize_spec
        source_shape = tuple(resize["from"]) if resize else spec.frame_shape
        self.reader = Mp4Frames(source_shape, opener=lambda key: mp4_file(self.root, name, key))

    def read(self, ds: LeRobotZarrDataset, episodes: np.ndarray, frames: np.ndarray) -> np.ndarray:
        file_of = self.index["file"][episodes]
        if (file_of < 0).any():
            e = int(episodes[np.argmax(file_of < 0)])
            raise NotMaterializedError(f"{ds.root}: episode {e} has no video of {self.name!r}", episode=e,
                                       feature=self.name)
        times = self.index["from_timestamp"][episodes] + ds._timestamps(episodes, frames)
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
