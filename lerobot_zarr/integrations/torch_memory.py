"""Numpy batches as tensors: :func:`to_tensors` in this process, and :class:`Ring`, the shared memory through
which a DataLoader worker's batches cross to the main process (used by the batch loader and the batched fetch)."""

from __future__ import annotations

import functools
import uuid
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import import_optional

torch = import_optional("torch", "lerobot_zarr.integrations.torch (the torch adapter and LeRobotDataset drop-in)")

__all__ = ["Ring", "aligned", "to_tensors"]


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


def aligned(n: int) -> int:
    """``n`` bytes rounded up to 64: where the next array of a ring slot or a stacked batch starts."""
    return (int(n) + 63) & ~63


class Ring:
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
        self.head = head = aligned(slots)
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
