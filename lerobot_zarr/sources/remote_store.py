"""A store in a bucket, read without copying it: a local mirror that holds what was read, filled by byte ranges.

The mirror is a folder laid out like the store (the same paths), private to the process that opened the bucket's
store (a DataLoader worker makes its own): the root ``zarr.json`` of the commit served (fetched at open, or given to
a worker with the dataset), each camera's ``mp4.json``, and every pack file as a sparse file of its full size into
which the rows read are written. The dataset's readers (memory maps of raw packs, compact shards, mp4 files) read
the mirror as they read a local store, and the dataset asks :meth:`RemoteStore.ensure` first for the frames a batch
reads: those missing are fetched (byte ranges of the rows, coalesced, sent together), written, marked present.

- Numeric features (small): the rows a batch needs at once, then, after the first batch, whole packs in the
  background (two requests in flight, so that a batch's own requests do not queue behind them), while they fit in
  half of the cache: afterwards a batch reads local maps only.
- Cameras: exactly the rows read (a compact camera's shard index first, once per pack); an mp4 file whole, the
  first time a frame of it is read. :meth:`RemoteStore.prefetch` fetches the frames of batches to come in the
  background (the sampler's lookahead), so that a batch finds them local.
- The cache is bounded (``cache_bytes``): past it the least recently used rows (a numeric pack whole) are
  dropped, their bytes punched out of the sparse file, never the rows of the batch being read.

Reads go through :class:`~lerobot_zarr.cloud.client.Bucket` (deadlines, bounded bodies, exact ranges, typed
errors). Rows live in the commit served never change but for in-place edits (visible as in a local store); the
root is read once, so a dataset keeps its commit until :meth:`RemoteStore.refresh`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..cloud.client import Bucket
from ..errors import ArgumentError, UnsupportedStoreError
from ..store.cameras import MP4_INDEX, read_mp4_index
from ..store.packs import read_shard_index, shard_index_bytes
from ..store.state import MAX_ROOT_BYTES, ROOT, StoreState, chunk_path, read_state
from ..utils.background import process_alive
from ..utils.fileio import atomic_write, pwrite_all
from ..utils.libc import punch_hole
from .home import MIRROR_MARKER

__all__ = ["RemoteStore", "CACHE_BYTES_ENV", "DEFAULT_CACHE_BYTES"]

CACHE_BYTES_ENV = "LEROBOT_ZARR_BUCKET_CACHE_BYTES"
DEFAULT_CACHE_BYTES = 8 << 30
_NUMERIC_GAP = 256 << 10  # numeric rows closer than this are read in one request (rows are tiny, round trips not)
_PIECE = 16 << 20  # the most one request of a foreground fetch asks for
_BACKGROUND_PIECE = 4 << 20  # whole packs in the background: small requests, few in flight
_BACKGROUND_IN_FLIGHT = 2
_IN_FLIGHT = 32
_MAX_MP4_BYTES = 64 << 30
_ROOT_FIRST = 16 << 20  # the root is read in one request up to this size


def _cache_bytes(value: int | None) -> int:
    if value is None:
        raw = os.environ.get(CACHE_BYTES_ENV)
        try:
            value = int(raw) if raw else DEFAULT_CACHE_BYTES
        except ValueError:
            raise ArgumentError(f"{CACHE_BYTES_ENV}={raw!r} is not a number of bytes") from None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 << 20:
        raise ArgumentError(f"cache_bytes must be an integer of at least 1 MiB, got {value!r:.40}")
    return value


@dataclass(eq=False)
class _Pack:
    """One pack file of one feature in the mirror: which rows are present."""

    name: str
    pack: int
    rel: str  # object key relative to the store
    path: str  # the mirror's file
    rows: int
    frame_bytes: int  # raw: bytes per row; compact: 0 (rows are the shard index's blobs)
    numeric: bool
    present: np.ndarray = field(init=False)
    coming: np.ndarray = field(init=False)  # rows a prefetch is fetching now
    index: np.ndarray | None = None  # compact: (offset, nbytes) per row
    size: int = -1  # bytes of the file (raw: rows * frame_bytes)
    complete: bool = False
    bytes_held: int = 0  # numeric: bytes of the present rows (the LRU entry of the whole pack)

    def __post_init__(self) -> None:
        self.present = np.zeros(self.rows, dtype=bool)
        self.coming = np.zeros(self.rows, dtype=bool)

    def span(self, row: int) -> tuple[int, int]:
        if self.index is None:
            return row * self.frame_bytes, (row + 1) * self.frame_bytes
        start, nbytes = (int(v) for v in self.index[row])
        return start, start + nbytes


class RemoteStore:
    """The store at ``bucket`` (a :class:`~lerobot_zarr.cloud.client.Bucket` of the store's folder) served from a
    private mirror under ``home`` (see the module docstring). ``root_doc``: the root ``zarr.json`` to serve (a
    worker serves the commit its parent opened); by default the bucket's current one. ``cache_bytes``: the most the
    mirror holds (default ``$LEROBOT_ZARR_BUCKET_CACHE_BYTES``, else 8 GiB)."""

    def __init__(self, bucket: Bucket, home: str | os.PathLike, *, cache_bytes: int | None = None,
                 root_doc: bytes | None = None):
        self.bucket = bucket
        self.home = Path(home)
        self.cache_bytes = _cache_bytes(cache_bytes)
        self._lock = threading.Lock()  # guards the bookkeeping below; never held while waiting on the network
        self._making = threading.Lock()  # held while a pack's file is made (a compact one: its index fetched)
        self._packs: dict[tuple[str, int], _Pack] = {}
        self._lru: OrderedDict[tuple[str, int, int], int] = OrderedDict()  # (name, pack, row or -1) -> bytes
        self._held = 0
        self._coming: dict[tuple[str, int], list[Future]] = {}  # background fetches of a pack
        self._mp4: dict[tuple[str, str], Future] = {}
        self._pool = ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-remote")
        self._ahead = ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-prefetch")  # batches to come
        self._background = ThreadPoolExecutor(_BACKGROUND_IN_FLIGHT, thread_name_prefix="lerobot_zarr-whole")
        self._numeric_started = False
        #: numeric features held whole (every pack): nothing to ask for them, and they are never evicted (they were
        #: fetched whole because they fit in half the cache)
        self.settled: set[str] = set()
        self._stopping = threading.Event()  # set when the mirror goes: background fetches stop at their next piece
        self.fetched_bytes = 0
        self.fetched_by: dict[str, int] = {}  # bytes fetched per feature ("": the root, indexes...)
        self.requests = 0
        if root_doc is None:
            root_doc, _ = bucket.read_whole(ROOT, limit=MAX_ROOT_BYTES, first=_ROOT_FIRST)
        self.root_doc = root_doc
        self.root = _mirror_folder(self.home, bucket)
        self._finalizer = weakref.finalize(self, _remove_mirror, self.root, self._stopping, self._pool,
                                           self._ahead, self._background)
        try:
            self.root.mkdir(parents=True)
            (self.root / MIRROR_MARKER).write_text(str(bucket.url))
            atomic_write(self.root / ROOT, root_doc, durable=False, root=self.root)
            self.state = read_state(self.root)
            self._fetch_mp4_indexes(self.state)
        except BaseException:
            self._finalizer()
            raise
        self._chunk, self._offset = self.state.table.chunk, self.state.table.offset

    def __reduce__(self) -> tuple:
        # to a DataLoader worker: a mirror of its own there, of the same commit (no request for the root)
        return (_reopen, (self.bucket, self.home, self.cache_bytes, self.root_doc))

    def location(self, rel: str = "") -> str:
        return self.bucket.location(rel)

    # bookkeeping ------------------------------------------------------------------------------------------
    def _pack(self, name: str, pack: int) -> _Pack:
        """The mirror's record of a pack file, made (and its file created at full size) on first use; a compact
        pack's shard index is fetched then."""
        key = (name, pack)
        with self._lock:
            found = self._packs.get(key)
        if found is not None:
            return found
        with self._making:  # one thread makes a pack's file (another would truncate what the first wrote)
            with self._lock:
                found = self._packs.get(key)
            return found if found is not None else self._make_pack(name, pack)

    def _make_pack(self, name: str, pack: int) -> _Pack:
        key = (name, pack)
        spec = self.state.arrays[name]
        rows = int(self.state.packs.rows[pack])
        path = chunk_path(self.root, name, pack, spec.ndim)
        rel = os.path.relpath(path, self.root).replace(os.sep, "/")
        entry = _Pack(name, pack, rel, path, rows, spec.frame_bytes if spec.storage == "raw" else 0,
                      spec.kind == "numeric" and spec.storage == "raw")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if spec.storage == "raw":
            entry.size = rows * spec.frame_bytes
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            try:
                os.ftruncate(fd, entry.size)
            finally:
                os.close(fd)
        elif spec.shard_index != "start":
            raise UnsupportedStoreError(f"{self.location(rel)}: a compact pack of store format 2 (its index at the "
                                        f"end); publish the store again from a local copy opened for writing, which "
                                        f"upgrades it", path=self.location(rel), feature=name)
        else:  # the shard index, and the file's size from the same answer
            head, info = self.bucket.read_head(rel, shard_index_bytes(rows))
            self._count(len(head), name)
            entry.size = info.size
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            try:
                os.ftruncate(fd, info.size)
                pwrite_all(fd, head, 0, path)
                index = read_shard_index(fd, spec, rows, 0, rows, f"{self.location(rel)}: pack {pack} of feature "
                                         f"{name!r}", allow_empty=True)
            finally:
                os.close(fd)
            entry.index = index
            entry.present[index[:, 0] < 0] = True  # rows never written: nothing to fetch (reading them is an error)
        with self._lock:
            return self._packs.setdefault(key, entry)

    def _count(self, nbytes: int, name: str = "") -> None:
        with self._lock:
            self.fetched_bytes += nbytes
            self.requests += 1
            self.fetched_by[name] = self.fetched_by.get(name, 0) + nbytes

    # what a batch reads -------------------------------------------------------------------------------------
    def _wants(self, eps: np.ndarray, frames: Mapping[str, np.ndarray],
               pinned: set | None = None) -> dict[tuple[str, int], np.ndarray]:
        """``{(feature, pack): rows}`` read by the frames ``frames[name]`` (``(n, w)`` episode-local) of episodes
        ``eps``; a camera kept as mp4 is handled by file (:meth:`_ensure_mp4`). A numeric feature whose packs are
        all held whole is left out (its packs only pinned and marked used)."""
        out: dict[tuple[str, int], np.ndarray] = {}
        chunk, offset = self._chunk[eps], self._offset[eps]
        for name, q in frames.items():
            spec = self.state.arrays[name]
            if spec.storage == "mp4":
                continue
            q = np.asarray(q).reshape(len(eps), -1)
            packs = np.repeat(chunk, q.shape[1])
            rows = (offset[:, None] + q).reshape(-1)
            if spec.kind == "numeric" and spec.storage == "raw" and self._held_whole(name, packs, pinned):
                continue
            order = np.argsort(packs, kind="stable")
            packs, rows = packs[order], rows[order]
            cut = np.flatnonzero(np.diff(packs)) + 1
            for p, r in zip(np.split(packs, cut), np.split(rows, cut), strict=True):
                if len(p):
                    out[(name, int(p[0]))] = r
        return out

    def _held_whole(self, name: str, packs: np.ndarray, pinned: set | None) -> bool:
        """Whether every pack of ``packs`` of numeric feature ``name`` is held whole (then pinned, marked used)."""
        unique = np.unique(packs).tolist()
        with self._lock:
            if not all(self._packs.get((name, p)) is not None and self._packs[(name, p)].complete for p in unique):
                return False
            for p in unique:
                if (name, p, -1) in self._lru:  # (a settled feature's packs are no longer in it)
                    self._lru.move_to_end((name, p, -1))
                if pinned is not None:
                    pinned.add((name, p, -1))
        return True

    def ensure(self, eps: np.ndarray, frames: Mapping[str, np.ndarray]) -> None:
        """Make the frames ``frames[name]`` (episode-local, ``(n, w)``) of episodes ``eps`` present in the mirror
        (fetching those missing, all at once), before they are read. Called by the dataset under its lock."""
        eps = np.asarray(eps, dtype=np.int64)
        pinned: set[tuple] = set()
        needed, waits = [], []
        for (name, pack), rows in self._wants(eps, frames, pinned).items():
            entry = self._pack(name, pack)
            rows = np.unique(rows)
            with self._lock:
                self._touch(entry, rows, pinned)
                if not entry.present[rows].all():
                    waits += self._coming.get((name, pack), [])
                    needed.append((entry, rows))
        wait(waits)  # background fetches bringing some of them (one that failed: its rows are fetched here)
        jobs = []
        for entry, rows in needed:
            with self._lock:
                missing = rows[~entry.present[rows]]
            jobs += self._plan(entry, missing)
        self._run(jobs)
        for name in frames:
            if self.state.arrays[name].storage == "mp4":
                self._ensure_mp4(name, eps, pinned)
        self._evict(pinned)
        self._start_numeric()

    def prefetch(self, eps: np.ndarray, frames: Mapping[str, np.ndarray]) -> None:
        """Fetch these frames in the background (batches to come): :meth:`ensure` then finds them present, or
        waits for the fetch already under way."""
        eps = np.asarray(eps, dtype=np.int64)
        for (name, pack), rows in self._wants(eps, frames).items():
            entry = self._pack(name, pack)
            rows = np.unique(rows)
            submitted = []
            with self._lock:  # rows neither held nor coming: marked coming, the fetch registered, at once
                missing = rows[~entry.present[rows] & ~entry.coming[rows]]
                for job in self._plan(entry, missing):
                    entry.coming[job[3]] = True
                    future = self._ahead.submit(self._fetch, *job)
                    self._coming.setdefault((name, pack), []).append(future)
                    submitted.append((future, job[3]))
            for future, planned in submitted:  # (a callback of a future done already runs here: not under the lock)
                future.add_done_callback(lambda f, e=entry, r=planned: self._done(e, r, f))

    def _done(self, entry: _Pack, rows: np.ndarray, future: Future) -> None:
        with self._lock:
            entry.coming[rows] = False  # present now, or the fetch failed: a batch that needs them fetches them
            coming = self._coming.get((entry.name, entry.pack), [])
            if future in coming:
                coming.remove(future)

    def _touch(self, entry: _Pack, rows: np.ndarray, pinned: set) -> None:
        if entry.numeric:
            key = (entry.name, entry.pack, -1)
            pinned.add(key)
            if key in self._lru:
                self._lru.move_to_end(key)
            return
        for row in rows.tolist():
            key = (entry.name, entry.pack, row)
            pinned.add(key)
            if key in self._lru:
                self._lru.move_to_end(key)

    def _plan(self, entry: _Pack, rows: np.ndarray, piece: int = _PIECE) -> list[tuple[_Pack, int, int, np.ndarray]]:
        """Requests for ``rows`` (sorted, missing) of a pack: byte ranges of consecutive rows merged (numeric rows
        closer than ``_NUMERIC_GAP`` too), each at most ``piece`` bytes."""
        if not len(rows):
            return []
        rows = np.asarray(rows, dtype=np.int64)
        if entry.index is None:
            starts = rows * entry.frame_bytes
            stops = starts + entry.frame_bytes
        else:
            starts, stops = entry.index[rows, 0], entry.index[rows, 0] + entry.index[rows, 1]
        gap = _NUMERIC_GAP if entry.numeric else 0
        breaks = np.flatnonzero(starts[1:] - stops[:-1] > gap) + 1
        jobs = []
        for lo, hi in zip(np.concatenate([[0], breaks]).tolist(), np.concatenate([breaks, [len(rows)]]).tolist(),
                          strict=True):
            first = lo
            while first < hi:  # a run longer than a piece: cut where a row would cross the piece's end
                last = first + int(np.searchsorted(stops[first:hi], starts[first] + piece, side="right"))
                last = max(last, first + 1)
                jobs.append((entry, int(starts[first]), int(stops[last - 1]), rows[first:last]))
                first = last
        return jobs

    def _run(self, jobs: list) -> None:
        if len(jobs) == 1:
            self._fetch(*jobs[0])
            return
        futures = [self._pool.submit(self._fetch, *job) for job in jobs]
        for future in futures:
            future.result()

    def _fetch(self, entry: _Pack, start: int, stop: int, rows: np.ndarray) -> None:
        """Fetch bytes ``[start, stop)`` of a pack, write them into the mirror, mark ``rows`` present."""
        if entry.index is None:  # raw rows: whole rows from start to stop (numeric: gaps between included)
            rows = np.arange(start // entry.frame_bytes, stop // entry.frame_bytes)
        data = self.bucket.read(entry.rel, start, stop, copy=False)
        self._count(len(data), entry.name)
        fd = os.open(entry.path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            pwrite_all(fd, data, start, entry.path)
        finally:
            os.close(fd)
        with self._lock:
            new = rows[~entry.present[rows]]
            entry.present[new] = True
            if entry.numeric:
                key = (entry.name, entry.pack, -1)
                added = len(new) * entry.frame_bytes
                entry.bytes_held += added
                self._lru[key] = entry.bytes_held
                self._lru.move_to_end(key)
                entry.complete = bool(entry.present.all())
                if entry.complete and self._numeric_started:
                    self._settle(entry.name)
            else:
                added = 0
                for row in new.tolist():
                    a, b = entry.span(row)
                    self._lru[(entry.name, entry.pack, row)] = b - a
                    added += b - a
            self._held += added

    def _settle(self, name: str) -> None:
        """(Under the lock.) Numeric feature ``name`` is held whole once every pack of it is: its packs leave the
        LRU (never evicted) and batches ask nothing for it."""
        packs = np.flatnonzero(self.state.packs.rows > 0).tolist()
        if all((name, p) in self._packs and self._packs[(name, p)].complete for p in packs):
            for p in packs:
                self._lru.pop((name, p, -1), None)
            self.settled.add(name)

    def _evict(self, pinned: set) -> None:
        """Drop the least recently used rows (not ``pinned``) until the mirror holds at most ``cache_bytes``."""
        with self._lock:
            if self._held <= self.cache_bytes:
                return
            victims = []
            for key in list(self._lru):
                if self._held <= self.cache_bytes:
                    break
                if key in pinned or (key[0], key[1]) in self._coming:
                    continue
                nbytes = self._lru.pop(key)
                self._held -= nbytes
                if key[2] == -2:  # an mp4 file (a reader holding it open keeps reading it)
                    self._mp4.pop((key[0], key[1]), None)
                    victims.append((str(self.root / key[0] / "videos" / key[1]), -1, -1))
                    continue
                entry = self._packs[(key[0], key[1])]
                if key[2] < 0:
                    entry.present[:] = False
                    entry.complete, entry.bytes_held = False, 0
                    victims.append((entry.path, 0, entry.size))
                else:
                    entry.present[key[2]] = False
                    victims.append((entry.path, *entry.span(key[2])))
        for path, start, stop in victims:  # rows no batch reads now (pinned ones stay): their bytes go
            if start < 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                punch_hole(fd, start, stop - start)
            finally:
                os.close(fd)

    def _start_numeric(self) -> None:
        """After the first batch: the numeric packs whole, in the background, while they fit in half the cache."""
        if self._numeric_started:
            return
        self._numeric_started = True
        numeric = [name for name, spec in self.state.arrays.items()
                   if spec.kind == "numeric" and spec.storage == "raw"]
        total = sum(int(self.state.packs.rows.sum()) * self.state.arrays[n].frame_bytes for n in numeric)
        if not numeric or total > self.cache_bytes // 2:
            return
        for name in numeric:
            for pack in np.flatnonzero(self.state.packs.rows > 0).tolist():
                self._background.submit(self._whole_pack, name, pack)

    def _whole_pack(self, name: str, pack: int) -> None:
        entry = self._pack(name, pack)
        with self._lock:
            missing = np.flatnonzero(~entry.present)
        for job in self._plan(entry, missing, _BACKGROUND_PIECE):
            if self._stopping.is_set():
                return
            self._fetch(*job)
        with self._lock:  # (held whole already, by the batches: settled now)
            if entry.complete:
                self._settle(name)

    # cameras kept as mp4 -----------------------------------------------------------------------------------
    def _fetch_mp4_indexes(self, state: StoreState) -> None:
        names = [name for name, spec in state.arrays.items() if spec.storage == "mp4"]
        for name in names:
            rel = f"{name}/{MP4_INDEX}"
            data, _ = self.bucket.read_whole(rel, limit=512 * (len(state.table) + 1) + (1 << 20))
            self._count(len(data))
            (self.root / name).mkdir(parents=True, exist_ok=True)
            atomic_write(self.root / rel, data, durable=False, root=self.root)
        self._mp4_index = {name: read_mp4_index(self.root, name, len(state.table)) for name in names}

    def _ensure_mp4(self, name: str, eps: np.ndarray, pinned: set) -> None:
        index = self._mp4_index[name]
        files = [index["files"][f] for f in np.unique(index["file"][eps]).tolist() if f >= 0]
        futures = []
        with self._lock:
            for file in files:
                key = (name, file, -2)
                pinned.add(key)
                if key in self._lru:
                    self._lru.move_to_end(key)
                if (name, file) not in self._mp4:
                    self._mp4[(name, file)] = self._pool.submit(self._fetch_mp4, name, file)
                futures.append(self._mp4[(name, file)])
        for future in futures:
            future.result()

    def _fetch_mp4(self, name: str, file: str) -> None:
        rel = f"{name}/videos/{file}"
        try:
            data, _ = self.bucket.read_whole(rel, limit=_MAX_MP4_BYTES)
        except BaseException:
            with self._lock:
                self._mp4.pop((name, file), None)  # tried again by the next batch that needs it
            raise
        self._count(len(data))
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, durable=False, root=self.root)
        with self._lock:
            self._lru[(name, file, -2)] = len(data)
            self._held += len(data)

    # lifetime ---------------------------------------------------------------------------------------------
    def refresh(self) -> StoreState | None:
        """The bucket's latest commit, if it is not the one served: the mirror serves it from now on (rows held
        are dropped: a new commit may have moved or edited them). None when it is the same."""
        doc, _ = self.bucket.read_whole(ROOT, limit=MAX_ROOT_BYTES, first=_ROOT_FIRST)
        if doc == self.root_doc:
            return None
        with self._lock:
            for future in [f for fs in self._coming.values() for f in fs]:
                future.cancel()
        for pool in (self._ahead, self._background):
            pool.shutdown(wait=True, cancel_futures=True)
        self._ahead = ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-prefetch")
        self._background = ThreadPoolExecutor(_BACKGROUND_IN_FLIGHT, thread_name_prefix="lerobot_zarr-whole")
        with self._lock:
            packs, self._packs, self._mp4 = self._packs, {}, {}
            self._lru.clear()
            self.settled.clear()
            self._held, self._numeric_started = 0, False
        for entry in packs.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
        for name, spec in self.state.arrays.items():
            if spec.storage == "mp4":
                shutil.rmtree(self.root / name / "videos", ignore_errors=True)
        atomic_write(self.root / ROOT, doc, durable=False, root=self.root)
        self.root_doc = doc
        self.state = read_state(self.root)
        self._fetch_mp4_indexes(self.state)
        self._chunk, self._offset = self.state.table.chunk, self.state.table.offset
        return self.state

    @property
    def held_bytes(self) -> int:
        """Bytes of rows the mirror holds now."""
        return self._held

    def close(self) -> None:
        """Stop the background fetches and delete the mirror."""
        self._finalizer()


def _reopen(bucket: Bucket, home: Path, cache_bytes: int, root_doc: bytes) -> RemoteStore:
    return RemoteStore(bucket, home, cache_bytes=cache_bytes, root_doc=root_doc)


def _mirror_folder(home: Path, bucket: Bucket) -> Path:
    """``home/<store>-<digest of its URL and endpoint>/<pid>-<random>``: a folder of this process's own; those of
    processes that ended are removed on the way."""
    ident = f"{bucket.url}\0{bucket.endpoint or ''}"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", bucket.url.name)[:40] or "store"
    base = home / f"{name}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"
    if base.is_dir():
        for entry in base.iterdir():
            pid = entry.name.split("-", 1)[0]
            if pid.isdigit() and not process_alive(int(pid)) and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
    return base / f"{os.getpid()}-{secrets.token_hex(4)}"


def _remove_mirror(root: Path, stopping: threading.Event, *pools: ThreadPoolExecutor) -> None:
    stopping.set()
    for pool in pools:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        except RuntimeError:  # the last reference went in one of the pool's own threads: it cannot wait for itself
            pool.shutdown(wait=False, cancel_futures=True)
    shutil.rmtree(root, ignore_errors=True)

