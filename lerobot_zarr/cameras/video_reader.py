"""Camera frames decoded on read from the mp4 files a store keeps (the ``mp4`` camera storage), with PyAV.

:class:`Mp4Frames` serves the frames of one camera's mp4 files at given timestamps, with LeRobot's rule: each
timestamp gets the nearest decoded frame, which must lie within ``TOLERANCE_S`` (1e-4 s); the pixels are exactly
those :func:`lerobot_zarr.cameras.video.decode_into` writes (PyAV's decode, converted to rgb24 / gray / rgba).

Unlike LeRobot's per-sample decode (open the file, seek, decode, close, every sample), it:

- keeps containers open, at most ``max_open`` per reader, least recently used closed first; a forked child
  drops the parent's (never closes them: their decoder threads do not exist in the child) and opens its own;
- seeks only when it must: to the keyframe at or before the first frame needed, and not when decoding on from
  where the decoder stands reaches the frame without passing a keyframe it could seek to;
- keeps the last ``cache_frames`` decoded frames of each open file (the current run, contiguous in time), so
  overlapping windows (``ds[i]`` then ``ds[i + 1]``) and sequential reads decode each frame once;
- batches: :meth:`Mp4Frames.read_many` groups queries by file and sorts them by time (forward passes), and
  decodes in parallel threads (PyAV releases the GIL while decoding): different files, and different parts of
  one file through one container per thread (LeRobot v3 puts many episodes in one mp4).

A random 2-frame window still costs what decoding its frames from the previous keyframe costs (LeRobot's AV1:
a keyframe every 2 frames, 2-3 frames decoded): the saving over per-sample decode is the open and seek, the
conversion of frames nobody asked for, and the parallelism across files.

Timestamps are seconds in the file: an episode's ``from_timestamp`` plus the frame's ``timestamp``.
"""

from __future__ import annotations

import bisect
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np

from ..errors import CorruptSourceError, LeRobotZarrError, SchemaMismatchError, SourceNotFoundError, import_optional
from .frame_codecs import decode_threads, run_in_parallel
from .video import TOLERANCE_S

__all__ = ["Mp4Frames"]

_FORMATS = {1: "gray", 3: "rgb24", 4: "rgba"}
# fewest queries of one file worth a container of their own in read_many: each container seeks and decodes from a
# keyframe, so splitting a 2-frame window (or two) over containers decodes its frames' keyframe runs twice
_MIN_PART = 4
_abandoned: list[Any] = []  # containers of a parent process, kept alive (never closed) in its forked children
_readers: weakref.WeakSet[Mp4Frames] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for reader in list(_readers):
        reader._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _as_path(key: str) -> str:
    return key


class _Run:
    """Decoded frames of one file, consecutive in time from a seek on, the decoder standing after the last."""

    def __init__(self, limit: int):
        self.times: list[float] = []
        self.frames: list[Any] = []  # av.VideoFrame, replaced by its ndarray once converted
        self.limit = limit
        self.ended = False  # the decoder reached the end of the stream

    def append(self, t: float, frame: Any) -> None:
        self.times.append(t)
        self.frames.append(frame)
        if len(self.times) > self.limit:
            del self.times[0], self.frames[0]


class _File:
    """An open container of one mp4 file, its decoder's position and its decoded-frame run."""

    def __init__(self, key: str, source: str | BinaryIO, cache_frames: int):
        import_optional("av", "reading a camera kept as mp4")
        import av
        import av.video.reformatter

        self.key = key
        self.lock = threading.Lock()
        self.container = av.open(source, mode="r")
        try:
            self.stream = self.container.streams.video[0]
        except IndexError:
            self.container.close()
            raise CorruptSourceError(f"{key}: no video stream") from None
        if self.stream.codec_context is None:  # a codec PyAV has no decoder for (a damaged header, found by fuzz)
            self.container.close()
            raise CorruptSourceError(f"{key}: its video stream has no decoder (a damaged file?)")
        self.stream.codec_context.thread_count = 1  # per-window decodes: one thread is fastest (no frame delay)
        # PyAV's to_ndarray converts with a thread-local swscale context using a pool of threads, which a forked
        # child inherits without its threads (and hangs in): convert with this file's own one-thread context
        # (the same pixels, and faster per frame)
        self.reformatter = av.video.reformatter.VideoReformatter()
        self.tb = self.stream.time_base
        # the container's sample index (mp4: no read needed): where keyframes are, to seek straight to them
        # (PyAV < 16 has no index_entries: then seeks go by time, as decode_into's)
        entries = [(int(e.timestamp), bool(e.is_keyframe)) for e in (getattr(self.stream, "index_entries", None)
                                                                        or ())]
        self.key_pts = sorted(ts for ts, key in entries if key)
        self.keyframes = [float(ts * self.tb) for ts in self.key_pts]
        self.entry_times = sorted(float(ts * self.tb) for ts, _ in entries)
        self.cache_frames = cache_frames
        self.run: _Run | None = None
        self.frames_iter: Any = None
        self.seeks = 0
        self.decoded = 0

    def close(self) -> None:
        self.run, self.frames_iter = None, None
        self.container.close()

    # -- decoding
    def _seek(self, q: float) -> None:
        """Start a new run at the last keyframe at or before ``q`` (+ tolerance) per the container's index; if
        that overshoots (an index in decode time, say), at the keyframe before ``q - TOLERANCE_S``, as
        decode_into seeks."""
        k = bisect.bisect_right(self.keyframes, q + TOLERANCE_S) - 1
        if k >= 0 and self._seek_to(self.key_pts[k]) and self.run.times[0] <= q + TOLERANCE_S:  # type: ignore
            return
        self._seek_to(max(0, int((q - TOLERANCE_S) / self.tb)))

    def _seek_to(self, pts: int) -> bool:
        """Seek backward to a keyframe at or before ``pts`` and decode its first frame; False at the end."""
        self.container.seek(pts, stream=self.stream, backward=True, any_frame=False)
        self.frames_iter = self.container.decode(self.stream)
        self.run = _Run(self.cache_frames)
        self.seeks += 1
        return self._next()

    def _next(self) -> bool:
        """Decode one more frame into the run; False at the end of the stream."""
        assert self.run is not None and self.frames_iter is not None
        frame = next(self.frames_iter, None)
        if frame is None:
            self.run.ended = True
            return False
        if frame.time is None:
            raise CorruptSourceError(f"{self.key}: decoded a frame without a timestamp")
        t = float(frame.time)
        if self.run.times and t <= self.run.times[-1]:
            raise CorruptSourceError(f"{self.key}: decoded frames out of time order ({self.run.times[-1]:.6f} s then "
                                     f"{t:.6f} s)")
        self.run.append(t, frame)
        self.decoded += 1
        return True

    def _must_seek(self, q: float) -> bool:
        """Whether reaching ``q`` needs a seek: it lies before the run, or a keyframe past the run's end (with
        frames between) comes before it, so that seeking skips decoding."""
        run = self.run
        if run is None or not run.times or q < run.times[0]:
            return True
        last = run.times[-1]
        if q <= last or run.ended:
            return False
        if self.keyframes:
            k = bisect.bisect_right(self.keyframes, q + TOLERANCE_S) - 1
            if k < 0 or self.keyframes[k] <= last:
                return False
            between = bisect.bisect_left(self.entry_times, self.keyframes[k] - TOLERANCE_S) - \
                bisect.bisect_right(self.entry_times, last + TOLERANCE_S)
            return between > 0
        return q - last > 1.0

    def _settled(self, q: float) -> bool:
        """Whether the run's last frame, a hair before ``q``, is already the one to pick: within the tolerance
        of ``q`` and, per the container's index, nearer than the next frame. Stored timestamps (float32 in
        LeRobot's parquet) often lie a few ns after their frame's: without this, every such query decoded the
        next frame too. Without an index, never (decode on)."""
        run = self.run
        if not run or not run.times or not self.entry_times or not 0 <= q - run.times[-1] < TOLERANCE_S:
            return False
        last = run.times[-1]
        j = bisect.bisect_right(self.entry_times, last)
        return j == len(self.entry_times) or self.entry_times[j] - q > q - last

    def frame_at(self, q: float, fmt: str, shape: tuple[int, int, int], where: str) -> np.ndarray:
        """The frame decode_into gives for timestamp ``q``: the nearer of the last frame before ``q`` and the
        first at or after it (that one on a tie), within ``TOLERANCE_S``."""
        if self._must_seek(q):
            self._seek(q)
        run = self.run
        assert run is not None
        while (not run.times or run.times[-1] < q) and not run.ended and not self._settled(q):
            self._next()
        j = bisect.bisect_left(run.times, q)  # first frame at or after q (len: none, past the last frame)
        if j == len(run.times):
            if not run.times:
                raise CorruptSourceError(f"{where}: no frame decoded at or after {q:.6f} s")
            j -= 1
        elif j > 0 and abs(run.times[j - 1] - q) < abs(run.times[j] - q):
            j -= 1
        t = run.times[j]
        if abs(t - q) >= TOLERANCE_S:
            raise CorruptSourceError(f"{where}: no frame within {TOLERANCE_S} s of timestamp {q:.6f} s (nearest "
                                     f"decoded frame at {t:.6f} s)")
        frame = run.frames[j]
        if not isinstance(frame, np.ndarray):
            try:
                arr = self.reformatter.reformat(frame, format=fmt, threads=1).to_ndarray()
            except TypeError:  # PyAV < 16: no threads option (and no threaded conversion to avoid)
                arr = self.reformatter.reformat(frame, format=fmt).to_ndarray()
            if arr.ndim == 2:
                arr = arr[..., None]
            if arr.shape != shape:
                raise SchemaMismatchError(f"{where}: decoded frames of shape {arr.shape}, the dataset declares "
                                          f"{shape}")
            run.frames[j] = frame = arr
        return frame


class Mp4Frames:
    """Frames of one camera, decoded from its mp4 files on demand (see the module docstring).

    ``opener(file)`` gives a path or a binary file object for a file key (default: the key is a path).
    """

    def __init__(self, frame_shape: Sequence[int], *, opener: Callable[[str], str | BinaryIO] | None = None,
                 max_open: int = 8, cache_frames: int = 16, threads: int | None = None):
        shape = tuple(int(s) for s in frame_shape)
        if len(shape) != 3 or shape[2] not in _FORMATS:
            raise ValueError(f"frames must be (height, width, 1, 3 or 4 channels), got {frame_shape}")
        if max_open < 1 or cache_frames < 2:
            raise ValueError(f"max_open must be >= 1 and cache_frames >= 2, got {max_open}, {cache_frames}")
        self.frame_shape: tuple[int, int, int] = shape  # type: ignore[assignment]
        self.format = _FORMATS[shape[2]]
        self.opener = opener or _as_path
        self.max_open, self.cache_frames, self.threads = max_open, cache_frames, threads
        self._files: OrderedDict[tuple[str, int], _File] = OrderedDict()
        self._lock = threading.Lock()
        _readers.add(self)

    def __getstate__(self) -> dict[str, Any]:  # pickles as its settings: open files stay in their process
        state = self.__dict__.copy()
        state["_files"], state["_lock"] = OrderedDict(), None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        _readers.add(self)

    def _forget(self) -> None:
        """In a forked child: drop the parent's open files without closing them (their decoder and converter
        threads do not exist here) and its locks (another thread may have held them at the fork)."""
        _abandoned.extend(self._files.values())
        self._files, self._lock = OrderedDict(), threading.Lock()

    # -- open files
    def _file(self, key: str, slot: int = 0) -> _File:
        """Container number ``slot`` of the file ``key`` (opened, and the least recently used closed, as
        needed); the caller holds no file lock."""
        with self._lock:
            f = self._files.get((key, slot))
            if f is not None:
                self._files.move_to_end((key, slot))
                return f
        self._trim_to(self.max_open - 1)
        f = self._open(key)
        with self._lock:
            other = self._files.setdefault((key, slot), f)
        if other is not f:  # another thread opened it meanwhile
            f.close()
        return other

    def _open(self, key: str) -> _File:
        import av

        try:
            return _File(key, self.opener(key), self.cache_frames)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{key}: video file not found") from None
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            if isinstance(exc, LeRobotZarrError):  # typed already (a store's file refused by the opener...)
                raise
            raise CorruptSourceError(f"{key}: cannot open the video ({type(exc).__name__}: {exc})") from None

    def close(self) -> None:
        """Close every open file (reopened on the next read)."""
        with self._lock:
            files, self._files = list(self._files.values()), OrderedDict()
        for f in files:
            with f.lock:
                f.close()

    def __enter__(self) -> Mp4Frames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Seeks and decoded frames so far over the files open now (for benchmarks and tests)."""
        with self._lock:
            files = list(self._files.values())
        return {"open": len(files), "seeks": sum(f.seeks for f in files), "decoded": sum(f.decoded for f in files)}

    # -- reads
    def read(self, file: str, times: Sequence[float] | np.ndarray, out: np.ndarray | None = None, *,
             where: str | None = None) -> np.ndarray:
        """The frames of ``file`` at ``times`` (seconds in the file, any order), as (n, H, W, C) uint8."""
        times = np.asarray(times, dtype=np.float64).reshape(-1)
        out = self._out(len(times), out)
        self._read_file(file, times, np.arange(len(times)), out, where or file)
        return out

    def read_many(self, files: Sequence[str], times: Sequence[float] | np.ndarray, out: np.ndarray | None = None, *,
                  threads: int | None = None) -> np.ndarray:
        """Frame k is ``files[k]`` at ``times[k]``; (n, H, W, C) uint8. Queries are grouped by file and sorted
        by time, files decoded in parallel (``threads``: the reader's, else the process's decode pool size)."""
        times = np.asarray(times, dtype=np.float64).reshape(-1)
        if len(files) != len(times):
            raise ValueError(f"{len(files)} files for {len(times)} timestamps")
        out = self._out(len(times), out)
        threads = threads if threads is not None else self.threads
        threads = decode_threads() if threads is None else max(1, threads)
        groups: dict[str, list[int]] = {}
        for k, f in enumerate(files):
            groups.setdefault(f, []).append(k)
        # a file's queries, in time order, are cut into one contiguous part per thread (of _MIN_PART queries at
        # least), each decoded by its own container of the file ("slot"): a batch whose windows all lie in one big
        # mp4 still uses every thread, and a single window stays in one container
        work: list[list[tuple[str, int, np.ndarray]]] = [[] for _ in range(threads)]
        turn = 0
        for key, members in groups.items():
            rows = np.asarray(members)
            rows = rows[np.argsort(times[rows], kind="stable")]
            parts = max(1, min(threads, len(rows) // _MIN_PART))
            for p in range(parts):
                work[(turn + p) % threads].append((key, p, rows[len(rows) * p // parts:len(rows) * (p + 1) // parts]))
            turn += parts

        work = [tasks for tasks in work if tasks]

        def run(lo: int, hi: int) -> None:
            for tasks in work[lo:hi]:
                for key, slot, rows in tasks:
                    self._read_file(key, times[rows], rows, out, key, slot)

        run_in_parallel(run, len(work), threads=threads)
        return out

    def _out(self, n: int, out: np.ndarray | None) -> np.ndarray:
        if out is None:
            return np.empty((n, *self.frame_shape), np.uint8)
        if out.shape != (n, *self.frame_shape) or out.dtype != np.uint8:
            raise ValueError(f"out must be uint8 of shape {(n, *self.frame_shape)}, got {out.dtype}{out.shape}")
        return out

    def _trim_to(self, limit: int) -> None:
        """Close least recently used files beyond ``limit`` that no thread is using."""
        with self._lock:
            for old in list(self._files):
                if len(self._files) <= limit:
                    break
                victim = self._files[old]
                if victim.lock.acquire(blocking=False):
                    try:
                        del self._files[old]
                        victim.close()
                    finally:
                        victim.lock.release()

    def _read_file(self, key: str, times: np.ndarray, rows: np.ndarray, out: np.ndarray, where: str,
                   slot: int = 0) -> None:
        try:
            self._read_open_file(key, times, rows, out, where, slot)
        finally:
            if len(self._files) > self.max_open:  # several threads held more files open than allowed
                self._trim_to(self.max_open)

    def _read_open_file(self, key: str, times: np.ndarray, rows: np.ndarray, out: np.ndarray, where: str,
                        slot: int) -> None:
        import av

        order = np.argsort(times, kind="stable")
        f = self._file(key, slot)
        with f.lock:
            try:
                for k in order.tolist():
                    out[rows[k]] = f.frame_at(float(times[k]), self.format, self.frame_shape, where)
            except (av.error.FFmpegError, OSError) as exc:
                f.run = None  # the decoder's state is unknown: seek on the next read
                raise CorruptSourceError(f"{where}: cannot decode ({type(exc).__name__}: {exc})") from None
            except BaseException:
                f.run = None
                raise
