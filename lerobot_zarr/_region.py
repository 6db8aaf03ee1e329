"""Memory maps of one feature's episode chunk files, laid side by side in one reserved address range.

Each episode's chunk file is mapped read-only (``mmap(MAP_SHARED | MAP_FIXED)``) into its own slot of a
reservation; slots are aligned to both the page size and the frame size, so one strided numpy view covers every
slot and a single fancy index gathers frames from many episodes at once (what ``get_batch`` needs). Rows outside a
mapped episode are never read: callers map an episode before touching its rows. Unmapping puts an inaccessible
anonymous mapping back over the slot, keeping the reservation whole. The reservation is released when the
last view of it is garbage collected.
"""

from __future__ import annotations

import ctypes
import errno
import math
import mmap
import os
import weakref
from collections.abc import Callable

import numpy as np

from ._libc import libc
from .errors import StoreError
from .store import open_chunk

_MAP_FAILED = ctypes.c_void_p(-1).value
_MAP_FIXED = 0x10  # same value on Linux and macOS
_PROT_NONE = 0
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0)
_ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
MAX_RESERVATION = 1 << 46  # 64 TiB of address space per feature


def _check(addr: int | None, what: str) -> int:
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return addr


class EpisodeRegion:
    """Read-only view of a feature's episode chunks; ``rows[e] + local`` is frame ``local`` of episode ``e``.

    ``path_of(e)`` gives the chunk file of episode ``e`` and where it is once retired (see ``store``)."""

    def __init__(self, name: str, dtype: np.dtype, frame_shape: tuple[int, ...], lengths: np.ndarray,
                 path_of: Callable[[int], tuple[str, str]], *, headroom: float = 0.0):
        self.name = name
        self.path_of = path_of
        frame_bytes = int(np.prod(frame_shape, dtype=np.int64)) * dtype.itemsize
        self.frame_bytes = frame_bytes
        self.align = align = math.lcm(mmap.PAGESIZE, frame_bytes)
        self.sizes = np.asarray(lengths, dtype=np.int64) * frame_bytes
        slots = -(-self.sizes // align) * align
        self.offsets = np.concatenate([[0], np.cumsum(slots)[:-1]]).astype(np.int64)
        self.slots = slots
        self.end = int(slots.sum())  # slots are handed out from here on (``relayout``)
        # a writer's dataset keeps room to lay out appended episodes without moving the mapped ones
        extra = int(self.end * headroom) + (1 << 30 if headroom else 0)
        self.total = -(-(self.end + extra) // align) * align + align
        if self.total > MAX_RESERVATION:
            raise StoreError(f"feature {name!r}: frames of {frame_bytes} bytes cannot be mapped side by side "
                             f"({self.total} bytes of address space needed)")
        self.base = _check(libc.mmap(None, self.total, _PROT_NONE, _ANON, -1, 0), f"reserving {name!r}")
        buf = (ctypes.c_char * self.total).from_address(self.base)
        # The reservation lives as long as any numpy view of it: released with the buffer object, never before.
        release = weakref.finalize(buf, libc.munmap, self.base, self.total)
        release.atexit = False  # at exit a daemon thread may still sample: let the OS reclaim the memory
        n_rows = self.total // frame_bytes
        view = np.frombuffer(buf, dtype=np.uint8, count=n_rows * frame_bytes).view(dtype)
        self.view = view.reshape(n_rows, *frame_shape)
        self.view.flags.writeable = False
        self.rows = self.offsets // frame_bytes

    def map(self, e: int) -> None:
        """Map the chunk file of episode ``e`` into its slot, after checking its size."""
        path, retired = self.path_of(e)
        size = int(self.sizes[e])
        fd = open_chunk(path, size, e, self.name, retired=retired)
        try:
            addr = self.base + int(self.offsets[e])
            try:
                got = _check(libc.mmap(addr, size, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, fd, 0), str(path))
            except OSError as exc:
                if exc.errno == errno.ENOMEM:
                    raise StoreError(f"{path}: the process has too many memory maps (vm.max_map_count); lower "
                                     f"LEROBOT_ZARR_MAX_MAPS or open fewer datasets at once") from None
                raise
            if got != addr:
                raise OSError(f"{path}: mapped at {got:#x} instead of {addr:#x}")
        finally:
            os.close(fd)

    def relayout(self, keep: np.ndarray, lengths: np.ndarray, drop: np.ndarray) -> bool:
        """Follow a new episode table without moving mapped episodes: episode ``i`` of the new table is episode
        ``keep[i]`` of the old one (same chunk file), or new when ``keep[i] < 0`` (a slot after the others); old
        episodes ``drop`` are unmapped. False when the reservation has no room left (build a new region)."""
        sizes = np.asarray(lengths, dtype=np.int64) * self.frame_bytes
        slots = -(-sizes // self.align) * self.align
        new = keep < 0
        offsets = np.empty(len(keep), dtype=np.int64)
        offsets[~new] = self.offsets[keep[~new]]
        starts = self.end + np.concatenate([[0], np.cumsum(slots[new])[:-1]]).astype(np.int64)
        end = self.end + int(slots[new].sum())
        if end + self.align > self.total:
            return False
        for e in drop.tolist():
            self.unmap(e)
        offsets[new] = starts
        self.offsets, self.sizes, self.slots, self.end = offsets, sizes, slots, end
        self.rows = self.offsets // self.frame_bytes
        return True

    def unmap(self, e: int) -> None:
        addr = self.base + int(self.offsets[e])
        _check(libc.mmap(addr, int(self.slots[e]), _PROT_NONE, _ANON | _MAP_FIXED, -1, 0), self.name)

