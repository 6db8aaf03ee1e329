"""Files read by byte ranges, for sources where a read costs a round trip (a Hub repository, a bucket): what
they share beneath their transport.

A subclass lists its files (``sizes``: all of them when it is made, a Hub repo's tree; or folder by folder as they are
first asked for, :meth:`RangeFiles._list_folder`, a bucket's) and fetches one byte range (:meth:`RangeFiles._fetch`,
with its own bounded waits, retries and errors); this class turns that into :class:`~.source_files.SourceFiles`:
parquet files opened as range-reading file objects (only footers and the row groups asked for cross the network),
videos read with read-ahead, requests that do not depend on each other sent together (:meth:`RangeFiles.prefetch`,
:meth:`~RangeFiles.prefetch_footers`, :meth:`~RangeFiles.prefetch_ranges`), bytes fetched ahead held (bounded)
until read. No disk cache: the local store stays the only local copy.
"""

from __future__ import annotations

import functools
import io
import os
import threading
import weakref
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import CorruptSourceError
from .source_files import SourceFiles

if TYPE_CHECKING:  # pyarrow is imported where a parquet file is read
    import pyarrow.parquet as pq

__all__ = ["RangeFiles", "coalesce"]

# Read-ahead of file objects (videos): the first read after a seek, and the most a sequential read grows to.
# Measured in benchmarks/bench_hub.py (AV1 mp4, a one-episode and a whole open): without read-ahead a whole open
# makes ~4x the requests; starting at 256 KiB instead of 64 KiB read 2.4x the bytes for one episode.
_READ_AHEAD = (64 << 10, 8 << 20)
_SHARED_BLOCKS_BYTES = 64 << 20  # blocks shared by the readers of one file (a whole open: ~half the bytes)
_HELD_BYTES = 256 << 20  # bytes fetched ahead of their reads (whole files, footers' tails, ranges), oldest out
_FOOTER_GUESS = 64 * 1024  # tail read for a footer of unknown size (a LeRobot data file's is ~120 B per column
# chunk: 400 episodes x 7 columns is 330 KiB, hence footer_hint)
# Round trips against bytes: at 50 ms and 1 Gbit/s one round trip costs as much as ~6 MB. A metadata file up to
# _WHOLE_FILE_MAX is read whole in one request: where its parts are is unknown before its footer, and in a LeRobot
# episode table (row groups of 10 episodes, LeRobot splits the table at 100 MB) the stats columns lie between the
# ones we read in every row group, so reading those costs the whole file and two more round trips anyway. Only a
# bigger one (a table of one row group, written by another tool) is read footer first, then the columns needed.
# Ranges of a file closer than _COALESCE_GAP are read as one, and one read makes at most _MAX_RANGES requests per
# file.
_WHOLE_FILE_MAX = 128 << 20
_COALESCE_GAP = 1 << 20
_MAX_RANGES = 16
_IN_FLIGHT = 8  # requests in flight at once
_TAIL_GAP = 64 << 10  # a range this close to the tail read for a footer is read with it (one request, not two)


class RangeFiles(SourceFiles):
    """Files of one source at one version, read by byte ranges (see the module docstring). Subclasses fill
    ``sizes`` (and may seed footers) and implement :meth:`_fetch`; one that lists folder by folder sets ``_listed``
    to the folders it listed and implements :meth:`_list_folder`."""

    concurrency = _IN_FLIGHT

    def __init__(self) -> None:
        self._footers: dict[str, pq.FileMetaData] = {}
        self._footer_sizes: dict[str, int] = {}  # exact, from our index
        self._footer_hints: dict[str, int] = {}  # estimated by the reader (footer_hint)
        self._lock = threading.Lock()  # guards the two caches below; never held while waiting on the network
        _live.add(self)  # (a forked child gets a lock of its own: _after_fork_in_child)
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # recent read-ahead blocks
        self._held: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # fetched ahead of their reads
        self.sizes: dict[str, int] = {}  # every file's, or (``_listed`` set) those of the folders listed so far
        self._listed: set[str] | None = None  # None: every file was listed up front
        self._listing: dict[str, Future] = {}  # folders being listed (or listed): waited on by their other askers

    def _list_folder(self, folder: str) -> Mapping[str, int]:
        """The files below ``folder`` and their sizes, listed now (a source listing folder by folder: called once a
        folder, when a file in it is first asked for)."""
        raise NotImplementedError(f"{type(self).__name__} lists every file up front")

    def _is_listed(self, folder: str) -> bool:
        """Whether ``folder`` (or a folder above it) is listed."""
        parts = folder.strip("/").split("/")
        return self._listed is None or any("/".join(parts[:n]) in self._listed for n in range(1, len(parts) + 1))

    def _ensure_listed(self, folder: str) -> None:
        """List ``folder`` unless it (or a folder above it) is: once, however many threads ask at once."""
        folder = folder.strip("/")
        if self._is_listed(folder):
            return
        with self._lock:
            future = self._listing.get(folder)
            mine = future is None
            if mine:
                future = self._listing[folder] = Future()
        if not mine:
            future.result()
            return
        try:
            listed = self._list_folder(folder)
        except BaseException as exc:
            with self._lock:
                del self._listing[folder]  # (asked again later: listed again)
            future.set_exception(exc)
            raise
        with self._lock:
            self.sizes.update(listed)
            self._listed.add(folder)
        future.set_result(None)

    def _known(self, rel: str) -> bool:
        if rel not in self.sizes and "/" in rel:
            self._ensure_listed(rel.rsplit("/", 1)[0])
        return rel in self.sizes

    def prefetch_sizes(self, rels: Iterable[str], folders: Iterable[str] = ()) -> None:
        """List ``folders`` and the folders of these files, those not listed yet, all at once (a first open of one
        episode lists only the folders of its files, whatever the count of episodes)."""
        folders = [*folders, *(rel.rsplit("/", 1)[0] for rel in rels if "/" in rel and rel not in self.sizes)]
        folders = [folder for folder in dict.fromkeys(f.strip("/") for f in folders) if not self._is_listed(folder)]
        folders = [f for f in folders if not any(f.startswith(g + "/") for g in folders)]  # (within one listed)
        self._in_parallel([functools.partial(self._ensure_listed, folder) for folder in folders])

    @abstractmethod
    def _fetch(self, rel: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of a listed file, exactly (``0 <= start < stop <= size``), with the transport's
        bounded waits and retries; its errors when they fail."""

    def exists(self, rel: str) -> bool:
        return self._known(rel)

    def size(self, rel: str) -> int:
        if not self._known(rel):
            raise FileNotFoundError(f"{self.location(rel)}: no such file in the repository")
        return self.sizes[rel]

    def get(self, rel: str, start: int = 0, stop: int | None = None) -> bytes:
        """Bytes ``[start, stop)`` of a file (to its end without ``stop``), with bounded waits and retries: from
        bytes fetched ahead when they hold the range (or its end: then only the rest is fetched)."""
        size = self.size(rel)
        stop = size if stop is None else min(stop, size)
        if start >= stop:
            return b""
        tail: tuple[int, bytes] | None = None
        with self._lock:
            for (held_rel, a), data in self._held.items():
                if held_rel != rel or stop > a + len(data) or a >= stop:
                    continue
                if a <= start:
                    return data[start - a:stop - a]
                if tail is None or a < tail[0]:
                    tail = (a, data)
        if tail is not None:  # the end of the range came with the footer: fetch the rest only
            return self._fetch(rel, start, tail[0]) + tail[1][:stop - tail[0]]
        return self._fetch(rel, start, stop)

    def _hold(self, rel: str, start: int, data: bytes) -> None:
        stop = start + len(data)
        with self._lock:
            for key in [(r, a) for (r, a), d in self._held.items() if r == rel and start <= a and a + len(d) <= stop]:
                del self._held[key]  # inside the new piece
            self._held[(rel, start)] = data
            _trim(self._held, _HELD_BYTES, len)

    def _whole(self, rel: str) -> bytes | None:
        """The whole file, if it was fetched ahead."""
        size = self.sizes.get(rel)
        with self._lock:
            data = self._held.get((rel, 0))
        return data if data is not None and len(data) == size else None

    def _holds(self, rel: str, start: int, stop: int) -> bool:
        with self._lock:
            return any(r == rel and a <= start and stop <= a + len(d) for (r, a), d in self._held.items())

    def _held_tail(self, rel: str) -> int:
        """Where the bytes of ``rel`` held from its end begin (its size if none are)."""
        start = self.size(rel)
        with self._lock:
            for (r, a), d in sorted(self._held.items(), key=lambda item: -item[0][1]):
                if r == rel and a < start <= a + len(d):
                    start = a
        return start

    def release(self, rel: str) -> None:
        """Forget the bytes of ``rel`` fetched ahead (the reader has what it needed)."""
        with self._lock:
            for key in [key for key in self._held if key[0] == rel]:
                del self._held[key]

    def prefetch(self, rels: Iterable[str], footers: Mapping[str, int] | None = None) -> None:
        """Fetch these files now, all at once (several requests in flight), to be read later: whole, but for
        parquet files bigger than ``_WHOLE_FILE_MAX`` their footer only; and with them the parquet footers of
        ``footers`` (each in one request of the tail where its estimated length holds). Files the repo does not
        have are skipped."""
        for rel, nbytes in (footers or {}).items():
            self.footer_hint(rel, nbytes)
        rels = list(dict.fromkeys(rels))
        self.prefetch_sizes([*rels, *(footers or {})])
        todo = [functools.partial(self._prefetch_one, rel) for rel in rels if rel in self.sizes]
        todo += [functools.partial(self._footer, rel) for rel in footers or {}
                 if rel in self.sizes and rel not in self._footers]
        self._in_parallel(todo)

    def _prefetch_one(self, rel: str) -> None:
        size = self.sizes[rel]
        if size <= _WHOLE_FILE_MAX or not rel.endswith(".parquet"):  # (the rest of a JSON file is read anyway)
            if not self._holds(rel, 0, size):
                self._hold(rel, 0, self._fetch(rel, 0, size))
        else:  # a footer of a few row groups fits a small read of the tail (a big one takes a second read)
            self._footer_hints.setdefault(rel, min(1 << 20, max(_FOOTER_GUESS, size // 128)))
            self._footer(rel)

    def prefetch_footers(self, rels: Iterable[str], ranges: Mapping[str, Iterable[tuple[int, int]]] | None = None
                         ) -> None:
        """Read the parquet footers of these files, and ``ranges`` of those not read yet (ranges of a file merged
        where they lie closer than ``_COALESCE_GAP``; less the tail its footer read takes, which reaches back to
        those closer to it than ``_TAIL_GAP``; none where they add more bytes than that tail read: a row group big
        beside its footer is read exactly, after it), all at once: one round trip where
        the ranges hold what is read next (a row group whose place the reader estimated before the footer)."""
        todo = [rel for rel in dict.fromkeys(rels) if rel not in self._footers]
        self.prefetch_sizes(todo)
        calls = []
        for rel, rs in (ranges or {}).items():
            # (a footer read already, or of a length our index gives: its reader reads exact ranges next)
            if rel not in todo or rel not in self.sizes or rel in self._footer_sizes:
                continue
            guess = self._footer_guess(rel)
            tail = self.sizes[rel] - guess
            reach, fetch = tail, []  # where the tail read begins; the ranges read on their own
            for a, b in coalesce(((max(0, a), min(b, tail)) for a, b in rs), _COALESCE_GAP, _MAX_RANGES):
                if tail - b < _TAIL_GAP:  # near the tail: read with it (and every range after it)
                    reach = a
                    break
                fetch.append((a, b))
            if (tail - reach) + sum(b - a for a, b in fetch) > guess:
                continue  # more than the tail read again: the row groups read exactly, after the footer
            if reach < tail:
                self._footer_hints[rel] = self.sizes[rel] - reach
            calls += [functools.partial(self._fetch_ahead, rel, a, b) for a, b in fetch if not self._holds(rel, a, b)]
        self._in_parallel([*(functools.partial(self._footer, rel) for rel in todo), *calls])

    def prefetch_ranges(self, ranges: Mapping[str, Iterable[tuple[int, int]]], gap: int | None = None) -> None:
        """Fetch byte ranges ``[start, stop)`` of files now, all together, to be read later: ranges of a file
        closer than ``gap`` (default ``_COALESCE_GAP``) are read as one, with at most ``_MAX_RANGES`` requests per
        file."""
        wanted = []
        for rel, rs in ranges.items():
            merged = [(a, b) for a, b in coalesce(rs, _COALESCE_GAP if gap is None else gap, _MAX_RANGES)
                      if not self._holds(rel, a, b)]
            if sum(b - a for a, b in merged) > self.size(rel) // 2:
                # most of the file (its parts spread over it): all of it at once, but for a tail held already (a
                # footer read first)
                merged = [(0, self._held_tail(rel))]
            wanted += [(rel, a, b) for a, b in merged]
        self._in_parallel([functools.partial(self._fetch_ahead, rel, a, b) for rel, a, b in wanted])

    def _fetch_ahead(self, rel: str, start: int, stop: int) -> None:
        self._hold(rel, start, self.get(rel, start, stop))

    @staticmethod
    def _in_parallel(calls: Sequence[Callable[[], Any]]) -> None:
        """Run the calls at once, ``_IN_FLIGHT`` at a time; the first exception is raised once all are done."""
        if len(calls) <= 1:
            for call in calls:
                call()
            return
        with ThreadPoolExecutor(min(_IN_FLIGHT, len(calls)), thread_name_prefix="lerobot_zarr-fetch") as pool:
            futures = [pool.submit(call) for call in calls]
        for future in futures:
            future.result()

    def footer_hint(self, rel: str, nbytes: int) -> None:
        """An estimate of a footer's length (from what the reader knows: row groups and columns), so that one
        request usually fetches it whole; the index's exact lengths take precedence."""
        self._footer_hints[rel] = int(nbytes)

    def read_bytes(self, rel: str) -> bytes:
        data = self.get(rel)
        self.release(rel)
        return data

    def block(self, rel: str, start: int, stop: int) -> tuple[int, bytes]:
        """Bytes from ``start`` to at least ``stop``: from a block read recently by any reader of the same file
        if one holds ``[start, stop)`` (episodes next to each other in one mp4 share blocks), else fetched."""
        with self._lock:
            for key, data in reversed(self._blocks.items()):
                if key[0] == rel and key[1] <= start and stop <= key[1] + len(data):
                    return key[1], data
        data = self.get(rel, start, stop)
        with self._lock:
            self._blocks[(rel, start)] = data
            _trim(self._blocks, _SHARED_BLOCKS_BYTES, len)
        return start, data

    def parquet(self, rel: str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
        import pyarrow.parquet as pq

        if self.size(rel) < 12:
            raise CorruptSourceError(f"{self.location(rel)}: {self.size(rel)} bytes is too small to be parquet")
        whole = self._whole(rel)
        if whole is not None:  # read from memory (many small reads through Python would cost more than the parse)
            import pyarrow as pa

            return pq.ParquetFile(pa.BufferReader(whole), metadata=metadata or self._footer(rel))
        return pq.ParquetFile(_RangeFile(self, rel), metadata=metadata or self._footer(rel), pre_buffer=True)

    def open(self, rel: str) -> BinaryIO:
        """The file over range requests with read-ahead: a decoder's many small reads become few requests, and
        a seek (to the mp4 index at the end, to an episode's frames) reads little past what it needs."""
        return _RangeFile(self, rel, block=_READ_AHEAD[0])

    def _footer(self, rel: str) -> pq.FileMetaData:
        """Read just the parquet footer: its tail first (one small request), the rest only if it is longer.
        Footers are kept for the life of this object (one commit: they cannot change)."""
        if rel not in self._footers:
            self._footers[rel] = self._read_footer(rel)
        return self._footers[rel]

    def _read_footer(self, rel: str) -> pq.FileMetaData:
        import pyarrow as pa
        import pyarrow.parquet as pq

        size = self.size(rel)
        start = max(0, size - self._footer_guess(rel))
        tail = self.get(rel, start, size)
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise CorruptSourceError(f"{self.location(rel)}: not a parquet file (no PAR1 magic at its end)")
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 8 > size - 4:
            raise CorruptSourceError(f"{self.location(rel)}: parquet footer of {length} bytes does not fit the file")
        if length + 8 > len(tail):
            start = size - 8 - length
            tail = self.get(rel, start, size - len(tail)) + tail
        self._hold(rel, start, tail)  # later reads inside the tail (a small file's columns) are served from it
        try:
            return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-8 - length:]))
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptSourceError(f"{self.location(rel)}: unreadable parquet footer ({exc})") from exc

    def _footer_guess(self, rel: str) -> int:
        """The bytes of the tail read for a footer: its exact length from our index, else the reader's estimate."""
        exact = self._footer_sizes.get(rel)
        return exact if exact is not None else max(_FOOTER_GUESS, self._footer_hints.get(rel, 0))

    def seed_footer(self, rel: str, metadata: pq.FileMetaData | None = None, size: int | None = None) -> None:
        """What our index file knows of a footer: the footer itself (no request for it), or its size in bytes
        (one exact range request)."""
        if metadata is not None:
            self._footers[rel] = metadata
        if size is not None:
            self._footer_sizes[rel] = int(size)

    def list(self, folder: str) -> list[str]:
        self._ensure_listed(folder)
        prefix = folder.strip("/") + "/"
        return sorted(p for p in list(self.sizes) if p.startswith(prefix))


_live: weakref.WeakSet[RangeFiles] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) has none of the parent's threads: a lock one of them held at the fork
    would never be released, so each reader gets a new one (the caches it guards are whole: the fork happened
    with the GIL held)."""
    for files in list(_live):
        files._lock = threading.Lock()
        files._listing = {k: f for k, f in files._listing.items() if f.done()}  # (a parent thread's: never done)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def coalesce(ranges: Iterable[tuple[int, int]], gap: int, most: int) -> list[tuple[int, int]]:
    """Sorted byte ranges ``[start, stop)`` merged where they overlap or lie less than ``gap`` apart, then across
    their smallest gaps until at most ``most`` remain."""
    merged: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if merged and a - merged[-1][1] < gap:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    while len(merged) > max(1, most):
        i = min(range(len(merged) - 1), key=lambda j: merged[j + 1][0] - merged[j][1])
        merged[i:i + 2] = [[merged[i][0], max(merged[i][1], merged[i + 1][1])]]
    return [(a, b) for a, b in merged]


def _trim(cache: OrderedDict, limit: int, nbytes: Callable[[Any], int]) -> None:
    """Drop the oldest entries of ``cache`` until its values hold at most ``limit`` bytes (keeps the newest)."""
    while len(cache) > 1 and sum(nbytes(v) for v in cache.values()) > limit:
        cache.popitem(last=False)


class _RangeFile(io.RawIOBase):
    """A seekable read-only file over range requests. Without ``block`` each read is one request (pyarrow
    coalesces its reads of a row group into few large ones); with it, reads fetch at least ``block`` bytes and
    later reads inside them are served from that buffer."""

    def __init__(self, files: RangeFiles, rel: str, *, block: int = 0):
        super().__init__()
        self.files, self.rel = files, rel
        self.length = files.size(rel)
        self.pos = 0
        self.block = block
        self._buffer, self._buffer_start = b"", 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def size(self) -> int:
        return self.length

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        stop = self.length if size is None or size < 0 else min(self.length, self.pos + size)
        if stop <= self.pos:
            return b""
        if not self.block:
            data = self.files.get(self.rel, self.pos, stop)
        else:
            start, end = self._buffer_start, self._buffer_start + len(self._buffer)
            head = self._buffer[self.pos - start:stop - start] if start <= self.pos < end else b""
            if self.pos + len(head) < stop:
                # reading on from the buffer: read further ahead next time; after a seek: start small again
                fetch = self.pos + len(head)
                self.block = min(2 * self.block, _READ_AHEAD[1]) if self._buffer and fetch == end else _READ_AHEAD[0]
                self._buffer_start, self._buffer = self.files.block(
                    self.rel, fetch, max(stop, min(self.length, fetch + self.block)))
                head += self._buffer[fetch - self._buffer_start:stop - self._buffer_start]
            data = head
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)
