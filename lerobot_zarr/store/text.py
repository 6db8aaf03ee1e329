"""Text arrays: a ``string`` feature's ``str`` per frame, a ``language`` column's value per frame (JSON text).

A text array is kept like a compact camera (a zarr shard per pack, one inner chunk per frame, the shard index first),
each inner chunk being zarr's ``vlen-utf8`` encoding of one string: its count (1) and its length as little-endian
uint32, then its UTF-8 bytes. So zarr-python (and xarray) read them as zarr ``string`` arrays. Equal consecutive
frames (a language column repeats its persistent rows on every frame of an episode) are written once and shared by
their rows of the shard index.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from ..errors import CorruptStoreError
from ..utils.hashing import Crc32c, compact_frame_header

__all__ = ["TEXT_KINDS", "TEXT_CODEC", "TEXT_DATA_TYPE", "encode_text", "decode_text", "text_value", "text_crc"]

TEXT_KINDS = ("string", "language")
TEXT_CODEC = "vlen-utf8"  # the frame codec a store records for its text arrays (zarr's codec of that name)
TEXT_DATA_TYPE = "string"  # zarr's data type of variable-length UTF-8 strings
_HEAD = struct.Struct("<II")


def encode_text(value: str) -> bytes:
    """One frame's inner chunk: zarr's vlen-utf8 encoding of the 1-element chunk ``[value]``."""
    if not isinstance(value, str):
        raise TypeError(f"text frames are str, got {type(value).__name__}")
    data = value.encode("utf-8")
    return _HEAD.pack(1, len(data)) + data


def decode_text(data: Any, where: str) -> str:
    """The string of an inner chunk written by :func:`encode_text` (any buffer)."""
    view = memoryview(data)
    if len(view) < _HEAD.size:
        raise CorruptStoreError(f"{where}: a text frame of {len(view)} bytes (no vlen-utf8 header)")
    count, size = _HEAD.unpack_from(view)
    if count != 1 or size != len(view) - _HEAD.size:
        raise CorruptStoreError(f"{where}: a text frame of {len(view)} bytes whose vlen-utf8 header says {count} "
                                f"string(s) of {size} bytes")
    try:
        return str(view[_HEAD.size:], "utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptStoreError(f"{where}: a text frame that is not UTF-8 ({exc})") from None


def text_value(kind: str, text: str, where: str) -> Any:
    """A stored frame as items give it: the ``str`` of a string feature, the Python value (a new object each time) of
    a language column."""
    if kind != "language":
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CorruptStoreError(f"{where}: a language frame that is not JSON ({exc})") from None


def text_crc(frames: Any) -> int:
    """The content hash of a text array's frames (strings, in row order), as a compact pack's: each encoded frame's
    length as 8 little-endian bytes, then the frame (what :class:`~lerobot_zarr.store.packs.RowWriter` computes)."""
    crc = Crc32c()
    for value in frames:
        blob = encode_text(value)
        crc.update(compact_frame_header(len(blob)))
        crc.update(blob)
    return crc.value
