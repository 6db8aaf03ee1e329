"""LeRobot's temporal windows as index arithmetic, apart from any data access (one kernel for every reader).

``delta_timestamps={key: [seconds, ...]}`` become integer frame offsets (each delta a multiple of 1/fps within
LeRobot's ``tolerance_s``, 1e-4 s). For frame ``local`` of an episode of ``length`` frames, offset ``o`` reads
frame ``clamp(local + o, 0, length - 1)`` and is padding (``<key>_is_pad``) when ``local + o`` falls outside the
episode: padded positions repeat the edge frame, as LeRobotDataset does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..cameras.video import TOLERANCE_S
from ..errors import DeltaTimestampsError, NotMaterializedError

__all__ = ["Window", "frames_read", "window_offsets", "windows"]


def window_offsets(delta_timestamps: Mapping[str, Sequence[float]] | None, fps: float, known: Sequence[str],
                   missing: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Validate deltas (multiples of 1/fps within ``TOLERANCE_S``) and turn them into frame offsets per feature.

    ``known``: features that can be windowed; ``missing``: features the data lacks, with why."""
    if delta_timestamps is None:
        return {}
    if not isinstance(delta_timestamps, Mapping):
        raise DeltaTimestampsError(f"delta_timestamps must be a mapping {{feature: [seconds, ...]}}, got "
                                   f"{type(delta_timestamps).__name__}")
    out: dict[str, np.ndarray] = {}
    for key, deltas in delta_timestamps.items():
        if key in missing:
            raise NotMaterializedError(f"delta_timestamps: {key!r} cannot be windowed, it is not in the samples: "
                                       f"{missing[key]} (or leave it out of delta_timestamps)", feature=str(key))
        if key not in known:
            raise DeltaTimestampsError(f"delta_timestamps: unknown feature {key!r} (features: {list(known)})",
                                       feature=str(key))
        if isinstance(deltas, (str, bytes)) or not isinstance(deltas, Sequence | np.ndarray):
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a list of seconds, got {deltas!r:.80}",
                                       feature=key)
        try:
            values = np.asarray(list(deltas), dtype=np.float64)
        except (TypeError, ValueError):
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a list of seconds, got {deltas!r:.80}",
                                       feature=key) from None
        if values.ndim != 1:  # a nested list would be flattened into another window
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a flat list of seconds, got a list of "
                                       f"shape {values.shape}", feature=key)
        if values.size == 0 or not np.isfinite(values).all() or (np.abs(values) > 1e9).any():
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a non-empty list of finite seconds",
                                       feature=key)
        frames = np.round(values * fps)
        bad = np.flatnonzero(np.abs(values - frames / fps) > TOLERANCE_S)
        if bad.size:
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}]: {values[bad[0]]} s is not a multiple of "
                                       f"1/fps = {1 / fps:.6g} s (tolerance {TOLERANCE_S} s)", feature=key)
        out[key] = frames.astype(np.int64)
    return out


class Window:
    """One windowed feature's frame offsets, with what the samplers' hot paths need precomputed."""

    __slots__ = ("name", "pad_key", "offsets", "lo", "hi", "contiguous", "no_pad")

    def __init__(self, name: str, offsets: np.ndarray):
        self.name, self.pad_key = name, f"{name}_is_pad"
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.lo, self.hi = int(self.offsets.min()), int(self.offsets.max())
        # offsets lo..hi in steps of one frame: a window inside its episode is one block of consecutive frames
        self.contiguous = bool(np.array_equal(self.offsets, np.arange(self.lo, self.hi + 1)))
        self.no_pad = np.zeros(len(self.offsets), dtype=bool)

    def frames(self, local: int, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Episode-local frames read by the window of frame ``local`` (clamped), and its padding mask."""
        q = self.offsets + local
        return np.minimum(np.maximum(q, 0), length - 1), (q < 0) | (q >= length)

    def frames_batch(self, local: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`frames` for many frames at once: ``(B, T)`` clamped frames and padding mask."""
        q = np.asarray(local)[:, None] + self.offsets
        last = (np.asarray(length) - 1)[:, None]
        return np.minimum(np.maximum(q, 0), last), (q < 0) | (q > last)

    def rows_batch(self, rows: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The same as :meth:`frames_batch` in rows of storage, fused: ``(B, T)`` rows read by the windows of
        frames at ``rows`` whose episodes lie in rows ``first .. last``, and the padding mask (the rows that had
        to be clamped)."""
        q = rows[:, None] + self.offsets
        clamped = np.maximum(q, first[:, None])
        np.minimum(clamped, last[:, None], out=clamped)
        return clamped, q != clamped


def windows(offsets: Mapping[str, np.ndarray]) -> dict[str, Window]:
    return {name: Window(name, o) for name, o in offsets.items()}


def frames_read(windows: Mapping[str, Window], names: Sequence[str], local: np.ndarray, length: np.ndarray,
                mp4: Sequence[str] = (), timestamps: bool = False) -> dict[str, np.ndarray]:
    """The episode-local frames each feature of ``names`` reads for frames ``local`` of episodes of ``length``
    frames, ``(n, window)``: its window's frames, or the frame itself. A camera kept as mp4 (``mp4``) is decoded at
    the stored timestamps of its frames: with ``timestamps``, ``"timestamp"`` reads those too."""
    frames = {}
    for name in names:
        w = windows.get(name)
        frames[name] = w.frames_batch(local, length)[0] if w is not None else np.asarray(local)[:, None]
    if mp4 and timestamps:
        frames["timestamp"] = np.concatenate([frames.get("timestamp", frames[mp4[0]][:, :0]),
                                              *(frames[name] for name in mp4)], axis=1)
    return frames
