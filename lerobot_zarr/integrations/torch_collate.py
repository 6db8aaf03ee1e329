"""The batched fetch of map-style datasets (``__getitems__``): a ``get_batch`` dict handed to a DataLoader's
collate function as items that share their batch's columns, which ``default_collate`` (extended through torch's
documented registry) takes back into the batch in one step, without a tensor per item. A collate function of your
own gets each item's values (views of the batch's, made when it first reads an item). In a DataLoader worker the
columns are stacked into the worker's shared-memory :class:`~.torch_memory.Ring`."""

from __future__ import annotations

import functools
import itertools
import operator
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import LeRobotZarrWarning, import_optional
from ..utils.background import process_alive

torch = import_optional("torch", "lerobot_zarr.integrations.torch (the torch adapter and LeRobotDataset drop-in)")
from torch.utils.data import get_worker_info  # noqa: E402

from .torch_memory import Ring, aligned, to_tensors  # noqa: E402

__all__ = ["batch_items"]


class _Column(torch.Tensor):
    """What an item of a batched fetch holds for each field until it is read: its whole batch's column (a tensor
    subclass, through torch's documented ``__torch_function__`` protocol), shared by every item of the fetch. Reading
    an item through the dict's methods gives its own values (:class:`_Item`); code that reads the dict's storage
    directly would find this, which is not one item's value: any use raises, naming what to do, never another item's
    values. ``default_collate`` never reads it: it collates a fetch's items in one step (:func:`_collate_fetch`)."""

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


_NOT_AN_ITEM = ("the items lerobot_zarr's __getitems__ gives a DataLoader share their batch's columns until read "
                "through the dict (item[key], item.items()...), which gives the item's values; index the dataset "
                "(ds[i]) for one item's values, or make the dataset with batched_fetch=False")


class _Block:
    """Where one batch's columns are stacked in a DataLoader worker: a slot of the worker's shared-memory ring
    (:func:`_worker_ring`), so that the batch crosses to the main process as the ring (one file descriptor, whose
    mapping the main process keeps) and offsets, and no new shared memory is made and faulted in per batch (1.5 ms
    for 300 KB here); a block of its own when every slot is still held."""

    def __init__(self) -> None:
        self.nbytes = 0
        self.where: tuple[Ring | None, int, torch.Tensor] | None = None

    def place(self, nbytes: int) -> int:
        at = self.nbytes
        self.nbytes = aligned(at + nbytes)
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


_worker_rings: dict[int, Ring] = {}  # this process's ring, by pid (a forked worker does not use its parent's)
# main process: the rings of the workers' collated batches, by ring id, with the worker's pid (dropped once the
# worker is gone and another ring arrives: outstanding batches keep their memory through their leases)
_received: dict[str, tuple[int, Ring]] = {}


def _worker_ring(nbytes: int) -> Ring:
    """This worker's ring, of slots holding at least ``nbytes`` (made, or made again bigger, when needed)."""
    ring = _worker_rings.get(os.getpid())
    if ring is None or ring.slot_bytes < nbytes:
        ring = _worker_rings[os.getpid()] = Ring(_DROPIN_SLOTS, aligned(nbytes))
    return ring


_DROPIN_SLOTS = 8  # a worker's batches in flight (prefetch_factor 2), the one in use and the one before it held


def _from_slot(memory: torch.Tensor | None, ring_id: str, pid: int, slots: int, slot_bytes: int, slot: int, at: int,
               dtype: str, shape: tuple) -> torch.Tensor:  # dtype: numpy's (dtype.str)
    """(main process) A column of a batch in a worker's ring slot, viewing the slot through the batch's lease:
    the slot is given back to the worker when every column of the batch is freed."""
    if memory is not None:
        for other, (owner, _) in list(_received.items()):
            if not process_alive(owner):
                del _received[other]
        _received[ring_id] = (pid, Ring(slots, slot_bytes, memory, ring_id))
    entry = _received.get(ring_id)
    if entry is None:
        raise RuntimeError("lerobot_zarr.integrations.torch: a batch arrived from a DataLoader worker whose shared "
                           "memory this process never received")
    ring = entry[1]
    lease = ring.leases[slot]() if ring.leases[slot] is not None else None
    if lease is None:  # the batch's first column (a slot is reused only once the lease of its last batch died)
        lease = ring.lease(slot)
    values = lease[at:].view(dtype)  # (numpy views: cheaper than torch's)
    return torch.from_numpy(values[:math.prod(shape)].reshape(shape))


def _reading(name: str) -> Callable[..., Any]:
    """A dict method of :class:`_Item` that reads or changes it: the item's own values are put in first."""
    method = getattr(dict, name)

    def own_first(self: _Item, *args: Any, **kwargs: Any) -> Any:
        self.own_values()
        return method(self, *args, **kwargs)
    own_first.__name__ = name
    return own_first


class _Item(dict):
    """An item of a batched fetch: a dict holding its batch's columns (and its own task) until read, and its
    position ``at`` in the fetch. ``default_collate`` hands the items of a fetch, untouched and in order, to
    :func:`_collate_fetch` (registered for this type), which gives the batch back in one step. Read or changed
    through the dict (``item[key]``, ``get``, ``items()``, ``values()``, ``dict(item)``, ``{**item}``, ``item[key] =
    ...``), it first takes its own values (views of its row of each column): a collate function of your own gets
    real items. Items refer to their columns and nothing refers back: no reference cycle through the tensors
    (freeing a batch of them is then refcounting's, not the cyclic collector's, which costs far more)."""

    __slots__ = ("at",)

    def own_values(self) -> None:
        """Put the item's own values in place of the shared columns (once)."""
        at = self.at
        if at is None:
            return
        n = next(len(v._batch) for v in dict.values(self) if type(v) is _Column)
        own = {}
        for key, value in dict.items(self):
            if type(value) is _Column:
                own[key] = value._batch[at]
            elif isinstance(value, (list, tuple)) and len(value) == n:  # a batch's list (a string feature's)
                own[key] = value[at]
        dict.update(self, own)
        self.at = None

    def __iter__(self) -> Any:  # (also makes dict(item) and {**item} read through __getitem__)
        return iter(dict.keys(self))

    def __reduce_ex__(self, protocol: Any) -> tuple:
        self.own_values()
        return dict, (dict(self),)

    __getitem__ = _reading("__getitem__")
    get = _reading("get")
    items = _reading("items")
    values = _reading("values")
    copy = _reading("copy")
    __repr__ = _reading("__repr__")
    __eq__ = _reading("__eq__")
    __ne__ = _reading("__ne__")
    __or__ = _reading("__or__")
    __ror__ = _reading("__ror__")
    __setitem__ = _reading("__setitem__")
    __delitem__ = _reading("__delitem__")
    __ior__ = _reading("__ior__")
    pop = _reading("pop")
    popitem = _reading("popitem")
    setdefault = _reading("setdefault")
    update = _reading("update")
    clear = _reading("clear")


_at = operator.attrgetter("at")


def _collate_fetch(batch: Sequence[_Item], *, collate_fn_map: Any = None) -> dict[str, Any]:
    """default_collate of :class:`_Item` s: the items a fetch handed out, in order and none read or changed, are
    its batch: its columns themselves (in a DataLoader worker, stacked into its shared-memory ring), in one step.
    Any other list of them (reordered, a part, several fetches, an item read or changed) is collated item by item,
    from each item's own values."""
    columns = dict.copy(batch[0])
    key, column = next(((k, v) for k, v in columns.items() if type(v) is _Column), (None, None))
    try:  # every item of the fetch, in order, still holding the shared column
        whole = (column is not None and len(batch) == len(column._batch)
                 and all(map(operator.is_, map(dict.get, batch, itertools.repeat(key)), itertools.repeat(column)))
                 and list(map(_at, batch)) == list(range(len(batch))))
    except (TypeError, AttributeError):  # (not all items of a fetch)
        whole = False
    if not whole:
        from torch.utils.data import default_collate

        return default_collate([dict(item) if isinstance(item, _Item) else item for item in batch])
    worker = get_worker_info() is not None
    out: dict[str, Any] = {}
    for key, value in columns.items():
        if type(value) is _Column:
            out[key] = value._block.stacked(value) if worker else value._batch
        elif key == "task":
            out[key] = list(map(dict.get, batch, itertools.repeat("task")))
        else:
            out[key] = value
    return out


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
    item: items (:class:`_Item` s of the fetch) share their batch's columns (:class:`_Column`) until read.
    ``squeeze``: keys whose items are 0-d (their (B, 1) columns become (B,))."""
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
    if not any(type(v) is _Column for v in columns.values()):  # (no column to share: items of their own)
        return tuple({k: v[at] if isinstance(v, (list, tuple)) and len(v) == n else v for k, v in columns.items()}
                     for at in range(n))
    # one dict per item, made in C, with its position
    tasks = batch.get("task")
    if tasks is None:
        items = list(map(_Item, itertools.repeat(columns, n)))
    else:
        first = {task: {**columns, "task": task} for task in dict.fromkeys(tasks)}
        items = list(map(_Item, map(first.__getitem__, tasks)))
    for at, item in enumerate(items):
        item.at = at
    return tuple(items)


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
        warnings.warn(f"lerobot_zarr.integrations.torch: torch {torch.__version__}'s default_collate does not take a "
                      f"batched fetch back in one step; DataLoader batches are made item by item (slower: use "
                      f"lerobot_zarr.integrations.torch.batch_loader)", LeRobotZarrWarning, stacklevel=3)
    return ok


def batch_items(batch: Mapping[str, Any], squeeze: Sequence[str] = (), *,
                shared: bool = True) -> Sequence[dict[str, Any]]:
    """The items of a ``get_batch`` dict for a DataLoader's collate function: sharing their batch's columns when
    default_collate takes them back in one step (:func:`_collatable`), else (or without ``shared``: for a collate
    function that reads items one by one) tensors of each item's own, views of the batch's."""
    if shared and _collation_works():
        return _collatable(batch, squeeze)
    tensors = to_tensors(batch)
    n = len(batch["task"]) if "task" in batch else len(next(iter(batch.values())))
    columns = {k: (v.reshape(n, *v.shape[2:]) if k in squeeze and v.ndim == 2 and v.shape[1] == 1 else v).unbind(0)
               if isinstance(v, torch.Tensor) else v for k, v in tensors.items()}
    return [{k: v[j] for k, v in columns.items()} for j in range(n)]
