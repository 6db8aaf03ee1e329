"""The recorder behind the drop-in's ``LeRobotDataset.create`` / ``resume``: LeRobot 0.6.1's ``writer`` (its
``DatasetWriter``'s public side) on a lerobot_zarr store.

:class:`Recorder` takes LeRobot's frames (:meth:`~Recorder.add_frame`: its checks, its conversions of camera frames)
into an episode buffer, and :meth:`~Recorder.save_episode` writes the episode to the store in ONE commit of
:class:`~lerobot_zarr.writing.writer.WritableDataset` (``add_episode``): once it returns, the episode is on disk
and any process can read it, whatever happens to this one; before, nothing of it is visible. Camera frames go to a
spill file in the store while the episode is recorded (written by a thread into the page cache: no encoding, no
compression, bounded memory; see :class:`_SpillWriter`), their numbers and text stay in memory. A killed recorder
leaves the spill as debris, removed by the next writer of the store (``.*.tmp-*``). Videos are encoded by a background
encoder process (:mod:`lerobot_zarr.writing.segments`, a thread per camera) from the spill as the episode is recorded
(kept as its segment once it is saved with those frames); ``save_episode`` waits for them (bounded) and writes LeRobot's
files of its commit beside the store (their videos joined from the segments without re-encoding), so that ``finalize``
only closes; the push joins the same segments.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..cameras.depth import is_depth_feature
from ..errors import FrameNotWrittenError
from ..lerobot.format import (
    CAMERA_DTYPES,
    DEFAULT_FEATURES,
    histogram_dtype,
    histogram_stats,
    image_histogram,
    sampled_histogram,
)
from ..utils.fileio import disk_error, pwrite_all
from ..utils.hashing import crc32c
from ..utils.libc import start_writeback
from ..writing.segments import SEGMENT_STORAGES, Gate
from ..writing.stream_encoding import progress_path
from .lerobot_encoders import Encoders
from .lerobot_frames import CameraFrameError, as_numpy, camera_frame, check_frame, depth_unit_of

__all__ = ["Recorder"]

logger = logging.getLogger(__name__)
SPILL_PREFIX = ".recording.tmp-"  # a name the store's next writer removes as debris (``.*.tmp-*``)
_WRITEBACK_BYTES = 4 << 20
SPILL_QUEUE_BYTES = 512 << 20  # camera frames add_frame may queue for the spill's writer before it waits
#: seconds ``save_episode`` waits for background encoders making no progress before it returns without the
#: episode's videos (logged; the episode is committed, its videos are made later: at the next save, or ``finalize``)
SAVE_TIMEOUT = 60.0
#: seconds ``add_frame`` waits (streaming) for an encoder making no progress before it stops waiting for it
KEEP_UP_TIMEOUT = 10.0
_KEEP_UP_POLL = 0.002
#: seconds by which frames come ahead of the fps, from which add_frame may wait for a streaming encoder: the frames
#: of the last second (from the episode's second frame: its first is often late, a camera's or a policy's first
#: call) given that much faster than the fps would space them; a camera's pace cannot (one frame given late makes
#: one look see the next second's frames ahead, not every look)
_AHEAD_S = 0.1
#: frames a streaming encoder may be behind frames given faster than real time (``encoder_queue_maxsize`` if fewer):
#: a ``save_episode`` then has little more than the encoder's flush to wait for, as LeRobot's (whose ``add_frame``
#: takes its encoders' pace then). Measured (3 cameras 480x640 as fast as it goes, LeRobot 0.6.1 beside): with 30,
#: save_episode 0.9 s; with 2, 0.30-0.36 s, total 1.07x LeRobot's; with 0, 0.23 s as LeRobot's but the encoders
#: then wait for frames: total 0.83x
_KEEP_UP_FRAMES = 2
#: ... and frames it may hold not yet encoded (an encoder takes frames faster than it encodes them: SVT-AV1 holds 13
#: when fed slowly, 22-49 as fast as they go, all to encode in save_episode). Measured as _KEEP_UP_FRAMES, with a
#: share (below) of 0.7, LeRobot's save_episode 0.21-0.24 s: with 24, save_episode 0.21-0.22 s but frames taken at
#: 42 fps at most (total 0.86-0.90x LeRobot's); 32, 0.22-0.24 s and 0.95-1.00x; without, 0.49-0.52 s and 1.10-1.12x
_KEEP_UP_ENCODED = 32
#: share of a frame's period (1 / fps) add_frame waits at most for streaming encoders within encoder_queue_maxsize
#: frames: frames are never taken slower than the fps while the encoders are no further behind. Measured (as
#: _KEEP_UP_FRAMES): 0.8, add_frame p99 35 ms (over 1/30 s) and frames taken at 37 fps at most, total 0.87-1.06x
#: LeRobot's; 0.7, p99 28-31 ms, total 1.00x, save_episode 0.21-0.22 s (LeRobot's 0.23 s)
_WAIT_SHARE = 0.7


class _Spill:
    """One camera's frames of the episode being recorded, appended to a file (read back as a memory map): a new
    file for each episode (``<name>.<attempt>``), never one emptied in place: a background encoder may still be
    reading the frames of the one before (an episode saved, or cleared)."""

    def __init__(self, folder: Path, name: str, frame_shape: tuple[int, ...], dtype: np.dtype, writeback: bool):
        self.folder, self.name, self.attempt = folder, name, 0
        self.frame_shape, self.dtype = tuple(frame_shape), np.dtype(dtype)
        # each frame's histogram (uint8 frames: their LeRobot stats, image_stats, at save_episode without reading
        # them again; made by the spill's writer thread, ~0.2 ms a 480x640 frame), in the smallest dtype holding its
        # counts (uint16 up to 65535 sampled pixels: 1.5 KB a 480x640 frame, 0.5 GB an hour at 30 fps x 3 cameras)
        self.histograms: list[np.ndarray] | None = [] if self.dtype == np.uint8 else None
        self.histogram_dtype = histogram_dtype(*self.frame_shape[:2]) if self.dtype == np.uint8 else None
        self.frame_bytes = int(np.prod(self.frame_shape)) * self.dtype.itemsize
        self.fd = self._open()
        self.frames = 0
        self.crc = 0  # CRC-32C of the frames written, from the bytes written: the store's content hash of them
        # a durable store flushes each episode at its commit: its frames start their way to disk as they come
        self.writeback, self.written_back = writeback, 0

    @property
    def path(self) -> Path:
        return self.folder / f"{self.name}.{self.attempt}"

    def _open(self) -> int:
        # the mode of a pack file: the spill becomes one (renamed) when its episode starts a new pack
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)

    def append(self, frame: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(frame, dtype=self.dtype)).cast("B")
        try:
            pwrite_all(self.fd, data, self.frames * self.frame_bytes, self.path)
        except OSError as exc:
            raise disk_error(exc, self.path) from None
        self.frames += 1
        self.crc = crc32c(data, self.crc)
        if self.histograms is not None:
            self.histograms.append(image_histogram(frame).astype(self.histogram_dtype))
        end = self.frames * self.frame_bytes
        if self.writeback and end - self.written_back >= _WRITEBACK_BYTES:
            start_writeback(self.fd, self.written_back, end - self.written_back)
            self.written_back = end

    def progress(self) -> tuple[int, int] | None:
        """The episode's frames its streaming encoder took so far, and those it gave back encoded (an encoder holds
        some back: SVT-AV1, 13); None: it did not start on them."""
        try:
            fd = os.open(progress_path(self.path), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            data = os.pread(fd, 16, 0)
        finally:
            os.close(fd)
        if len(data) != 16:
            return 0, 0
        return int.from_bytes(data[:8], "little"), int.from_bytes(data[8:], "little")

    def frames_map(self) -> np.ndarray:
        if not self.frames:
            return np.empty((0, *self.frame_shape), self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.frames, *self.frame_shape))

    def taken(self) -> bool:
        """Whether the store took the file as a pack (it is no longer at the spill's path)."""
        try:
            return os.stat(self.path).st_ino != os.fstat(self.fd).st_ino
        except FileNotFoundError:
            return True

    def clear(self) -> None:
        """Empty, as a new file: the store may have taken the old one as a pack (never truncated then); the old one,
        if not taken, is unlinked (its frames stay readable to an encoder that opened it)."""
        if not self.taken():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(progress_path(self.path))
        os.close(self.fd)
        self.attempt += 1
        self.fd = self._open()
        self.frames = self.written_back = self.crc = 0
        if self.histograms is not None:
            self.histograms = []

    def stats(self) -> dict[str, np.ndarray] | None:
        """LeRobot's stats of the frames (uint8: :func:`~lerobot_zarr.lerobot.format.image_stats`, from their
        histograms), None for other frames (a depth map's: from the store)."""
        if not self.histograms or len(self.histograms) != self.frames:
            return None
        return histogram_stats(*sampled_histogram(np.stack(self.histograms)))

    def close(self) -> None:
        os.close(self.fd)


class _SpillWriter:
    """Writes camera frames to their spills in a thread, as LeRobot's image writer threads write its PNGs:
    ``add_frame`` only queues a frame (bounded: at most ``max_bytes`` of frames wait, then it waits), so a disk
    busy writing back does not stall it. With LeRobot's asynchronous image writers asked for, the frame is the
    caller's array, held until written and not copied, as LeRobot's image writer holds it (else a copy): a copy
    (0.3 ms per 480x640 frame) made ``add_frame`` ~10x longer, so ~10x likelier to lose its CPU on a loaded machine,
    and let the writer take the GIL mid-call (numpy releases it while copying). Measured (3 cameras 480x640, 270
    frames taken as fast as it goes, load 25-30): p99 45 ms without the copy, 72-108 ms with it, 86-715 ms writing
    in ``add_frame`` (the disk's stalls then land in it). The bound is in bytes, :data:`SPILL_QUEUE_BYTES`: 256
    frames (one episode of 90 frames x 3 cameras did not fit) made frames given as fast as they go wait for the
    writer near each episode's end (``add_frame`` p99 1.5-5.4 ms, LeRobot's unbounded queue 0.3-0.7 ms).
    :meth:`drain` waits until every frame queued is written and raises the first error met (a full disk...)."""

    def __init__(self, max_bytes: int | None = None):
        self._queue: queue.Queue = queue.Queue()
        self._room = threading.Condition()
        self._queued, self._max = 0, SPILL_QUEUE_BYTES if max_bytes is None else max_bytes
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lerobot_zarr-spill", daemon=True)
        self._thread.start()

    def put(self, spill: _Spill, frame: np.ndarray) -> None:
        if self._error is not None:
            self.drain()
        with self._room:  # (a frame larger than the bound waits for the queue to be empty)
            while self._queued and self._queued + frame.nbytes > self._max:
                self._room.wait()
            self._queued += frame.nbytes
        self._queue.put((spill, frame))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    item[0].append(item[1])
            except BaseException as exc:  # reported by drain(), in the recording thread
                self._error = exc
            finally:
                if item is not None:
                    with self._room:
                        self._queued -= item[1].nbytes
                        self._room.notify_all()
                self._queue.task_done()

    def drain(self, *, errors: bool = True) -> None:
        """Wait for the frames queued; raise the first error met (dropped with ``errors=False``)."""
        self._queue.join()
        error, self._error = self._error, None
        if error is not None and errors:
            raise error

    def stop(self) -> None:
        """Let the thread end once the frames queued are written (not waited for). Never blocks: it may run in
        the thread itself (the recorder's weakref finalizer, called by a garbage collection there)."""
        self._queue.put_nowait(None)

    def close(self) -> None:
        self.stop()
        self._thread.join()


class Recorder:
    """LeRobot's ``writer`` of a drop-in dataset being recorded into the store ``store`` (a
    :class:`~lerobot_zarr.writing.writer.WritableDataset`, whose lock it holds until :meth:`finalize`).

    ``features`` is the dataset's ``meta.features`` (LeRobot's, declared shapes; a depth camera's ``info`` gains its
    unit from its first frame, as LeRobot's does). ``on_saved`` is called after each commit (the drop-in refreshes
    its ``meta``). A store with video cameras gets background encoders (one process, a thread per camera,
    :class:`~lerobot_zarr.writing.segments.BackgroundEncoder`, ``encoder_threads``), started at the recording's
    first frame: with ``batch_encoding_size`` 1 (the default) and ``streaming_encoding``, they encode each episode
    as it is recorded (from its spill), the segment kept once it is saved; with ``batch_encoding_size`` N > 1, the
    saved episodes each time N were saved, where LeRobot encodes them. ``save_episode`` waits for them where
    LeRobot encodes (each episode, or each batch's last) and exports the commit beside the store, so that
    :meth:`finalize` then only closes; ``add_frame`` waits for them only with ``streaming_encoding`` and frames
    coming faster than the fps (:meth:`_keep_up`).
    """

    image_writer = None  # LeRobot's asynchronous PNG writer: none, frames are not encoded

    def __init__(self, store: Any, features: dict[str, dict], *, on_saved: Callable[[], None],
                 streaming_encoding: bool = False, batch_encoding_size: int = 1, encoder_threads: int | None = None,
                 hold_frames: bool = False, encoder_queue_maxsize: int = 30):
        self._store = store
        self._features = features
        self._on_saved = on_saved
        self._batch_encoding_size = batch_encoding_size
        self._hold_frames = hold_frames  # LeRobot's asynchronous image writers asked for: the caller's array held
        specs = store.reader.array_specs
        self._cameras = [k for k, ft in features.items() if ft["dtype"] in CAMERA_DTYPES and k in specs]
        # (named as the store's root is, relative or not: its files are checked to be inside it by their path)
        self._folder = Path(store.root) / Path(tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=store.root)).name
        video = [k for k in self._cameras if specs[k].kind == "video" and specs[k].storage in SEGMENT_STORAGES]
        self._encoder = Encoders(store.root, video, encoder_threads, Gate(self._folder / "gate")) if video else None
        self._episodes_since_last_encoding = 0  # LeRobot's name: saved episodes the encoder was not told of yet
        self._every = 1 if streaming_encoding else batch_encoding_size
        self._streamed = False  # the episode in progress is encoded as it is recorded (each episode encoded at once)
        # LeRobot's (its VideoEncodingManager cancels it when recording fails)
        self._streaming_encoder = self._encoder if streaming_encoding else None
        self._streamable = [k for k in video if specs[k].storage == "raw"]  # those it encodes as they come
        self._spills: dict[str, _Spill] = {}
        self._values: dict[str, list] = {}
        self._tasks: list[str] = []
        self._refused: list[str] = []  # camera frames LeRobot's image writer would have failed on, why
        self._writer = _SpillWriter()
        self._beside = _Beside(store.root)
        self._hint_kept_stats()
        self._queue_frames = encoder_queue_maxsize  # frames the streaming encoders may lag behind add_frame
        self._all_encoded = False  # every saved episode has its segments (the last save_episode waited for them)
        self._unpaced = False  # add_frame stopped waiting for a stalled streaming encoder (this episode)
        self._fps = float(store.meta.fps)
        self._given: collections.deque = collections.deque(maxlen=max(2, round(self._fps) + 1))  # add_frame's times
        # dropped without finalize: its threads stop and its encoder processes finish the saved episodes and exit
        weakref.finalize(self, _release, self._writer, self._encoder)
        self._finalized = False

    def _hint_kept_stats(self) -> None:
        """A resumed recording: its cameras' stats of the episodes saved before, as the store keeps them, given to
        the first export beside the store, which then reads none of their frames back (as each episode saved here
        gives its own, from its frames' histograms)."""
        episodes = self._store.meta.total_episodes
        if not episodes or not self._cameras:
            return
        rows = self._store.episode_stats()
        for e in range(episodes):
            self._beside.cache.hint(e, {k: {name: v[e] for name, v in rows[k].items()}
                                        for k in self._cameras if k in rows})

    # -- LeRobot's episode buffer ------------------------------------------------------------------------------
    @property
    def episode_buffer(self) -> dict[str, Any]:
        """LeRobot's view of the episode being recorded: ``size``, ``task`` (one per frame), ``episode_index`` and
        each feature's frames so far (cameras as arrays of their stored frames, not image file paths)."""
        self._writer.drain()
        out: dict[str, Any] = {"size": len(self._tasks), "task": list(self._tasks),
                               "episode_index": self._store.meta.total_episodes}
        for key in self._features:
            if key in self._spills:
                out[key] = list(self._spills[key].frames_map())
            elif key not in DEFAULT_FEATURES:
                out[key] = list(self._values.get(key, []))
        return out

    def store_reader(self) -> Any:
        """The store's reader (a LeRobotZarrDataset that follows every commit of this recorder)."""
        return self._store.reader

    @property
    def pending_frames(self) -> int:
        return len(self._tasks)

    # -- recording -----------------------------------------------------------------------------------------------
    def add_frame(self, frame: dict) -> None:
        """One frame of the episode being recorded, checked as LeRobot checks it (``ValueError``: keys, dtypes,
        shapes). A camera frame LeRobot's image writer could not write (floats outside [0, 1], a wrong channel
        count...) is logged as LeRobot logs it, and :meth:`save_episode` then refuses the episode
        (:class:`~lerobot_zarr.errors.FrameNotWrittenError`, a ``FileNotFoundError`` as LeRobot's). A camera frame
        is copied, or, when the recording was made with LeRobot's asynchronous image writers
        (``image_writer_threads``/``_processes`` > 0), held until written as they hold it: the caller then does not
        write into that array afterwards (a camera read gives a new one)."""
        self._check_open()
        if not isinstance(frame, Mapping):
            raise TypeError(f"a frame is a dict {{feature: value, 'task': str}}, got {type(frame).__name__}")
        frame = {key: as_numpy(value) for key, value in frame.items()}
        check_frame(frame, self._features)
        index = len(self._tasks)
        if index == 0:
            self._learn_depth_units(frame)
            if self._encoder is not None:
                self._encoder.start()
        specs = self._store.reader.array_specs
        for key, value in frame.items():
            if key == "task":
                continue
            ft = self._features[key]
            if key in self._cameras:
                spec = specs[key]
                try:
                    stored = camera_frame(value, ft, spec.frame_shape, spec.dtype)
                except (CameraFrameError, TypeError) as exc:
                    logger.error("Error writing image %s: %s", f"{key} frame {index}", exc)
                    self._refused.append(f"{key!r} frame {index}: {exc}")
                    stored = np.zeros(spec.frame_shape, spec.dtype)
                if not self._hold_frames and np.may_share_memory(stored, value):
                    stored = stored.copy()  # LeRobot without image writers writes it at once: later changes are not in
                self._writer.put(self._spill(key, spec), stored)
            elif ft["dtype"] == "language":
                self._values.setdefault(key, []).append(None)  # LeRobot drops them: written by its annotator
            elif ft["dtype"] == "string":
                self._values.setdefault(key, []).append(value)
            else:
                self._values.setdefault(key, []).append(np.array(value, copy=True))
        self._tasks.append(frame["task"])
        if index == 0 and self._encoder is not None and self._every == 1:
            self._encoder.stream({key: self._spills[key].path for key in self._encoder.cameras if key in self._spills})
            self._streamed = True
        if self._streaming_encoder is not None and self._streamed and not self._unpaced:
            if index == 0:
                self._given.clear()
            else:
                now = time.monotonic()
                self._given.append(now)
                if (len(self._given) - 1) / self._fps - (now - self._given[0]) > _AHEAD_S:
                    self._keep_up(index + 1)

    def _keep_up(self, frames: int) -> None:
        """``streaming_encoding``'s backpressure, as LeRobot's encoder queue (``encoder_queue_maxsize`` frames)
        gives it, for frames coming faster than the dataset's fps (a replay, a conversion: more than
        :data:`_AHEAD_S` s ahead of it over the last second; never at a camera's pace, where ``add_frame`` does
        not wait): wait while a camera's encoder, streaming the episode, has taken more than
        :data:`_KEEP_UP_FRAMES` frames fewer than the ``frames`` added, or holds more than
        :data:`_KEEP_UP_ENCODED` of them not yet encoded, for at most :data:`_WAIT_SHARE` of a frame
        period in all, then while it is more than ``encoder_queue_maxsize`` behind (none is dropped, as LeRobot
        drops them after 0.1 s). An encoder not started on the episode yet (its process starting, or encoding an
        older episode) is waited for within that share only; one that ended or made no progress for
        :data:`KEEP_UP_TIMEOUT` s no longer (logged once; the episode is then encoded at ``save_episode``)."""
        bound = min(self._queue_frames, _KEEP_UP_FRAMES)
        until = time.monotonic() + _WAIT_SHARE / self._fps
        for key in self._streamable:
            spill = self._spills.get(key)
            process = self._streaming_encoder.process(key)
            if spill is None or process is None:
                continue
            progress = spill.progress()  # None: not started on the episode (an older one's, its process's start)
            last, since = progress, time.monotonic()
            while process.process.poll() is None:
                started = progress is not None
                done, out = progress or (0, 0)
                behind = frames - done
                if (behind <= bound and frames - out <= _KEEP_UP_ENCODED) or \
                        ((behind <= self._queue_frames or not started) and time.monotonic() > until):
                    break  # (the next camera is still looked at: within its bounds once the share is spent)
                time.sleep(_KEEP_UP_POLL)
                progress = spill.progress()
                if progress != last:
                    last, since = progress, time.monotonic()
                elif started and time.monotonic() - since > KEEP_UP_TIMEOUT:
                    logger.warning("%s: the streaming encoder of %s made no progress for %.0f s; add_frame no longer "
                                   "waits for it this episode", self._store.root, key, KEEP_UP_TIMEOUT)
                    self._unpaced = True
                    return

    def _learn_depth_units(self, frame: Mapping[str, Any]) -> None:
        """A depth camera without a recorded unit takes its first frame's (floats: metres, else millimetres), as
        LeRobot's recorder does; the store records it at once (one small commit)."""
        units = {key: depth_unit_of(frame[key]) for key in self._cameras if is_depth_feature(self._features[key])
                 and (self._features[key].get("info") or {}).get("depth_unit") is None}
        if units:
            self._store.update_info({key: {"depth_unit": unit} for key, unit in units.items()})
            for key, unit in units.items():
                self._features[key].setdefault("info", {})["depth_unit"] = unit
            self._on_saved()

    def _spill(self, key: str, spec: Any) -> _Spill:
        if key not in self._spills:
            self._spills[key] = _Spill(self._folder, str(len(self._spills)), spec.frame_shape, spec.dtype,
                                       writeback=self._store.durable)
        return self._spills[key]

    def save_episode(self, episode_data: dict | None = None, parallel_encoding: bool = True) -> None:
        """Write the buffered episode (or ``episode_data``, LeRobot's episode buffer dict) to the store in one
        commit, then empty the buffer; where LeRobot encodes (each episode, each batch's last) wait for the
        background encoders' segments (bounded: :meth:`_wait_for_videos`) and put LeRobot's files of the commit
        beside the store.
        ``parallel_encoding`` is LeRobot's switch for encoding cameras in parallel at this point; here nothing is
        encoded at this point (the background encoders, a thread per camera, encode it), so it changes
        nothing. The encoders are held back while the episode is committed
        (:class:`~lerobot_zarr.writing.segments.Gate`)."""
        self._check_open()
        if episode_data is not None:
            frames, tasks = self._episode_of(episode_data)
        else:
            if not self._tasks:
                raise ValueError("You must add one or several frames with `add_frame` before calling `add_episode`.")
            if self._refused:
                raise FrameNotWrittenError(
                    f"{self._store.root}: the episode cannot be saved: camera frames were not written "
                    f"({'; '.join(self._refused[:3])}{'...' if len(self._refused) > 3 else ''}); record it again "
                    f"after clear_episode_buffer()", path=self._store.root)
            self._writer.drain()
            if self._streamed and self._encoder is not None and self._every == 1:  # complete its videos meanwhile
                self._encoder.end(len(self._tasks))
            frames, tasks = self._buffered()
        spills = {} if episode_data is not None else {key: spill.path for key, spill in self._spills.items()}
        camera_stats = {} if episode_data is not None else {key: stats for key, spill in self._spills.items()
                                                             if (stats := spill.stats()) is not None}
        hashes = {} if episode_data is not None else {key: spill.crc for key, spill in self._spills.items()}
        try:
            with self._encoder.gate.closed() if self._encoder is not None else contextlib.nullcontext():
                index = self._store.add_episode(frames, task=tasks, frame_files=spills,  # encoders held back
                                                camera_stats=camera_stats, frame_hashes=hashes)
        except BaseException:
            if any(spill.taken() for spill in self._spills.values()):  # the store kept them (its commit went
                self.clear_episode_buffer()  # through, or it cannot tell): never written again, nor read from
            elif self._streamed and self._encoder is not None and self._every == 1:  # told `end`: stream the
                # episode again, so that frames added after are encoded too (and keep_up sees them encoded)
                self._encoder.stream({key: self._spills[key].path for key in self._encoder.cameras
                                      if key in self._spills})
            raise
        streamed = self._streamed and episode_data is None
        if episode_data is None:
            self._clear()
        self._on_saved()
        self._all_encoded = due = False
        if self._encoder is not None:  # (LeRobot encodes here: at every save_episode, or every batch's last)
            self._episodes_since_last_encoding += 1
            if self._episodes_since_last_encoding >= self._every:
                if streamed:  # what its encoders made of it as it was recorded becomes its segments
                    self._encoder.saved(index, reply=True)
                else:
                    self._encoder.notify()
                self._episodes_since_last_encoding = 0
                due = True
        self._beside.cache.hint(index, camera_stats)

        def videos() -> None:  # (once the data files are written: the encoders make the last frames' meanwhile)
            self._all_encoded = self._wait_for_videos(asked=streamed)

        # LeRobot's files beside the store: this commit's (if every episode has its videos)
        self._beside.saved(self._store.reader, before_videos=videos if due else None)

    def _wait_for_videos(self, asked: bool) -> bool:
        """As LeRobot's ``save_episode`` returns with the episode's videos made: wait until the background
        encoders made the segments of every saved episode (they encoded the episode as it was recorded: what is
        left is its last frames). Bounded: an encoder that ended, or made no progress for :data:`SAVE_TIMEOUT` s,
        is logged and not waited for (its episodes are encoded later, at the latest by ``finalize``); whether all
        were made. ``asked``: the encoders were told to reply once they made the episode's segments."""
        from ..errors import EncoderTimeoutError

        try:
            return self._encoder.flush(SAVE_TIMEOUT, asked=asked)
        except EncoderTimeoutError as exc:
            logger.warning("%s (save_episode returns without this episode's videos: finalize makes them)", exc)
            return False

    def _buffered(self) -> tuple[dict[str, Any], list[str]]:
        frames: dict[str, Any] = {key: spill.frames_map() for key, spill in self._spills.items()}
        for key, values in self._values.items():
            dtype = self._features[key]["dtype"]
            frames[key] = values if dtype in ("string", "language") else np.stack(values)
        return frames, list(self._tasks)

    def _episode_of(self, data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """LeRobot's episode buffer dict (``size``, ``task``, ``episode_index``, each feature's frames; cameras as
        arrays or image files), checked as LeRobot checks it."""
        if "size" not in data:
            raise ValueError("size key not found in episode_buffer")
        if "task" not in data:
            raise ValueError("task key not found in episode_buffer")
        if data.get("episode_index", self._store.meta.total_episodes) != self._store.meta.total_episodes:
            raise NotImplementedError("You might have manually provided the episode_buffer with an episode_index "
                                      "that doesn't match the total number of episodes already in the dataset. This "
                                      "is not supported for now.")
        if data["size"] == 0:
            raise ValueError("You must add one or several frames with `add_frame` before calling `add_episode`.")
        user = {k for k in self._features if k not in DEFAULT_FEATURES}
        given = set(data) - {"task", "size", *DEFAULT_FEATURES}
        if given != user:
            raise ValueError(f"Features from `episode_buffer` don't match the ones in `features`.In episode_buffer "
                             f"not in features: {given - user}In features not in episode_buffer: {user - given}")
        specs = self._store.reader.array_specs
        frames: dict[str, Any] = {}
        for key in user:
            values = [as_numpy(v) for v in data[key]]
            if key in self._cameras:
                frames[key] = np.stack([camera_frame(_image(v), self._features[key], specs[key].frame_shape,
                                                     specs[key].dtype) for v in values])
            elif self._features[key]["dtype"] == "language":
                frames[key] = [None] * len(values)
            elif self._features[key]["dtype"] == "string":
                frames[key] = values
            else:
                frames[key] = np.stack([np.asarray(v) for v in values])
        return frames, [str(t) for t in data["task"]]

    def clear_episode_buffer(self, delete_images: bool = True) -> None:
        """Drop the frames recorded since the last saved episode (``delete_images``: LeRobot's switch for its
        temporary image files; the buffer's camera frames are always dropped with it), and what the background
        encoders encoded of them."""
        self._drop_stream()
        self._clear()

    def _drop_stream(self) -> None:
        if self._streamed and self._encoder is not None:
            self._encoder.drop()
        self._streamed = False

    def _clear(self) -> None:
        self._streamed = self._unpaced = False
        self._writer.drain(errors=False)  # the frames are dropped: so is what failed to write them
        for spill in self._spills.values():
            spill.clear()
        self._values.clear()
        self._tasks.clear()
        self._refused.clear()

    # -- LeRobot's writer methods around recording ---------------------------------------------------------------
    def cancel_pending_videos(self) -> None:
        """LeRobot's: drop the streaming encoder's work on the episode in progress (its VideoEncodingManager calls
        it when recording fails), the encoder going on with the next episodes; the buffered frames stay until
        ``clear_episode_buffer`` / ``cleanup_interrupted_episode``, as LeRobot's (saved still, the episode is
        encoded from the store)."""
        self._drop_stream()

    def cleanup_interrupted_episode(self, episode_index: int) -> None:
        """The frames of an episode interrupted before ``save_episode`` dropped (LeRobot's removal of its temporary
        images)."""
        self.clear_episode_buffer()

    def flush_pending_videos(self) -> None:
        """(LeRobot's: encode the episodes a batch or a streaming encoder still holds.) Wait until the background
        encoders have made the segments of every saved episode (what is left of a batch too). An encoder that was
        killed or failed (it says why on stderr) is logged: the push encodes the episodes it did not."""
        if self._encoder is not None and not self._finalized and (self._encoder.processes or
                                                                  self._store.meta.total_episodes):
            self._episodes_since_last_encoding = 0
            self._encoder.flush()

    def start_image_writer(self, num_processes: int = 0, num_threads: int = 4) -> None:
        """(LeRobot's PNG writer pool.) Camera frames are copied as they are, never encoded while recording: no
        writer is needed, none is started."""

    def stop_image_writer(self) -> None:
        """(LeRobot's.) No image writer runs."""

    def finalize(self) -> None:
        """Close, and leave ``root`` a LeRobot v3.0 dataset as LeRobot's recorder does. When the last
        ``save_episode`` had every video made and exported (the usual case), it only closes: the encoders exit at
        once. Otherwise (a batch's rest, an encoder stopped or killed) the background encoders
        finish the saved episodes they have not encoded yet (as LeRobot's finalize finishes its encoders' work; a
        thread per camera, at the recorder's priority: waiting for them is never slower than encoding again what
        they started), the spill is removed, LeRobot's files of the store's last commit are put beside the store
        (:func:`~lerobot_zarr.writing.export.export_beside`: their videos joined from the segments; what an
        encoder did not make, killed or stalled, encoded there, the cameras in parallel), and the store's writer
        lock released. The encoders are waited for once LeRobot's data files are written (they make the last videos
        meanwhile). Those files were kept up with each saved episode (:class:`_Beside`), whose cache the last export
        takes: it computes the rows and stats of the episodes saved since, links the files earlier exports closed,
        and writes the last data file, each camera's last video file and the metadata again. Idempotent; episodes
        are already committed, so a recorder that never gets here loses nothing saved (a later ``resume`` +
        ``finalize`` writes the files)."""
        if self._finalized:
            return
        self._finalized = True
        encoders = self._encoder
        try:
            self._writer.close()
            for spill in self._spills.values():
                spill.close()
            self._spills.clear()
            if encoders is not None:
                if self._all_encoded:  # nothing is left for them to make
                    encoders.exit()
                else:
                    encoders.close()  # they finish the saved episodes while the data files are written
            try:
                if self._store.meta.total_episodes:
                    from ..writing.export import export_beside

                    # (nothing to do when the last save_episode exported its commit)
                    export_beside(self._store.reader, before_videos=encoders.finish if encoders else None,
                                  cache=self._beside.cache)
            finally:
                if encoders is not None:
                    if not self._all_encoded:  # (told to exit at once otherwise: not waited for)
                        encoders.finish()
                    encoders.release()  # its messenger thread ends
                    encoders.gate.close()
                shutil.rmtree(self._folder, ignore_errors=True)
        finally:
            self._store.close()

    @property
    def finalized(self) -> bool:
        return self._finalized

    def _check_open(self) -> None:
        if self._finalized:
            raise RuntimeError(f"{self._store.root}: this recording was finalized; continue it with "
                               f"LeRobotDataset.resume(repo_id, root=...)")


class _Beside:
    """LeRobot's files beside a store being recorded (:func:`~lerobot_zarr.writing.export.export_beside`) kept up
    with its commits, as LeRobot's recorder writes its data files and metadata at each ``save_episode``: each export
    reuses what the ones before made (:class:`~lerobot_zarr.writing.beside_cache.BesideCache`: the new episodes'
    rows and stats computed, the files earlier exports closed linked, the last data file, the last video file of
    each camera and the metadata written again), encodes nothing (``encode=False``: it joins the background
    encoders' segments; without all of them, as in the middle of a batch, it waits for a later commit), and moves
    the files into place at once (those of a complete commit, or none: never half-written). Called in
    ``save_episode``, once the encoders made the episode's segments: the files are of its commit when it returns.
    An export that fails is logged (the episode is committed: ``finalize`` exports again, and says why if it fails
    again)."""

    def __init__(self, root: Path):
        import pyarrow as pa

        from ..writing import export  # noqa: F401  (imported now, not in the first save_episode)
        from ..writing.beside_cache import BesideCache

        self.root = Path(root)
        self.cache = BesideCache()
        pa.array(np.zeros(1))  # pyarrow imports pandas at its first array (0.5-0.7 s, once): at create, not later

    def saved(self, reader: Any, before_videos: Callable[[], None] | None = None) -> None:
        """A commit was made (``reader`` reads it: the recorder's): export it if its segments are all made (after
        ``before_videos``: the wait for the encoders, once the data files are written). ``before_videos`` is called
        in any case."""
        from ..writing.export import export_beside

        called = False

        def hook() -> None:
            nonlocal called
            called = True
            before_videos()

        try:
            export_beside(reader, cache=self.cache, encode=False, before_videos=None if before_videos is None else hook)
        except Exception as exc:  # noqa: BLE001  (the episode is committed; finalize exports again)
            logger.warning("%s: LeRobot's files beside the store not updated after this episode (finalize writes "
                           "them): %s", self.root, exc)
        finally:
            if before_videos is not None and not called:
                before_videos()


def _release(writer: _SpillWriter, encoders: Encoders | None) -> None:
    """What a recorder dropped without ``finalize`` leaves running is stopped (its weakref finalizer; holds no
    reference to it): the spill thread ends, the encoder processes finish the saved episodes and exit (their notify
    thread ends). The store's lock is released by the store's own finalizer."""
    writer.stop()
    if encoders is not None:
        encoders.release()


def _image(value: Any) -> Any:
    """A camera value of LeRobot's episode buffer: an array, a PIL image, or the path of an image file."""
    if isinstance(value, (str, os.PathLike)):
        from PIL import Image

        with Image.open(value) as img:
            return np.asarray(img)
    return value
