"""Torch adapter (``pip install lerobot_zarr[torch]``): the same samples as tensors, per item or per batch.

- ``TorchDataset(ds)``: a map-style ``Dataset`` whose items are ``ds[i]`` as tensors (``task`` stays a string):
  ``DataLoader(TorchDataset(ds), batch_size=B, shuffle=True)`` works as with any dataset. It also answers a
  list of indices with the whole batch at once (one ``ds.get_batch``).
- :func:`batch_loader` (the fast path): a ``DataLoader`` whose sampler hands out whole index batches
  (``BatchSampler``) and ``batch_size=None``, so each batch is one vectorised ``get_batch`` turned into tensors,
  never split into items and collated again. Its workers hand batches over through shared memory (:class:`_Ring`).
- ``TorchStream(stream(...))``: an ``IterableDataset`` over :func:`lerobot_zarr.stream`.
- :class:`LeRobotDataset`: a drop-in for ``lerobot.datasets.lerobot_dataset.LeRobotDataset`` users (same
  constructor arguments where they apply, LeRobot's item layout: tensors, float32 CHW images in [0, 1],
  ``meta.camera_keys``, ``push_to_hub``).

Everything pickles as cheaply as the dataset does, so ``num_workers > 0`` works.
"""

from __future__ import annotations

import functools
import math
import os
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, LeRobotZarrWarning, import_optional

torch = import_optional("torch", "lerobot_zarr.integrations.torch (the torch adapter and LeRobotDataset drop-in)")
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, Sampler, get_worker_info  # noqa: E402

from ..sampling.dataset import LeRobotZarrDataset  # noqa: E402
from ..cameras.video import TOLERANCE_S  # noqa: E402
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES  # noqa: E402
from ..sampling.streams import SampleStream  # noqa: E402

__all__ = ["BatchLoader", "IndexBatches", "LeRobotDataset", "StreamLoader", "TorchDataset", "TorchStream",
           "batch_loader", "stream_loader", "to_tensors"]


def to_tensors(sample: Mapping[str, Any]) -> dict[str, Any]:
    """Turn every numpy value of a sample (or batch) into a tensor, sharing memory where numpy allows; leave
    strings and lists of strings as they are."""
    out = {}
    for k, v in sample.items():
        if isinstance(v, np.ndarray):
            out[k] = torch.from_numpy(v if v.flags.writeable else v.copy())
        elif isinstance(v, np.generic):
            out[k] = torch.from_numpy(np.asarray(v))
        else:
            out[k] = v
    return out


class _Column(torch.Tensor):
    """What an item of a batched fetch holds for each field: its whole batch's column (a tensor subclass, through
    torch's documented ``__torch_function__`` protocol), shared by every item of the fetch. It is not one item's
    value: any use raises, naming what to do, so a collate function that reads items one by one fails loudly and
    never gives another item's values. ``default_collate`` never reads it: it collates a fetch's items in one step
    (:func:`_collate_fetch`)."""

    @staticmethod
    def of(values: np.ndarray, block: _Block) -> _Column:
        """The column of a batch's ``values`` (a fresh array, shared with the tensors made of it)."""
        batch = torch.from_numpy(values)
        column = torch.Tensor._make_subclass(_Column, batch)
        column._batch, column._at, column._block = batch, block.place(values.nbytes), block
        column._numpy_dtype = values.dtype.str
        return column

    def __repr__(self, *args: Any, **kwargs: Any) -> str:
        return (f"<a column of {len(self._batch)} items ({tuple(self._batch.shape[1:])}, {self._batch.dtype}) for "
                f"the DataLoader's collation: index the dataset for one item's values>")

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise TypeError(f"{getattr(func, '__name__', func)}: {_NOT_AN_ITEM}")


_NOT_AN_ITEM = ("the items lerobot_zarr's __getitems__ gives a DataLoader share their batch's columns, which "
                "default_collate turns back into the batch in one step; index the dataset (ds[i]) for one item's "
                "values, or make the dataset with batched_fetch=False for a collate_fn that reads items one by one")


class _Block:
    """Where one batch's columns are stacked in a DataLoader worker: a slot of the worker's shared-memory ring
    (:func:`_worker_ring`), so that the batch crosses to the main process as the ring (one file descriptor, whose
    mapping the main process keeps) and offsets, and no new shared memory is made and faulted in per batch (1.5 ms
    for 300 KB here); a block of its own when every slot is still held."""

    def __init__(self) -> None:
        self.nbytes = 0
        self.where: tuple[_Ring | None, int, torch.Tensor] | None = None

    def place(self, nbytes: int) -> int:
        at = self.nbytes
        self.nbytes = _aligned(at + nbytes)
        return at

    def _new_shared(self, numel: int, device: Any = None) -> _Block:
        return self

    def stacked(self, column: _Column) -> torch.Tensor:
        if self.where is None:
            ring = _worker_ring(self.nbytes)
            slot = ring.acquire()
            if slot is None:  # the main process holds every slot: a block of its own
                self.where = (None, -1, torch.empty(max(self.nbytes, 1), dtype=torch.uint8).share_memory_())
            else:
                self.where = (ring, slot, ring.memory[ring.head + slot * ring.slot_bytes:][:ring.slot_bytes])
        ring, slot, memory = self.where
        batch = column._batch
        view = memory[column._at:column._at + batch.numel() * batch.element_size()].view(batch.dtype)
        out = view.view(batch.shape).copy_(batch)
        if ring is None:
            return out
        out = torch.Tensor._make_subclass(_InSlot, out)
        out._place = (ring, slot, column._at, column._numpy_dtype, tuple(batch.shape))
        return out


class _InSlot(torch.Tensor):
    """A collated column in a slot of a worker's ring: pickles as where it is in the ring (and, in the first
    message from the ring, the ring's memory: one file descriptor, the only one the main process ever receives
    from this worker's collated batches)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __reduce_ex__(self, protocol: Any) -> tuple:
        ring, slot, at, dtype, shape = self._place
        memory, ring.sent = (None if ring.sent else ring.memory), True
        return _from_slot, (memory, ring.id, os.getpid(), len(ring.slots), ring.slot_bytes, slot, at, dtype, shape)


_worker_rings: dict[int, _Ring] = {}  # this process's ring, by pid (a forked worker does not use its parent's)
# main process: the rings of the workers' collated batches, by ring id, with the worker's pid (dropped once the
# worker is gone and another ring arrives: outstanding batches keep their memory through their leases)
_received: dict[str, tuple[int, _Ring]] = {}


def _worker_ring(nbytes: int) -> _Ring:
    """This worker's ring, of slots holding at least ``nbytes`` (made, or made again bigger, when needed)."""
    ring = _worker_rings.get(os.getpid())
    if ring is None or ring.slot_bytes < nbytes:
        ring = _worker_rings[os.getpid()] = _Ring(_DROPIN_SLOTS, _aligned(nbytes))
    return ring


_DROPIN_SLOTS = 8  # a worker's batches in flight (prefetch_factor 2), the one in use and the one before it held


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _from_slot(memory: torch.Tensor | None, ring_id: str, pid: int, slots: int, slot_bytes: int, slot: int, at: int,
               dtype: str, shape: tuple) -> torch.Tensor:  # dtype: numpy's (dtype.str)
    """(main process) A column of a batch in a worker's ring slot, viewing the slot through the batch's lease:
    the slot is given back to the worker when every column of the batch is freed."""
    if memory is not None:
        for other, (owner, _) in list(_received.items()):
            if not _alive(owner):
                del _received[other]
        _received[ring_id] = (pid, _Ring(slots, slot_bytes, memory, ring_id))
    entry = _received.get(ring_id)
    if entry is None:
        raise RuntimeError("lerobot_zarr.integrations.torch: a batch arrived from a DataLoader worker whose shared memory this "
                           "process never received")
    ring = entry[1]
    lease = ring.leases[slot]() if ring.leases[slot] is not None else None
    if lease is None:  # the batch's first column (a slot is reused only once the lease of its last batch died)
        lease = ring.lease(slot)
    values = lease[at:].view(dtype)  # (numpy views: cheaper than torch's)
    return torch.from_numpy(values[:math.prod(shape)].reshape(shape))


class _Fetch:
    """One batched fetch: the columns and tasks its items share, in the batch's key order, and the items it handed
    out (a tuple: it cannot be reordered in place)."""

    __slots__ = ("columns", "items", "tasks")

    def collated(self) -> dict[str, Any]:
        """The batch: the columns themselves (in a DataLoader worker, stacked into its shared-memory ring)."""
        worker = get_worker_info() is not None
        out: dict[str, Any] = {}
        for key, value in self.columns.items():
            if key == "task" and self.tasks is not None:
                out[key] = list(self.tasks)
            elif type(value) is _Column:
                out[key] = value._block.stacked(value) if worker else value._batch
            else:
                out[key] = value
        return out


class _Item(dict):
    """An item of a batched fetch (a dict of its batch's columns and its task): ``default_collate`` hands the
    items of a fetch to :func:`_collate_fetch`, registered for this type, which gives the batch back in one step."""

    __slots__ = ("fetch",)


def _collate_fetch(batch: Sequence[_Item], *, collate_fn_map: Any = None) -> dict[str, Any]:
    """default_collate of :class:`_Item` s: the items a fetch handed out, as handed out, are its batch. Items share
    their batch's columns, so any other list of them (reordered, a part, several fetches) has no batch to give:
    refused."""
    fetch = batch[0].fetch
    if batch is not fetch.items:
        raise TypeError(f"collating {len(batch)} items of a batched fetch other than as __getitems__ gave them "
                        f"({len(fetch.items)} items, in order): {_NOT_AN_ITEM}")
    return fetch.collated()


# torch's documented way to extend default_collate (the docstring of torch.utils.data._utils.collate.collate): a
# collate function for a type of its own in default_collate_fn_map. Only batches of _Item take it. Where a torch
# has no such registry, _collation_works finds out at the first fetch and items are made one by one instead.
try:
    from torch.utils.data._utils.collate import default_collate_fn_map as _collate_map
except ImportError:  # pragma: no cover (another torch)
    _collate_map = None
if isinstance(_collate_map, dict):
    _collate_map.setdefault(_Item, _collate_fetch)


def _collatable(batch: Mapping[str, Any], squeeze: Sequence[str] = ()) -> tuple[dict[str, Any], ...]:
    """A ``get_batch`` dict as the items a DataLoader's collate function expects, without making a tensor per
    item: items share their batch's columns (:class:`_Column`), and items with the same ``task`` are one dict (an
    :class:`_Item` of the fetch). ``squeeze``: keys whose items are 0-d (their (B, 1) columns become (B,))."""
    n = len(batch["task"]) if "task" in batch else len(next(iter(batch.values())))
    if not n:
        return ()
    block = _Block()
    columns: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            if not value.flags.writeable:
                value = value.copy()
            if key in squeeze and value.ndim == 2 and value.shape[1] == 1:
                value = value.reshape(n)
            columns[key] = _Column.of(value, block)
        else:
            columns[key] = value
    fetch = _Fetch()
    fetch.columns, fetch.tasks = columns, batch.get("task")

    def item(task: Any) -> _Item:
        one = _Item(columns) if task is None else _Item({**columns, "task": task})
        one.fetch = fetch
        return one

    if fetch.tasks is None:
        fetch.items = (item(None),) * n
    else:
        one = {task: item(task) for task in set(fetch.tasks)}
        fetch.items = tuple(one[task] for task in fetch.tasks)
    return fetch.items


@functools.cache
def _collation_works() -> bool:
    """Whether default_collate turns a fetch's items back into their batch here (checked once per process, on a
    tiny batch: a DataLoader worker takes another path than the main process); else items are made one by one
    (slower, and said once)."""
    from torch.utils.data import default_collate

    batch = {"a": np.arange(12, dtype=np.float32).reshape(3, 2, 2), "b": np.arange(3, dtype=np.int64).reshape(3, 1),
             "task": ["x", "y", "x"]}
    try:
        got = default_collate(_collatable(batch, squeeze=("b",)))
        ok = (type(got["a"]) in (torch.Tensor, _InSlot) and torch.equal(got["a"], torch.from_numpy(batch["a"]))
              and torch.equal(got["b"], torch.arange(3)) and got["task"] == batch["task"])
    except Exception:  # noqa: BLE001 (any failure means: not with this torch)
        ok = False
    finally:
        _worker_rings.pop(os.getpid(), None)  # (a worker: the check's slot is not sent, so not given back)
    if not ok:
        warnings.warn(f"lerobot_zarr.integrations.torch: torch {torch.__version__}'s default_collate does not take a batched "
                      f"fetch back in one step; DataLoader batches are made item by item (slower: use "
                      f"lerobot_zarr.integrations.torch.batch_loader)", LeRobotZarrWarning, stacklevel=3)
    return ok


def _items(batch: Mapping[str, Any], squeeze: Sequence[str] = ()) -> Sequence[dict[str, Any]]:
    """The items of a ``get_batch`` dict for a DataLoader's collate function: sharing their batch's columns when
    default_collate takes them back in one step (:func:`_collatable`), else tensors of each item's own."""
    if _collation_works():
        return _collatable(batch, squeeze)
    tensors = to_tensors(batch)
    n = len(batch["task"]) if "task" in batch else len(next(iter(batch.values())))
    columns = {k: (v.reshape(n, *v.shape[2:]) if k in squeeze and v.ndim == 2 and v.shape[1] == 1 else v).unbind(0)
               if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}
    return [{k: v[j] for k, v in columns.items()} for j in range(n)]


class TorchDataset(Dataset):
    """A map-style torch dataset over a :class:`~lerobot_zarr.LeRobotZarrDataset`.

    ``tds[i]`` is ``ds[i]`` as tensors; ``tds[[i, j, ...]]`` (what :func:`batch_loader`'s batch sampler asks for)
    is ``ds.get_batch([i, j, ...])`` as tensors, stacked along a leading axis.
    """

    def __init__(self, dataset: LeRobotZarrDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int | Sequence[int]) -> dict[str, Any]:
        if (isinstance(i, Sequence) and not isinstance(i, str)) or getattr(i, "ndim", 0) > 0:
            return to_tensors(self.dataset.get_batch(np.asarray(i, dtype=np.int64)))
        return to_tensors(self.dataset[int(i)])

    def __getitems__(self, indices: list[int]) -> Sequence[dict[str, Any]]:
        """What ``DataLoader(batch_size=B)`` asks for: one ``get_batch``, handed to the collate function as items
        that share the batch's columns (``default_collate`` takes them back in one step, no tensor per item)."""
        return _items(self.dataset.get_batch(np.asarray(indices, dtype=np.int64)))


class IndexBatches(Sampler):
    """Whole index batches as numpy arrays (no per-index Python work): a fresh permutation each epoch when
    ``shuffle`` (from ``generator``, else from torch's global RNG, as ``RandomSampler`` does)."""

    def __init__(self, n: int, batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                 generator: torch.Generator | None = None):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.n, self.batch_size, self.shuffle, self.drop_last = int(n), int(batch_size), shuffle, drop_last
        self.generator = generator

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.shuffle:
            generator = self.generator
            if generator is None:
                generator = torch.Generator().manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            order = torch.randperm(self.n, generator=generator).numpy()
        else:
            order = np.arange(self.n, dtype=np.int64)
        stop = len(self) * self.batch_size if self.drop_last else self.n
        for k in range(0, stop, self.batch_size):
            yield order[k:k + self.batch_size]


_GROWTH = 4  # a worker's rings may grow to this many times the first one when the user holds many batches


def _shipped(value: Any) -> bool:
    """Whether a ``get_batch`` value goes through a ring (numeric and bool arrays; the rest is pickled)."""
    return type(value) is np.ndarray and value.ndim > 0 and value.dtype.kind in "biufc"


def _aligned(n: int) -> int:
    return (int(n) + 63) & ~63


class _Ring:
    """A DataLoader worker's shared-memory slots for whole batches, so that a batch crosses to the main process as
    a slot number and a layout instead of its bytes.

    One ``share_memory_()`` tensor: a flag byte per slot, then the slots. The worker makes it and sends it once
    (with its first batch); it fills only slots whose flag is 0, and sets the flag. The main process clears the
    flag when the last tensor viewing the slot is freed: the tensors of a delivered batch all view one lease array,
    whose weak reference frees the slot. A message dropped unread (an abandoned epoch) is still unpickled by the
    DataLoader, so its lease dies at once and frees its slot."""

    def __init__(self, slots: int, slot_bytes: int, memory: torch.Tensor | None = None, ring_id: str = ""):
        self.id = ring_id or uuid.uuid4().hex
        self.slot_bytes = slot_bytes
        self.head = head = _aligned(slots)
        if memory is None:
            memory = torch.zeros(head + slots * slot_bytes, dtype=torch.uint8).share_memory_()
        self.memory = memory
        whole = memory.numpy()
        self.flags = whole[:slots]
        self.slots = [whole[head + s * slot_bytes:head + (s + 1) * slot_bytes] for s in range(slots)]
        self.leases: list[weakref.ref | None] = [None] * slots
        self.sent = False

    def acquire(self) -> int | None:
        """(worker) A free slot, now marked in use; None while the main process holds them all."""
        free = np.flatnonzero(self.flags == 0)
        if not len(free):
            return None
        slot = int(free[0])
        self.flags[slot] = 1
        return slot

    def lease(self, slot: int, keep: Any = None) -> np.ndarray:
        """(main process) The bytes of ``slot`` as a new array object whose death frees the slot (and until then
        keeps ``keep`` alive)."""
        # through a memoryview: a plain view's base would collapse to the whole ring, and outlive the lease
        mem = np.frombuffer(memoryview(self.slots[slot]), dtype=np.uint8)
        self.leases[slot] = weakref.ref(mem, functools.partial(_free, self.flags, slot, keep))
        return mem


def _free(flags: np.ndarray, slot: int, _keep: Any, _ref: Any) -> None:
    flags[slot] = 0  # the last reader of the slot is gone; the worker rewrites it only after seeing this


# main process: the rings of one loader iteration's workers (by the iteration's token), by ring id
_RINGS: dict[str, dict[str, _Ring]] = {}


class _InRing:
    """A batch a worker put in its ring: pickles to the slot, the layout and the non-array values (and the ring
    itself the first time); unpickling it in the main process gives the batch as tensors viewing the slot."""

    __slots__ = ("extras", "layout", "ring", "slot", "token")

    def __init__(self, token: str, ring: _Ring, slot: int, layout: tuple, extras: dict):
        self.token, self.ring, self.slot, self.layout, self.extras = token, ring, slot, layout, extras

    def __reduce__(self) -> tuple:
        ring, memory = self.ring, None
        if not ring.sent:  # the worker's queue thread pickles in order: its first message carries the ring
            memory, ring.sent = ring.memory, True
        return _receive, (self.token, ring.id, len(ring.slots), ring.slot_bytes, memory, self.slot, self.layout,
                          self.extras)


def _receive(token: str, ring_id: str, slots: int, slot_bytes: int, memory: torch.Tensor | None, slot: int,
             layout: tuple, extras: dict) -> dict[str, Any]:
    ring = _RINGS.get(token, {}).get(ring_id)
    if ring is None:
        if memory is None:
            raise RuntimeError("lerobot_zarr.integrations.torch: a batch arrived from a DataLoader worker whose shared memory "
                               "this loader no longer knows (its iteration has ended)")
        ring = _RINGS.setdefault(token, {})[ring_id] = _Ring(slots, slot_bytes, memory, ring_id)
    mem = ring.lease(slot)
    extras = to_tensors(extras)
    return {key: extras[key] if offset < 0 else torch.from_numpy(np.ndarray(shape, dtype, buffer=mem, offset=offset))
            for key, offset, dtype, shape in layout}


class _Copied:
    """A batch that crosses pickled (no ring slot for it): unpickles to tensors too."""

    __slots__ = ("batch",)

    def __init__(self, batch: dict[str, Any]):
        self.batch = batch

    def __reduce__(self) -> tuple:
        return to_tensors, (self.batch,)


class _BatchRequests(Dataset):
    """Answers a request (a list of index batches) with their ``get_batch`` dicts. In a DataLoader worker the
    numeric arrays go into one of the worker's :class:`_Ring` s and cross as a slot number. When every slot is in
    use (the user holds more batches than planned) the worker adds a ring, up to ``_GROWTH`` times the first one's
    size and a quarter of the free shared memory (``/dev/shm``); past that, or in a container with little shared
    memory, a batch crosses pickled instead."""

    def __init__(self, dataset: LeRobotZarrDataset, batch_size: int, slots: int):
        self.dataset, self.batch_size, self.ring_slots = dataset, int(batch_size), int(slots)
        self.token: str | None = None  # set by the loader before its workers start
        self._rings: list[_Ring] = []  # (worker) the first made with the first batch
        self._room = 0  # (worker) bytes the rings may still grow by
        self._held: dict | None = None  # (worker) the last batch made

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_rings": [], "_room": 0, "_held": None}

    def __len__(self) -> int:
        return len(self.dataset)

    def batch(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """One batch: ``get_batch`` of the indices (numpy)."""
        return self.dataset.get_batch(np.asarray(indices, dtype=np.int64))

    def __getitem__(self, request: Sequence[Sequence[int] | np.ndarray]) -> list[Any]:
        """The batches of ``request``: numpy dicts in the main process; in a worker, objects that unpickle to
        dicts of tensors."""
        many = getattr(self.dataset, "get_batches", None)  # a mixture gathers a request's batches at once
        batches = many(request) if many is not None else [self.batch(ix) for ix in request]
        if get_worker_info() is None:
            return batches
        # Keep the last batch until the next request is made: freed with the others, it would leave the top of the
        # heap free for malloc to give back to the system, and the next request would take that memory again a
        # page fault at a time (which doubled the workers' CPU with 3 MB batches).
        self._held = batches[-1]
        return [self._ship(b) for b in batches]

    def _ship(self, batch: dict[str, Any]) -> _InRing | _Copied:
        ring, slot = self._slot(batch)
        if ring is None:
            return _Copied(batch)
        mem, size, offset, layout, extras = ring.slots[slot], ring.slot_bytes, 0, [], {}
        for key, value in batch.items():
            if _shipped(value) and offset + value.nbytes <= size:
                np.ndarray(value.shape, value.dtype, buffer=mem, offset=offset)[...] = value
                layout.append((key, offset, value.dtype.str, value.shape))  # a str pickles cheaper than a dtype
                offset = _aligned(offset + value.nbytes)
            else:
                layout.append((key, -1, None, None))
                extras[key] = value
        if not offset:
            ring.flags[slot] = 0
            return _Copied(batch)
        return _InRing(self.token, ring, slot, tuple(layout), extras)

    def _slot(self, batch: dict[str, Any]) -> tuple[_Ring | None, int]:
        """A free slot of one of this worker's rings (marked in use), adding a ring if none is free and there
        is room; (None, -1) otherwise."""
        for ring in self._rings:
            slot = ring.acquire()
            if slot is not None:
                return ring, slot
        if self.token is None:
            return None, -1
        slot_bytes = sum(_aligned(-(-v.nbytes // max(len(v), 1)) * max(self.batch_size, len(v)))
                         for v in batch.values() if _shipped(v))  # a full batch, scaled from this one
        if not slot_bytes:
            return None, -1
        if not self._rings:
            self._room = _GROWTH * self.ring_slots * slot_bytes
        else:
            slot_bytes = self._rings[0].slot_bytes
        slots = min(self.ring_slots if not self._rings else max(1, self.ring_slots // 2), self._room // slot_bytes)
        try:
            st = os.statvfs("/dev/shm")
            slots = min(slots, st.f_bavail * st.f_frsize // 4 // slot_bytes)
        except OSError:
            pass
        if slots < 1:
            return None, -1
        try:
            ring = _Ring(int(slots), slot_bytes)
        except (OSError, RuntimeError) as exc:  # no usable shared memory here: batches cross pickled
            warnings.warn(f"lerobot_zarr.integrations.torch: DataLoader worker could not make shared memory for its batches "
                          f"({exc}); they cross pickled instead (slower)", LeRobotZarrWarning, stacklevel=2)
            self.token = None
            return None, -1
        self._rings.append(ring)
        self._room -= slots * slot_bytes
        return ring, ring.acquire()


class _Requests(Sampler):
    """The index batches of ``batches``, ``k`` to a request: one DataLoader message to and from a worker per ``k``
    batches (a message costs the main process about as much as gathering a small batch)."""

    def __init__(self, batches: Sampler, k: int):
        self.batches, self.k = batches, int(k)

    def __len__(self) -> int:
        return (len(self.batches) + self.k - 1) // self.k

    def __iter__(self) -> Iterator[list]:
        request = []
        for batch in self.batches:
            request.append(batch)
            if len(request) == self.k:
                yield request
                request = []
        if request:
            yield request


def _as_is(batch: Any) -> Any:
    return batch


class BatchLoader(DataLoader):
    """A ``DataLoader`` over whole index batches (see :func:`batch_loader`), yielding dicts of tensors;
    ``len()`` counts batches. Over a batch sampler with a state (a mixture's), ``state_dict()`` is its state after
    the batches this loader has delivered (not those its workers prefetched), and ``load_state_dict()`` restores it
    before an iteration."""

    def __init__(self, requests: _BatchRequests, batches: Sampler, k: int, **kwargs: Any):
        self._batches = batches
        self._since: dict | None = None  # the batch sampler's state when the current (or last) iteration started
        self._delivered = 0  # batches that iteration delivered
        super().__init__(requests, batch_size=None, sampler=_Requests(batches, k), collate_fn=_as_is, **kwargs)

    def __len__(self) -> int:
        return len(self._batches)

    def state_dict(self) -> dict[str, Any]:
        if not hasattr(self._batches, "state_dict"):
            raise TypeError("this loader's batches have no state to save (a mixture's sampler has: "
                            "batch_loader(mix, ...) or batch_sampler=mix.sampler(...))")
        return self._batches.state_dict(since=self._since, batches=self._delivered)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._batches.load_state_dict(state)
        self._since, self._delivered = None, 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        requests: _BatchRequests = self.dataset
        if self.num_workers == 0:
            # in this process the DataLoader's machinery adds nothing (no collation, no pinning: a batch is one
            # get_batch) but its cost per batch (a profiler record, the fetcher): the batches come straight
            return self._in_process(requests)
        return self._from_workers(requests)

    def _in_process(self, requests: _BatchRequests) -> Iterator[dict[str, Any]]:
        if hasattr(self._batches, "state_dict"):
            self._since, self._delivered = self._batches.state_dict(), 0
        for indices in self._batches:
            batch = to_tensors(requests.batch(indices))
            self._delivered += 1
            yield batch

    def _from_workers(self, requests: _BatchRequests) -> Iterator[dict[str, Any]]:
        token = None
        if self.num_workers > 0 and not (self.persistent_workers and self._iterator is not None):
            requests.token = token = uuid.uuid4().hex  # the workers about to start ship under this token
            if self.persistent_workers:
                weakref.finalize(self, _RINGS.pop, token, None)
                token = None
        if hasattr(self._batches, "state_dict"):  # before the workers start taking batches ahead
            self._since, self._delivered = self._batches.state_dict(), 0
        answers = super().__iter__()
        try:
            for answer in answers:
                answer.reverse()
                while answer:  # keep no delivered batch: its slot frees as soon as the user drops it
                    self._delivered += 1
                    yield answer.pop()
        finally:
            if token is not None:  # this iteration's workers end with it (not persistent)
                del answers
                _RINGS.pop(token, None)


def batch_loader(dataset: LeRobotZarrDataset | TorchDataset | Any, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False, generator: torch.Generator | None = None,
                 sampler: Sampler | None = None, batch_sampler: Any = None, batches_per_request: int | None = None,
                 **kwargs: Any) -> BatchLoader:
    """A ``DataLoader`` yielding dicts of batched tensors (the ``get_batch`` dict), each batch one ``get_batch``.

    Its sampler hands the dataset whole index batches (:class:`IndexBatches`, or ``BatchSampler(sampler)`` for a
    ``sampler`` of your own such as a ``DistributedSampler``, or ``batch_sampler`` as it is) and it runs with
    ``batch_size=None``: no per-item work, no collation. ``dataset`` may be anything with ``__len__`` and
    ``get_batch`` that pickles; a mixture (``open_mixture``) is sampled by its own sampler by default,
    ``dataset.sampler(batch_size, seed=0)`` (this process's rank of ``torch.distributed`` when initialized): pass
    ``batch_sampler=mix.sampler(...)`` for another seed or rank. The loader's ``state_dict()`` then saves where
    the delivered batches reached, for the training checkpoint. Other keyword arguments (``num_workers``,
    ``persistent_workers``, ``prefetch_factor``, ...) go to ``DataLoader``; ``pin_memory`` does not apply (call
    ``.pin_memory()`` on the tensors if needed).

    With ``num_workers > 0`` a worker is asked for ``batches_per_request`` batches at a time (default: as many as
    fit in 12 MiB, 1 to 16; a mixture gathers them with one ``get_batches``, also without workers) and puts them
    in shared memory of its own; the main process gets slot numbers and makes tensors viewing the slots. A slot is
    reused only once every tensor of its batch is freed, so a batch stays valid as long as you hold it (hold many
    and further batches arrive by copy instead)."""
    ds = dataset.dataset if isinstance(dataset, TorchDataset) else dataset
    if batch_sampler is None and sampler is None and callable(getattr(ds, "sampler", None)):  # a mixture
        if not shuffle:
            raise ValueError("a mixture's sampler draws by weight (it always shuffles): shuffle=False does not apply; "
                             "pass batch_sampler= for batches of your own")
        batch_sampler = ds.sampler(batch_size, seed=0 if generator is None else generator.initial_seed())
    if batch_sampler is not None:
        if sampler is not None:
            raise ValueError("give sampler= or batch_sampler=, not both")
        batches: Any = batch_sampler
    elif sampler is None:
        batches = IndexBatches(len(ds), batch_size, shuffle=shuffle, drop_last=drop_last, generator=generator)
    else:
        batches = BatchSampler(sampler, batch_size=int(batch_size), drop_last=drop_last)
    kwargs.pop("pin_memory", None)
    k = 1
    if int(kwargs.get("num_workers", 0)) > 0 or hasattr(ds, "get_batches"):
        k = _default_request(ds, batch_size) if batches_per_request is None else int(batches_per_request)
        if k < 1:
            raise ValueError(f"batches_per_request must be positive, got {batches_per_request}")
    prefetch = kwargs.get("prefetch_factor") or 2
    # a worker's slots in use: its requests in flight, the one being yielded, the batch before it (still held)
    requests = _BatchRequests(ds, batch_size, slots=(prefetch + 1) * k + 1)
    return BatchLoader(requests, batches, k, **kwargs)


def _default_request(ds: LeRobotZarrDataset, batch_size: int) -> int:
    """Batches per worker request: as many as fit in 12 MiB, 1 to 16. A request costs a DataLoader message each way
    (about 0.2 ms of CPU on either side), which must stay small next to the work on the batches it carries."""
    if not len(ds):
        return 1
    one = ds.get_batch(np.zeros(1, dtype=np.int64))
    nbytes = sum(v.nbytes for v in one.values() if isinstance(v, np.ndarray)) * int(batch_size)
    return max(1, min(16, (12 << 20) // max(nbytes, 1)))


class TorchStream(IterableDataset):
    """An iterable torch dataset over :func:`lerobot_zarr.stream`: each DataLoader worker reads its own share of
    the episodes (no duplicates, no gaps); call :meth:`set_epoch` before each epoch for a new shuffle. A stream
    made with ``batch_size=B`` yields batches: use ``DataLoader(TorchStream(s), batch_size=None)``."""

    def __init__(self, samples: SampleStream):
        self.samples = samples

    def set_epoch(self, epoch: int) -> None:
        self.samples.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (to_tensors(item) for item in self.samples)


class StreamLoader(DataLoader):
    """A ``DataLoader`` over ``TorchStream(samples)`` (``batch_size=None``: the stream's samples or batches as they
    come) that counts what it delivers: ``state_dict()`` is where the delivered items reached (not what the workers
    prefetched), ``load_state_dict()`` resumes an interrupted epoch exactly, with the same ``num_workers``.
    Iterating again continues an interrupted epoch, or starts the next one (see :func:`stream_loader`)."""

    def __init__(self, samples: SampleStream, **kwargs: Any):
        super().__init__(TorchStream(samples), batch_size=None, **kwargs)
        self.samples = samples
        self._epoch, self._delivered = samples.epoch, 0

    def _workers(self) -> int:
        return max(1, self.num_workers)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs; the one it is in (a restored state) continues where it was."""
        if int(epoch) != self._epoch:
            self._epoch, self._delivered = int(epoch), 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch, samples = self._epoch, self.samples
        if self._delivered:
            samples.load_state_dict(samples.state_at(epoch, self._delivered, num_workers=self._workers()))
        else:
            samples.set_epoch(epoch)
        for item in super().__iter__():
            self._delivered += 1
            yield item
        self._epoch, self._delivered = epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        return self.samples.state_at(self._epoch, self._delivered, num_workers=self._workers())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("num_workers") != self._workers():
            raise ValueError(f"the stream state was saved with {state.get('num_workers')} DataLoader workers per "
                             f"rank (0 counts as 1) and this loader has {self._workers()}; the order depends on it")
        self.samples.load_state_dict(state)
        self._epoch, self._delivered = int(state["epoch"]), int(state["items"])


def stream_loader(samples: SampleStream, **kwargs: Any) -> StreamLoader:
    """A resumable ``DataLoader`` over a stream (:class:`StreamLoader`); keyword arguments go to ``DataLoader``
    (``num_workers``, ``prefetch_factor``, ...). Save ``loader.state_dict()`` with the training checkpoint and call
    ``loader.load_state_dict(state)`` on restart: the interrupted epoch continues with no sample repeated or
    skipped, on every rank (their states are equal)."""
    return StreamLoader(samples, **kwargs)


class _Meta:
    """The parts of ``LeRobotDatasetMetadata`` that training code reads. ``features`` (and the camera keys) are
    those the items hold: a camera left out of the samples (its video missing, or PyAV not installed) is not
    listed, so a policy built from them does not expect it."""

    def __init__(self, meta: Any, stored: Sequence[str]):
        self._meta = meta
        self.repo_id = None
        self.root = meta.root
        self.info = meta.info
        self.stats = {k: {s: np.asarray(v) for s, v in st.items()} for k, st in meta.stats.items()}
        self.features = {k: v for k, v in meta.features.items() if k in stored}

    fps = property(lambda self: self._meta.fps)
    robot_type = property(lambda self: self._meta.robot_type)
    total_episodes = property(lambda self: self._meta.total_episodes)
    total_frames = property(lambda self: self._meta.total_frames)
    total_tasks = property(lambda self: len(self._meta.tasks))

    @property
    def camera_keys(self) -> list[str]:
        """Image and video features the items hold (LeRobot's ``camera_keys``)."""
        return [k for k, ft in self.features.items() if ft.get("dtype") in CAMERA_DTYPES]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "image"]

    @property
    def tasks(self) -> list[str]:
        return list(self._meta.tasks)

    @property
    def episodes(self) -> dict[str, np.ndarray]:
        m = self._meta
        return {"episode_index": np.arange(m.total_episodes), "length": m.episode_length,
                "dataset_from_index": m.episode_start, "dataset_to_index": m.episode_end}


class LeRobotDataset(Dataset):
    """``LeRobotDataset`` for code written against LeRobot: the same constructor arguments where they apply and
    the same items (tensors; cameras float32 CHW in [0, 1]; ``<key>_is_pad`` masks; ``task`` string), served
    from a lerobot_zarr store (made on first use, see :func:`lerobot_zarr.open_dataset`).

    ``repo_id`` is a Hub repo id; ``root`` a LeRobot dataset folder or a store to read instead of the Hub (as
    LeRobot's ``root``); ``episodes``, ``delta_timestamps``, ``revision``, ``token`` as in LeRobot;
    ``image_transforms`` is applied to each camera frame (a CHW tensor) like LeRobot does. Arguments about
    LeRobot's own video decoding and recording (``video_backend``, ``download_videos``, encoders) do not apply
    and are accepted and ignored; ``tolerance_s`` must be LeRobot's default (1e-4 s), the one lerobot_zarr uses.

    In a plain ``DataLoader(ds, batch_size=B)`` each batch is one ``get_batch`` (torch's batched fetch,
    ``__getitems__``): the items handed to the collate function share the batch's columns and
    ``default_collate`` takes them back into exactly LeRobot's batch (docs/torch.md). A ``collate_fn`` of your own
    that reads items gets a ``TypeError`` saying so: pass ``batched_fetch=False`` for real items (then made one by
    one, as with ``image_transforms``).
    """

    def __init__(self, repo_id: str, root: str | os.PathLike | None = None, episodes: list[int] | None = None,
                 image_transforms: Callable | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = TOLERANCE_S,
                 revision: str | None = None, force_cache_sync: bool = False, download_videos: bool = True,
                 video_backend: str | None = None, *, token: str | bool | None = None, store: str | None = None,
                 batched_fetch: bool = True, **ignored: Any):
        from ..api import open_dataset

        if abs(float(tolerance_s) - TOLERANCE_S) > 1e-12:
            raise ArgumentError(f"tolerance_s={tolerance_s}: lerobot_zarr matches timestamps within {TOLERANCE_S} s "
                                f"only")
        self.repo_id = repo_id
        self.root = Path(root) if root is not None else None
        self.revision = revision
        self.image_transforms = image_transforms
        self.delta_timestamps = None if delta_timestamps is None else {k: list(v)
                                                                       for k, v in delta_timestamps.items()}
        source = self.root if self.root is not None else repo_id
        self.dataset = open_dataset(source, root=store, episodes=episodes, delta_timestamps=delta_timestamps,
                                    revision=None if self.root is not None else revision, token=token,
                                    image_format="float32_chw")
        self.episodes = None if episodes is None else sorted(int(e) for e in episodes)
        self.batched_fetch = batched_fetch
        self.meta = _Meta(self.dataset.meta, self.dataset.array_specs)
        self.meta.repo_id = repo_id

    # LeRobotDataset's properties
    fps = property(lambda self: self.meta.fps)
    features = property(lambda self: self.meta.features)
    num_frames = property(lambda self: len(self.dataset))
    num_episodes = property(lambda self: self.dataset.num_episodes)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: list[int]) -> Sequence[dict[str, Any]]:
        """What a plain ``DataLoader(ds, batch_size=B)`` asks for: the batch in one ``get_batch``, handed to the
        collate function as items that share its columns, which ``default_collate`` takes back into LeRobot's batch
        in one step, without a tensor per item (with ``image_transforms``, which apply per item: item by item)."""
        if self.image_transforms is not None or not self.batched_fetch:
            return [self[i] for i in indices]
        return _items(self.dataset.get_batch(np.asarray(indices, dtype=np.int64)), squeeze=DEFAULT_FEATURES)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        item = to_tensors(self.dataset[int(idx)])
        for key in self.meta.camera_keys:
            if key not in item:
                continue
            if self.image_transforms is not None:
                item[key] = self.image_transforms(item[key])
        for key in DEFAULT_FEATURES:
            if key in item and item[key].ndim == 1 and item[key].numel() == 1:
                item[key] = item[key][0]  # LeRobot gives these as 0-d tensors
        return item

    def push_to_hub(self, branch: str | None = None, tags: list | None = None, license: str | None = "apache-2.0",
                    tag_version: bool = True, push_videos: bool = True, private: bool | None = None,
                    **ignored: Any) -> str | None:
        """Publish the store as LeRobot v3.0 to ``repo_id`` (one commit; see ``LeRobotZarrDataset.push``)."""
        return self.dataset.push(self.repo_id, revision=branch, private=bool(private), videos=None)

    def __repr__(self) -> str:
        return (f"LeRobotDataset(repo_id={self.repo_id!r}, episodes={self.num_episodes}, frames={self.num_frames}, "
                f"features={list(self.features)}, served by lerobot_zarr from {self.dataset.root})")
