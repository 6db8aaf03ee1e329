"""Memory maps of a dataset's raw packs, laid out at the same rows in one reserved address range per feature.

Each feature reserves address space (``PROT_NONE``, no memory) for every pack; pack ``k`` occupies rows
``base_row[k] ..`` of every feature's row-indexed view, at a row alignment common to all features that keeps each
slot page-aligned. A pack file is mapped read-only (``mmap(MAP_SHARED | MAP_FIXED)``) into its slot on first use,
so one numpy fancy index gathers frames of many episodes and packs at once, and frame ``j`` of episode ``e`` is row
``base_row[chunk[e]] + offset[e] + j`` in every feature. Rows outside a mapped pack are never read: callers map a
pack before touching its rows. At most ``max_packs`` packs are mapped (least recently used unmapped first;
unmapping puts an inaccessible anonymous mapping back over the slot); :meth:`close` releases everything at once.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import weakref
from collections.abc import Mapping

import numpy as np

from ._libc import libc
from ._packs import open_pack
from .errors import StoreError
from .store import ArraySpec, PackLayout, chunk_path, retired_path

__all__ = ["PackMaps", "MAX_RESERVATION"]

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


def row_alignment(specs: Mapping[str, ArraySpec]) -> int:
    """Rows such that a slot starting at a multiple of them is page-aligned in every feature."""
    page = mmap.PAGESIZE
    return max((page // np.gcd(page, s.frame_bytes) for s in specs.values()), default=1)


class _Reservation:
    """One feature's reserved address range and its row-indexed read-only view; released with :meth:`release`
    or when the last view of it is garbage collected."""

    def __init__(self, name: str, spec: ArraySpec, total_rows: int):
        self.name, self.frame_bytes = name, spec.frame_bytes
        self.size = -(-max(total_rows, 1) * spec.frame_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        if self.size > MAX_RESERVATION:
            raise StoreError(f"feature {name!r}: {self.size} bytes of address space needed to map it side by side")
        self.base = _check(libc.mmap(None, self.size, _PROT_NONE, _ANON, -1, 0), f"reserving {name!r}")
        buf = (ctypes.c_char * self.size).from_address(self.base)
        self._release = weakref.finalize(buf, libc.munmap, self.base, self.size)
        self._release.atexit = False  # at exit a daemon thread may still sample: let the OS reclaim the memory
        n_rows = self.size // spec.frame_bytes
        view = np.frombuffer(buf, dtype=np.uint8, count=n_rows * spec.frame_bytes).view(spec.dtype)
        self.view = view.reshape(n_rows, *spec.frame_shape)
        self.view.flags.writeable = False

    def map(self, row: int, path: str, retired: str, nbytes: int, pack: int) -> None:
        fd = open_pack(path, nbytes, retired=retired, what=f"pack {pack} of feature {self.name!r}", feature=self.name)
        try:
            addr = self.base + row * self.frame_bytes
            got = _check(libc.mmap(addr, nbytes, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, fd, 0), path)
            if got != addr:
                raise OSError(f"{path}: mapped at {got:#x} instead of {addr:#x}")
        finally:
            os.close(fd)

    def unmap(self, row: int, nbytes: int) -> None:
        size = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
        addr = self.base + row * self.frame_bytes
        _check(libc.mmap(addr, size, _PROT_NONE, _ANON | _MAP_FIXED, -1, 0), self.name)

    def release(self) -> None:
        self.view = None
        self._release()


class PackMaps:
    """The maps of every raw feature's packs (see the module docstring). Not thread-safe: the dataset's lock
    guards it."""

    def __init__(self, root: str | os.PathLike, specs: Mapping[str, ArraySpec], packs: PackLayout, *,
                 max_packs: int, headroom_rows: int = 0):
        self.root = os.fspath(root)
        self.specs = {name: spec for name, spec in specs.items() if spec.storage == "raw"}
        self.align = row_alignment(self.specs)
        self.max_packs = max(1, int(max_packs))
        self._layout(packs)
        total = self.end_row + headroom_rows
        self.capacity_rows = -(-total // self.align) * self.align
        self._reservations = {name: _Reservation(name, spec, self.capacity_rows) for name, spec in self.specs.items()}
        self.views = {name: r.view for name, r in self._reservations.items()}
        self.mapped = np.zeros(len(packs), dtype=bool)
        self.last_used = np.zeros(len(packs), dtype=np.int64)
        self.n_mapped = 0
        self.tick = 0

    def _layout(self, packs: PackLayout) -> None:
        slots = -(-packs.rows // self.align) * self.align
        self.base_row = np.concatenate([[0], np.cumsum(slots)[:-1]]).astype(np.int64) if len(packs) else \
            np.zeros(0, dtype=np.int64)
        self.end_row = int(slots.sum())
        self.rows = packs.rows

    def update(self, packs: PackLayout) -> bool:
        """Follow a newer commit's packs (existing packs keep their rows and maps; new ones go after them; retired
        ones are unmapped). False when the reservation has no room left: build a new PackMaps then."""
        old = len(self.rows)
        if len(packs) < old or ((packs.rows[:old] != self.rows) & (packs.rows[:old] != 0)).any():
            return False
        new_slots = -(-packs.rows[old:] // self.align) * self.align
        if self.end_row + int(new_slots.sum()) > self.capacity_rows:
            return False
        for k in np.flatnonzero(self.mapped[:old] & (packs.rows[:old] == 0)).tolist():
            self._unmap(k)
        bases = self.end_row + np.concatenate([[0], np.cumsum(new_slots)[:-1]]).astype(np.int64)
        self.base_row = np.concatenate([self.base_row, bases[:len(new_slots)]])
        self.end_row += int(new_slots.sum())
        self.rows = packs.rows
        grow = len(packs) - old
        self.mapped = np.concatenate([self.mapped, np.zeros(grow, dtype=bool)])
        self.last_used = np.concatenate([self.last_used, np.zeros(grow, dtype=np.int64)])
        return True

    def ensure(self, packs: np.ndarray) -> None:
        """Map the given packs (unique ids) in every feature, unmapping least recently used ones beyond the budget.
        A pack that cannot be mapped raises with ``pack`` set on the error."""
        self.tick += 1
        self.last_used[packs] = self.tick
        need = packs[~self.mapped[packs]]
        excess = self.n_mapped + len(need) - self.max_packs
        if excess > 0:
            self._evict(max(excess, self.n_mapped // 4))
        for k in need.tolist():
            try:
                self._map(k)
            except StoreError as exc:
                exc.pack = k
                raise

    def _evict(self, count: int) -> None:
        candidates = np.flatnonzero(self.mapped & (self.last_used < self.tick))
        order = np.argsort(self.last_used[candidates], kind="stable")
        for k in candidates[order[:count]].tolist():
            self._unmap(k)

    def _map(self, k: int) -> None:
        rows = int(self.rows[k])
        for name, spec in self.specs.items():
            path = chunk_path(self.root, name, k, spec.ndim)
            try:
                self._reservations[name].map(int(self.base_row[k]), path, retired_path(self.root, name, k),
                                             rows * spec.frame_bytes, k)
            except OSError as exc:
                if exc.errno != errno.ENOMEM or not self.n_mapped:
                    self._unmap_partial(k)
                    if exc.errno == errno.ENOMEM:
                        raise StoreError(f"{path}: the process has too many memory maps (vm.max_map_count) even "
                                         f"with none of this dataset's; open fewer datasets at once") from None
                    raise
                # the process is out of maps (other datasets, other libraries): give back half of ours, retry once
                self._evict(max(1, self.n_mapped // 2))
                self._reservations[name].map(int(self.base_row[k]), path, retired_path(self.root, name, k),
                                             rows * spec.frame_bytes, k)
        self.mapped[k] = True
        self.n_mapped += 1

    def _unmap_partial(self, k: int) -> None:
        for name, spec in self.specs.items():
            self._reservations[name].unmap(int(self.base_row[k]), int(self.rows[k]) * spec.frame_bytes or 1)

    def _unmap(self, k: int) -> None:
        self._unmap_partial(k)
        self.mapped[k] = False
        self.n_mapped -= 1

    def close(self) -> None:
        """Release every map and reservation now (the views become unusable)."""
        for reservation in self._reservations.values():
            reservation.release()
        self.views = {}
        self.mapped[:] = False
        self.n_mapped = 0
