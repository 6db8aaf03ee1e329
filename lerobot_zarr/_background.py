"""Running an iterator in a background thread, a bounded number of items ahead (reads overlap the consumer)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

_T = TypeVar("_T")


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
