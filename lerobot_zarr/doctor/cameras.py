"""The checks of cameras: frozen and black frames as the frames pass by (decoded from a video into the store, or an
episode of an image feature), and a video against the rows (:func:`video_defects`, from what the decode saw)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from ..cameras.video import DecodeLog
from .kinds import THRESHOLDS, Defect, frame_ranges

__all__ = ["FrameWatch", "video_defects"]

_STRIDE = 61  # every 61st byte of a frame: a prime, so no channel or row is favoured; enough for a mean


class FrameWatch:
    """Watches one camera of one episode: runs of identical frames and black frames, frame by frame (:meth:`see`,
    or :meth:`wrap` around a decoder's sink) or for a whole episode of images (:meth:`see_all`). Its ``log`` is
    what the decode of a video saw (filled by the decoder)."""

    def __init__(self, episode: int, feature: str, fps: float, thresholds: Mapping[str, float] = THRESHOLDS, *,
                 colour: bool = True):
        self.episode, self.feature, self.fps = episode, feature, fps
        self.frozen_frames = max(2, math.ceil(fps * thresholds["frozen_seconds"] - 1e-9))
        self.black_level = thresholds["black_level"] if colour else None  # a depth map is never "black"
        self.log = DecodeLog()
        self.n = 0
        self._previous: bytes | None = None
        self._run_start = 0
        self._runs: list[tuple[int, int]] = []  # frozen runs [first, stop) long enough
        self._black: list[int] = []

    def wrap(self, sink: Callable[[bytes], None]) -> Callable[[bytes], None]:
        def watched(frame: bytes) -> None:
            sink(frame)
            self.see(frame)
        return watched

    def rewinding(self, rewind: Callable[[], None] | None = None) -> Callable[[], None]:
        """What the decoder calls when it starts the episode over (``rewind``, the sink's own, first)."""
        def restart() -> None:
            if rewind is not None:
                rewind()
            self.n, self._previous, self._run_start, self._runs, self._black = 0, None, 0, [], []
        return restart

    def see(self, frame: bytes) -> None:
        """The next frame (raw uint8 bytes)."""
        if self._previous is None or frame != self._previous:  # bytes equality: one memcmp
            self._end_run()
            self._run_start = self.n
        if self.black_level is not None and np.frombuffer(frame, np.uint8)[::_STRIDE].mean() < self.black_level:
            self._black.append(self.n)
        self._previous = frame
        self.n += 1

    def see_all(self, frames: np.ndarray) -> None:
        """A whole episode of frames (T, H, W, C) uint8, vectorised."""
        n = len(frames)
        if not n:
            return
        flat = frames.reshape(n, -1)
        sample = flat[:, ::_STRIDE]
        if self.black_level is not None:
            self._black.extend(np.flatnonzero(sample.mean(axis=1) < self.black_level).tolist())
        maybe = np.flatnonzero((sample[1:] == sample[:-1]).all(axis=1)) + 1  # frame i equals frame i - 1 there?
        same = np.zeros(n, dtype=bool)
        same[[i for i in maybe.tolist() if np.array_equal(flat[i], flat[i - 1])]] = True
        starts = np.flatnonzero(~same)
        stops = np.r_[starts[1:], n]
        self._runs.extend((int(a), int(b)) for a, b in zip(starts, stops, strict=True)
                          if b - a >= self.frozen_frames)
        self.n = self._run_start = n

    def _end_run(self) -> None:
        if self.n - self._run_start >= self.frozen_frames:
            self._runs.append((self._run_start, self.n))

    def defects(self) -> list[Defect]:
        """The frozen runs and black frames seen."""
        self._end_run()
        self._run_start = self.n
        out = []
        if self._runs:
            longest = max(b - a for a, b in self._runs)
            out.append(Defect("frozen_frames", self.episode, self.feature, tuple(self._runs), longest / self.fps,
                              f"the same frame for up to {longest} frames ({longest / self.fps:.1f} s) in "
                              f"{len(self._runs)} run{'s' if len(self._runs) > 1 else ''}"))
        if self._black:
            out.append(Defect("black_frames", self.episode, self.feature, frame_ranges(self._black),
                              float(len(self._black)), f"{len(self._black)} black frames (mean pixel value below "
                                                       f"{self.black_level:g} of 255)"))
        return out


def video_defects(episode: int, feature: str, queries: np.ndarray, log: DecodeLog, error: str | None,
                  tolerance_s: float = THRESHOLDS["tolerance_s"]) -> list[Defect]:
    """A video against the rows of an episode, from what its decode saw: ``queries`` are the rows' times in the
    file (its ``from_timestamp`` + their timestamps), ``error`` the decoder's reason for refusing the episode's
    camera (None: it took it)."""
    n = len(queries)
    times = log.times if len(log.times) == n else np.full(n, np.nan)
    if error is not None and np.isnan(times).all():  # not a late frame: no video, or one that does not decode
        where = f"episode {episode}, camera {feature!r}: "  # the decoder's reason names them: the line does too
        return [Defect("video_missing", episode, feature, ((0, n),) if n else (), float(n),
                       error[len(where):] if error.startswith(where) else error)]
    out = []
    off = np.abs(times - queries)
    bad = ~(off < tolerance_s)
    short = np.zeros(n, dtype=bool)
    if log.last is not None:
        short = queries >= log.last + tolerance_s
        if short.any():
            first = int(np.argmax(short))
            out.append(Defect("video_short", episode, feature, ((first, n),), float(n - first),
                              f"the video ends at {log.last - queries[0]:.3f} s of the episode, {n - first} rows "
                              f"after that (the last at {queries[-1] - queries[0]:.3f} s)"))
    late = bad & ~short
    if late.any():
        worst = float(np.nanmax(off[late])) if np.isfinite(off[late]).any() else float("nan")
        out.append(Defect("video_timestamps", episode, feature, frame_ranges(np.flatnonzero(late)), worst,
                          f"{int(late.sum())} rows have no video frame within {tolerance_s} s of their timestamp (the "
                          f"nearest up to {worst:.6f} s away)"))
    if log.unused:
        after = np.searchsorted(queries, np.asarray(log.unused), side="right") - 1
        out.append(Defect("video_extra_frames", episode, feature, frame_ranges(np.clip(after, 0, max(n - 1, 0))),
                          float(len(log.unused)), f"{len(log.unused)} video frames between rows that no row has "
                                                  f"(the video holds more frames than the episode's rows)"))
    return out
