"""Content hashes of a store's episodes: CRC-32C (Castagnoli), computed while the data is written.

A CRC is not a cryptographic hash: it detects damage (bit rot, a truncated or zeroed file, a copy gone wrong, rows
of one episode served as another's), not forgery: whoever can rewrite a store's data can rewrite its root too.
CRC-32C runs in hardware on x86-64 (SSE 4.2) and arm64 (several GB/s per core, faster than the disk it checks).
It comes from the ``libcrc32c`` that ``google-crc32c`` (a dependency of zarr) ships, called through ctypes on any
buffer without a copy and without holding the GIL; where that library cannot be loaded, from ``google_crc32c``'s
own function (one copy per call), so results are identical everywhere.

What a hash covers (see :mod:`lerobot_zarr.store`): a raw feature's episode rows, byte for byte; a compact
camera's encoded frames in row order, each as its 8-byte little-endian length then its bytes; a camera kept as
mp4, the whole mp4 file holding the episode.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

import numpy as np

__all__ = ["ALGORITHM", "crc32c", "crc32c_at", "Crc32c", "compact_frame_header"]

ALGORITHM = "crc32c"


def _load_library() -> Any:
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - zarr depends on it
        return None
    base = os.path.dirname(os.path.abspath(google_crc32c.__file__))
    for pattern in (f"{base}.libs/libcrc32c*", f"{base}/.dylibs/libcrc32c*", f"{base}/libcrc32c*"):
        for path in sorted(glob.glob(pattern)):
            try:
                lib = ctypes.CDLL(path)
                fn = lib.crc32c_extend
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_uint32
            fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
            if fn(0, b"123456789", 9) == 0xE3069283:  # the standard check value
                return fn
    return None


_extend = _load_library()


def crc32c(data: Any, value: int = 0) -> int:
    """CRC-32C of ``data`` (bytes, a memoryview, a numpy array...), continuing from ``value``."""
    if _extend is not None:
        if isinstance(data, bytes):
            return int(_extend(value, data, len(data)))
        array = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8) if \
            memoryview(data).c_contiguous else np.ascontiguousarray(np.asarray(memoryview(data)))
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return int(_extend(value, array.ctypes.data, array.nbytes)) if array.nbytes else value
    import google_crc32c

    view = memoryview(np.ascontiguousarray(np.asarray(memoryview(data)))).cast("B")
    return int(google_crc32c.extend(value, bytes(view))) if view.nbytes else value


def crc32c_at(address: int, nbytes: int, value: int = 0) -> int:
    """CRC-32C of ``nbytes`` bytes at ``address`` (inside a buffer the caller keeps alive), from ``value``."""
    if _extend is not None:
        return int(_extend(value, address, nbytes))
    return crc32c(ctypes.string_at(address, nbytes), value)


class Crc32c:
    """An incremental CRC-32C: ``update`` with consecutive pieces, ``value`` at the end."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0):
        self.value = value

    def update(self, data: Any) -> None:
        self.value = crc32c(data, self.value)


def compact_frame_header(nbytes: int) -> bytes:
    """What precedes each encoded frame of a compact camera in its hash: the frame's length."""
    return int(nbytes).to_bytes(8, "little")
