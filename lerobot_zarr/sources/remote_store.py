"""A store in a bucket, read without copying it: a local mirror that holds what was read, filled by byte ranges,
shared by the processes of the machine that read the same commit (DataLoader workers, ranks).

The mirror is a folder laid out like the store (the same paths), one per store and commit (and boot of the
machine): the root ``zarr.json`` of the commit served (fetched at open, or given to a worker with the dataset),
each camera's ``mp4.json``, and every pack file as a sparse file of its full size into which the rows read are
written. The dataset's readers (memory maps of raw packs, compact shards) read the mirror as they read a local
store, and the dataset asks :meth:`RemoteStore.ensure` first for the frames a batch reads: those missing are
fetched (byte ranges of the rows, coalesced, sent together), written, marked present.

- Numeric features (small): the rows a batch needs at once (up to ``_IN_FLIGHT`` requests together), then, after
  the first batch, whole packs in the background (two requests in flight, so that a batch's own requests do not
  queue behind them), while they fit in half of the cache: afterwards a batch reads local maps only.
- Cameras: exactly the rows read (a compact camera's shard index first, once per pack). A camera kept as mp4 is
  read by byte ranges with read-ahead, as a Hub repo's videos (:class:`~lerobot_zarr.cloud.files.BucketFiles`),
  never whole. :meth:`RemoteStore.prefetch` fetches the frames of batches to come in the background (the
  sampler's lookahead), so that a batch finds them local; those queued or under way ask for at most
  ``cache_bytes / 8`` (a deeper lookahead is left to the batches that read it). A camera (or text) whose every row
  was read and that fits in half the cache with the numeric features is then held whole (never evicted): a batch
  reads it from the maps alone, as the numeric features (:mod:`.keeping`).
- The cache is bounded (``cache_bytes``): past it the least recently used rows (a numeric pack whole) are
  dropped, their bytes punched out of the sparse file, never rows a process is reading (or fetching) nor those of
  a feature held whole: the bound is exceeded by those (each process's last three batches and its prefetches
  under way) and the rows that landed since the last eviction looked.

Sharing between processes (Linux open file description locks, ``F_OFD_SETLK``, on ranges of one lock file that
name rows; the kernel drops a process's locks when it dies):

- which rows are present, and when each was last used, is a small file per pack mapped by every process
  (``.mirror/packs/``); a row is marked present only after its bytes are written, so a process killed while
  writing leaves the row absent (fetched again), never half served; the folder is keyed by the machine's boot, so
  a power loss does not leave marks whose bytes never reached the disk;
- a fetch holds an exclusive lock on its rows (a claim): another process wanting them waits for it, then finds
  them present (each row crosses the network once);
- a process reading rows holds shared locks on them (pins) from the :meth:`RemoteStore.ensure` that brought them
  until its second ensure after, and an eviction drops only rows on which it gets an exclusive lock on both the
  claim and the pin: never rows being fetched or read;
- the bytes held are counted in a shared counter (recounted by each eviction, plus what landed while it looked);
  one process evicts at a time (one that finds another evicting waits for it, then looks again), the
  least recently used rows of all processes, down to 7/8 of ``cache_bytes``;
- the folder is removed when the last process using it closes it (a shared ``flock`` per user; those of
  processes that died are removed by the next open);
- a process forked from one reading the store (a DataLoader worker, as Linux starts them) joins the mirror at its
  first use with descriptors of its own (open file description locks and flocks are shared across a fork: the
  inherited ones stay the parent's, never released nor taken for the child's), and its requests go through a
  fetcher process of its own (:mod:`~lerobot_zarr.cloud.relay`: obstore's engine does not survive a fork).

Reads go through :class:`~lerobot_zarr.cloud.client.Bucket` (deadlines, bounded bodies, exact ranges, typed
errors). Rows of the commit served never change but for in-place edits (visible as in a local store, for the rows
fetched after them); the root is read once, so a dataset keeps its commit until :meth:`RemoteStore.refresh`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..cloud.client import Bucket, bucket_timeout
from ..errors import ArgumentError, BucketError, UnsupportedStoreError
from ..store.cameras import MP4_INDEX, read_mp4_index
from ..store.packs import read_shard_index, shard_index_bytes
from ..store.state import StoreState, chunk_path, read_state
from ..utils.background import ByteBudget
from ..utils.fileio import atomic_write, pwrite_all, retry_within
from .keeping import Keeping
from .mirror import (
    CLAIMS,
    INDEXES,
    MAKING,
    MINE,
    PIN_TURNS,
    PINS,
    SHARED,
    Mirror,
    Pack,
    RangeLocks,
    align8,
    publish,
    read_root,
    shared_map,
)

__all__ = ["RemoteStore", "CACHE_BYTES_ENV", "DEFAULT_CACHE_BYTES", "SHARED"]

log = logging.getLogger("lerobot_zarr")

CACHE_BYTES_ENV = "LEROBOT_ZARR_BUCKET_CACHE_BYTES"
DEFAULT_CACHE_BYTES = 8 << 30
# numeric rows closer than this in one request: a gap costing less link time than a request's share of a round trip
_NUMERIC_GAP = 64 << 10  # (a request's CPU, ~0.5 ms, is as long as 64 KB takes on a 1 Gbit/s link)
_PIECE = 16 << 20  # the most one request of a foreground fetch asks for
_BACKGROUND_IN_FLIGHT = 2
_IN_FLIGHT = 256  # a batch's requests at once: a 100,000-episode store's first batch in 4 round trips (32: 27)
_IN_FLIGHT_BYTES = 32 << 20  # and their bytes: each request's deadline holds on a link of 50 Mbit/s
_AHEAD_IN_FLIGHT = 32  # prefetches (bounded in bytes by ``ahead_limit``)
_AHEAD_SHARE = 8  # a process's prefetches queued or under way: at most 1/8 of the cache's bytes
_ROUNDS = 4  # the most times one ensure fetches rows itself (a prefetch that failed, rows taken from under it...)
_SETTLE_EVERY = 16  # ensures between two looks whether a feature read row by row is held whole


def _wait_limit() -> float:
    """The longest a thread waits for a fetch it needs to end (another thread's or process's: each bounded by its
    requests' deadlines): twice the longest a fetch of a piece may take."""
    return 6 * bucket_timeout() + _PIECE / (256 << 10)


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


class RemoteStore(Keeping):
    """The store at ``bucket`` (a :class:`~lerobot_zarr.cloud.client.Bucket` of the store's folder) served from a
    mirror under ``home`` shared with the other processes reading the same commit (see the module docstring).
    ``root_doc``: the root ``zarr.json`` to serve (a worker's: its parent's commit; an open's: the one read asking what
    the folder is); by default the bucket's current one, read here (``requests`` and ``fetched_bytes`` count what this
    object reads). ``cache_bytes``: the most the mirror holds (default ``$LEROBOT_ZARR_BUCKET_CACHE_BYTES``, else
    8 GiB)."""

    def __init__(self, bucket: Bucket, home: str | os.PathLike, *, cache_bytes: int | None = None,
                 root_doc: bytes | None = None):
        self.bucket = bucket
        self.home = Path(home)
        self.cache_bytes = _cache_bytes(cache_bytes)
        #: the most bytes this process's prefetches queued or under way may ask for (a prefetch past it is not
        #: made: the batch that reads those rows fetches them)
        self.ahead_limit = self.cache_bytes // _AHEAD_SHARE
        self._lock = threading.Lock()  # guards the bookkeeping below; never held while waiting on the network
        self._changed = threading.Condition(self._lock)  # rows this process was fetching are no longer coming
        self._making = threading.Lock()  # held while a pack's file is made (a compact one: its index fetched)
        self._pools = self._new_pools()
        self._pin_lock = threading.Lock()  # one pinning at a time (it may wait for an eviction of another process)
        self._evict_lock = threading.Lock()  # one eviction at a time in this process (the flock is per process)
        self._stopping = threading.Event()  # set when the mirror goes: background fetches stop at their next piece
        self.fetched_bytes = 0
        self.fetched_by: dict[str, int] = {}  # bytes fetched per feature ("": the root, indexes...)
        self.requests = 0
        if root_doc is None:  # (counted: a root given was read by another, an open's probe or a parent process)
            root_doc = read_root(bucket)
            self._count(len(root_doc))
        self._holder: list[Mirror | None] = [None]  # the mirror joined (the finalizer lets go of it)
        self._finalizer = weakref.finalize(self, _close, self._stopping, self._pools, self._holder)
        self._attach(root_doc)
        _live.add(self)

    def _new_pools(self) -> list[ThreadPoolExecutor]:
        """Threads of a batch's fetches (their bytes budgeted), of prefetches, of whole packs in the background."""
        self._in_flight = ByteBudget(_IN_FLIGHT_BYTES)
        self._pool = ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-remote")
        self._ahead = ThreadPoolExecutor(_AHEAD_IN_FLIGHT, thread_name_prefix="lerobot_zarr-prefetch")
        self._background = ThreadPoolExecutor(_BACKGROUND_IN_FLIGHT, thread_name_prefix="lerobot_zarr-whole")
        return [self._pool, self._ahead, self._background]

    def _after_fork(self) -> None:
        """In a forked child (a DataLoader worker started by fork): the parent's locks and threads are not the
        child's (new locks: nothing waits on a lock a parent thread held); the rest at the first use (:meth:`_own`)."""
        self._forked = True
        self._holder[0] = None  # the parent's mirror is not this process's to let go of (its flock is the parent's)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._making, self._pin_lock, self._owning = threading.Lock(), threading.Lock(), threading.Lock()
        self._evict_lock = threading.Lock()

    def _own(self) -> None:
        """In a forked child, at its first use: the mirror joined with descriptors of its own (open file
        description locks are shared across a fork: the inherited ones are the parent's claims and pins), thread
        pools of its own, and none of the parent's claims, pins or fetches under way. The bucket's requests go
        through the child's fetcher (:mod:`~lerobot_zarr.cloud.relay`): obstore's engine does not survive a fork."""
        if not getattr(self, "_forked", False):
            return
        with self._owning:
            if not self._forked:
                return
            old = self._mirror
            old.forget()  # (this process's copies of the descriptors: the parent's locks stay the parent's)
            os.close(old.users)
            self._pools[:] = self._new_pools()
            self._attach(self.root_doc, mp4_files=self.mp4_files)
            self._forked = False

    def _attach(self, root_doc: bytes, mp4_files: Any = None) -> None:
        """Serve the commit ``root_doc``: its mirror joined (or made), its state read, its mp4 files listed (unless
        given: those of the same commit)."""
        self.root_doc = root_doc
        self._packs: dict[tuple[str, int], Pack] = {}
        self._coming: dict[tuple[str, int], list[Future]] = {}  # background fetches of a pack
        self._ahead_bytes = 0  # bytes of this process's prefetches queued or under way
        self._claimed: dict[tuple[str, int], list[tuple[int, int]]] = {}  # rows claimed by this process's threads
        empty = np.empty(0, np.int64)
        self._pinned = [(empty, empty)] * PIN_TURNS  # per descriptor of pins: the ranges it holds (starts, lengths)
        self._pin_turn = 0
        self._numeric_started = False
        #: features held whole (every row present): nothing to ask for them, and they are never evicted. Numeric
        #: ones fetched whole because they fit in half the cache; those read row by row (cameras...) once every row
        #: was read, while with the others held whole they fit in half the cache (:meth:`_look_to_settle`)
        self.settled: set[str] = set()
        self._ensures = 0
        self._settle_cursor: dict[str, int] = {}  # per feature read row by row: packs found complete from the first
        self._fetched_since_evict = 0
        mirror = Mirror(self.home, self.bucket, root_doc)
        self._mirror = self._holder[0] = mirror
        self.root = mirror.root
        try:
            self.state = read_state(self.root)
            self._fetch_mp4_indexes(self.state)
        except BaseException:
            self._finalizer()
            raise
        names = list(self.state.arrays)
        self._feature = {name: i for i, name in enumerate(names)}
        self._pack_start = np.concatenate([[0], np.cumsum(self.state.packs.rows)]).astype(np.int64)
        self._feature_span = int(self._pack_start[-1]) + 1
        self._chunk, self._offset = self.state.table.chunk, self.state.table.offset
        self._filled = np.flatnonzero(self.state.packs.rows > 0).tolist()
        self._numeric = [name for name, spec in self.state.arrays.items()
                         if spec.kind == "numeric" and spec.storage == "raw"]
        self._by_rows = [name for name, spec in self.state.arrays.items()
                         if spec.storage != "mp4" and name not in self._numeric]
        self.mp4_files = mp4_files if mp4_files is not None else self._list_mp4(self.state)

    def __reduce__(self) -> tuple:
        # to a DataLoader worker: the same commit in the same mirror (no request for the root)
        return (_reopen, (self.bucket, self.home, self.cache_bytes, self.root_doc))

    def location(self, rel: str = "") -> str:
        return self.bucket.location(rel)

    def _slot(self, name: str, pack: int) -> int:
        return self._feature[name] * self._feature_span + int(self._pack_start[pack])

    def _pack(self, name: str, pack: int) -> Pack:
        """The mirror's record of a pack file, made (its file created at full size, by this process or another)
        on first use; a compact pack's shard index is fetched then, once for every process."""
        key = (name, pack)
        with self._lock:
            found = self._packs.get(key)
        if found is not None:
            return found
        with self._making:  # one thread makes a pack's record
            with self._lock:
                found = self._packs.get(key)
            if found is not None:
                return found
            entry = self._make_pack(name, pack)
            with self._lock:
                return self._packs.setdefault(key, entry)

    def _make_pack(self, name: str, pack: int) -> Pack:
        mirror = self._mirror
        spec = self.state.arrays[name]
        rows = int(self.state.packs.rows[pack])
        path = chunk_path(self.root, name, pack, spec.ndim)
        rel = os.path.relpath(path, self.root).replace(os.sep, "/")
        entry = Pack(name, pack, rel, path, rows, spec.frame_bytes if spec.storage == "raw" else 0,
                      spec.kind == "numeric" and spec.storage == "raw", self._slot(name, pack))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if spec.storage == "raw":
            entry.size = rows * spec.frame_bytes
            if not os.path.exists(path):
                publish(path, lambda fd: os.ftruncate(fd, entry.size))
        elif spec.shard_index != "start":
            raise UnsupportedStoreError(f"{self.location(rel)}: a compact pack of store format 2 (its index at the "
                                        f"end); publish the store again from a local copy opened for writing, which "
                                        f"upgrades it", path=self.location(rel), feature=name)
        else:  # the shard index, and the file's size from the same answer: fetched by one process
            making = MAKING + self._feature[name] * len(self._pack_start) + pack
            self._wait_lock(mirror.claims, making, 1, f"the shard index of pack {pack} of {name!r}")
            try:
                if not os.path.exists(path):
                    head, info = self.bucket.read_head(rel, shard_index_bytes(rows))
                    self._count(len(head), name)

                    def fill(fd: int) -> None:
                        os.ftruncate(fd, info.size)
                        pwrite_all(fd, head, 0, path)

                    publish(path, fill)
            finally:
                mirror.claims.unlock(making, 1)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                entry.size = os.fstat(fd).st_size
                entry.index = read_shard_index(fd, spec, rows, 0, rows, f"{self.location(rel)}: pack {pack} of "
                                               f"feature {name!r}", allow_empty=True)
            finally:
                os.close(fd)
        state = mirror.root / MINE / "packs" / f"{self._feature[name]}-{pack}"
        entry.attach(shared_map(state, align8(rows) + 8 * rows))
        return entry

    def _count(self, nbytes: int, name: str = "") -> None:
        with self._lock:
            self.fetched_bytes += nbytes
            self.requests += 1
            self.fetched_by[name] = self.fetched_by.get(name, 0) + nbytes

    def _wait_lock(self, locks: RangeLocks, start: int, length: int, what: str, *, exclusive: bool = True) -> None:
        """Take a lock, waiting while another process holds a conflicting one (a fetch or an eviction under way
        there, bounded by its own deadlines): a :class:`BucketError` past twice the longest a fetch may take."""
        if locks.lock(start, length, exclusive=exclusive):  # free (the usual case): no deadline to work out
            return
        limit = _wait_limit()  # (no event crosses processes: tried again; the holder is a fetch, ms to seconds)
        if not retry_within(lambda: locks.lock(start, length, exclusive=exclusive), limit):
            raise BucketError(f"{self.location()}: {what} has been fetched by another process for more than "
                              f"{limit:.0f} s (is it stopped?)", path=self.location())

    def _wants(self, eps: np.ndarray, frames: Mapping[str, np.ndarray]) -> dict[tuple[str, int], np.ndarray]:
        """``{(feature, pack): rows}`` read by the frames ``frames[name]`` (``(n, w)`` episode-local) of episodes
        ``eps``; cameras kept as mp4 (read by ranges) and features held whole are left out."""
        out: dict[tuple[str, int], np.ndarray] = {}
        chunk, offset = self._chunk[eps].astype(np.int64), self._offset[eps].astype(np.int64)
        span = self._feature_span
        for name, q in frames.items():
            spec = self.state.arrays[name]
            if spec.storage == "mp4" or name in self.settled:
                continue
            q = np.asarray(q).reshape(len(eps), -1)
            # one sort for every pack: (pack, row) as one key
            keys = np.unique((chunk[:, None] * span + offset[:, None] + q).reshape(-1))
            packs = keys // span
            cut = np.flatnonzero(packs[1:] != packs[:-1]) + 1
            for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), len(keys)], strict=True):
                if hi > lo:
                    pack = int(packs[lo])
                    out[(name, pack)] = keys[lo:hi] - pack * span
        return out

    def ensure(self, eps: np.ndarray, frames: Mapping[str, np.ndarray]) -> None:
        """Make the frames ``frames[name]`` (episode-local, ``(n, w)``) of episodes ``eps`` present in the mirror
        (fetching those missing, all at once), and keep them there until this process's second ensure after this
        one. Called by the dataset under its lock, before it reads them."""
        self._own()
        eps = np.asarray(eps, dtype=np.int64)
        units = [(self._pack(name, pack), rows) for (name, pack), rows in self._wants(eps, frames).items()]
        self._pin(units)  # first: once present, no process evicts them
        now = time.monotonic()
        for entry, rows in units:  # (a numeric pack is evicted whole, by its latest use: one row's stamp stands)
            entry.used[rows[:1] if entry.numeric else rows] = now
        self._bring(units)
        self._evict()
        self._start_numeric()
        self._ensures += 1
        if self._ensures % _SETTLE_EVERY == 0:
            try:
                self._look_to_settle()
            except (BucketError, OSError) as exc:  # (the batch's rows are present: looked at again 16 batches on)
                log.info("%s: looking whether features are held whole: %s (looked at again later)", self.location(),
                         exc)

    def _pin(self, units: list[tuple[Pack, np.ndarray]]) -> None:
        """Shared locks on the rows of ``units`` (a numeric pack's: the whole pack, as it is evicted), held until
        the second ensure after this one (the third lets go). Each ensure pins through the next of ``PIN_TURNS``
        descriptors of the lock file, first letting go of all that descriptor held (the pins of the ensure
        ``PIN_TURNS`` before, in one call; no count per row): a row pinned by a later ensure too stays pinned by that
        one's descriptor. A row of this batch that the letting go leaves unpinned for a moment may be evicted then:
        :meth:`_bring`, after this, fetches it again."""
        slots = [PINS + entry.slot + rows for entry, rows in units if not entry.numeric]
        slots = np.concatenate(slots) if slots else np.empty(0, np.int64)  # (each unit's rows sorted, distinct)
        first = np.flatnonzero(np.diff(slots, prepend=-2) != 1)  # runs of consecutive slots: one lock each
        numeric = [entry for entry, _ in units if entry.numeric]
        pinned = (np.concatenate([slots[first], [PINS + entry.slot for entry in numeric]]).astype(np.int64),
                  np.concatenate([np.diff(first, append=len(slots)), [e.rows for e in numeric]]).astype(np.int64))
        with self._pin_lock:
            turn = self._pin_turn = (self._pin_turn + 1) % PIN_TURNS
            self._pinned[turn] = pinned
            if not SHARED:  # (the mirror is this process's: its pins are asked of ``_pinned`` alone)
                return
            locks = self._mirror.pins[turn]
            locks.unlock(PINS, MAKING - PINS)
            for slot, n in zip(*(a.tolist() for a in pinned), strict=True):
                self._wait_lock(locks, slot, n, "rows being evicted", exclusive=False)  # (waits only on an eviction)

    def _bring(self, units: list[tuple[Pack, np.ndarray]]) -> None:
        """Fetch the rows of ``units`` that are missing, all at once; wait for those this process is fetching
        already (a prefetch), and fetch those it failed to bring. Bounded: a wait for another thread's fetch past
        :func:`_wait_limit`, or rows still missing after ``_ROUNDS`` fetches of its own, is a
        :class:`~lerobot_zarr.errors.BucketError` (never a loop without end)."""
        rounds, before = 0, None
        while True:
            mine, waiting, left_rows = [], False, 0
            with self._lock:
                for entry, rows in units:
                    missing = rows[~(entry.present[rows] | entry.empty[rows])]
                    free = missing[~entry.coming[missing]]
                    waiting |= len(free) < len(missing)
                    left_rows += len(missing)
                    if len(free):
                        mine.append((entry, free))
                if not mine and not waiting:
                    return
                if before is None or left_rows < before:  # (the wait is counted from the last progress seen)
                    before, deadline = left_rows, time.monotonic() + _wait_limit()
                if not mine:
                    self._wait_changed(deadline, "", "rows a batch reads have been fetched")
                    continue
                rounds += 1
                if rounds > _ROUNDS:
                    entry, rows = mine[0]
                    raise BucketError(
                        f"{self.location()}: {sum(len(r) for _, r in mine)} rows a batch reads (row {rows[0]} of "
                        f"pack {entry.pack} of {entry.name!r}...) were still missing after {_ROUNDS} fetches of "
                        f"them: dropped from the mirror as soon as they landed", path=self.location())
                for entry, free in mine:
                    entry.coming[free] = True
            jobs = [job for entry, rows in mine for job in self._plan(entry, rows)]
            try:
                if len(jobs) == 1:
                    self._fetch(*jobs[0])
                else:
                    for future in [self._pool.submit(self._fetch_in_budget, *job) for job in jobs]:
                        future.result()
            finally:
                self._release(mine)
            before = None  # (a wait after a fetch of its own: counted from its end)

    def _release(self, mine: list[tuple[Pack, np.ndarray]]) -> None:
        with self._lock:
            for entry, rows in mine:
                entry.coming[rows] = False
            self._changed.notify_all()

    def prefetch(self, eps: np.ndarray, frames: Mapping[str, np.ndarray]) -> None:
        """Fetch these frames in the background (batches to come): :meth:`ensure` then finds them present, or
        waits for the fetch already under way."""
        self._own()
        eps = np.asarray(eps, dtype=np.int64)
        for (name, pack), rows in self._wants(eps, frames).items():
            entry = self._pack(name, pack)
            with self._lock:  # rows neither held nor coming: marked coming, the fetch registered, at once
                missing = rows[~(entry.present[rows] | entry.empty[rows] | entry.coming[rows])]
                for job in self._plan(entry, missing):
                    if self._ahead_bytes + job[2] - job[1] > self.ahead_limit:
                        return  # (bounded: the batches to come fetch the rest themselves)
                    self._ahead_bytes += job[2] - job[1]
                    entry.coming[job[3]] = True
                    future = self._ahead.submit(self._fetch_then_release, job)
                    self._coming.setdefault((name, pack), []).append(future)

    def _fetch_in_budget(self, entry: Pack, start: int, stop: int, rows: np.ndarray) -> None:
        with self._in_flight.held(stop - start, _wait_limit(), lambda why: BucketError(
                f"{self.location()}: pack {entry.pack} of {entry.name!r}: {why}", path=self.location())):
            self._fetch(entry, start, stop, rows)

    def _fetch_then_release(self, job: tuple) -> None:
        try:
            self._fetch(*job)
        finally:
            entry = job[0]
            with self._lock:
                self._ahead_bytes -= job[2] - job[1]
            self._release([(entry, job[3])])
            with self._lock:
                coming = self._coming.get((entry.name, entry.pack), [])
                for future in [f for f in coming if f.done()]:
                    coming.remove(future)

    def _plan(self, entry: Pack, rows: np.ndarray, piece: int = _PIECE, *, exact: bool = False
              ) -> list[tuple[Pack, int, int, np.ndarray]]:
        """Requests for ``rows`` (sorted, missing) of a pack: byte ranges of consecutive rows merged (numeric rows
        closer than ``_NUMERIC_GAP`` too, unless ``exact``), each at most ``piece`` bytes."""
        if not len(rows):
            return []
        rows = np.asarray(rows, dtype=np.int64)
        if entry.index is None:
            starts = rows * entry.frame_bytes
            stops = starts + entry.frame_bytes
        else:
            starts, stops = entry.index[rows, 0], entry.index[rows, 0] + entry.index[rows, 1]
        gap = _NUMERIC_GAP if entry.numeric and not exact else 0
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

    def _fetch(self, entry: Pack, start: int, stop: int, rows: np.ndarray) -> None:
        """Bring ``rows`` (bytes ``[start, stop)`` of a pack): under their claim (another process fetching some of
        them is waited for), those still missing fetched, written, marked present."""
        if entry.index is None:  # raw rows: whole rows from start to stop (numeric: gaps between included)
            lo, hi = start // entry.frame_bytes, stop // entry.frame_bytes
        else:
            lo, hi = int(rows[0]), int(rows[-1]) + 1
        self._claim(entry, lo, hi)
        try:
            if entry.index is None:  # (slices: a numeric request may span a pack's 600,000 rows)
                missing = lo + np.flatnonzero(~entry.present[lo:hi])
                whole = len(missing) == hi - lo
            else:
                missing = rows[~entry.present[rows]]
                whole = len(missing) == len(rows)
            if whole:
                self._get(entry, start, stop, rows)
            else:  # another process brought some meanwhile: the others exactly (no byte fetched twice)
                for job in self._plan(entry, missing, exact=True):
                    self._get(*job)
        finally:
            self._unclaim(entry, lo, hi)

    def _claim(self, entry: Pack, lo: int, hi: int, *, wait: bool = True, evicting: bool = False) -> bool:
        """Claim rows ``[lo, hi)`` of a pack: no thread of this process claims any of them meanwhile (waited for,
        so that the claims of one descriptor never overlap), nor another process (its lock: waited for too).
        Without ``wait``, or ``evicting`` (an eviction's claim: the rows' pins too): whether they were all free now
        (claimed then)."""
        key, deadline = (entry.name, entry.pack), None
        wait = wait and not evicting
        with self._lock:
            while any(a < hi and lo < b for a, b in self._claimed.get(key, ())):
                if not wait:
                    return False
                deadline = deadline or time.monotonic() + _wait_limit()
                self._wait_changed(deadline, entry.rel, f"rows {lo}-{hi - 1} of pack {entry.pack} of {entry.name!r} "
                                                        f"have been claimed")
            self._claimed.setdefault(key, []).append((lo, hi))
        try:
            if wait:
                self._wait_lock(self._mirror.claims, CLAIMS + entry.slot + lo, hi - lo, f"rows {lo}-{hi - 1} of "
                                f"pack {entry.pack} of {entry.name!r}")
                return True
            if not evicting:
                if self._mirror.claims.lock(CLAIMS + entry.slot + lo, hi - lo):
                    return True
            elif self._mirror.evicting.lock(CLAIMS + entry.slot + lo, hi - lo):
                if self._mirror.evicting.lock(PINS + entry.slot + lo, hi - lo):
                    return True
                self._mirror.evicting.unlock(CLAIMS + entry.slot + lo, hi - lo)
        except BaseException:
            self._forget_claim(key, lo, hi)
            raise
        self._forget_claim(key, lo, hi)
        return False

    def _wait_changed(self, deadline: float, rel: str, what: str) -> None:
        """(Under ``self._lock``.) Wait for a fetch or a claim of this process to end (each notifies ``_changed``),
        at most until ``deadline``: past it a :class:`BucketError` (``what`` of ``rel`` "... by another thread")."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise BucketError(f"{self.location(rel)}: {what} by another thread of this process for more than "
                              f"{_wait_limit():.0f} s", path=self.location(rel))
        self._changed.wait(min(1.0, left))

    def _unclaim(self, entry: Pack, lo: int, hi: int, *, evicting: bool = False) -> None:
        if evicting:
            self._mirror.evicting.unlock(PINS + entry.slot + lo, hi - lo)
            self._mirror.evicting.unlock(CLAIMS + entry.slot + lo, hi - lo)
        else:
            self._mirror.claims.unlock(CLAIMS + entry.slot + lo, hi - lo)
        self._forget_claim((entry.name, entry.pack), lo, hi)

    def _forget_claim(self, key: tuple[str, int], lo: int, hi: int) -> None:
        with self._lock:
            self._claimed[key].remove((lo, hi))
            self._changed.notify_all()

    def _get(self, entry: Pack, start: int, stop: int, rows: np.ndarray) -> None:
        """(Under the rows' claim.) Fetch bytes ``[start, stop)``, write them, then mark ``rows`` present (raw
        rows: every row of the range)."""
        data = self.bucket.read(entry.rel, start, stop, copy=False)
        self._count(len(data), entry.name)
        fd = os.open(entry.path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            pwrite_all(fd, data, start, entry.path)
        finally:
            os.close(fd)
        now = time.monotonic()
        if entry.index is None:  # rows [a, b): slices, no index arrays
            a, b = start // entry.frame_bytes, stop // entry.frame_bytes
            new = ~entry.present[a:b]
            added = int(np.count_nonzero(new)) * entry.frame_bytes
            self._mirror.add_held(added)  # counted before marked: a process killed between counts too much
            if entry.numeric:  # (evicted whole, by its rows' latest use: one stamp stands for the range's)
                entry.used[a] = now
            else:
                entry.used[a:b][new] = now
            entry.present[a:b] = True
        else:
            new = rows[~entry.present[rows]]
            added = entry.nbytes(new)
            self._mirror.add_held(added)
            entry.used[new] = now
            entry.present[new] = True
        with self._lock:
            self._fetched_since_evict += added

    def _fetch_mp4_indexes(self, state: StoreState) -> None:
        """Each mp4 camera's index (episode -> file, times) into the mirror: fetched by one process."""
        names = [name for name, spec in state.arrays.items() if spec.storage == "mp4"]
        for k, name in enumerate(names):
            rel = f"{name}/{MP4_INDEX}"
            path = self.root / rel
            if not path.exists():
                self._wait_lock(self._mirror.claims, INDEXES + k, 1, f"the mp4 index of {name!r}")
                try:
                    if not path.exists():
                        data, _ = self.bucket.read_whole(rel, limit=512 * (len(state.table) + 1) + (1 << 20))
                        self._count(len(data))
                        path.parent.mkdir(parents=True, exist_ok=True)
                        atomic_write(path, data, durable=False, root=self.root)
                finally:
                    self._mirror.claims.unlock(INDEXES + k, 1)
        self._mp4_index = {name: read_mp4_index(self.root, name, len(state.table)) for name in names}

    def _list_mp4(self, state: StoreState) -> Any:
        """The mp4 files of the cameras kept as mp4, read by byte ranges (listed: their sizes and ETags)."""
        folders = [f"{name}/videos" for name, spec in state.arrays.items() if spec.storage == "mp4"]
        if not folders:
            return None
        from ..cloud.files import BucketFiles

        return BucketFiles(self.bucket, folders=folders, on_fetch=self._count)

    def mp4_opener(self, name: str) -> Callable[[str], BinaryIO]:
        """For the mp4 reader of camera ``name``: a file of its ``videos/`` folder as a file object over byte range
        requests, with read-ahead (as a Hub repo's videos are read)."""
        files = self.mp4_files
        return lambda key: files.open(f"{name}/videos/{key}")

    def refresh(self) -> StoreState | None:
        """The bucket's latest commit, if it is not the one served: the mirror of that commit serves it from now
        on. None when it is the same."""
        self._own()
        doc = read_root(self.bucket)
        self._count(len(doc))
        if doc == self.root_doc:
            return None
        with self._lock:
            for future in [f for fs in self._coming.values() for f in fs]:
                future.cancel()
        for pool in (self._ahead, self._background):
            pool.shutdown(wait=True, cancel_futures=True)
        self._ahead = ThreadPoolExecutor(_AHEAD_IN_FLIGHT, thread_name_prefix="lerobot_zarr-prefetch")
        self._background = ThreadPoolExecutor(_BACKGROUND_IN_FLIGHT, thread_name_prefix="lerobot_zarr-whole")
        self._pools[1:] = [self._ahead, self._background]
        old = self._mirror
        self._attach(doc)
        old.close()  # (its folder removed if no other process reads that commit)
        return self.state

    @property
    def held_bytes(self) -> int:
        """Bytes of rows the mirror holds now (every process's)."""
        self._own()
        return self._mirror.add_held(0)

    def close(self) -> None:
        """Stop the background fetches and let go of the mirror (removed when no other process uses it)."""
        self._finalizer()


_live: weakref.WeakSet[RemoteStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_live):
        store._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _reopen(bucket: Bucket, home: Path, cache_bytes: int, root_doc: bytes) -> RemoteStore:
    return RemoteStore(bucket, home, cache_bytes=cache_bytes, root_doc=root_doc)


def _close(stopping: threading.Event, pools: list[ThreadPoolExecutor], holder: list) -> None:
    stopping.set()
    for pool in pools:
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        except RuntimeError:  # the last reference went in one of the pool's own threads: it cannot wait for itself
            pool.shutdown(wait=False, cancel_futures=True)
    mirror, holder[0] = holder[0], None
    if mirror is not None:
        mirror.close()
