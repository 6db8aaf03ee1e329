"""The shared folder of a store in a bucket's mirror (:mod:`.remote_store`): one per store, commit and boot of the
machine, joined by every process that reads that commit, and the means they share it by.

- Files appear whole (:func:`publish`: written under a temporary name, then linked into place, unless another
  process did first); small shared state is a file mapped by every process (:func:`shared_map`).
- :class:`RangeLocks`: byte-range locks on one lock file whose ranges name rows (Linux open file description locks:
  per descriptor, released by the kernel when a process dies): claims (fetching), pins (reading), and an eviction's
  try of both.
- :class:`Pack`: one pack file of the mirror, which of its rows are present and when each was last used (shared).
- :class:`Mirror`: the folder joined (a shared ``flock`` per user: the last to let go removes it; the mirrors no
  process uses are removed by the next open), the bytes held (a shared counter), one evictor at a time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import re
import secrets
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..cloud.client import Bucket
from ..errors import BucketError
from ..store.state import MAX_ROOT_BYTES, ROOT
from ..utils.background import process_alive
from ..utils.fileio import atomic_write, pwrite_all
from .home import MIRROR_MARKER

__all__ = ["Mirror", "RangeLocks", "SHARED", "MINE", "CLAIMS", "PINS", "PIN_TURNS", "MAKING", "INDEXES", "publish",
           "shared_map", "align8", "read_root", "Pack"]

MINE = ".mirror"  # the mirror's own files, beside the store's
_ROOT_FIRST = 16 << 20  # a store's root is read in one request up to this size

#: where the ranges of the lock file start: claims of rows (fetching), pins of rows (reading), making a compact
#: pack's file (its shard index), fetching an mp4 index
CLAIMS, PINS, MAKING, INDEXES = 0, 1 << 44, 2 << 44, 3 << 44
#: descriptors the pins of a process's ensures rotate over: a batch's rows stay pinned through its next two ensures
PIN_TURNS = 3
#: Open file description locks (Linux): shared by the threads of a process, released when it dies. Elsewhere the
#: mirror is private to the process (its folder named after it), as no lock tells another process's rows apart.
SHARED = hasattr(fcntl, "F_OFD_SETLK")


class RangeLocks:
    """Byte-range locks on one file through one descriptor (open file description locks where the system has
    them): a lock conflicts with those of every other descriptor, in this process or another, and goes when the
    descriptor is closed or its process dies. The file's bytes are never written: its ranges name rows."""

    _SET = fcntl.F_OFD_SETLK if SHARED else fcntl.F_SETLK

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)

    def lock(self, start: int, length: int, *, exclusive: bool = True) -> bool:
        """Take the lock now if no other descriptor holds a conflicting one; whether it was taken."""
        kind = fcntl.F_WRLCK if exclusive else fcntl.F_RDLCK
        try:
            fcntl.fcntl(self.fd, self._SET, struct.pack("hhqqi4x", kind, os.SEEK_SET, start, length, 0))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    def unlock(self, start: int, length: int) -> None:
        fcntl.fcntl(self.fd, self._SET, struct.pack("hhqqi4x", fcntl.F_UNLCK, os.SEEK_SET, start, length, 0))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def read_root(bucket: Bucket) -> bytes:
    """The root ``zarr.json`` of the store in ``bucket`` now (one request up to ``_ROOT_FIRST`` bytes; at most
    ``MAX_ROOT_BYTES``); :class:`~lerobot_zarr.errors.SourceNotFoundError` when there is none."""
    return bucket.read_whole(ROOT, limit=MAX_ROOT_BYTES, first=_ROOT_FIRST)[0]


def shared_map(path: Path, size: int) -> mmap.mmap:
    """A file of ``size`` zero bytes (made at once whole: linked into place from a temporary file) mapped shared."""
    if not path.exists():
        publish(path, lambda fd: os.ftruncate(fd, size))
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def publish(path: Path | str, fill: Callable[[int], None]) -> bool:
    """Make the file ``path`` whole or not at all: written (``fill(fd)``) under a temporary name, then linked into
    place unless another process did first. Whether this call made it."""
    tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        fill(fd)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def align8(n: int) -> int:
    return (n + 7) // 8 * 8


@dataclass(eq=False)
class Pack:
    """One pack file of one feature in the mirror: which rows are present (shared by every process), when each was
    last used (shared), which this process is fetching now."""

    name: str
    pack: int
    rel: str  # object key relative to the store
    path: str  # the mirror's file
    rows: int
    frame_bytes: int  # raw: bytes per row; compact: 0 (rows are the shard index's blobs)
    numeric: bool
    slot: int  # the lock file's range of row 0 (rows follow)
    present: np.ndarray = field(init=False)  # shared: the row's bytes are in the file
    used: np.ndarray = field(init=False)  # shared: time.monotonic() of the row's last read (one boot: one clock)
    coming: np.ndarray = field(init=False)  # this process is fetching the row now (or evicting it)
    empty: np.ndarray = field(init=False)  # compact rows never written: nothing to fetch (reading them is an error)
    index: np.ndarray | None = None  # compact: (offset, nbytes) per row
    size: int = -1  # bytes of the file (raw: rows * frame_bytes)
    state: mmap.mmap | None = None

    def attach(self, state: mmap.mmap) -> None:
        self.state = state
        self.present = np.frombuffer(state, dtype=np.bool_, count=self.rows)
        self.used = np.frombuffer(state, dtype=np.float64, count=self.rows, offset=align8(self.rows))
        self.coming = np.zeros(self.rows, dtype=bool)
        self.empty = np.zeros(self.rows, dtype=bool) if self.index is None else self.index[:, 0] < 0

    def span(self, row: int) -> tuple[int, int]:
        if self.index is None:
            return row * self.frame_bytes, (row + 1) * self.frame_bytes
        start, nbytes = (int(v) for v in self.index[row])
        return start, start + nbytes

    def nbytes(self, rows: np.ndarray) -> int:
        if self.index is None:
            return len(rows) * self.frame_bytes
        return int(self.index[rows, 1].sum())

    @property
    def complete(self) -> bool:
        return bool((self.present | self.empty).all())


class Mirror:
    """The shared folder of one commit and this process's handles on it (locks, the users' flock)."""

    def __init__(self, home: Path, bucket: Bucket, root_doc: bytes):
        base = _store_folder(home, bucket)
        commit = hashlib.sha256(root_doc).hexdigest()[:16]
        name = f"{commit}-{_boot_id()}" + ("" if SHARED else f"-p{os.getpid()}")
        _sweep(base, keep=name)
        self.root = base / name
        users = self.root / MINE / "users"
        for _ in range(10):  # a sweeper removing it as it was joined: made anew
            try:
                (self.root / MINE / "packs").mkdir(parents=True, exist_ok=True)
                self.users = os.open(users, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            except FileNotFoundError:
                continue
            fcntl.flock(self.users, fcntl.LOCK_SH)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(users).st_ino == os.fstat(self.users).st_ino:
                    break
            os.close(self.users)
        else:
            raise BucketError(f"{bucket.location()}: the mirror folder {self.root} keeps being removed", path=str(base))
        self.claims = RangeLocks(self.root / MINE / "locks")  # fetching: exclusive
        self.pins = [RangeLocks(self.root / MINE / "locks") for _ in range(PIN_TURNS)]  # reading: shared
        self.evicting = RangeLocks(self.root / MINE / "locks")  # an eviction's try of claim and pin together
        self.held = shared_map(self.root / MINE / "held", 8)
        self._adding = threading.Lock()
        self.held_lock = os.open(self.root / MINE / "held", os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        self.evictor = os.open(self.root / MINE / "evict", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                               0o644)
        if not (self.root / MIRROR_MARKER).exists():
            publish(self.root / MIRROR_MARKER, lambda fd: pwrite_all(fd, str(bucket.url).encode(), 0))
        if not (self.root / ROOT).exists():
            atomic_write(self.root / ROOT, root_doc, durable=False, root=self.root)

    def add_held(self, delta: int) -> int:
        """Add to the bytes held by the mirror (shared by its processes); the new total."""
        with self._adding:  # (a flock excludes other processes only: this process's threads share its descriptor)
            return self._add_held(delta)

    def _add_held(self, delta: int) -> int:
        fcntl.flock(self.held_lock, fcntl.LOCK_EX)
        try:
            (now,) = struct.unpack_from("q", self.held)
            now = max(0, now + delta)
            struct.pack_into("q", self.held, 0, now)
            return now
        finally:
            fcntl.flock(self.held_lock, fcntl.LOCK_UN)

    def recount(self, counted: int, since: int) -> None:
        """After an eviction: the bytes it ``counted`` (the rows present as it looked, less those it dropped), plus
        what the count gained since it began (``since``: the count then). Rows that landed while it looked may be
        counted twice (until the next eviction counts again), never missed."""
        with self._adding:
            fcntl.flock(self.held_lock, fcntl.LOCK_EX)
            try:
                (now,) = struct.unpack_from("q", self.held)
                struct.pack_into("q", self.held, 0, max(0, counted + max(0, now - since)))
            finally:
                fcntl.flock(self.held_lock, fcntl.LOCK_UN)

    def forget(self) -> None:
        """Close this process's descriptors (in a forked child: the parent's, whose locks stay the parent's)."""
        for locks in (self.claims, *self.pins, self.evicting):
            locks.close()
        for fd in (self.held_lock, self.evictor):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(BufferError, ValueError):
            self.held.close()

    def close(self) -> None:
        """Let go of the folder; removed if no other process uses it."""
        self.forget()
        try:
            fcntl.flock(self.users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # another process reads it still
        else:
            shutil.rmtree(self.root, ignore_errors=True)
        os.close(self.users)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    except OSError:
        return "noboot"


def _store_folder(home: Path, bucket: Bucket) -> Path:
    """``home/<store>-<digest of its URL and endpoint>``: the folder of this store's mirrors (one per commit)."""
    ident = f"{bucket.url}\0{bucket.endpoint or ''}"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", bucket.url.name)[:40] or "store"
    return home / f"{name}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def _sweep(base: Path, keep: str) -> None:
    """Remove the mirrors of ``base`` no process uses (other commits, other boots, processes that died)."""
    if not base.is_dir():
        return
    for entry in base.iterdir():
        if entry.name == keep or entry.is_symlink() or not entry.is_dir():
            continue
        users = entry / MINE / "users"
        if not users.exists():  # one of an older version (<pid>-<random>), or one being made now
            pid = entry.name.split("-", 1)[0]
            if pid.isdigit() and not process_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)
            continue
        try:
            fd = os.open(users, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        shutil.rmtree(entry, ignore_errors=True)  # (under the lock: a process joining it waits, then makes it anew)
        os.close(fd)
