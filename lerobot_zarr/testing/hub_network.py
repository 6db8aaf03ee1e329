"""The test Hub's view of the network: the record of every request (:class:`HubStats`), injected faults, and a
modelled link (:class:`NetworkModel`) so that round trips and bandwidth are measured rather than assumed."""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import socket
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["FAULT_KINDS", "Dropped", "Fault", "Faults", "HubStats", "Link", "NetworkModel", "RequestRecord",
           "close_abruptly", "deep_json", "gzip_bomb", "settle"]


class Dropped(Exception):
    """Raised to abort a response and close its connection (fault injection)."""


@dataclasses.dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it. ``path`` is the URL-decoded path, ``query`` the raw query string,
    ``range`` the ``Range`` header, ``bytes_sent`` the response body bytes written (updated while streaming,
    before each write), ``bytes_received`` the request body bytes read, ``connection`` a number identifying the
    TCP connection (equal numbers: the request reused a kept-alive connection). ``status`` stays 0 when no
    status line was sent (a ``"reset"`` fault, or a ``"drop"`` fault on a response without body). ``started`` and
    ``ended`` are ``time.monotonic()`` when the request arrived and just before the last piece of its answer went
    to the socket, so never after the client could have it all (when nothing was written: when the handler
    ended; 0 until then): :meth:`HubStats.round_trips` counts the requests one after the other from them."""

    method: str
    path: str
    query: str
    range: str | None
    status: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    connection: int = 0
    started: float = 0.0
    ended: float = 0.0

    def __iter__(self):
        return iter(dataclasses.astuple(self))


class HubStats:
    """Thread-safe list of :class:`RequestRecord`, oldest first. Iterating, ``len()`` and indexing use a snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __getitem__(self, index):
        return self.snapshot()[index]

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        return [
            r
            for r in self.snapshot()
            if (method is None or r.method == method.upper()) and (path_contains is None or path_contains in r.path)
        ]

    def bytes_sent(self, path_prefix: str | None = None) -> int:
        return sum(r.bytes_sent for r in self.snapshot() if path_prefix is None or r.path.startswith(path_prefix))

    def round_trips(self, exclude: Sequence[str] = ()) -> int:
        """The longest chain of requests each sent after the previous one was answered: the round trips a client
        waited for one after the other (requests in flight together count once). Requests whose path contains
        one of ``exclude`` are left out."""
        done = sorted((r.started, r.ended) for r in self.snapshot()
                      if r.ended and not any(x in r.path for x in exclude))
        answered: list[tuple[float, int]] = []  # (ended, depth) of requests not yet known to precede the next one
        before = deepest = 0  # the deepest chain answered before the current request started; the deepest of all
        for started, ended in done:
            while answered and answered[0][0] <= started:
                before = max(before, heapq.heappop(answered)[1])
            heapq.heappush(answered, (ended, before + 1))
            deepest = max(deepest, before + 1)
        return deepest

    def reset(self) -> None:
        with self._lock:
            self._records.clear()


@dataclasses.dataclass
class Fault:
    path_contains: str
    kind: str
    remaining: int
    after_bytes: int
    method: str | None
    seconds: float = 60.0
    rate: int = 16
    value: str = ""
    query_contains: str = ""  # (S3 server: and the request's query, e.g. "uploadId" for a multipart completion)


class Faults:
    """The faults injected into a test server, met by requests in the order they were injected (each counted
    down, dropped at 0); thread-safe, shared by the test Hub and the S3 test server."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, method: str, path: str, query: str = "") -> Fault | None:
        """The fault a request of ``method`` to ``path`` (with ``query``) meets, if any."""
        with self._lock:
            for fault in self._faults:
                if (fault.path_contains in path and fault.query_contains in query
                        and (fault.method is None or fault.method == method)):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None


@dataclasses.dataclass(frozen=True)
class NetworkModel:
    """A modelled network between the clients and the server, so that round trips and bandwidth are measured
    rather than assumed: every request waits ``latency_s`` (a round trip) before its answer starts, the first
    request of a connection ``handshake_rtts`` round trips more (TCP and TLS set-up: 2 for HTTPS over TLS 1.3),
    and all response bodies share one link of ``rate`` bytes/s (1 Gbit/s = 125e6), written in 64 KiB pieces so
    that concurrent answers share it fairly.

    With ``settle``, an answer also waits until no other thread of this process runs or waits for a CPU
    (:func:`settle`): the client, in the same process, has then sent every request it can send without that
    answer, so requests it sends together overlap however long a loaded machine delays one of its threads, and
    :meth:`HubStats.round_trips` counts exactly the answers it waited for one after the other (not a clock's
    race). For counting round trips; it costs a few ms per answer and serializes nothing."""

    latency_s: float = 0.05
    rate: float = 125e6
    handshake_rtts: int = 0
    settle: bool = False

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0 and self.rate > 0 and self.handshake_rtts >= 0):
            raise ValueError(f"invalid network model {self}")


_QUIET_WINDOW_S = 0.01  # no other thread ran or waited for a CPU for this long: the process is idle
_SETTLE_LIMIT_S = 5.0  # a thread that never stops (a busy background thread) delays an answer at most this long


class _Settler:
    """Waits for a moment when no thread of this process but the caller runs or waits to run: one caller at a
    time looks (the others sleep, so they do not count as running), and a quiet window that began after a
    caller arrived releases it."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._looking = False
        self._quiet_from = -math.inf  # when the last quiet window seen began

    def wait(self, stopping: threading.Event, limit_s: float = _SETTLE_LIMIT_S) -> None:
        arrived = time.monotonic()
        deadline = arrived + limit_s
        with self._cond:
            while self._quiet_from < arrived:
                if stopping.is_set():
                    raise Dropped
                now = time.monotonic()
                if now >= deadline:
                    return  # as without settling
                if self._looking:
                    self._cond.wait(deadline - now)
                    continue
                self._looking = True
                self._cond.release()
                try:
                    began = time.monotonic()
                    quiet = _idle_for(_QUIET_WINDOW_S)
                finally:
                    self._cond.acquire()
                    self._looking = False
                    self._cond.notify_all()
                if quiet is None:
                    return  # no per-thread scheduler counters (not Linux): the latency alone
                if quiet:
                    self._quiet_from = max(self._quiet_from, began)


def _threads() -> dict[str, tuple[bytes, bytes]] | None:
    """Per thread of this process but the caller: its scheduler state (R: running or waiting for a CPU, D: waiting
    on a disk, S: asleep) and its nanoseconds on a CPU (Linux /proc; None elsewhere)."""
    me = str(threading.get_native_id())
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    out = {}
    for tid in tids:
        if tid != me:
            try:
                with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                    state = f.read().rpartition(b")")[2].split()[0]
                with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                    out[tid] = (state, f.read().split()[0])
            except (OSError, IndexError):
                out[tid] = (b"R", b"")  # it ended meanwhile: not idle
    return out


def _idle_for(window_s: float) -> bool | None:
    """Whether no other thread of this process ran, waited for a CPU or a disk during ``window_s`` (None:
    unknown). A thread queued for a CPU is in state R, but its counters only move once it runs."""
    before = _threads()
    if before is None:
        return None
    if any(state in (b"R", b"D") for state, _ in before.values()):
        time.sleep(window_s)  # before the next look: looking again at once takes a CPU from the threads it waits on
        return False
    time.sleep(window_s)
    after = _threads()
    return after == before


_settler = _Settler()


def settle(stopping: threading.Event, limit_s: float = _SETTLE_LIMIT_S) -> None:
    """Return once no thread of this process but the caller has run or waited for a CPU for a short window that
    began after the call (at most ``limit_s`` later; at once where the scheduler's per-thread counters are not
    available); raise :class:`Dropped` when ``stopping`` is set. A thread blocked on a socket, a lock or a sleep
    is idle; one delayed by the scheduler, the GIL's holder or a garbage collection is not."""
    _settler.wait(stopping, limit_s)


class Link:
    """The shared link of a :class:`NetworkModel`: a virtual clock of when it is next free."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free_at = 0.0

    def send(self, nbytes: int, rate: float, stopping: threading.Event) -> None:
        """Wait until ``nbytes`` have crossed the link after everything sent before them."""
        with self._lock:
            now = time.monotonic()
            # a sender woken late may catch up by a few ms (a token bucket's burst): oversleeping does not add up
            self._free_at = max(now - 0.005, self._free_at) + nbytes / rate
            until = self._free_at
        delay = until - time.monotonic()
        if delay > 0 and stopping.wait(delay):
            raise Dropped


FAULT_KINDS = ("500", "401", "403", "drop", "reset", "stall", "trickle", "short", "bad_range", "bad_commit",
               "gzip_bomb", "deep_json")


def gzip_bomb(size: int) -> bytes:
    """A gzip stream (``Content-Encoding: gzip``) that inflates to ``size`` bytes of spaces, about 1,000 times its
    own size: 1 MiB blocks each compressed once and repeated (a full flush makes each block's bytes stand alone).
    It has no trailer: a client that inflates it whole holds all of it before it could notice."""
    block = 1 << 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    piece = compressor.compress(b" " * block) + compressor.flush(zlib.Z_FULL_FLUSH)
    n, rest = divmod(size, block)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + piece * n + compressor.compress(b" " * rest)
            + compressor.flush(zlib.Z_FULL_FLUSH))


def deep_json(levels: int) -> bytes:
    """A JSON array nested ``levels`` deep (``[[[...]]]``): a parser recursing on it overflows its stack."""
    return b"[" * levels + b"]" * levels


def close_abruptly(handler: Any) -> None:
    """End a test server's connection now (a dropped or cut answer): what was written is flushed, the socket shut
    both ways, and the handler asked not to read another request from it."""
    handler.close_connection = True
    try:
        handler.wfile.flush()
    except OSError:
        pass
    try:
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
