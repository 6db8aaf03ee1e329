"""Big output arrays whose memory is used again once the caller drops them.

A fresh allocation of many MB (a batch of camera frames: 118 MB for 64 windows of two 480x640 frames) is new memory:
its first write faults every page in and the kernel zeroes it. On a 2-core VM that cost 400-1,800 µs per 480x640
frame written, against ~120 µs to copy the frame into memory already touched, and ~15 % of a batch of frames decoded
from mp4. :func:`recycled_empty` hands out arrays over anonymous memory maps and takes a map back once its array,
and every view of it, is gone and nothing else refers to its memory (the map has no exported buffer left: checked
before each reuse), so the batches of a training loop land in warm memory. At most ``KEEP_BYTES`` of maps are kept
per process; a forked child drops its parent's.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
import weakref
from collections.abc import Sequence

import numpy as np

__all__ = ["recycled_empty", "KEEP_BYTES", "MIN_BYTES"]

KEEP_BYTES = 256 << 20  # maps kept for reuse, per process
MIN_BYTES = 4 << 20  # smaller arrays come from numpy's allocator (glibc reuses its heap for them)
_lock = threading.Lock()
_free: dict[int, list[mmap.mmap]] = {}
_kept = [0]  # bytes of the maps in _free


def _forget() -> None:
    """In a forked child: the parent's maps are shared copy-on-write: writing them would fault every page again."""
    global _lock
    _lock = threading.Lock()
    _free.clear()
    _kept[0] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


def recycled_empty(shape: Sequence[int], dtype: np.dtype | type = np.uint8) -> np.ndarray:
    """An uninitialized C-contiguous array, like ``np.empty``, in memory that earlier arrays of the same size left
    (when ``MIN_BYTES`` or more)."""
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    mm = _take(nbytes) or _new(nbytes)
    flat = np.frombuffer(mm, dtype, count)  # views of it have it as their base: it lives while any view does
    weakref.finalize(flat, _give_back, mm).atexit = False
    return flat.reshape(shape)


def _new(nbytes: int) -> mmap.mmap:
    mm = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_HUGEPAGE"):  # as numpy advises its big allocations: fewer faults on first touch
        mm.madvise(mmap.MADV_HUGEPAGE)
    return mm


def _take(nbytes: int) -> mmap.mmap | None:
    with _lock:
        maps = _free.get(nbytes)
        while maps:
            mm = maps.pop()
            _kept[0] -= nbytes
            if _unexported(mm):
                return mm
    return None


def _unexported(mm: mmap.mmap) -> bool:
    """Whether no buffer of ``mm`` is alive (a resize to its own size is refused while one is; it changes
    nothing otherwise). Where resizing is not supported, never: the map is not reused."""
    try:
        mm.resize(len(mm))
    except (BufferError, OSError, SystemError, TypeError, ValueError):
        return False
    return True


def _give_back(mm: mmap.mmap) -> None:
    with _lock:
        if _kept[0] + len(mm) <= KEEP_BYTES:
            _free.setdefault(len(mm), []).append(mm)
            _kept[0] += len(mm)
