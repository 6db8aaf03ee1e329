"""How the commands write sizes, episode lists and a dataset's origin (shared by ``info``, ``edit``, ``cache``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..sources.registry import describe_record

__all__ = ["episodes_text", "size_text", "source_line"]


def size_text(n: float) -> str:
    """Bytes as MB, or GB from 1 GB up."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def episodes_text(episodes: Sequence[int]) -> str:
    """The first eight episodes of a list, ``...`` if there are more."""
    return f"{list(episodes[:8])}{'...' if len(episodes) > 8 else ''}"


def source_line(source: Mapping[str, Any]) -> str:
    """A store's or source's origin on one line."""
    return describe_record(source)
