"""Memory maps of a dataset's raw packs, laid side by side in one reserved address range per feature.

Each feature reserves address space (``PROT_NONE``, no memory) for every pack; pack ``k`` occupies rows
``base_row[feature][k] ..`` of that feature's row-indexed view, so frame ``j`` of episode ``e`` is row
``base_row[f][chunk[e]] + offset[e] + j`` and one numpy fancy index gathers frames of many episodes and packs at
once. A pack file is mapped read-only (``mmap(MAP_SHARED | MAP_FIXED)``) into its slot on first use. Slots start at
2 MiB boundaries where the frame size allows it without wasting much address space, so the kernel can map large
page-cache folios with huge pages, as it does for a plain ``np.memmap`` of a file: fewer page faults and TLB misses
on random access. A transcode writes packs so that the page cache holds them in huge folios
(:mod:`~lerobot_zarr.writing.transcode`); with 20 datasets open, 4 KiB pages made a batch 1.3x slower. Maps of the
stores a process has open are also advised ``MADV_HUGEPAGE`` while they fit in half the memory, so packs read back
from disk come in huge too (:func:`advise_huge_pages`). Rows outside a mapped pack are never read: callers map a
pack before touching its rows. At most ``max_packs`` packs are mapped (least recently used unmapped first;
unmapping puts an inaccessible anonymous mapping back over the slot); :meth:`PackMaps.close` releases everything
at once.
"""

from __future__ import annotations

import ctypes
import errno
import math
import mmap
import os
import weakref
from collections.abc import Mapping

import numpy as np

from ..errors import MapLimitError, StoreError
from ..store.packs import HUGE_PAGE, open_pack
from ..store.state import chunk_path, retired_path
from ..store.tables import ArraySpec, PackLayout
from ..utils.libc import libc

__all__ = ["PackMaps", "Reservation", "MAX_RESERVATION", "advise_huge_pages", "shared_alignment", "slot_rows"]

_MAP_FAILED = ctypes.c_void_p(-1).value
_MAP_FIXED = 0x10  # same value on Linux and macOS
_PROT_NONE = 0
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0)
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
_ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
_MAX_HUGE_ALIGN = 32 << 20  # align slots to huge pages only while that costs at most this much per slot
MAX_RESERVATION = 1 << 46  # 64 TiB of address space per feature


def _check(addr: int | None, what: str) -> int:
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return addr


def slot_alignment(frame_bytes: int) -> int:
    """Bytes a slot start must be a multiple of: a huge page and a frame if affordable, else a page and a frame."""
    huge = math.lcm(HUGE_PAGE, frame_bytes)
    return huge if huge <= _MAX_HUGE_ALIGN else math.lcm(mmap.PAGESIZE, frame_bytes)


_SHARED_SLOT_MAX = 256 << 20  # features share a slot layout while its granularity costs at most this per slot


def shared_alignment(specs: Mapping[str, ArraySpec]) -> dict[str, int]:
    """Rows each feature's slots are a multiple of. Every feature's own alignment is a power of two rows: the
    features for which the largest costs at most ``_SHARED_SLOT_MAX`` per slot all take it, so their packs sit at
    the same rows and a sampler computes a frame's row once for all of them (numeric features, not cameras)."""
    own = {name: slot_alignment(spec.frame_bytes) // spec.frame_bytes for name, spec in specs.items()}
    shared = [name for name in specs if own[name] * specs[name].frame_bytes <= _SHARED_SLOT_MAX]
    rows = max((own[name] for name in shared), default=1)
    return {name: rows if name in shared and rows * specs[name].frame_bytes <= _SHARED_SLOT_MAX else own[name]
            for name in specs}


def _memory_bytes() -> int:
    """The machine's memory, or the cgroup's limit where that is lower (a container)."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total


_open_maps: weakref.WeakSet[PackMaps] = weakref.WeakSet()


def advise_huge_pages(root: str, nbytes: int) -> bool:
    """Whether the maps of the store at ``root`` (a resolved path), whose raw packs hold ``nbytes``, are advised
    ``MADV_HUGEPAGE``: when they fit in half the memory with the other stores this process has open (each store
    counted once, however many datasets map it), samples come from the page cache, where a TLB miss per frame is
    the cost that huge pages remove. Past that, samples come from disk, where reading a whole 2 MiB folio per page
    fault would multiply the reads of random small frames: the maps keep the kernel's default read-around."""
    if _MADV_HUGEPAGE is None or nbytes <= 0:
        return False
    others = {maps.store: maps.nbytes for maps in list(_open_maps) if maps.store != root}
    return nbytes + sum(others.values()) <= _memory_bytes() // 2


def slot_rows(rows: np.ndarray, align_rows: int) -> int:
    """Rows the slots of packs of ``rows`` rows take, each rounded up to ``align_rows`` (as :class:`PackMaps` lays
    them out)."""
    return int((-(-np.asarray(rows, dtype=np.int64) // align_rows) * align_rows).sum())


class Reservation:
    """Address space for ``rows`` frames of one feature (``PROT_NONE``, no memory) and its row-indexed read-only
    view. Released with :meth:`release` or when the last view of it is garbage collected; maps placed inside it go
    with it."""

    def __init__(self, name: str, spec: ArraySpec, rows: int):
        size = rows * spec.frame_bytes
        if size > MAX_RESERVATION:
            raise MapLimitError(f"feature {name!r}: {size} bytes of address space needed to map it side by side",
                                feature=name)
        reserved = size + HUGE_PAGE
        try:
            raw = _check(libc.mmap(None, reserved, _PROT_NONE, _ANON, -1, 0), f"reserving {name!r}")
        except OSError as exc:  # the packs the table declares need more address space than the process has left
            raise MapLimitError(f"feature {name!r}: cannot reserve {size} bytes of address space to map its packs side "
                                f"by side ({exc.strerror}); open fewer datasets at once", feature=name) from None
        self.base = -(-raw // HUGE_PAGE) * HUGE_PAGE
        buf = (ctypes.c_char * size).from_address(self.base)
        self._release = weakref.finalize(buf, libc.munmap, raw, reserved)
        self._release.atexit = False  # at exit a daemon thread may still sample: let the OS reclaim the memory
        view = np.frombuffer(buf, dtype=np.uint8, count=size).view(spec.dtype)
        self.view: np.ndarray | None = view.reshape(rows, *spec.frame_shape)
        self.view.flags.writeable = False

    def release(self) -> None:
        self.view = None
        self._release()


class _Feature:
    """One feature's slots: its row-indexed read-only view and where each pack's slot starts, in a reservation of
    its own, or (``place``: address, capacity in rows) in a part of a reservation whose owner releases it."""

    def __init__(self, name: str, spec: ArraySpec, packs: PackLayout, headroom_rows: int, align_rows: int,
                 place: tuple[int, int] | None = None):
        self.name, self.spec, self.frame_bytes = name, spec, spec.frame_bytes
        self.align_rows = align_rows
        self.huge = False  # advise MADV_HUGEPAGE (set by PackMaps)
        self._layout(packs.rows)
        self.reservation: Reservation | None = None
        if place is None:
            self.capacity_rows = self._round(self.end_row + headroom_rows)
            self.reservation = Reservation(name, spec, self.capacity_rows)
            self.base, self.view = self.reservation.base, self.reservation.view
        else:
            self.base, self.capacity_rows = place
            self.view = None

    def _round(self, rows: int | np.ndarray) -> int | np.ndarray:
        return -(-rows // self.align_rows) * self.align_rows

    def _layout(self, rows: np.ndarray) -> None:
        slots = self._round(np.asarray(rows, dtype=np.int64))
        self.base_row = np.concatenate([[0], np.cumsum(slots)[:-1]]).astype(np.int64) if len(rows) else \
            np.zeros(0, dtype=np.int64)
        self.end_row = int(slots.sum())

    def extend(self, rows: np.ndarray) -> bool:
        """Slots for new packs after the others; False when the reservation is too small."""
        slots = self._round(np.asarray(rows, dtype=np.int64))
        if self.end_row + int(slots.sum()) > self.capacity_rows:
            return False
        self.base_row = np.concatenate([self.base_row, self.end_row + np.cumsum(slots) - slots])
        self.end_row += int(slots.sum())
        return True

    def map(self, k: int, rows: int, root: str) -> None:
        path = chunk_path(root, self.name, k, self.spec.ndim)
        nbytes = rows * self.frame_bytes
        fd = open_pack(path, nbytes, root=root, retired=retired_path(root, self.name, k),
                       what=f"pack {k} of feature {self.name!r}", feature=self.name)
        try:
            addr = self.base + int(self.base_row[k]) * self.frame_bytes
            got = _check(libc.mmap(addr, nbytes, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, fd, 0), path)
            if got != addr:
                raise OSError(f"{path}: mapped at {got:#x} instead of {addr:#x}")
            if self.huge:  # a hint: a kernel without transparent huge pages refuses it, harmlessly
                libc.madvise(addr, nbytes, _MADV_HUGEPAGE)
        finally:
            os.close(fd)

    def unmap(self, k: int, rows: int) -> None:
        size = -(-max(rows * self.frame_bytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
        addr = self.base + int(self.base_row[k]) * self.frame_bytes
        _check(libc.mmap(addr, size, _PROT_NONE, _ANON | _MAP_FIXED, -1, 0), self.name)

    def release(self) -> None:
        self.view = None
        if self.reservation is not None:
            self.reservation.release()


class PackMaps:
    """The maps of every raw feature's packs (see the module docstring). Not thread-safe: the dataset's lock
    guards it."""

    def __init__(self, root: str | os.PathLike, specs: Mapping[str, ArraySpec], packs: PackLayout, *,
                 max_packs: int, headroom_rows: int = 0, place: Mapping[str, tuple[int, int, int]] | None = None):
        """``place``: per feature ``(address, capacity in rows, rows per alignment)`` of slots inside a reservation
        of the caller's (:mod:`~lerobot_zarr.sampling.fused` lays several datasets' packs side by side); the
        caller keeps that reservation alive while these maps are used and releases it, and views are its own."""
        self.root = os.fspath(root)
        self.specs = {name: spec for name, spec in specs.items() if spec.storage == "raw"}
        self.max_packs = max(1, int(max_packs))
        if place is None:
            align = shared_alignment(self.specs)
            self.features = {name: _Feature(name, spec, packs, headroom_rows, align[name])
                             for name, spec in self.specs.items()}
        else:
            self.features = {name: _Feature(name, spec, packs, 0, place[name][2], place[name][:2])
                             for name, spec in self.specs.items()}
        self.store = os.path.realpath(self.root)
        self._row_bytes = sum(spec.frame_bytes for spec in self.specs.values())
        self.rows = packs.rows
        huge = advise_huge_pages(self.store, self.nbytes)
        for feature in self.features.values():
            feature.huge = huge
        _open_maps.add(self)
        self.views = {name: f.view for name, f in self.features.items() if f.view is not None}
        self.mapped = np.zeros(len(packs), dtype=bool)
        self.last_used = np.zeros(len(packs), dtype=np.int64)
        self.n_mapped = 0
        self.tick = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the raw packs these maps serve (of the commit they follow)."""
        return int(np.sum(self.rows)) * self._row_bytes

    def base_rows(self, name: str) -> np.ndarray:
        """Row of each pack's first frame in feature ``name``'s view."""
        return self.features[name].base_row

    def update(self, packs: PackLayout) -> bool:
        """Follow a newer commit's packs (existing packs keep their slots and maps; new ones go after them;
        retired ones are unmapped). False when a reservation has no room left: build a new PackMaps then."""
        old = len(self.rows)
        if len(packs) < old or ((packs.rows[:old] != self.rows) & (packs.rows[:old] != 0)).any():
            return False
        new = packs.rows[old:]
        if not all(f.end_row + int(f._round(new).sum()) <= f.capacity_rows for f in self.features.values()):
            return False
        for k in np.flatnonzero(self.mapped[:old] & (packs.rows[:old] == 0)).tolist():
            self._unmap(k)
        for f in self.features.values():
            f.extend(new)
        self.rows = packs.rows
        self.mapped = np.concatenate([self.mapped, np.zeros(len(new), dtype=bool)])
        self.last_used = np.concatenate([self.last_used, np.zeros(len(new), dtype=np.int64)])
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
        for name, feature in self.features.items():
            try:
                feature.map(k, rows, self.root)
            except OSError as exc:
                if exc.errno != errno.ENOMEM or not self.n_mapped:
                    self._unmap_slots(k)
                    if exc.errno == errno.ENOMEM:
                        raise MapLimitError(f"{chunk_path(self.root, name, k, feature.spec.ndim)}: the process has "
                                            f"too many memory maps (vm.max_map_count) even with none of this "
                                            f"dataset's; open fewer datasets at once", feature=name) from None
                    raise
                # the process is out of maps (other datasets, other libraries): give back half of ours, retry once
                self._evict(max(1, self.n_mapped // 2))
                feature.map(k, rows, self.root)
        self.mapped[k] = True
        self.n_mapped += 1

    def _unmap_slots(self, k: int) -> None:
        for feature in self.features.values():
            feature.unmap(k, int(self.rows[k]))

    def _unmap(self, k: int) -> None:
        self._unmap_slots(k)
        self.mapped[k] = False
        self.n_mapped -= 1

    def close(self) -> None:
        """Release every map and reservation now (the views become unusable)."""
        _open_maps.discard(self)
        for feature in self.features.values():
            feature.release()
        self.views = {}
        self.mapped[:] = False
        self.n_mapped = 0
