"""The registered kinds of sources, and what a store's source record says through them.

:func:`kinds` loads the built-in kinds (a store folder, a LeRobot folder, a bucket folder, a Hub repo: in that
order) and those that installed packages declare under the ``lerobot_zarr.sources`` entry point group (before the
Hub's), then answers them in order. The records are what stores keep in ``source`` (:mod:`lerobot_zarr.store`):
:func:`kind_of_record` finds the kind that wrote one, which reopens, describes and compares it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

from . import bucket, hub, local  # noqa: F401  (the built-in kinds register themselves, in this order)
from .base import Source, origin, register, registered

__all__ = ["kinds", "kind_of_record", "describe_record", "same_source", "made_from_source", "ENTRY_POINTS"]

ENTRY_POINTS = "lerobot_zarr.sources"
_loaded_entry_points = False


def kinds() -> list[type[Source]]:
    """The registered kinds, in the order :func:`~.resolve.resolve_source` asks them (entry points loaded)."""
    global _loaded_entry_points
    if not _loaded_entry_points:
        _loaded_entry_points = True
        for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
            kind = entry.load()
            if kind not in registered():
                register(kind, before="hub")
    return registered()


def kind_of_record(record: Mapping[str, Any]) -> type[Source] | None:
    """The kind of source that writes records like ``record`` (through ``edited``), None for a store recorded
    with ``lerobot_zarr.create`` (or of a kind not installed here)."""
    name = origin(record).get("kind")
    return next((k for k in kinds() if k.record_kind is not None and k.record_kind == name), None)


def describe_record(record: Mapping[str, Any]) -> str:
    """Where a store's data came from, in words."""
    if isinstance(record, Mapping) and record.get("kind") == "edited":
        return f"edited in place, from {describe_record(record.get('from', {}))}"
    if isinstance(record, Mapping) and record.get("kind") == "recorded":
        return "recorded with lerobot_zarr.create"
    kind = kind_of_record(record) if isinstance(record, Mapping) else None
    return kind.describe(record) if kind is not None else f"a {dict(record).get('kind', 'unknown')} source"


def made_from_source(record: Mapping[str, Any]) -> bool:
    """Whether a store whose record is ``record`` holds a source's data as the source has it (not changed in place
    by a writer, not recorded with ``lerobot_zarr.create``): the cache's store of that source."""
    return isinstance(record, Mapping) and record.get("kind") not in ("edited", "recorded") and \
        kind_of_record(record) is not None


def same_source(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """Whether the store whose record is ``a`` holds data of the source whose record is ``b`` (a store changed
    in place by a writer still comes from its source)."""
    a, b = origin(a or {}), origin(b)
    kind = kind_of_record(b)
    if kind is None or a.get("kind") != b.get("kind"):
        return a == b
    return kind.same(a, b)
