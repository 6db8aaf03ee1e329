"""Pack files: creating them, writing episodes' rows into them, opening them for reading, retiring them.

A raw pack file is exactly ``rows * frame_bytes`` bytes, created sparse at full size before any row is written,
so positional writes of different episodes (threads, dask workers) never race and unwritten rows take no disk.
A compact pack is a zarr shard whose index (``rows`` x (offset, nbytes) uint64, then its crc32c) comes first: frames
are encoded with the array's frame codec (:mod:`~lerobot_zarr.frame_codecs`) and appended after it, then their
index entries are filled in; one process writes a compact
pack at a time (transcode units are whole packs), threads of that process take the pack's lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._fileio import create_sized, disk_error, open_nofollow, pwrite_all
from .errors import CorruptStoreError
from .store import ArraySpec, chunk_path, retired_path

__all__ = ["ensure_pack", "write_rows", "write_rows_vectored", "row_writer", "open_pack", "open_array_pack",
           "read_raw_rows", "read_shard_index", "retire_pack", "remove_retired", "RowWriter"]

_EMPTY = np.uint64(2**64 - 1)
_pack_locks: dict[str, threading.Lock] = {}
_pack_locks_guard = threading.Lock()


def _lock_of(path: str) -> threading.Lock:
    with _pack_locks_guard:
        return _pack_locks.setdefault(path, threading.Lock())


def _index_bytes(rows: int) -> int:
    return 16 * rows + 4


def _crc(index: bytes) -> bytes:
    from numcodecs import CRC32C

    return bytes(CRC32C().encode(index))[-4:]


def ensure_pack(root: str | os.PathLike, arrays: Mapping[str, ArraySpec], pack: int, rows: int) -> None:
    """Create pack ``pack`` of every array (``rows`` rows) unless it exists: raw files sparse at full size,
    compact files with an empty shard index."""
    for name, spec in arrays.items():
        if spec.storage == "mp4":
            continue
        path = chunk_path(root, name, pack, spec.ndim)
        if spec.storage == "raw":
            create_sized(path, rows * spec.frame_bytes)
        elif spec.shard_index == "start" and not os.path.lexists(path):
            index = np.full(2 * rows, _EMPTY, dtype="<u8").tobytes()
            tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
            fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                pwrite_all(fd, index + _crc(index), 0, path)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)


class RowWriter:
    """Writes consecutive frames of one episode into a pack, frame by frame (a decoder's output goes straight
    to disk for raw packs; compact frames are compressed as they come and appended at :meth:`close`)."""

    def __init__(self, path: str, spec: ArraySpec, offset: int, n_frames: int, pack_rows: int):
        self.path, self.spec, self.offset, self.n_frames, self.pack_rows = path, spec, offset, n_frames, pack_rows
        self.written = 0
        if spec.storage == "raw":
            self.fd = open_nofollow(path, os.O_WRONLY)
        else:
            from .frame_codecs import frame_codec

            self.codec = frame_codec(spec.codec_spec, spec.frame_shape)
            self.frames: list[bytes] = []

    def write(self, frame: bytes | np.ndarray) -> None:
        """Append one frame (raw bytes of the stored shape, or an array of it)."""
        if self.written >= self.n_frames:
            raise CorruptStoreError(f"{self.path}: more than the {self.n_frames} frames of the episode written")
        if self.spec.storage == "raw":
            data = frame if isinstance(frame, bytes) else memoryview(np.ascontiguousarray(frame)).cast("B")
            pwrite_all(self.fd, data, (self.offset + self.written) * self.spec.frame_bytes, self.path)
        else:
            array = frame if isinstance(frame, np.ndarray) else \
                np.frombuffer(frame, dtype=np.uint8).reshape(self.spec.frame_shape)
            self.frames.append(self.codec.encode(array))
        self.written += 1

    def close(self) -> None:
        if self.spec.storage == "raw":
            os.close(self.fd)
        elif self.written == self.n_frames:
            _append_compact(self.path, self.spec, self.offset, self.frames, self.pack_rows)

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None and self.spec.storage != "raw":
            self.frames = []
            self.written = -1  # nothing appended for a failed episode
        self.close()


def row_writer(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, offset: int, n_frames: int,
               pack_rows: int) -> RowWriter:
    return RowWriter(chunk_path(root, name, pack, spec.ndim), spec, offset, n_frames, pack_rows)


def write_rows(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, offset: int, frames: np.ndarray,
               pack_rows: int) -> None:
    """Write one episode's frames of ``name`` at row ``offset`` of pack ``pack`` of ``pack_rows`` rows (which
    must exist: :func:`ensure_pack`)."""
    path = chunk_path(root, name, pack, spec.ndim)
    data = np.ascontiguousarray(frames, dtype=spec.dtype)
    if spec.storage == "raw":
        fd = open_nofollow(path, os.O_WRONLY)
        try:
            pwrite_all(fd, memoryview(data.reshape(-1)).cast("B"), offset * spec.frame_bytes, path)
        finally:
            os.close(fd)
        return
    with RowWriter(path, spec, offset, len(data), pack_rows) as writer:
        for frame in data:
            writer.write(frame)


_IOV_MAX = 512


def write_rows_vectored(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, offset: int,
                        parts: list[np.ndarray]) -> None:
    """Write consecutive episodes' frames (``parts``, in order) of a raw feature from row ``offset`` of a pack in
    as few system calls as possible: large writes put large folios in the page cache, which the kernel then maps
    with huge pages (fewer page faults and TLB misses when sampling)."""
    path = chunk_path(root, name, pack, spec.ndim)
    buffers = [memoryview(np.ascontiguousarray(a, dtype=spec.dtype).reshape(-1)).cast("B") for a in parts]
    fd = open_nofollow(path, os.O_WRONLY)
    try:
        position = offset * spec.frame_bytes
        for i in range(0, len(buffers), _IOV_MAX):
            group = buffers[i:i + _IOV_MAX]
            total = sum(len(b) for b in group)
            if hasattr(os, "pwritev"):
                written = os.pwritev(fd, group, position)
                if written < total:  # short write: finish it piece by piece
                    pwrite_all(fd, b"".join(group)[written:], position + written, path)
            else:
                pwrite_all(fd, b"".join(group), position, path)
            position += total
    except OSError as exc:
        raise disk_error(exc, path) from None
    finally:
        os.close(fd)


def _append_compact(path: str, spec: ArraySpec, offset: int, frames: list[bytes], rows: int) -> None:
    """Append compressed frames to a compact pack and point rows ``offset...`` of its index at them."""
    if spec.shard_index != "start":  # format 2: a shard per episode, its index at the end, written whole
        if offset != 0:
            raise CorruptStoreError(f"{path}: format-2 compact chunks hold one episode each")
        index = np.zeros((len(frames), 2), dtype="<u8")
        pos = 0
        for i, frame in enumerate(frames):
            index[i] = (pos, len(frame))
            pos += len(frame)
        fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            pwrite_all(fd, b"".join(frames) + index.tobytes() + _crc(index.tobytes()), 0, path)
        finally:
            os.close(fd)
        return
    with _lock_of(path):
        fd = open_nofollow(path, os.O_RDWR)
        try:
            end = os.fstat(fd).st_size
            if end < _index_bytes(rows):
                raise CorruptStoreError(f"{path}: compact pack of {end} bytes cannot hold the index of {rows} rows")
            if offset + len(frames) > rows:
                raise CorruptStoreError(f"{path}: rows {offset}..{offset + len(frames)} are outside the pack's {rows}")
            entries = np.empty((len(frames), 2), dtype="<u8")
            pos = end
            for i, frame in enumerate(frames):
                entries[i] = (pos, len(frame))
                pos += len(frame)
            pwrite_all(fd, b"".join(frames), end, path)
            pwrite_all(fd, entries.tobytes(), 16 * offset, path)
            index = os.pread(fd, 16 * rows, 0)
            pwrite_all(fd, _crc(index), 16 * rows, path)
        finally:
            os.close(fd)


def read_shard_index(fd: int, spec: ArraySpec, rows: int, first: int, count: int, where: str, *,
                     allow_empty: bool = False) -> np.ndarray:
    """``(offset, nbytes)`` of rows ``first .. first + count`` of a compact pack of ``rows`` rows, checked against
    the file size (and, for end-index shards, their crc32c). Rows never written are an error, or with
    ``allow_empty`` (a whole pack's index, some of whose episodes are not fetched yet) ``(-1, 0)``."""
    size = os.fstat(fd).st_size
    if spec.shard_index == "start":
        if size < _index_bytes(rows):
            raise CorruptStoreError(f"{where}: compact pack of {size} bytes cannot hold the index of {rows} rows")
        raw = os.pread(fd, 16 * count, 16 * first)
        index = np.frombuffer(raw, dtype="<u8").reshape(count, 2)
    else:
        from numcodecs import CRC32C

        tail = _index_bytes(rows)
        if size < tail:
            raise CorruptStoreError(f"{where}: compact chunk of {size} bytes cannot hold the index of {rows} frames")
        try:
            full = np.frombuffer(CRC32C().decode(os.pread(fd, tail, size - tail)), dtype="<u8").reshape(rows, 2)
        except RuntimeError as exc:
            raise CorruptStoreError(f"{where}: compact chunk index is corrupt ({exc})") from None
        index = full[first:first + count]
    empty = index[:, 0] == _EMPTY
    if (empty.any() and not allow_empty) or ((index[~empty, 0] + index[~empty, 1]) > size).any():
        raise CorruptStoreError(f"{where}: compact pack index points outside the file or at frames never written")
    out = index.astype(np.int64)
    out[empty] = (-1, 0)
    return out


def open_pack(path: str | os.PathLike, nbytes: int, *, retired: str | os.PathLike | None, what: str,
              flags: int = os.O_RDONLY, feature: str | None = None) -> int:
    """Open a committed pack file (refusing symlinks, in the path too: the store's folders are checked) and check
    its size (unless ``nbytes`` < 0: compact packs); return the descriptor. ``retired`` is where the file is found
    if a writer retired the pack after the caller read its commit."""
    try:
        fd = _open_in_store(path, flags)
    except FileNotFoundError:
        fd = None
        if retired is not None:
            with contextlib.suppress(FileNotFoundError):
                fd = _open_in_store(retired, flags)
                path = retired
        if fd is None:
            raise CorruptStoreError(f"{path}: {what} is missing (if a writer deleted episodes since this dataset "
                                    f"was opened, open it again)", path=path, feature=feature) from None
    size = os.fstat(fd).st_size
    if nbytes >= 0 and size != nbytes:
        os.close(fd)
        raise CorruptStoreError(f"{path}: {what} holds {size} bytes, expected {nbytes}", path=path, feature=feature)
    return fd


def open_array_pack(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, rows: int,
                    flags: int = os.O_RDONLY) -> int:
    """:func:`open_pack` of pack ``pack`` (``rows`` rows) of array ``name`` of the store at ``root``."""
    nbytes = rows * spec.frame_bytes if spec.storage == "raw" else -1
    return open_pack(chunk_path(root, name, pack, spec.ndim), nbytes, retired=retired_path(root, name, pack),
                     what=f"pack {pack} of feature {name!r}", flags=flags, feature=name)


def read_raw_rows(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, pack_rows: int, offset: int,
                  length: int) -> np.ndarray:
    """A copy of ``length`` committed rows from row ``offset`` of a raw pack."""
    fd = open_array_pack(root, name, spec, pack, pack_rows)
    with os.fdopen(fd, "rb") as f:
        f.seek(offset * spec.frame_bytes)
        return np.fromfile(f, dtype=spec.dtype, count=length * int(np.prod(spec.frame_shape, dtype=np.int64))
                           ).reshape(length, *spec.frame_shape)


def _open_in_store(path: str | os.PathLike, flags: int) -> int:
    """Open a file inside a store refusing a symlink at the file and at its two parent folders (``c/<k>/...``
    layouts), so that a symlinked chunk folder cannot point reads or writes outside the store."""
    path = os.fspath(path)
    parent = os.path.dirname(path)
    for folder in (parent, os.path.dirname(parent)):
        if os.path.islink(folder):
            raise CorruptStoreError(f"{folder}: is a symbolic link; store folders must be real folders", path=folder)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: a symlink in place of the file
            raise CorruptStoreError(f"{path}: is a symbolic link; store files must be real files", path=path) from None
        raise


def retire_pack(root: str | os.PathLike, arrays: Mapping[str, ArraySpec], pack: int) -> None:
    """Move a pack's files under ``.retired/`` (readers of older commits still find them there)."""
    for name, spec in arrays.items():
        target = Path(retired_path(root, name, pack))
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(chunk_path(root, name, pack, spec.ndim), target)
        _remove_empty_dirs(Path(root) / name / "c" / str(pack))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"{os.fspath(root)}/frame_live/c/{pack}")


def remove_retired(root: str | os.PathLike, arrays: Mapping[str, ArraySpec], pack: int) -> None:
    for name in arrays:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(retired_path(root, name, pack))


def _remove_empty_dirs(folder: Path) -> None:
    if folder.is_symlink() or not folder.is_dir():
        return
    for child in folder.iterdir():
        _remove_empty_dirs(child)
    with contextlib.suppress(OSError):
        folder.rmdir()
