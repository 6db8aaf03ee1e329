"""Low-level file operations of a store: atomic replacement, positional writes, flushing, sparse copies, the
writer lock, and the reading of untrusted JSON.

A store may come from elsewhere (a copy, a download, a disk that failed), so its files are untrusted input: every
open of a file inside a store checks each folder from the store root down to the file (none may be a symbolic
link, :func:`check_in_store`) and refuses a symlink in place of the file itself (``O_NOFOLLOW``); a full disk
becomes :class:`~lerobot_zarr.errors.DiskSpaceError` naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CorruptStoreError, DiskSpaceError, ReadOnlyStoreError, StoreLockedError
from .libc import libc

__all__ = [
    "holds_lock",
    "flock_within",
    "retry_within",
    "atomic_write",
    "replace_file",
    "flush_filesystem",
    "fsync_dir",
    "pwrite_all",
    "create_sized",
    "open_nofollow",
    "check_in_store",
    "find_links",
    "load_json",
    "read_bounded",
    "disk_error",
    "copy_file",
    "data_ranges",
    "link_or_copy",
    "WriterLock",
]

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def disk_error(exc: OSError, path: str | os.PathLike) -> Exception:
    """A write refused by the system as a typed error naming the path: a full disk or quota, or a file past the
    size limit (``ulimit -f``, RLIMIT_FSIZE, or the filesystem's) as :class:`DiskSpaceError`; a read-only volume as
    :class:`ReadOnlyStoreError`. Other errors as they are."""
    where = os.fspath(path)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskSpaceError(exc.errno, f"{where}: no space left on the device while writing; the store stays at its "
                                         f"last commit", path=where)
    if exc.errno == errno.EFBIG:
        return DiskSpaceError(exc.errno, f"{where}: the file would pass the largest file this process may write (the "
                                         f"file size limit, `ulimit -f`, or the filesystem's); the store stays at its "
                                         f"last commit", path=where)
    if exc.errno == errno.EROFS:
        return ReadOnlyStoreError(f"{where}: the volume is read-only: nothing can be written there (a store there "
                                  f"can be read; copy it elsewhere to write it)", path=where)
    return exc


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy ``src`` to a new file ``dst`` (a symlink at either is refused), keeping holes as holes: only the data
    ranges of a sparse file are copied (``SEEK_DATA``/``SEEK_HOLE``), so a pack with unwritten rows stays as small
    on disk as it was. A full disk raises ``DiskSpaceError`` naming ``dst`` and the partial copy is removed."""
    try:
        fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd_out = os.open(dst, _WRITE_FLAGS | os.O_EXCL, 0o644)
            try:
                _copy_sparse(fd_in, fd_out)
            finally:
                os.close(fd_out)
        finally:
            os.close(fd_in)
    except OSError as exc:
        if not isinstance(exc, FileExistsError):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dst)
        err = disk_error(exc, dst)
        if err is exc:
            raise
        raise err from None


def data_ranges(fd: int, size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` byte ranges of a file that may hold data (everything else is a hole, read as zeros); the
    whole file where the system cannot tell (no ``SEEK_DATA``)."""
    if not hasattr(os, "SEEK_DATA"):
        return [(0, size)] if size else []
    out: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole from here to the end
                break
            return [(0, size)]  # a filesystem that cannot tell
        stop = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        out.append((start, stop))
        pos = stop
    return out


# what copy_file_range raises where it cannot copy between these two files (another filesystem, a kernel or a
# filesystem without it): the copy goes on with reads and writes
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})


def _copy_sparse(fd_in: int, fd_out: int) -> None:
    size = os.fstat(fd_in).st_size
    kernel_copy = hasattr(os, "copy_file_range")
    for start, stop in data_ranges(fd_in, size):
        pos = start
        while pos < stop:
            n = 0
            if kernel_copy:
                try:
                    n = os.copy_file_range(fd_in, fd_out, stop - pos, pos, pos)
                except OSError as exc:
                    if exc.errno not in _NO_KERNEL_COPY:
                        raise
                    kernel_copy = False  # for the rest of this file: one failed call, not one per range
            if n <= 0:  # no kernel copy here (or nothing copied): plain reads and writes of the data ranges
                data = os.pread(fd_in, min(stop - pos, 8 << 20), pos)
                if not data:
                    raise OSError(errno.EIO, "the file shrank while it was copied")
                pwrite_all(fd_out, data, pos)
                n = len(data)
            pos += n
    os.ftruncate(fd_out, size)  # the trailing hole, if any


def link_or_copy(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """``dst`` as a hard link to ``src`` (no bytes copied), or a copy where links fail (another filesystem)."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        copy_file(src, dst)


def check_in_store(root: str | os.PathLike, path: str | os.PathLike) -> str:
    """``path`` (a file inside the store ``root``) once every folder between ``root`` and the file is known not to
    be a symbolic link or anything but a folder (folders not made yet are fine: they will be made real). The
    store root itself may be a link (the user's choice); the file is opened ``O_NOFOLLOW`` by the caller. Raises
    :class:`CorruptStoreError` naming the link, so that a link planted in a store can point neither reads nor
    writes outside it."""
    root_s, path_s = os.fspath(root).rstrip("/") or "/", os.fspath(path)
    if not path_s.startswith(root_s + "/"):
        raise CorruptStoreError(f"{path_s}: is not inside the store {root_s}", path=path_s)
    parts = path_s[len(root_s) + 1:].split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise CorruptStoreError(f"{path_s}: not a plain path inside the store {root_s}", path=path_s)
    folder = root_s
    for part in parts[:-1]:
        folder = f"{folder}/{part}"
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            break
        if stat.S_ISLNK(mode):
            raise CorruptStoreError(f"{folder}: is a symbolic link; a store's folders must be real folders (a link "
                                    f"could point reads or writes outside the store)", path=folder)
        if not stat.S_ISDIR(mode):
            raise CorruptStoreError(f"{folder}: is not a folder, where the store keeps {path_s}", path=folder)
    return path_s


def find_links(root: str | os.PathLike) -> list[Path]:
    """Symbolic links anywhere under ``root`` (none is followed), sorted."""
    found, todo = [], [os.fspath(root)]
    while todo:
        folder = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                found.append(Path(entry.path))
            elif entry.is_dir(follow_symlinks=False):
                todo.append(entry.path)
    return sorted(found)


def open_nofollow(path: str | os.PathLike, flags: int, mode: int = 0o644, *, root: str | os.PathLike | None = None
                  ) -> int:
    """``os.open`` that refuses a symlink at ``path`` (and makes missing parent folders when creating). With
    ``root`` (the store holding ``path``) every folder below the root is checked first (:func:`check_in_store`)."""
    if root is not None:
        check_in_store(root, path)
    try:
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
            os.makedirs(os.path.dirname(os.fspath(path)), exist_ok=True)
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CorruptStoreError(f"{os.fspath(path)}: is a symbolic link; store files must be real files",
                                    path=os.fspath(path)) from None
        if exc.errno == errno.EISDIR:
            raise _not_a_file(path) from None
        err = disk_error(exc, path)
        if err is exc:
            raise
        raise err from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder (or a device, a pipe) where the store keeps a file
        os.close(fd)
        raise _not_a_file(path)
    return fd


def _not_a_file(path: str | os.PathLike) -> CorruptStoreError:
    return CorruptStoreError(f"{os.fspath(path)}: is a folder or another special file where a file belongs; remove "
                             f"it (`lerobot-zarr verify` tells what the store lacks then)", path=os.fspath(path))


def pwrite_all(fd: int, data: bytes | memoryview, offset: int, path: str | os.PathLike = "") -> None:
    """Write all of ``data`` at ``offset`` (short writes retried); a full disk raises ``DiskSpaceError``."""
    view = memoryview(data).cast("B")
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            view, offset = view[n:], offset + n
    except OSError as exc:
        raise disk_error(exc, path) from None


def create_sized(path: str | os.PathLike, size: int, *, root: str | os.PathLike | None = None) -> bool:
    """Create ``path`` as a sparse file of ``size`` bytes (holes take no disk) unless it exists; True if created.

    Created under a temporary name and renamed, so a file at ``path`` always has its full size."""
    path = os.fspath(path)
    if root is not None:
        check_in_store(root, path)
    if os.path.lexists(path):
        return False
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{os.getpid()}-{threading.get_ident()}"
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


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a folder (a file created or renamed in it survives power loss)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True, root: str | os.PathLike | None = None) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename: readers see old or new, never partial.

    ``durable`` also fsyncs the file and its folder (survives power loss, not only a killed process). With
    ``root`` (the store holding ``path``) the folders below the root are checked first (:func:`check_in_store`)."""
    path = Path(path)
    if root is not None:
        check_in_store(root, path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
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
    replace_file(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_in_place(path: str | os.PathLike, data: bytes, *, root: str | os.PathLike | None = None,
                   pad: bool = False, unless_equal: bool = False) -> None:
    """Overwrite ``path`` (made, with its folders, if missing) with ``data`` in place: not atomic for a reader,
    for files no reader trusts without a check (a cache, zarr's copies of a commit). Cheaper than
    :func:`atomic_write` on ext4, where replacing an existing file (by rename, or truncating it to 0) makes the
    filesystem start writing the new one out at once (``auto_da_alloc``): 1-30 ms on a busy disk. A killed writer
    leaves the new bytes followed by the old file's tail, never a shorter file; ``pad`` (JSON) pads ``data`` with
    spaces to the file's size instead of truncating it, so that a document of at most a page is whole whatever
    the moment of the kill. ``unless_equal``: nothing is written when the file holds ``data`` already. A file with
    other hard links (shared with a copy of the store) is replaced instead, never changed under the other name."""
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, root=root)
    try:
        st = os.fstat(fd)
        if st.st_nlink > 1:
            atomic_write(Path(path), data, durable=False, root=root)
            return
        size = st.st_size
        if pad and len(data) < size:
            data += b" " * (size - len(data))
        if unless_equal and os.pread(fd, size + 1, 0) == data:
            return
        pwrite_all(fd, data, 0, path)
        if size > len(data):
            os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def replace_file(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """``os.replace(tmp, path)`` of a finished temporary file; a folder in the way of ``path`` is a
    :class:`CorruptStoreError` naming it (``tmp`` is removed)."""
    try:
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno == errno.EISDIR:
            raise _not_a_file(path) from None
        raise


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


MAX_JSON_DEPTH = 64  # nesting of any JSON file this package reads: its own files need 8


def read_bounded(path: str | os.PathLike, limit: int, *, root: str | os.PathLike | None = None,
                 what: str = "file") -> bytes:
    """The bytes of a store file of at most ``limit`` bytes (a larger one is refused before it is read), opened
    without following links (and with ``root``, checked inside the store)."""
    fd = open_nofollow(path, os.O_RDONLY, root=root)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise CorruptStoreError(f"{os.fspath(path)}: {what} of {size} bytes, more than the {limit} bytes such a "
                                    f"file can hold", path=os.fspath(path))
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(limit + 1 - total, 8 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise CorruptStoreError(f"{os.fspath(path)}: {what} larger than {limit} bytes", path=os.fspath(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def load_json(data: bytes | str, where: str, *, error: Callable[[str], Exception] = CorruptStoreError,
              max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse untrusted JSON: invalid text, or nesting deeper than ``max_depth`` (JSON "bombs" that would exhaust the
    stack of any code walking them), raise ``error(message)`` naming ``where`` (a typed error of this package)."""
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise error(f"{where}: invalid JSON ({detail})") from None
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise error(f"{where}: JSON nested deeper than {max_depth} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, (dict, list)))
    return doc


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


def holds_lock(root: str | os.PathLike) -> bool:
    """Whether this thread took the writer lock of the store at ``root`` (a second one would wait for itself; one
    another thread of the process holds is waited for, as another process's)."""
    where, me = Path(root).resolve(), threading.get_ident()
    return any(lock.held and lock.taker == me and lock.root.resolve() == where for lock in list(_held_locks))


class WriterLock:
    """Exclusive ``flock`` on ``<store>/.lock``: one writer per store, released when its process dies. A forked
    child does not inherit it (its copy is closed after the fork)."""

    def __init__(self, root: Path, *, blocking: bool = True):
        self.root = Path(root)
        self.blocking = blocking
        self._fd: int | None = None
        self.taker: int | None = None  # the thread that took it

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._fd is not None

    def __enter__(self) -> WriterLock:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            err = disk_error(exc, self.root)
            if err is exc:
                raise
            raise err from None
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
        self.taker = threading.get_ident()
        _held_locks.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _held_locks.discard(self)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def retry_within(attempt: Callable[[], bool], seconds: float, *, longest_sleep: float = 0.02) -> bool:
    """Call ``attempt`` until it returns True, sleeping between tries (from 1 ms, doubling up to ``longest_sleep``:
    for what no event signals, such as a lock another process holds) for at most ``seconds``; whether it did."""
    deadline = time.monotonic() + seconds
    delay = 0.001
    while not attempt():
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(2 * delay, longest_sleep)
    return True


def flock_within(fd: int, seconds: float, *, longest_sleep: float = 0.02) -> bool:
    """Take an exclusive ``flock`` on ``fd`` within ``seconds``, tried as :func:`retry_within` does; False when it
    was not free by then."""

    def attempt() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False

    return retry_within(attempt, seconds, longest_sleep=longest_sleep)
