"""What the mirror of a store in a bucket keeps (:mod:`.remote_store`, whose :class:`~.remote_store.RemoteStore`
this is part of): features held whole (never evicted, nothing asked for them) and the eviction of the least recently
used rows past the cache's bound."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..cloud.client import bucket_timeout
from ..store.state import StoreState
from ..utils.fileio import flock_within, pwrite_all
from ..utils.libc import punch_hole
from .mirror import MINE, PINS, SHARED, Mirror, Pack, publish

log = logging.getLogger("lerobot_zarr")

__all__ = ["Keeping"]

_BACKGROUND_PIECE = 4 << 20  # whole packs in the background: small requests, few in flight


class Keeping:
    """Part of :class:`~.remote_store.RemoteStore` (its state, its fetches): which features are held whole, and
    the eviction. Uses the store's attributes below and its methods ``_pack``, ``_claim``, ``_unclaim``, ``_plan``,
    ``_fetch``, ``_release`` and
    ``location``."""

    state: StoreState
    root: Path
    cache_bytes: int
    settled: set[str]
    _lock: threading.Lock
    _evict_lock: threading.Lock
    _pin_lock: threading.Lock
    _stopping: threading.Event
    _background: ThreadPoolExecutor
    _mirror: Mirror
    _feature: dict[str, int]
    _numeric: list[str]
    _by_rows: list[str]
    _filled: list[int]
    _packs: dict[tuple[str, int], Pack]
    _pinned: list[tuple[np.ndarray, np.ndarray]]
    _settle_cursor: dict[str, int]
    _numeric_started: bool
    _fetched_since_evict: int

    def _settle(self, name: str, *, wait: bool = True) -> None:
        """Numeric feature ``name`` is held whole once every pack of it is: marked so in the mirror first (no process
        evicts its packs after that: an eviction looks for the mark under its claim), then each pack checked under
        its claim (an eviction under way is waited for); batches ask nothing more for it. A pack found incomplete
        (evicted just before the mark) is fetched whole in the background: settled at a later look. Without
        ``wait`` (a batch's look): a pack claimed by a fetch or an eviction is not waited for, left to a later look."""
        packs = np.flatnonzero(self.state.packs.rows > 0).tolist()
        marker = self.root / MINE / f"settled-{self._feature[name]}"
        if not marker.exists():
            publish(marker, lambda fd: None)
        for p in packs:
            entry = self._pack(name, p)
            if not self._claim(entry, 0, entry.rows, wait=wait):
                return
            try:
                complete = entry.complete
            finally:
                self._unclaim(entry, 0, entry.rows)
            if not complete:  # (never evicted now, maybe never read by the batches: an ``episodes=`` selection)
                self._background.submit(self._whole_pack, name, p)
                return
        with self._lock:
            self.settled.add(name)

    def _numeric_whole_bytes(self) -> int:
        """Bytes of the numeric features fetched whole (all of them, when they fit in half the cache), else 0."""
        total = int(self.state.packs.rows.sum()) * sum(self.state.arrays[name].frame_bytes for name in self._numeric)
        return total if total <= self.cache_bytes // 2 else 0

    def _look_to_settle(self) -> None:
        """Features read row by row (cameras, text...) whose every row is present are settled as numeric ones are
        (never evicted, nothing asked for them: a batch reads the maps alone), while together with the numeric
        features and those settled before they fit in half the cache; and numeric features fetched whole that the
        background fetch could not settle (rows a batch was fetching as it ended: not present yet when it looked).
        Looked at every 16 ensures: the packs found complete are not looked at again (a cursor per
        feature; packs never made stop it, no request is sent); for a feature read row by row the last look is under
        the eviction lock (no eviction meanwhile, in any process), every pack again, and the mark (its bytes)
        published then; a numeric one is settled as the background fetch settles it (:meth:`_settle`), not waiting
        for packs another fetch claims (a batch's rows are present: it is never failed for this), and a pack it
        finds incomplete is fetched whole in the background."""
        numeric = self._numeric if self._numeric_started and self._numeric_whole_bytes() else []
        for name in numeric + self._by_rows:
            cursor = self._settle_cursor.get(name, 0)
            if name in self.settled or cursor < 0:
                continue
            i = self._feature[name]
            if name not in numeric and (self.root / MINE / f"settled-{i}").exists():  # (by another process)
                with self._lock:
                    self.settled.add(name)
                continue
            while cursor < len(self._filled):
                pack = self._filled[cursor]
                if (name, pack) not in self._packs and not (self.root / MINE / "packs" / f"{i}-{pack}").exists():
                    break
                if not self._pack(name, pack).complete:
                    break
                cursor += 1
            self._settle_cursor[name] = cursor
            if cursor < len(self._filled) and name in numeric and (self.root / MINE / f"settled-{i}").exists():
                self._background.submit(self._whole_pack, name, self._filled[cursor])  # (evicted before the mark)
            if cursor == len(self._filled):
                if name in numeric:
                    self._settle(name, wait=False)
                else:
                    self._settle_rows(name)

    def _settle_rows(self, name: str) -> None:
        entries = [self._pack(name, pack) for pack in self._filled]
        total = sum(entry.nbytes(np.flatnonzero(~entry.empty)) for entry in entries)
        mirror = self._mirror
        if not self._evict_lock.acquire(blocking=False):  # (a look never waits: tried again at the next)
            return
        try:
            if not flock_within(mirror.evictor, 0):
                return
            try:
                marker = self.root / MINE / f"settled-{self._feature[name]}"
                if not marker.exists():
                    whole = self._numeric_whole_bytes() + sum(
                        int((self.root / MINE / f"settled-{self._feature[other]}").read_bytes() or 0)
                        for other in self._by_rows if (self.root / MINE / f"settled-{self._feature[other]}").exists())
                    if whole + total > self.cache_bytes // 2:
                        self._settle_cursor[name] = -1  # (never: those held whole stay so)
                        log.warning("%s: feature %r (%s bytes) is not held whole: with the features held whole "
                                    "(%s bytes) it passes half the cache (cache_bytes=%s); its rows stay evictable, "
                                    "fetched again when read. Held whole with cache_bytes of %s or more",
                                    self.location(), name, f"{total:,}", f"{whole:,}",
                                    f"{self.cache_bytes:,}", f"{2 * (whole + total):,}")
                        return
                    if not all(entry.complete for entry in entries):  # (rows evicted since the cursor passed)
                        self._settle_cursor[name] = 0
                        return
                    publish(marker, lambda fd: pwrite_all(fd, str(total).encode(), 0, str(marker)))
            finally:
                fcntl.flock(mirror.evictor, fcntl.LOCK_UN)
        finally:
            self._evict_lock.release()
        with self._lock:
            self.settled.add(name)

    def _evict(self) -> None:
        """When the mirror holds more than ``cache_bytes``: drop the least recently used rows of every process
        (not pinned nor being fetched by any, nor of a feature held whole), down to 7/8 of it. One process at a
        time; the count recomputed."""
        mirror = self._mirror
        with self._lock:
            due = self._fetched_since_evict > 0
            self._fetched_since_evict = 0
        if not due or mirror.add_held(0) <= self.cache_bytes:
            return
        # An eviction under way (of this process or another) may have looked at the rows before the ones just
        # landed: wait for it to end, then look again (skipping it let the processes fetch on, unbounded, while a
        # slow one evicted). Bounded: past it, the next fetch tries again.
        deadline = time.monotonic() + bucket_timeout()
        if not self._evict_lock.acquire(timeout=bucket_timeout()):
            return
        try:
            if not flock_within(mirror.evictor, deadline - time.monotonic()):  # an eviction is local work: ms
                return
            try:
                if mirror.add_held(0) > self.cache_bytes:
                    self._evict_locked()
            finally:
                fcntl.flock(mirror.evictor, fcntl.LOCK_UN)
        finally:
            self._evict_lock.release()

    def _evict_locked(self) -> None:
        mirror = self._mirror
        since = mirror.add_held(0)  # (rows landing while the packs are looked at are added to the count after)
        held, units = self._scan()
        target = self.cache_bytes * 7 // 8
        units.sort(key=lambda u: u[0])
        for _, entry, rows, nbytes in units:
            if held <= target:
                break
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            if not SHARED and self._pinned_here(entry, lo, hi):
                continue  # (one process's locks do not conflict: its pins are asked of its own count)
            if not self._claim(entry, lo, hi, evicting=True):
                continue  # being fetched or read by a process
            try:  # marked absent first, then the bytes go
                if entry.numeric and (mirror.root / MINE / f"settled-{self._feature[entry.name]}").exists():
                    continue  # held whole for good since it was listed
                entry.present[rows] = False
                fd = os.open(entry.path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                try:
                    a, b = (0, entry.size) if entry.numeric else entry.span(lo)
                    punch_hole(fd, a, b - a)
                finally:
                    os.close(fd)
            finally:
                self._unclaim(entry, lo, hi, evicting=True)
            held -= nbytes
        mirror.recount(held, since)

    def _scan(self) -> tuple[int, list[tuple[float, Pack, np.ndarray, int]]]:
        """The bytes of the rows present in the mirror (every process's), and the units an eviction may drop:
        (last used, pack record, rows, bytes), a row each, a numeric pack whole (not those held whole for good)."""
        mirror = self._mirror
        units = []
        held = 0
        names = list(self.state.arrays)
        for path in (mirror.root / MINE / "packs").iterdir():
            i, _, pack = path.name.partition("-")
            if not (i.isdigit() and pack.isdigit()) or int(i) >= len(names) or int(pack) >= len(self.state.packs):
                continue
            name = names[int(i)]
            entry = self._pack(name, int(pack))
            rows = np.flatnonzero(entry.present)
            if not len(rows):
                continue
            nbytes = entry.nbytes(rows)
            held += nbytes
            if (mirror.root / MINE / f"settled-{i}").exists():
                continue
            if entry.numeric:
                units.append((float(entry.used[rows].max()), entry, np.arange(entry.rows), nbytes))
            else:
                units += [(float(entry.used[r]), entry, np.array([r]), entry.nbytes(np.array([r]))) for r in
                          rows.tolist()]
        return held, units

    def _pinned_here(self, entry: Pack, lo: int, hi: int) -> bool:
        a, b = PINS + entry.slot + lo, PINS + entry.slot + hi
        with self._pin_lock:
            return any(bool(((starts < b) & (starts + lengths > a)).any()) for starts, lengths in self._pinned)

    def _start_numeric(self) -> None:
        """After the first batch: the numeric packs whole, in the background, while they fit in half the cache."""
        if self._numeric_started:
            return
        self._numeric_started = True
        if not self._numeric or not self._numeric_whole_bytes():
            return
        for name in self._numeric:  # (held whole by another process: each pack found complete, then settled)
            self._background.submit(self._whole_feature, name)

    def _whole_feature(self, name: str) -> None:
        for pack in np.flatnonzero(self.state.packs.rows > 0).tolist():
            if self._stopping.is_set():
                return
            self._whole_pack(name, pack)
        self._settle(name)

    def _whole_pack(self, name: str, pack: int) -> None:
        entry = self._pack(name, pack)
        with self._lock:
            missing = np.flatnonzero(~entry.present & ~entry.coming)
            entry.coming[missing] = True
        try:
            for job in self._plan(entry, missing, _BACKGROUND_PIECE):
                if self._stopping.is_set():
                    return
                self._fetch(*job)
        finally:
            self._release([(entry, missing)])
