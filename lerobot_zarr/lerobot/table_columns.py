"""Columns of LeRobot's episode table (``meta/episodes``), read and checked: integers (indices, lengths, frame
ranges), seconds (a video's ``from_timestamp``) and task lists; a value out of place is a
:class:`~lerobot_zarr.errors.CorruptSourceError` naming the column and episode."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ..errors import CorruptSourceError

__all__ = ["float_column", "int_column", "task_lists"]


def int_column(table: pa.Table, name: str, where: str, *, order: np.ndarray | None = None,
                nullable: bool = False, episodes: Sequence[int] | None = None) -> list[int | None]:
    """An integer column of an episode table (in ``order``), every value an int >= 0 (or None if ``nullable``).
    ``episodes``: the episode of each value in ``order``, for messages (default: its position)."""
    col = table.column(name)
    if not (pa.types.is_integer(col.type) or (nullable and pa.types.is_null(col.type))):
        raise CorruptSourceError(f"{where}: column {name!r} holds {col.type}, expected integers")
    values = col.to_pylist()
    if order is not None:
        values = [values[i] for i in order]
    for e, v in enumerate(values):
        if (v is None and not nullable) or (v is not None and v < 0):
            raise CorruptSourceError(f"{where}: column {name!r} of {'episode' if order is not None else 'row'} "
                                     f"{e if episodes is None else episodes[e]} is {v!r}, expected an integer >= 0")
    return values


def float_column(table: pa.Table, name: str, where: str, order: np.ndarray,
                 episodes: Sequence[int] | None = None) -> list[float | None]:
    """A column of seconds (in ``order``): each a finite float >= 0, or None."""
    col = table.column(name)
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
        raise CorruptSourceError(f"{where}: column {name!r} holds {col.type}, expected seconds")
    column = col.to_pylist()
    values = [column[int(i)] for i in order]
    for e, v in enumerate(values):
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise CorruptSourceError(f"{where}: column {name!r} of episode {e if episodes is None else episodes[e]} "
                                     f"is {v!r}, expected seconds >= 0")
    return [None if v is None else float(v) for v in values]


def task_lists(col: pa.ChunkedArray, where: str, order: np.ndarray,
               episodes: Sequence[int] | None = None) -> list[list[str]]:
    """The ``tasks`` column (in ``order``): each a list of strings (a null: no task)."""
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_null(col.type)):
        raise CorruptSourceError(f"{where}: column 'tasks' holds {col.type}, expected lists of strings")
    values = col.to_pylist()
    out = []
    for e, i in enumerate(order):
        tasks = values[int(i)] or []
        if not all(isinstance(t, str) for t in tasks):
            raise CorruptSourceError(f"{where}: column 'tasks' of episode {e if episodes is None else episodes[e]} "
                                     f"is {tasks!r:.80}, expected strings")
        out.append(list(tasks))
    return out
