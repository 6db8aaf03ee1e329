"""Camera frames decoded on read from the mp4 files a store keeps (the ``mp4`` camera storage), with PyAV.

:class:`Mp4Frames` serves the frames of one camera's mp4 files at given timestamps, with LeRobot's rule: each
timestamp gets the nearest decoded frame, which must lie within ``TOLERANCE_S`` (1e-4 s); the pixels are exactly
those :func:`lerobot_zarr.cameras.video.decode_into` writes (:func:`~lerobot_zarr.cameras.video.frame_pixels` of
PyAV's decode, as LeRobot's).

A frame of a video costs decoding it and every frame since the keyframe before it. Unlike LeRobot's per-sample
decode (open the file, seek, decode, close, every sample), a batch (:meth:`Mp4Frames.read_many`) is planned:

- its frames are grouped by file and sorted by time, and cut into runs by the file's keyframe index: a run is
  decoded in one pass from a seek to the keyframe before its first frame, and a new run starts only where frames
  nobody asked for lie before the next frame's keyframe (a seek skips them); each needed keyframe interval is
  decoded once per batch, only the frames asked for are converted, each straight into its row of the batch
  (:class:`~lerobot_zarr.cameras.frame_convert.FrameConverter`: PyAV's swscale, no frame allocated, no copy), a
  frame asked for twice at once copied from its first row;
- the runs, in (file, time) order, are handed out to the decoding threads as they come free, in pieces of
  decreasing decode cost cut between runs (no thread idles while another has work left, whatever the other
  tenants of the machine do to either thread); a thread decodes a piece through a container of the file no other
  thread is using (PyAV releases the GIL while it decodes);
- seeks go by presentation time; a decoder that holds a frame back until fed the next packet (h264 with B-frames
  allowed, as LeRobot encodes it) is drained once a run's frames are fed, rather than fed the next keyframe; an
  open GOP's keyframe (HEVC), whose leading frames a decoder starting there drops, is passed for the one before;
- the batch lands in memory a dropped batch left (:func:`lerobot_zarr.utils.buffers.recycled_empty`);
- containers stay open across batches, with their decoder's position and their last decoded frames (so ``ds[i]``
  then ``ds[i + 1]`` and sequential reads decode each frame once), in a cache bounded in count (``max_open``) and
  in memory (``max_bytes``: the frames kept plus an estimate of each decoder's), least recently used closed first,
  all closed by :meth:`Mp4Frames.close` or when the reader is dropped. A forked child (a DataLoader worker) drops
  the parent's containers without closing them (their decoder threads do not exist in the child) and opens its
  own; a pickled reader carries its settings only.

The keyframe index is the container's (PyAV >= 16: ``index_entries``, no read needed); with an older PyAV
(LeRobot 0.6.1 pins PyAV 15) it is made once per file and reader by reading the file's packets, without decoding.

Timestamps are seconds in the file: an episode's ``from_timestamp`` plus the frame's ``timestamp``.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import math
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np

from ..errors import CorruptSourceError, LeRobotZarrError, SchemaMismatchError, SourceNotFoundError, import_optional
from ..utils.buffers import recycled_empty
from .depth import DEPTH_PIX_FMT
from .frame_codecs import decode_threads, run_in_parallel
from .frame_convert import FrameConverter
from .video import PIXEL_FORMATS, TOLERANCE_S

__all__ = ["Mp4Frames"]

# the plan's cost of decoding a keyframe, in frames: an intra frame of LeRobot's AV1 (crf 30) costs ~10 inter
# frames to decode, of its h264 ~3; only the balance of threads depends on it
_KEY_WEIGHT = 4
# frames an open decoder may hold besides those the reader keeps (AV1 keeps up to 8 references): the memory bound
_DECODER_FRAMES = 8
_MAX_INDEXES = 4096  # keyframe indexes kept per reader (two floats per frame), least recently used dropped
# decoders (PyAV's names) of the codecs LeRobot writes whose packets in mp4 FFmpeg parses for their headers only
# (the packets demuxed are the same with or without the parser): their containers demux without it
_UNPARSED = frozenset({"h264", "libdav1d", "libaom-av1", "av1", "hevc"})
_NO_PARSE = 0x20  # AVFMT_FLAG_NOPARSE
_abandoned: list[Any] = []  # containers of a parent process, kept alive (never closed) in its forked children
_readers: weakref.WeakSet[Mp4Frames] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for reader in list(_readers):
        reader._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _as_path(key: str) -> str:
    return key


def _close_all(files: dict) -> None:
    for f in list(files.values()):
        f.close()
    files.clear()


class _Index:
    """Where a file's frames and keyframes are, in presentation time: the keyframes' seek positions (``key_pts``,
    stream time base) and times (s), and every frame's time (s), sorted. From the container's sample index, or a
    read of the stream's packets where PyAV gives none (PyAV < 16). Both give decode times (mp4's index): a stream
    whose decoder reorders frames (h264 with B-frames allowed, as LeRobot's) presents each frame a constant delay
    later, which the first packet tells (its pts - dts); seeks go by presentation time."""

    def __init__(self, entries: list[tuple[int, bool]], delay: int, tb: Any):
        self.key_pts = sorted(ts + delay for ts, key in entries if key)
        self.keyframes = [float(ts * tb) for ts in self.key_pts]
        self.entry_times = sorted(float((ts + delay) * tb) for ts, _ in entries)
        self.key_array, self.entry_array = np.asarray(self.keyframes), np.asarray(self.entry_times)

    @classmethod
    def of(cls, container: Any, stream: Any) -> _Index:
        """The index of ``stream``: the container's (reading its first packet for the delay), else a scan."""
        index = getattr(stream, "index_entries", None)
        if index is None:
            return cls.scan(container, stream)
        first = next((p for p in container.demux(stream) if p.pts is not None and p.dts is not None), None)
        return cls([(int(e.timestamp), bool(e.is_keyframe)) for e in index],
                   first.pts - first.dts if first is not None else 0, stream.time_base)

    @classmethod
    def scan(cls, container: Any, stream: Any) -> _Index:
        """The index of ``stream`` from a read of all its packets (no decoding)."""
        entries, delay = [], None
        for packet in container.demux(stream):
            if delay is None and packet.pts is not None and packet.dts is not None:
                delay = packet.pts - packet.dts
            ts = packet.dts if packet.dts is not None else packet.pts
            if packet.size and ts is not None:
                entries.append((int(ts), bool(packet.is_keyframe)))
        return cls(entries, delay or 0, stream.time_base)

    def presented_at(self, k: int, t: float) -> None:
        """Keyframe ``k`` turned out to be shown at ``t``, later than the index said (an open GOP's keyframe is
        shown after its leading frames, which come after it in decode order)."""
        if t > self.keyframes[k] and (k + 1 == len(self.keyframes) or t < self.keyframes[k + 1]):
            self.keyframes[k] = self.key_array[k] = t

    def key_before(self, q: float) -> int:
        """The last keyframe at or before ``q`` (+ tolerance), -1 if none."""
        return bisect.bisect_right(self.keyframes, q + TOLERANCE_S) - 1

    def frames_in(self, lo: float, hi: float) -> int:
        """Frames from time ``lo`` to ``hi``, both included (with the tolerance)."""
        return bisect.bisect_right(self.entry_times, hi + TOLERANCE_S) - \
            bisect.bisect_left(self.entry_times, lo - TOLERANCE_S)

    def skips(self, last: float, q: float) -> bool:
        """Whether a seek to the keyframe of ``q`` skips decoding, from a decoder whose last frame is at ``last``:
        that keyframe comes after ``last``, with frames between. Without keyframes: whether ``q`` is over a second
        later."""
        if not self.keyframes:
            return q - last > 1.0
        k = self.key_before(q)
        return k >= 0 and self.keyframes[k] > last + TOLERANCE_S and \
            self.frames_in(last, self.keyframes[k]) > 2

    def runs(self, times: np.ndarray) -> list[tuple[int, int, float]]:
        """Cut query times (sorted) into runs ``(start, stop, cost)``, each decoded in one pass from a seek to the
        keyframe before its first query: a query starts a new run when frames lie between the previous query's
        frame and its own keyframe (as :meth:`_File.frame_at` seeks). ``cost``: frames decoded, a keyframe
        counting ``_KEY_WEIGHT``. Without keyframes, one run per query over a second after the previous."""
        n = len(times)
        if not n:
            return []
        if not self.keyframes:
            bounds = [0, *(np.flatnonzero(np.diff(times) > 1.0) + 1).tolist(), n]
            return [(a, b, float(b - a)) for a, b in itertools.pairwise(bounds)]
        times = times + TOLERANCE_S
        k = np.maximum(np.searchsorted(self.key_array, times, "right") - 1, 0)
        upto = np.searchsorted(self.entry_array, times, "right")  # frames up to each query's
        start = np.searchsorted(self.entry_array, self.key_array[k] - TOLERANCE_S, "left")  # its keyframe's frame
        bounds = [0, *(np.flatnonzero((k[1:] != k[:-1]) & (start[1:] > upto[:-1])) + 1).tolist(), n]
        return [(a, b, float(max(1, upto[b - 1] - start[a]) + (_KEY_WEIGHT - 1) * (k[b - 1] - k[a] + 1)))
                for a, b in itertools.pairwise(bounds)]


class _Work:
    """A batch's runs handed out to decoding threads as they come free (no thread idles while another has work
    left): the runs of every file (``(file, rows in time order, runs)``), in that order, taken in pieces of
    decreasing cost (guided: a piece costs about the cost left over twice the threads, at least a thirty-second of
    the batch), each a list of ``(file, rows, after)``: ``after``, the time of the file's next row after the piece
    (None: its last), which decides how the piece's pass ends. A piece is cut between runs only, so no keyframe
    interval is decoded twice."""

    def __init__(self, files: list[tuple[str, np.ndarray, list[tuple[int, int, float]]]], times: np.ndarray,
                 threads: int):
        self.files, self.times, self.threads = files, times, threads
        self.left = sum(cost for _, _, runs in files for *_, cost in runs)
        self.least = self.left / 32
        self.lock = threading.Lock()
        self.file = self.run = 0  # the next run: run ``self.run`` of file ``self.file``
        self.stopped = False

    def stop(self) -> None:
        """Hand out nothing more (a thread failed: the batch fails)."""
        self.stopped = True

    def take(self) -> list[tuple[str, np.ndarray, float | None]]:
        """The next piece, empty once every run was handed out."""
        with self.lock:
            piece: list[tuple[str, np.ndarray, float | None]] = []
            target, got = max(self.left / (2 * self.threads), self.least), 0.0
            while not self.stopped and self.file < len(self.files) and got < target:
                key, rows, runs = self.files[self.file]
                first = runs[self.run][0]
                while self.run < len(runs) and got < target:
                    got += runs[self.run][2]
                    self.run += 1
                stop = runs[self.run - 1][1]
                after = float(self.times[rows[stop]]) if stop < len(rows) else None
                piece.append((key, rows[first:stop], after))
                if self.run == len(runs):
                    self.file, self.run = self.file + 1, 0
            self.left -= got
            return piece


class _Run:
    """Decoded frames of one file, consecutive in time from a seek on, the decoder standing after the last."""

    def __init__(self, limit: int):
        self.times: list[float] = []
        self.frames: list[Any] = []  # av.VideoFrame
        self.limit = limit
        self.ended = False  # the decoder reached the end of the stream
        self.drained = False  # the decoder gave all it held before the end: a seek comes next

    def append(self, t: float, frame: Any) -> None:
        self.times.append(t)
        self.frames.append(frame)
        if len(self.times) > self.limit:
            del self.times[0], self.frames[0]


class _File:
    """An open container of one mp4 file, its decoder's position and its decoded-frame run."""

    def __init__(self, key: str, source: str | BinaryIO, cache_frames: int, index: _Index | None, fmt: str):
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
        self.stream.codec_context.thread_count = 1  # runs of a few frames: one thread is fastest (no frame delay)
        if self.stream.codec_context.name in _UNPARSED:
            # FFmpeg runs a codec's parser on the packets mp4 demuxes, which only reads their headers here, and
            # starts it anew on every seek (~13 µs a seek, ~2 µs a packet): the packets are the same without it
            self.container.flags |= _NO_PARSE
        # PyAV's to_ndarray converts with a thread-local swscale context using a pool of threads, which a forked
        # child inherits without its threads (and hangs in): convert with this file's own one-thread context
        # (the same pixels, and faster per frame), straight into the batch where it gives PyAV's bytes
        self.converter = FrameConverter(fmt, av.video.reformatter.VideoReformatter())
        self.tb = self.stream.time_base
        self._tb_num, self._tb_den = self.tb.numerator, self.tb.denominator
        try:
            self.index = index or _Index.of(self.container, self.stream)
        except BaseException:
            self.container.close()
            raise
        self.codec = self.stream.codec_context
        self.cache_frames = cache_frames
        self.run: _Run | None = None
        self.packets: Any = None
        self.fed: list[float] = []  # presentation times of the packets fed since the last seek, sorted
        self.seeks = 0
        self.decoded = 0  # packets fed to the decoder
        self.closed = False

    def close(self) -> None:
        self.run, self.packets, self.closed = None, None, True
        self.container.close()
        self.converter.close()

    # -- decoding
    def _seek(self, q: float, then: float | None) -> None:
        """Start a new run at the last keyframe at or before ``q`` (+ tolerance) per the index. A keyframe whose
        first frame comes after ``q`` (an open GOP's: its leading frames precede it and a decoder starting there
        drops them; the index put it earlier) is learned and passed for the one before; before the first
        keyframe, at the keyframe before ``q - TOLERANCE_S`` by time, as decode_into seeks."""
        index = self.index
        k = index.key_before(q)
        while k >= 0:
            if not self._seek_to(index.key_pts[k], q, then):
                break
            first = self.run.times[0]  # type: ignore[union-attr]
            if first <= q + TOLERANCE_S:
                return
            index.presented_at(k, first)
            k -= 1
        self._seek_to(max(0, int((q - TOLERANCE_S) / self.tb)), q, then)

    def _seek_to(self, pts: int, q: float, then: float | None) -> bool:
        """Seek backward to a keyframe at or before ``pts`` (the decoder is flushed) and decode its first frame
        (:meth:`_next`); False at the end."""
        self.container.seek(pts, stream=self.stream, backward=True, any_frame=False)
        self.packets = self.container.demux(self.stream)
        self.fed = []
        self.run = _Run(self.cache_frames)
        self.seeks += 1
        return self._next(q, self._drain_rule(q, then))

    def _drain_rule(self, q: float, then: float | None) -> bool | None:
        """How :meth:`_next` ends a read of ``q`` followed by one of ``then`` (None: the pass ends at ``q``): drain
        the decoder (True) when reaching ``then`` needs a seek anyway, never (False) when it does not, and at the
        end of the pass (None) when the next packet is a keyframe."""
        return None if then is None else self.index.skips(q, then)

    def _next(self, q: float | None = None, drain: bool | None = False) -> bool:
        """Decode on until the decoder gives frames (into the run); False once it gives no more (the end of the
        stream, or drained). Packets are fed in order, but a decoder that reorders (h264's) holds a frame back
        until it is fed the next packet (at LeRobot's g=2, often a keyframe): once every frame up to ``q`` was
        fed, it is drained instead per ``drain`` (:meth:`_drain_rule`: when the next time this pass reads needs a
        seek, or, at the end of the pass, when the next packet is a keyframe: a cheaper one is fed, the next read
        may go on from here); the frames after ``q`` it gives are dropped (those between them were never fed)."""
        run = self.run
        assert run is not None
        codec, fed = self.codec, self.fed
        while not (run.ended or run.drained):
            packet = next(self.packets, None)
            if packet is None or not packet.size:  # the end of the stream (a flush packet)
                frames = codec.decode(None)
                run.ended = True
            elif q is not None and (drain if drain is not None else packet.is_keyframe) and self._fed_up_to(q):
                run.drained = True
                frames = [f for f in codec.decode(None) if f.pts is None or self._time(f.pts) <= q + TOLERANCE_S]
            else:
                if packet.pts is not None:
                    bisect.insort(fed, self._time(packet.pts))  # near the end: decode order is almost time's
                frames = codec.decode(packet)
                self.decoded += 1
            for frame in frames:
                self._add(frame)
            if frames:
                return True
        return False

    def _time(self, pts: int) -> float:
        """Seconds of a timestamp of the stream, as PyAV's ``frame.time`` (frames a drain gives have no time base
        in PyAV < 16)."""
        return float(pts) * self._tb_num / self._tb_den

    def _fed_up_to(self, q: float) -> bool:
        """Whether every frame from the run's first to ``q`` was fed to the decoder (per the index)."""
        if not self.fed or not self.index.entry_times:
            return False
        fed = bisect.bisect_right(self.fed, q + TOLERANCE_S)  # not a scan: a sequential read feeds a whole file
        return fed > 0 and fed == self.index.frames_in(self.fed[0], q)

    def _add(self, frame: Any) -> None:
        run = self.run
        assert run is not None
        pts = frame.pts
        if pts is None:
            raise CorruptSourceError(f"{self.key}: decoded a frame without a timestamp")
        t = self._time(pts)
        if run.times and t <= run.times[-1]:
            raise CorruptSourceError(f"{self.key}: decoded frames out of time order ({run.times[-1]:.6f} s then "
                                     f"{t:.6f} s)")
        run.append(t, frame)

    def _must_seek(self, q: float) -> bool:
        """Whether reaching ``q`` needs a seek: it lies before the run, after a drained one, or a keyframe past
        the run's end (with frames between) comes before it, so that seeking skips decoding."""
        run = self.run
        if run is None or not run.times or q < run.times[0]:
            return True
        last = run.times[-1]
        if q <= last or run.ended:
            return False
        return run.drained or self.index.skips(last, q)

    def _settled(self, q: float) -> bool:
        """Whether the run's last frame, a hair before ``q``, is already the one to pick: within the tolerance
        of ``q`` and, per the index, nearer than the next frame. Stored timestamps (float32 in LeRobot's parquet)
        often lie a few ns after their frame's: without this, every such query decoded the next frame too.
        Without an index, never (decode on)."""
        run, entries = self.run, self.index.entry_times
        if not run or not run.times or not entries or not 0 <= q - run.times[-1] < TOLERANCE_S:
            return False
        last = run.times[-1]
        j = bisect.bisect_right(entries, last + TOLERANCE_S / 2)
        return j == len(entries) or entries[j] - q > q - last

    def _nearest(self, q: float, then: float | None) -> int:
        """Decode (seeking if needed) until the run holds the frames around ``q``; the nearer of the last frame
        before ``q`` and the first at or after it (that one on a tie), -1 if none was decoded."""
        if self._must_seek(q):
            self._seek(q, then)
        run = self.run
        assert run is not None
        times = run.times
        if not times or times[-1] < q:
            drain = self._drain_rule(q, then)
            while (not times or times[-1] < q) and not self._settled(q) and self._next(q, drain):
                pass
        j = bisect.bisect_left(run.times, q)  # first frame at or after q (len: none, past the last frame)
        if j == len(run.times):
            return j - 1
        if j > 0 and abs(run.times[j - 1] - q) < abs(run.times[j] - q):
            j -= 1
        return j

    def frame_at(self, q: float, where: str, then: float | None = None) -> Any:
        """The frame decode_into gives for timestamp ``q`` (an ``av.VideoFrame``): the nearest decoded frame,
        within ``TOLERANCE_S``. ``then``: the next (later) timestamp this pass reads, if any."""
        j = self._nearest(q, then)
        if (j < 0 or abs(self.run.times[j] - q) >= TOLERANCE_S) and self.run.drained:  # type: ignore[union-attr]
            self.run = None  # drained early on a wrong index: decode again without draining before q
            j = self._nearest(q, q)
        run = self.run
        assert run is not None
        if j < 0:
            raise CorruptSourceError(f"{where}: no frame decoded at or after {q:.6f} s")
        t = run.times[j]
        if abs(t - q) >= TOLERANCE_S:
            raise CorruptSourceError(f"{where}: no frame within {TOLERANCE_S} s of timestamp {q:.6f} s (nearest "
                                     f"decoded frame at {t:.6f} s)")
        return run.frames[j]

    def convert_into(self, frame: Any, dst: np.ndarray, where: str) -> None:
        """The pixels of a decoded ``frame`` into ``dst`` (a row of the batch), as ``frame_pixels`` gives them."""
        if (frame.height, frame.width) != dst.shape[:2]:
            raise SchemaMismatchError(f"{where}: decoded frames of shape {(frame.height, frame.width, dst.shape[2])}, "
                                      f"the dataset declares {dst.shape}")
        self.converter.convert_into(frame, dst)


class Mp4Frames:
    """Frames of one camera, decoded from its mp4 files on demand (see the module docstring).

    ``opener(file)`` gives a path or a binary file object for a file key (default: the key is a path). At most
    ``max_open`` containers are open at once and, per container, the last ``cache_frames`` decoded frames kept,
    both lowered as needed to hold the frames kept plus an estimate of each decoder's own within ``max_bytes``
    (at least one container and two frames each). ``threads``: decoding threads of a batch (default: the
    process's decode pool size, ``LEROBOT_ZARR_DECODE_THREADS`` or the CPUs). ``depth``: a depth camera (one
    channel), its frames LeRobot's 12-bit codes as uint16 (``gray12le``, as its decoder asks), else uint8.
    """

    def __init__(self, frame_shape: Sequence[int], *, opener: Callable[[str], str | BinaryIO] | None = None,
                 max_open: int = 16, cache_frames: int = 16, max_bytes: int = 256 << 20, threads: int | None = None,
                 depth: bool = False):
        shape = tuple(int(s) for s in frame_shape)
        if len(shape) != 3 or shape[2] not in PIXEL_FORMATS or (depth and shape[2] != 1):
            raise ValueError(f"frames must be (height, width, 1, 3 or 4 channels; 1 for depth), got {frame_shape}")
        if max_open < 1 or cache_frames < 2 or max_bytes < 1:
            raise ValueError(f"max_open and max_bytes must be >= 1 and cache_frames >= 2, got {max_open}, "
                             f"{max_bytes}, {cache_frames}")
        self.frame_shape: tuple[int, int, int] = shape  # type: ignore[assignment]
        self.format = DEPTH_PIX_FMT if depth else PIXEL_FORMATS[shape[2]]
        self.dtype = np.dtype(np.uint16 if depth else np.uint8)
        self.opener = opener or _as_path
        self.threads = threads
        frame_bytes = math.prod(shape) * self.dtype.itemsize
        while cache_frames > 2 and max_bytes // ((_DECODER_FRAMES + cache_frames) * frame_bytes) < 2:
            cache_frames = max(2, cache_frames // 2)
        self.cache_frames = cache_frames
        self.max_open = max(1, min(max_open, max_bytes // ((_DECODER_FRAMES + cache_frames) * frame_bytes)))
        self._closed_counts = [0, 0]  # seeks and decoded frames of the files closed since
        self._start()

    def _start(self) -> None:
        self._files: OrderedDict[tuple[str, int], _File] = OrderedDict()
        self._indexes: OrderedDict[str, _Index] = OrderedDict()
        self._lock = threading.Lock()
        # a container is only freed by the garbage collector (PyAV's streams and container refer to each other):
        # a reader dropped without close() closes its files at once
        self._finalizer = weakref.finalize(self, _close_all, self._files)
        _readers.add(self)

    def __getstate__(self) -> dict[str, Any]:  # pickles as its settings: open files stay in their process
        state = self.__dict__.copy()
        for name in ("_files", "_indexes", "_lock", "_finalizer"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start()

    def _forget(self) -> None:
        """In a forked child: drop the parent's open files without closing them (their decoder and converter
        threads do not exist here) and its locks (another thread may have held them at the fork)."""
        _abandoned.extend(self._files.values())
        self._files.clear()
        self._lock = threading.Lock()

    # -- open files
    def _file(self, key: str, slot: int = 0) -> _File:
        """Container number ``slot`` of the file ``key`` (opened, and the least recently used closed, as
        needed); the caller holds no file lock."""
        with self._lock:
            f = self._files.get((key, slot))
            if f is not None:
                self._files.move_to_end((key, slot))
                return f
            index = self._indexes.get(key)
        self._trim_to(self.max_open - 1)
        f = self._open(key, index)
        with self._lock:
            other = self._files.setdefault((key, slot), f)
            self._indexes[key] = f.index
            self._indexes.move_to_end(key)
            while len(self._indexes) > _MAX_INDEXES:
                self._indexes.popitem(last=False)
        if other is not f:  # another thread opened it meanwhile
            f.close()
        return other

    @contextlib.contextmanager
    def _using(self, key: str, slot: int) -> Iterator[_File]:
        """Container ``slot`` of ``key`` with its lock held. Another thread's trim may close a file between
        :meth:`_file` handing it out and its lock being taken (it is not in use yet): a closed one is opened anew."""
        while True:
            f = self._file(key, slot)
            with f.lock:
                if not f.closed:
                    yield f
                    return

    def _open(self, key: str, index: _Index | None) -> _File:
        import av

        try:
            return _File(key, self.opener(key), self.cache_frames, index, self.format)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{key}: video file not found") from None
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            if isinstance(exc, LeRobotZarrError):  # typed already (a store's file refused by the opener...)
                raise
            raise CorruptSourceError(f"{key}: cannot open the video ({type(exc).__name__}: {exc})") from None

    def _index(self, key: str) -> _Index:
        with self._lock:
            index = self._indexes.get(key)
        return index if index is not None else self._file(key).index

    def close(self) -> None:
        """Close every open file (reopened on the next read)."""
        with self._lock:
            files = list(self._files.values())
            self._files.clear()
        for f in files:
            with f.lock:
                self._close_file(f)

    def _close_file(self, f: _File) -> None:
        self._closed_counts[0] += f.seeks
        self._closed_counts[1] += f.decoded
        f.close()

    def __enter__(self) -> Mp4Frames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Open containers now, seeks and decoded frames so far (for benchmarks and tests)."""
        with self._lock:
            files = list(self._files.values())
        return {"open": len(files), "seeks": self._closed_counts[0] + sum(f.seeks for f in files),
                "decoded": self._closed_counts[1] + sum(f.decoded for f in files)}

    # -- reads
    def read(self, file: str, times: Sequence[float] | np.ndarray, out: np.ndarray | None = None, *,
             where: str | None = None) -> np.ndarray:
        """The frames of ``file`` at ``times`` (seconds in the file, any order), as (n, H, W, C) uint8 (a depth
        camera's: uint16)."""
        times = np.asarray(times, dtype=np.float64).reshape(-1)
        out = self._out(len(times), out)
        self._read_file(file, times, np.arange(len(times)), out, where or file)
        return out

    def read_many(self, files: Sequence[str], times: Sequence[float] | np.ndarray, out: np.ndarray | None = None, *,
                  threads: int | None = None) -> np.ndarray:
        """Frame k is ``files[k]`` at ``times[k]``; (n, H, W, C) uint8 (depth: uint16). Planned by file and
        keyframe interval and decoded in parallel (see the module docstring; ``threads``: the reader's by default)."""
        times = np.asarray(times, dtype=np.float64).reshape(-1)
        if len(files) != len(times):
            raise ValueError(f"{len(files)} files for {len(times)} timestamps")
        out = self._out(len(times), out)
        threads = threads if threads is not None else self.threads
        threads = min(self.max_open, decode_threads() if threads is None else max(1, threads))
        groups: dict[str, list[int]] = {}
        for k, f in enumerate(files):
            groups.setdefault(f, []).append(k)
        if threads == 1 or len(times) < 2:
            for key, members in groups.items():
                self._read_file(key, times[members], np.asarray(members), out, key)
            return out
        plan = []
        for key, members in groups.items():
            rows = np.asarray(members)
            rows = rows[np.argsort(times[rows], kind="stable")]
            plan.append((key, rows, self._index(key).runs(times[rows])))
        threads = min(threads, sum(len(runs) for _, _, runs in plan))
        work = _Work(plan, times, threads)

        def run(lo: int, hi: int) -> None:
            try:
                while piece := work.take():
                    for key, rows, after in piece:
                        self._read_file(key, times[rows], rows, out, key, None, after)
            except BaseException:
                work.stop()
                raise

        run_in_parallel(run, threads, threads=threads)
        return out

    def _out(self, n: int, out: np.ndarray | None) -> np.ndarray:
        if out is None:
            return recycled_empty((n, *self.frame_shape), self.dtype)
        if out.shape != (n, *self.frame_shape) or out.dtype != self.dtype:
            raise ValueError(f"out must be {self.dtype} of shape {(n, *self.frame_shape)}, got {out.dtype}{out.shape}")
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
                        self._close_file(victim)
                    finally:
                        victim.lock.release()

    def _read_file(self, key: str, times: np.ndarray, rows: np.ndarray, out: np.ndarray, where: str,
                   slot: int | None = 0, after: float | None = None) -> None:
        try:
            self._read_open_file(key, times, rows, out, where, slot, after)
        finally:
            if len(self._files) > self.max_open:  # several threads held more files open than allowed
                self._trim_to(self.max_open)

    @contextlib.contextmanager
    def _any_free(self, key: str) -> Iterator[_File]:
        """A container of ``key`` no other thread is using, its lock held: the first free one of those open,
        else a new one (container number ``len(open ones)``)."""
        slot = 0
        while True:
            f = self._file(key, slot)
            if f.lock.acquire(blocking=False):
                try:
                    if not f.closed:
                        yield f
                        return
                finally:
                    f.lock.release()
                continue  # closed by another thread's trim between _file and the lock: open it anew
            slot += 1

    def _read_open_file(self, key: str, times: np.ndarray, rows: np.ndarray, out: np.ndarray, where: str,
                        slot: int | None, after: float | None = None) -> None:
        """Frames of ``key`` at ``times`` into ``out[rows]``, through container ``slot`` (None: any free one);
        ``after``: the time the caller reads next in this file, if any (how the pass ends)."""
        import av

        order = np.argsort(times, kind="stable")
        sorted_times = times[order].tolist()
        # the next later timestamp after each: whether the decoder is to go on after a frame or be drained
        then: list[float | None] = [None] * len(order)
        if after is not None and sorted_times and after - sorted_times[-1] >= TOLERANCE_S:
            then[-1] = after
        for j in range(len(order) - 2, -1, -1):
            then[j] = sorted_times[j + 1] if sorted_times[j + 1] - sorted_times[j] >= TOLERANCE_S else then[j + 1]
        # each frame is converted straight into its row of ``out``; a frame read again at once is copied from
        # the row it went to
        previous, previous_row = None, 0
        with self._using(key, slot) if slot is not None else self._any_free(key) as f:
            frame_at, convert_into = f.frame_at, f.convert_into
            try:
                for q, q_then, row in zip(sorted_times, then, rows[order].tolist(), strict=True):
                    frame = frame_at(q, where, q_then)
                    if frame is previous:
                        out[row] = out[previous_row]
                    else:
                        convert_into(frame, out[row], where)
                    previous, previous_row = frame, row
            except (av.error.FFmpegError, OSError) as exc:
                f.run = None  # the decoder's state is unknown: seek on the next read
                raise CorruptSourceError(f"{where}: cannot decode ({type(exc).__name__}: {exc})") from None
            except BaseException:
                f.run = None
                raise
