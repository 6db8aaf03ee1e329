"""lerobot_zarr.utils.buffers.recycled_empty: big arrays reuse the memory of dropped ones, never memory still in use."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from lerobot_zarr.utils import buffers
from lerobot_zarr.utils.buffers import recycled_empty

SHAPE = (8, 480, 640, 3)  # 7 MB


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.fixture(autouse=True)
def empty_pool():
    buffers._forget()
    yield
    buffers._forget()


def test_a_dropped_array_gives_its_memory_to_the_next():
    a = recycled_empty(SHAPE)
    assert a.shape == SHAPE and a.dtype == np.uint8 and a.flags.c_contiguous and a.flags.writeable
    where = address(a)
    del a
    b = recycled_empty(SHAPE)
    assert address(b) == where
    assert address(recycled_empty(SHAPE)) != where  # b holds it
    c = recycled_empty((2, *SHAPE[1:]), np.float32)  # another size: other memory
    assert c.dtype == np.float32 and c.shape == (2, *SHAPE[1:])


def test_memory_in_use_is_never_reused():
    """A view, a memoryview of the array or of its buffer keeps the memory: what it shows stays as written."""
    for keep in (lambda a: a[1:3], lambda a: a.reshape(-1)[::7], lambda a: memoryview(a), lambda a: a.base.base):
        a = recycled_empty(SHAPE)
        a[:] = 7
        kept = keep(a)
        where = address(a)
        del a
        b = recycled_empty(SHAPE)
        b[:] = 9
        assert address(b) != where
        assert (np.asarray(kept) == 7).all() if not isinstance(kept, memoryview) else set(kept.tobytes()) == {7}
        del kept, b


def test_small_arrays_are_plain_and_the_pool_is_bounded(monkeypatch):
    small = recycled_empty((4, 4))
    assert small.base is None  # np.empty's own
    monkeypatch.setattr(buffers, "KEEP_BYTES", int(np.prod(SHAPE)) * 2)
    arrays = [recycled_empty(SHAPE) for _ in range(4)]
    del arrays
    assert buffers._kept[0] == 2 * int(np.prod(SHAPE))
    assert sum(len(m) for maps in buffers._free.values() for m in maps) == buffers._kept[0]


def _child(conn) -> None:
    conn.send(buffers._kept[0])
    conn.close()


@pytest.mark.filterwarnings("ignore:This process")
def test_a_forked_child_drops_the_parents_maps():
    a = recycled_empty(SHAPE)
    del a
    assert buffers._kept[0] > 0
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child,))
    proc.start()
    assert parent.poll(60)
    assert parent.recv() == 0
    proc.join(10)
