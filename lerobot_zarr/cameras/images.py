"""LeRobot's image format for models: uint8 HWC frames as float32 CHW in [0, 1] (``image_format="float32_chw"``)."""

from __future__ import annotations

import numpy as np

__all__ = ["to_float32_chw"]

_CHUNK = 16  # frames transposed at a time into a caller's array: each part stays in cache until it is divided


def to_float32_chw(frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``frames`` (``(..., H, W, C)`` uint8) as ``(..., C, H, W)`` float32 ``k / 255`` (as torch computes
    ``u8.float() / 255``).

    Without ``out``, one pass that keeps the frames' memory order (CHW axes over HWC memory: torch's
    ``channels_last``, with no transpose paid). Into ``out`` (C-contiguous CHW), a few frames at a time: each part
    is transposed as uint8 (4x fewer bytes moved than float32), then divided into place."""
    if out is None:
        return np.divide(np.moveaxis(frames, -1, -3), np.float32(255), dtype=np.float32)
    *_, h, w, c = frames.shape
    flat, flat_out = frames.reshape(-1, h, w, c), out.reshape(-1, c, h, w)
    for i in range(0, len(flat), _CHUNK):
        chw = np.ascontiguousarray(flat[i:i + _CHUNK].transpose(0, 3, 1, 2))
        np.divide(chw, np.float32(255), out=flat_out[i:i + _CHUNK], dtype=np.float32)
    return out
