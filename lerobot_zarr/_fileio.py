"""Low-level file operations of a store: atomic replacement, positional writes, flushing, the writer lock.

Every write refuses a symlink in place of its file (``O_NOFOLLOW``), and a full disk becomes
:class:`~lerobot_zarr.errors.DiskSpaceError` naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import weakref
from pathlib import Path
from typing import Any

from ._libc import libc
from .errors import DiskSpaceError, StoreLockedError

__all__ = [
    "atomic_write",
    "flush_filesystem",
    "pwrite_all",
    "create_sized",
    "open_nofollow",
    "punch_hole",
    "disk_error",
    "copy_file",
    "link_or_copy",
    "WriterLock",
]

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def disk_error(exc: OSError, path: str | os.PathLike) -> OSError:
    """A full disk or quota as :class:`DiskSpaceError` naming the path; other errors as they are."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskSpaceError(exc.errno, f"{os.fspath(path)}: no space left on the device while writing; the store "
                                         f"stays at its last commit", path=os.fspath(path))
    return exc


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy ``src`` to ``dst`` (symlinks not followed); a full disk raises ``DiskSpaceError`` naming ``dst`` and
    the partial copy is removed."""
    try:
        shutil.copyfile(src, dst, follow_symlinks=False)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dst)
        err = disk_error(exc, dst)
        if err is exc:
            raise
        raise err from None


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """``dst`` as a hard link to ``src`` (no bytes copied), or a copy where links fail (another filesystem)."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        copy_file(src, dst)


def open_nofollow(path: str | os.PathLike, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symlink at ``path`` (and makes missing parent folders when creating)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
        os.makedirs(os.path.dirname(os.fspath(path)), exist_ok=True)
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def pwrite_all(fd: int, data: bytes | memoryview, offset: int, path: str | os.PathLike = "") -> None:
    """Write all of ``data`` at ``offset`` (short writes retried); a full disk raises ``DiskSpaceError``."""
    view = memoryview(data).cast("B")
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n
    except OSError as exc:
        raise disk_error(exc, path) from None


def create_sized(path: str | os.PathLike, size: int) -> bool:
    """Create ``path`` as a sparse file of ``size`` bytes (holes take no disk) unless it exists; True if created.

    Created under a temporary name and renamed, so a file at ``path`` always has its full size."""
    path = os.fspath(path)
    if os.path.lexists(path):
        return False
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{os.getpid()}"
    fd = open_nofollow(tmp, _WRITE_FLAGS | os.O_TRUNC)
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        os.close(fd)
        raise disk_error(exc, path) from None
    os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a file another writer created meanwhile
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename: readers see old or new, never partial.

    ``durable`` also fsyncs the file and its folder (survives power loss, not only a killed process)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = open_nofollow(tmp, _WRITE_FLAGS | os.O_TRUNC)
    try:
        pwrite_all(fd, data, 0, path)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        _fsync_dir(path.parent)


def flush_filesystem(root: Path) -> None:
    """Flush written data of the store's filesystem to disk (``syncfs``; ``sync`` where it does not exist)."""
    syncfs = getattr(libc, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Free the disk blocks of a byte range (reads then give zeros); False where the system cannot (non-Linux)."""
    fallocate = getattr(libc, "fallocate", None)
    if fallocate is None or length <= 0:
        return False
    import ctypes

    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    return fallocate(fd, _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE, offset, length) == 0


_held_locks: weakref.WeakSet = weakref.WeakSet()


def _drop_inherited_locks() -> None:
    # A forked child shares the parent's lock: it must neither release it nor keep it alive after the parent dies.
    for lock in list(_held_locks):
        if lock._fd is not None:
            with contextlib.suppress(OSError):
                os.close(lock._fd)
            lock._fd = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)


class WriterLock:
    """Exclusive ``flock`` on ``<store>/.lock``: one writer per store, released when its process dies. A forked
    child does not inherit it (its copy is closed after the fork)."""

    def __init__(self, root: Path, *, blocking: bool = True):
        self.root = Path(root)
        self.blocking = blocking
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._fd is not None

    def __enter__(self) -> WriterLock:
        self.root.mkdir(parents=True, exist_ok=True)
        self._fd = open_nofollow(self.root / ".lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | (0 if self.blocking else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(self._fd)
            self._fd = None
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(f"{self.root}: another writer holds this store (another process, or a writable "
                                       f"dataset still open in this one: close() it first)", path=str(self.root)
                                       ) from None
            raise
        _held_locks.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _held_locks.discard(self)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
