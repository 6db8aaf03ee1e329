"""Work ahead of the consumer, a bounded amount: an iterator run in a background thread (reads overlap the
consumer), or a function mapped over items by a thread pool with the results kept in order; and whether another
process still runs (its leftovers may be cleaned up); a budget of bytes under way at once (:class:`ByteBudget`)."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


def prefetched(items: Iterator[_T], depth: int) -> Iterator[_T]:
    """Run ``items`` in a background thread, at most ``depth`` ahead, so that parquet decoding (which releases
    the GIL) overlaps chunk writes. Exceptions of the producer are raised here; stopping early stops it."""
    buffer: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple) -> bool:
        while not stop.is_set():
            try:
                buffer.put(entry, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((False, None))
        except BaseException as exc:  # handed to the consumer, which raises it
            put((False, exc))

    thread = threading.Thread(target=produce, name="lerobot_zarr-reader", daemon=True)
    thread.start()
    try:
        while True:
            more, payload = buffer.get()
            if not more:
                if payload is not None:
                    raise payload
                return
            yield payload
    finally:
        stop.set()
        thread.join()


def in_threads(fn: Callable[[_T], _R], items: Iterable[_T], workers: int, *, ahead: int, name: str
               ) -> Iterator[tuple[_T, _R]]:
    """``(item, fn(item))`` for ``items``, in order: ``fn`` runs in a pool of ``workers`` threads (named ``name``)
    with at most ``ahead`` calls submitted and not yet yielded; with one worker or none, here, one at a time.
    An exception of ``fn`` is raised in its turn; stopping early waits for the calls in flight."""
    if workers <= 1:
        for item in items:
            yield item, fn(item)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix=name) as pool:
        pending: deque = deque()
        for item in items:
            pending.append((item, pool.submit(fn, item)))
            if len(pending) >= ahead:
                first, future = pending.popleft()
                yield first, future.result()
        while pending:
            first, future = pending.popleft()
            yield first, future.result()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ByteBudget:
    """At most ``limit`` bytes of work under way at once (one piece larger than the limit runs alone): requests
    sharing one link, each with a deadline counted from its start, so that many in flight never share the link so
    thinly that each misses its deadline."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def held(self, size: int, seconds: float, error: Callable[[str], Exception] = TimeoutError) -> Iterator[None]:
        """Run the block with ``size`` bytes of the budget; ``error`` (of a message) raised when they are not free
        within ``seconds`` (the work under way is stuck)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.used == 0 or self.used + size <= self.limit, seconds):
                raise error(f"{self.used} bytes of work under way did not end within {seconds:.0f} s")
            self.used += size
        try:
            yield
        finally:
            with self._changed:
                self.used -= size
                self._changed.notify_all()
