"""Pack files: creating them, writing episodes' rows into them, opening them for reading, retiring them.

A raw pack file is exactly ``rows * frame_bytes`` bytes, created sparse at full size before its first row is
written, so positional writes of different episodes (threads, dask workers) never race and unwritten rows take no
disk. A feature's pack file is made only when a row of it is written: a camera whose video no episode of the pack
has gets none.
A compact pack is a zarr shard whose index (``rows`` x (offset, nbytes) uint64, then its crc32c) comes first: frames
are encoded with the array's frame codec (:mod:`~lerobot_zarr.cameras.frame_codecs`) and appended after it, then their
index entries are filled in; one process writes a compact
pack at a time (transcode units are whole packs), threads of that process take the pack's lock.

Writes return the content hash of what they wrote (:mod:`lerobot_zarr.utils.hashing`), computed from the bytes as
they are written. Every file is opened through the store root's checked folders
(:func:`~lerobot_zarr.utils.fileio.check_in_store`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from ..utils.fileio import check_in_store, create_sized, disk_error, open_nofollow, pwrite_all
from ..utils.hashing import Crc32c, compact_frame_header, crc32c
from .state import chunk_path, retired_path
from .tables import ArraySpec
from .text import decode_text, encode_text

__all__ = ["ensure_pack", "adopt_pack_file", "unadopt_pack_file", "write_rows", "write_pack_bytes", "HUGE_PAGE",
           "APPEND_PIECE", "row_writer", "open_pack", "open_array_pack", "read_raw_rows", "read_text_rows",
           "read_shard_index", "shard_index_bytes", "retire_pack", "remove_retired", "RowWriter", "PackWriters"]

_EMPTY = np.uint64(2**64 - 1)
_pack_locks: dict[str, threading.Lock] = {}
_pack_locks_guard = threading.Lock()


def _lock_of(path: str) -> threading.Lock:
    with _pack_locks_guard:
        return _pack_locks.setdefault(path, threading.Lock())


def shard_index_bytes(rows: int) -> int:
    """Bytes of the index (then its crc32c) at the start of a compact pack of ``rows`` rows."""
    return 16 * rows + 4


def _crc(index: bytes) -> bytes:
    return crc32c(index).to_bytes(4, "little")  # zarr's crc32c index codec: little-endian after the index


def ensure_pack(root: str | os.PathLike, arrays: Mapping[str, ArraySpec], pack: int, rows: int) -> None:
    """Create pack ``pack`` of the given arrays (``rows`` rows) unless it exists: raw files sparse at full size,
    compact files with an empty shard index. Only for arrays whose rows are about to be written."""
    for name, spec in arrays.items():
        if spec.storage != "mp4":
            _ensure_file(root, chunk_path(root, name, pack, spec.ndim), spec, rows)


def _ensure_file(root: str | os.PathLike, path: str, spec: ArraySpec, rows: int) -> None:
    if spec.storage == "raw":
        create_sized(path, rows * spec.frame_bytes, root=root)
    elif spec.shard_index == "start":
        check_in_store(root, path)
        if os.path.lexists(path):
            return
        index = np.full(2 * rows, _EMPTY, dtype="<u8").tobytes()
        tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{os.getpid()}-{threading.get_ident()}"
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


def adopt_pack_file(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, rows: int,
                    path: str | os.PathLike) -> str:
    """Make the file ``path`` of the store (a raw feature's frames from byte 0: the rows of a new pack ``pack``
    that no commit lists yet) that pack's file by a rename instead of a copy of its frames: sized to ``rows`` rows
    first (what it lacks a hole), so that the file at the pack's path always has the pack's size. Returns the
    pack's path (:func:`unadopt_pack_file` moves it back if the commit fails)."""
    target = chunk_path(root, name, pack, spec.ndim)
    check_in_store(root, target)
    fd = open_nofollow(path, os.O_WRONLY, root=root)
    try:
        size = os.fstat(fd).st_size
        if size > rows * spec.frame_bytes:
            raise CorruptStoreError(f"{path}: {size} bytes, more than the {rows} rows of pack {pack} of feature "
                                    f"{name!r}", path=path, feature=name)
        try:
            os.ftruncate(fd, rows * spec.frame_bytes)
        except OSError as exc:
            raise disk_error(exc, path) from None
    finally:
        os.close(fd)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(path, target)  # a file there is debris of an append that never committed (pack >= the packs')
    return target


def unadopt_pack_file(root: str | os.PathLike, target: str, path: str | os.PathLike) -> None:
    """Undo :func:`adopt_pack_file` (its commit failed): the file goes back to ``path`` (its frames unchanged)."""
    check_in_store(root, path)
    os.replace(check_in_store(root, target), path)


class RowWriter:
    """Writes consecutive frames of one episode into a pack, frame by frame (a decoder's output goes straight
    to disk for raw packs; compact frames are compressed as they come and appended at :meth:`close`). The pack
    file is made at the first frame. ``crc`` is the content hash of what was written (after :meth:`close`)."""

    def __init__(self, root: str | os.PathLike, path: str, spec: ArraySpec, offset: int, n_frames: int,
                 pack_rows: int):
        self.root, self.path, self.spec, self.offset = root, path, spec, offset
        self.n_frames, self.pack_rows = n_frames, pack_rows
        self.written = 0
        self.fd: int | None = None
        self.hash = Crc32c()
        if spec.storage != "raw":
            if spec.is_text:
                self.encode = encode_text
            else:
                from ..cameras.frame_codecs import frame_codec

                self.encode = frame_codec(spec.codec_spec, spec.frame_shape).encode
            self.frames: list[bytes] = []

    @property
    def crc(self) -> int:
        return self.hash.value

    def write(self, frame: bytes | np.ndarray | str) -> None:
        """Append one frame (raw bytes of the stored shape, or an array of it; a text array's ``str``)."""
        if self.written >= self.n_frames:
            raise CorruptStoreError(f"{self.path}: more than the {self.n_frames} frames of the episode written")
        if self.spec.storage == "raw":
            data = frame if isinstance(frame, bytes) else memoryview(np.ascontiguousarray(frame)).cast("B")
            if len(data) != self.spec.frame_bytes:
                raise CorruptStoreError(f"{self.path}: a frame of {len(data)} bytes, the feature's are "
                                        f"{self.spec.frame_bytes}")
            if self.fd is None:
                _ensure_file(self.root, self.path, self.spec, self.pack_rows)
                self.fd = open_nofollow(self.path, os.O_WRONLY, root=self.root)
            pwrite_all(self.fd, data, (self.offset + self.written) * self.spec.frame_bytes, self.path)
            self.hash.update(data)
        else:
            if self.spec.is_text:
                blob = self.encode(frame)
            else:
                blob = self.encode(frame if isinstance(frame, np.ndarray) else
                                   np.frombuffer(frame, dtype=self.spec.dtype).reshape(self.spec.frame_shape))
            self.hash.update(compact_frame_header(len(blob)))
            self.hash.update(blob)
            self.frames.append(blob)
        self.written += 1

    def rewind(self) -> None:
        """Start the episode over: the next frame written is its first again (a decoder that restarts)."""
        self.written = 0
        self.hash = Crc32c()
        if self.spec.storage != "raw":
            self.frames = []

    def close(self) -> None:
        if self.spec.storage == "raw":
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
        elif self.written == self.n_frames:
            _append_compact(self.root, self.path, self.spec, self.offset, self.frames, self.pack_rows)

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None and self.spec.storage != "raw":
            self.frames = []
            self.written = -1  # nothing appended for a failed episode
        self.close()


def row_writer(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, offset: int, n_frames: int,
               pack_rows: int) -> RowWriter:
    return RowWriter(root, chunk_path(root, name, pack, spec.ndim), spec, offset, n_frames, pack_rows)


def _open_raw_for_writing(root: str | os.PathLike, path: str, spec: ArraySpec, pack_rows: int) -> int:
    try:
        return open_nofollow(path, os.O_WRONLY, root=root)
    except FileNotFoundError:  # the pack's first rows
        _ensure_file(root, path, spec, pack_rows)
        return open_nofollow(path, os.O_WRONLY, root=root)


APPEND_PIECE = 256 << 10  # the largest write of raw rows (see _write_raw)


def _write_raw(fd: int, path: str, spec: ArraySpec, offset: int, frames: np.ndarray, hashed: bool = True
               ) -> int | None:
    """Write raw rows in pieces cut at :data:`APPEND_PIECE`-aligned offsets: one large write gets 2 MiB folios,
    costly on a VM with free page reporting (``benchmarks/README.md``, bench_rl_buffer)."""
    view = memoryview(np.ascontiguousarray(frames, dtype=spec.dtype).reshape(-1)).cast("B")
    start = offset * spec.frame_bytes
    at, end = start, start + len(view)
    while at < end:
        cut = min(end, (at // APPEND_PIECE + 1) * APPEND_PIECE)
        pwrite_all(fd, view[at - start:cut - start], at, path)
        at = cut
    return crc32c(view) if hashed else None


def write_rows(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, offset: int, frames: np.ndarray,
               pack_rows: int) -> int:
    """Write one episode's frames of ``name`` at row ``offset`` of pack ``pack`` of ``pack_rows`` rows (made if
    it does not exist); return their content hash."""
    path = chunk_path(root, name, pack, spec.ndim)
    if spec.storage == "raw":
        fd = _open_raw_for_writing(root, path, spec, pack_rows)
        try:
            return _write_raw(fd, path, spec, offset, frames)
        finally:
            os.close(fd)
    data = frames if spec.is_text else np.ascontiguousarray(frames, dtype=spec.dtype)
    with RowWriter(root, path, spec, offset, len(data), pack_rows) as writer:
        for frame in data:
            writer.write(frame)
    return writer.crc


class PackWriters:
    """:func:`write_rows` for a writer that commits often (an RL buffer's episode per commit): the raw pack file
    each feature last wrote stays open across commits, so that appends to the last pack open no file. A write
    to another pack closes it (pack ids are never reused and a pack file is never replaced in place: a shared one
    is copied to a new id, a retired one is never written again)."""

    def __init__(self, root: str | os.PathLike):
        self.root = root
        self._open: dict[str, tuple[int, int, str]] = {}  # feature -> (pack, fd, path)
        self.close = weakref.finalize(self, _close_files, self._open)  # (also when dropped unclosed)

    def write(self, name: str, spec: ArraySpec, pack: int, offset: int, frames: np.ndarray, pack_rows: int,
              hashed: bool = True) -> int | None:
        """:func:`write_rows` (``hashed=False``: a raw feature's rows are not hashed, None returned: the caller
        hashes what it needs)."""
        if spec.storage != "raw":
            return write_rows(self.root, name, spec, pack, offset, frames, pack_rows)
        held = self._open.get(name)
        if held is None or held[0] != pack:
            self.release(name)
            path = chunk_path(self.root, name, pack, spec.ndim)
            held = self._open[name] = (pack, _open_raw_for_writing(self.root, path, spec, pack_rows), path)
        return _write_raw(held[1], held[2], spec, offset, frames, hashed)

    def release(self, name: str) -> None:
        """Close feature ``name``'s file (its pack file is about to be replaced: a file adopted as a new pack)."""
        held = self._open.pop(name, None)
        if held is not None:
            os.close(held[1])


def _close_files(held: dict[str, tuple[int, int, str]]) -> None:
    while held:
        os.close(held.popitem()[1][1])


HUGE_PAGE = 2 << 20  # a PMD huge page on x86-64 and arm64 with 4 KiB pages


def write_pack_bytes(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, position: int,
                     data: np.ndarray) -> None:
    """Write ``data`` (bytes of consecutive rows of a raw feature, uint8, possibly cut inside a frame) at byte
    ``position`` of a pack in one system call. The page cache keeps what a write puts in it in folios as large as
    the write allows: a write that covers a whole aligned :data:`HUGE_PAGE` fills it with one huge folio, which
    the kernel then maps with a huge page (fewer page faults and TLB misses when sampling); many small writes
    leave small folios, and so does a vectored write of less than a huge page."""
    path = chunk_path(root, name, pack, spec.ndim)
    fd = open_nofollow(path, os.O_WRONLY, root=root)
    try:
        pwrite_all(fd, memoryview(np.ascontiguousarray(data, dtype=np.uint8)), position, path)
    finally:
        os.close(fd)


def _append_compact(root: str | os.PathLike, path: str, spec: ArraySpec, offset: int, frames: list[bytes],
                    rows: int) -> None:
    """Append compressed frames to a compact pack (made if it does not exist) and point rows ``offset...`` of its
    index at them."""
    if spec.shard_index != "start":  # format 2: a shard per episode, its index at the end, written whole
        if offset != 0:
            raise CorruptStoreError(f"{path}: format-2 compact chunks hold one episode each")
        index = np.zeros((len(frames), 2), dtype="<u8")
        pos = 0
        for i, frame in enumerate(frames):
            index[i] = (pos, len(frame))
            pos += len(frame)
        fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, root=root)
        try:
            pwrite_all(fd, b"".join(frames) + index.tobytes() + _crc(index.tobytes()), 0, path)
        finally:
            os.close(fd)
        return
    _ensure_file(root, path, spec, rows)
    with _lock_of(path):
        fd = open_nofollow(path, os.O_RDWR, root=root)
        try:
            end = os.fstat(fd).st_size
            if end < shard_index_bytes(rows):
                raise CorruptStoreError(f"{path}: compact pack of {end} bytes cannot hold the index of {rows} rows")
            if offset + len(frames) > rows:
                raise CorruptStoreError(f"{path}: rows {offset}..{offset + len(frames)} are outside the pack's {rows}")
            entries = np.empty((len(frames), 2), dtype="<u8")
            pos = end
            unique: list[bytes] = []
            for i, frame in enumerate(frames):
                if unique and (frame is unique[-1] or frame == unique[-1]):  # the same bytes as the frame before:
                    entries[i] = entries[i - 1]  # shared (the persistent rows of a language column...)
                    continue
                entries[i] = (pos, len(frame))
                pos += len(frame)
                unique.append(frame)
            pwrite_all(fd, b"".join(unique), end, path)
            pwrite_all(fd, entries.tobytes(), 16 * offset, path)
            index = os.pread(fd, 16 * rows, 0)
            pwrite_all(fd, _crc(index), 16 * rows, path)
        finally:
            os.close(fd)


def read_shard_index(fd: int, spec: ArraySpec, rows: int, first: int, count: int, where: str, *,
                     allow_empty: bool = False) -> np.ndarray:
    """``(offset, nbytes)`` of rows ``first .. first + count`` of a compact pack of ``rows`` rows, checked against
    the index's crc32c and the file size. Rows never written are an error, or with ``allow_empty`` (a whole pack's
    index, some of whose episodes are not fetched yet) ``(-1, 0)``.

    A writer appending to the pack writes the new entries, then the crc32c: a reader may meet the two out of step
    for an instant, so a mismatch is read again a few times before it is called damage."""
    for attempt in range(_INDEX_READS):
        problem, out = _read_index_once(fd, spec, rows, first, count, where, allow_empty)
        if problem is None:
            return out
        if attempt + 1 < _INDEX_READS:
            time.sleep(0.005 * (attempt + 1))
    raise CorruptStoreError(f"{where}: {problem}")


_INDEX_READS = 5


def _read_index_once(fd: int, spec: ArraySpec, rows: int, first: int, count: int, where: str, allow_empty: bool
                     ) -> tuple[str | None, np.ndarray | None]:
    size = os.fstat(fd).st_size
    tail = shard_index_bytes(rows)
    if not 0 <= first <= first + count <= rows:
        raise CorruptStoreError(f"{where}: rows {first}..{first + count} are outside the pack's {rows}")
    if size < tail:
        raise CorruptStoreError(f"{where}: compact pack of {size} bytes cannot hold the index of {rows} rows")
    raw = os.pread(fd, tail, 0 if spec.shard_index == "start" else size - tail)
    if len(raw) != tail:
        return f"compact pack index cut short ({len(raw)} of {tail} bytes)", None
    if _crc(raw[:-4]) != raw[-4:]:
        return "compact pack index does not match its crc32c (damaged)", None
    index = np.frombuffer(raw[:-4], dtype="<u8").reshape(rows, 2)[first:first + count]
    empty = index[:, 0] == _EMPTY
    if empty.any() and not allow_empty:
        return "compact pack index has no frame at rows asked for (never written)", None
    ends = index[~empty, 0] + index[~empty, 1]
    if (index[~empty, 0] >= size).any() or (index[~empty, 1] > size).any() or (ends > size).any():
        return "compact pack index points outside the file", None
    out = index.astype(np.int64)
    out[empty] = (-1, 0)
    return None, out


def open_pack(path: str | os.PathLike, nbytes: int, *, root: str | os.PathLike, retired: str | os.PathLike | None,
              what: str, flags: int = os.O_RDONLY, feature: str | None = None) -> int:
    """Open a committed pack file of the store ``root`` (refusing symlinks at the file and at every folder from the
    root down) and check its size (unless ``nbytes`` < 0: compact packs); return the descriptor. ``retired`` is
    where the file is found if a writer retired the pack after the caller read its commit."""
    try:
        fd = open_nofollow(path, flags, root=root)
    except FileNotFoundError:
        fd = None
        if retired is not None:
            with contextlib.suppress(FileNotFoundError):
                fd = open_nofollow(retired, flags, root=root)
                path = retired
        if fd is None:
            raise CorruptStoreError(f"{path}: {what} is missing (if a writer deleted episodes since this dataset "
                                    f"was opened, open it again)", path=path, feature=feature) from None
    except CorruptStoreError as exc:
        raise CorruptStoreError(str(exc), path=exc.path, feature=feature) from None
    size = os.fstat(fd).st_size
    if nbytes >= 0 and size != nbytes:
        os.close(fd)
        raise CorruptStoreError(f"{path}: {what} holds {size} bytes, expected {nbytes}", path=path, feature=feature)
    return fd


def open_array_pack(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, rows: int,
                    flags: int = os.O_RDONLY) -> int:
    """:func:`open_pack` of pack ``pack`` (``rows`` rows) of array ``name`` of the store at ``root``."""
    nbytes = rows * spec.frame_bytes if spec.storage == "raw" else -1
    return open_pack(chunk_path(root, name, pack, spec.ndim), nbytes, root=root,
                     retired=retired_path(root, name, pack), what=f"pack {pack} of feature {name!r}", flags=flags,
                     feature=name)


def read_raw_rows(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, pack_rows: int, offset: int,
                  length: int) -> np.ndarray:
    """A copy of ``length`` committed rows from row ``offset`` of a raw pack."""
    fd = open_array_pack(root, name, spec, pack, pack_rows)
    with os.fdopen(fd, "rb") as f:
        f.seek(offset * spec.frame_bytes)
        return np.fromfile(f, dtype=spec.dtype, count=length * int(np.prod(spec.frame_shape, dtype=np.int64))
                           ).reshape(length, *spec.frame_shape)


def read_text_rows(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, pack_rows: int, offset: int,
                   length: int) -> np.ndarray:
    """``length`` committed rows from row ``offset`` of a text array's pack, as a 1-D object array of the stored
    strings."""
    fd = open_array_pack(root, name, spec, pack, pack_rows)
    try:
        where = f"pack {pack} of feature {name!r}"
        index = read_shard_index(fd, spec, pack_rows, offset, length, where)
        out = np.empty(length, dtype=object)
        last: tuple[int, str] | None = None
        for k, (start, nbytes) in enumerate(index.tolist()):
            if last is None or last[0] != start:
                last = (start, decode_text(os.pread(fd, nbytes, start), f"{root}: {where} row {offset + k}"))
            out[k] = last[1]
        return out
    finally:
        os.close(fd)


def retire_pack(root: str | os.PathLike, arrays: Mapping[str, ArraySpec], pack: int) -> None:
    """Move a pack's files under ``.retired/`` (readers of older commits still find them there)."""
    for name, spec in arrays.items():
        source = check_in_store(root, chunk_path(root, name, pack, spec.ndim))
        target = Path(check_in_store(root, retired_path(root, name, pack)))
        if os.path.lexists(source):
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.replace(source, target)
        _remove_empty_dirs(Path(root) / name / "c" / str(pack))  # also when a crash moved the file, not its folders
    live = check_in_store(root, f"{os.fspath(root)}/frame_live/c/{pack}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(live)


def remove_retired(root: str | os.PathLike, arrays: Mapping[str, ArraySpec], pack: int) -> None:
    for name in arrays:
        path = check_in_store(root, retired_path(root, name, pack))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _remove_empty_dirs(folder: Path) -> None:
    if folder.is_symlink() or not folder.is_dir():
        return
    for child in folder.iterdir():
        _remove_empty_dirs(child)
    with contextlib.suppress(OSError):
        folder.rmdir()
