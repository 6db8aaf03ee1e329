"""Per-episode mp4 segments of a store's video cameras, and the background encoder that makes them while a
recording goes on.

An export (:mod:`.export`) makes a camera's LeRobot mp4 files as LeRobot's recorder makes them: each episode
encoded on its own, the episodes' mp4 files joined without re-encoding (:class:`~lerobot_zarr.cameras.video.Mp4Joiner`).
An episode's mp4 can be made before the export and kept in the store folder, in ``.segments/``, as a *segment*
named by what it holds: the camera, the episode's frames (their content hash as the store records it at commit, with
their count, shape and dtype), the fps and everything the encoder's bytes depend on (codec, pixel format, options,
threads). The export then joins a segment whose name matches the episode's and whose packets check out
(:func:`~lerobot_zarr.cameras.video.segment_packets`), and encodes the others. An episode whose frames change (an
edit, an extension) gets another content hash, so another name: its old segment is never used again.

A segment is written under a temporary name (``.segments/.<name>.tmp-<pid>.mp4``) and renamed once complete: a
killed encoder leaves debris the store's next writer removes, never a part of a segment under its name. It is
made from frames whose content hash is checked against the recorded one (raw cameras: the hash covers their bytes),
so a segment holds exactly the frames its name says.

The background encoder (:class:`BackgroundEncoder`) is a separate process (a recording runs one for its video cameras, a
thread each, as LeRobot encodes its cameras in parallel threads; a process, not threads of the recorder: on 2 cores
those would compete with ``add_frame`` for the GIL as well as for a CPU, and it finishes the saved episodes if the
recorder dies): it encodes the committed episodes that lack segments each time it is told to (after a ``save_episode``),
reading the store as any reader does. It also encodes the episode being recorded as its frames come, from the recorder's
spill file (a *stream*, :class:`~lerobot_zarr.writing.stream_encoding.Stream`, as LeRobot's streaming encoder encodes
frames as they come): what it made becomes the episode's segment only once the episode is committed with exactly the
frames encoded (count and content hash), else it is dropped; a stream paused for a while completes its file then
(:meth:`~lerobot_zarr.writing.stream_encoding.Stream.settle`: the encoder's flush done before ``save_episode``). It runs
at the recorder's priority as a batch process (``SCHED_BATCH``: it never preempts the recorder's threads when they wake)
and waits at the recorder's :class:`Gate` while an episode is committed. :func:`encode_in_parallel` makes what is left
at the end, the cameras in parallel. Run as ``python -m lerobot_zarr.writing.encoder_process ROOT``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..cameras.frame_codecs import decode_batch, frame_codec
from ..cameras.video import VideoWriter, codec_name, segment_packets, writer_settings
from ..errors import EncoderTimeoutError, VideoEncodeError
from ..sampling.dataset import LeRobotZarrDataset
from ..store.packs import open_array_pack, read_shard_index
from ..utils.fileio import check_in_store, flock_within, replace_file
from ..utils.hashing import compact_frame_header, crc32c

__all__ = ["SEGMENTS", "SEGMENT_STORAGES", "CameraEncoding", "camera_encodings", "episode_hashes", "find_segment",
           "make_segment", "encode_missing", "wanted_segments", "prune_segments", "recorded_encoder", "segment_cameras",
           "lacking_cameras", "lacking_segments", "encode_in_parallel", "finish", "BackgroundEncoder", "FLUSH_TIMEOUT",
           "ENCODER_NICE", "Gate", "SETTLE_S"]

SEGMENTS = ".segments"  # the store's folder of segments (hidden: not a feature's folder)
SEGMENT_STORAGES = ("raw", "compact")  # cameras whose episodes get segments: those whose stored bytes are hashed
#: seconds without frames after which a stream completes its file (``Stream.settle``): more than a recording loop's
#: pause between two frames, less than a reset before ``save_episode``
SETTLE_S = 0.5
_GATE_FRAMES = 8  # frames given to the encoder between two looks at the gate
FLUSH_TIMEOUT = 600.0  # seconds without progress a wait for the background encoder allows
_LONGEST_LOOK = 1.0  # seconds at most that one gap between two looks at the encoder counts as waited
#: the background encoder's CPU priority (a nice value), chosen by measurement: see docs/torch.md
ENCODER_NICE = 0


def recorded_encoder(feature: dict) -> dict[str, Any] | None:
    """The encoder settings a recorder kept in a video feature's ``info`` (LeRobot's ``video.<field>`` keys, with
    ``video.vcodec``, which LeRobot's info never has), or None: the feature is encoded as LeRobot's default."""
    recorded = feature.get("info") or {}
    if "video.vcodec" not in recorded:
        return None
    return {k[len("video."):]: v for k, v in recorded.items() if k.startswith("video.")}


@dataclass(frozen=True)
class CameraEncoding:
    """How one camera's episodes are encoded: its frames (``frame_shape``, ``dtype``, ``depth``: 12-bit codes),
    ``fps`` and the encoder (``encoder``: the settings recorded in its ``info``, None: LeRobot's default;
    ``threads``: LeRobot's ``encoder_threads``)."""

    key: str
    fps: float
    frame_shape: tuple[int, int, int]
    dtype: str
    depth: bool
    encoder: dict[str, Any] | None
    threads: int | None

    def writer(self, path: Path) -> VideoWriter:
        height, width, channels = self.frame_shape
        return VideoWriter(path, self.fps, width, height, channels, depth=self.depth, encoder=self.encoder,
                           threads=self.threads)

    def name(self, crc: int, frames: int) -> str:
        """The segment name of an episode whose frames have content hash ``crc`` (``frames`` of them)."""
        vcodec, pix_fmt, options = writer_settings(self.depth, self.encoder, self.threads)
        key = {"camera": self.key, "crc32c": int(crc), "frames": int(frames), "shape": list(self.frame_shape),
               "dtype": self.dtype, "fps": self.fps, "vcodec": vcodec, "pix_fmt": pix_fmt, "options": options}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:40] + ".mp4"

    def valid(self, path: Path, frames: int) -> bool:
        """Whether the segment at ``path`` holds ``frames`` frames of this encoding (its packets, not decoded)."""
        vcodec, pix_fmt, _ = writer_settings(self.depth, self.encoder, self.threads)
        height, width, _ = self.frame_shape
        return segment_packets(path, frames, self.fps, codec_name(vcodec), width, height, pix_fmt)


def camera_encodings(ds: LeRobotZarrDataset, keys: Iterable[str], threads: int | None = None
                     ) -> dict[str, CameraEncoding]:
    """The encoding of each camera of ``keys`` as an export makes its videos: the encoder settings its ``info``
    records, with ``threads`` (None: the recorded ``encoder_threads``, if any)."""
    specs, info = ds.array_specs, ds.meta.info
    out = {}
    for k in keys:
        feature = info["features"].get(k, {})
        recorded = (feature.get("info") or {}).get("encoder_threads")
        out[k] = CameraEncoding(k, float(info["fps"]), tuple(specs[k].frame_shape), np.dtype(specs[k].dtype).str,
                                k in ds.meta.depth_keys, recorded_encoder(feature),
                                threads if threads is not None else recorded)
    return out


def episode_hashes(ds: LeRobotZarrDataset, key: str) -> np.ndarray:
    """The content hash the store recorded for each episode's frames of camera ``key`` (-1: none)."""
    return ds.gather_layout()["state"].episode_hashes(key)


def find_segment(ds: LeRobotZarrDataset, encoding: CameraEncoding, episode: int,
                 hashes: np.ndarray | None = None) -> Path | None:
    """The segment of ``episode`` (the store's numbering) for ``encoding`` if the store has a valid one, else None.
    ``hashes``: :func:`episode_hashes` of the camera, when several episodes are looked up."""
    crc = int((episode_hashes(ds, encoding.key) if hashes is None else hashes)[episode])
    if crc < 0 or ds.array_specs[encoding.key].storage not in SEGMENT_STORAGES:
        return None
    frames = int(ds.meta.episode_length[episode])
    path = Path(ds.root) / SEGMENTS / encoding.name(crc, frames)
    if path.is_file() and not path.is_symlink() and encoding.valid(path, frames):
        return path
    return None


def make_segment(ds: LeRobotZarrDataset, encoding: CameraEncoding, episode: int, target: Path | None = None,
                 hashes: np.ndarray | None = None, gate: Callable[[], None] | None = None) -> Path | None:
    """Encode ``episode``'s frames of the camera into an mp4 of their own: at ``target``, or (None) as the store's
    segment, if the frames' content hash is the one the store recorded (else None: nothing kept). Written under a
    temporary name, renamed once complete. ``gate``: called before each few frames are given to the encoder (the
    background encoder's :class:`Gate`: it waits there while the recorder commits an episode)."""
    if target is None:
        crc = int((episode_hashes(ds, encoding.key) if hashes is None else hashes)[episode])
        stored = _stored_frames(ds, encoding.key, episode) if crc >= 0 else None
        if stored is None or stored[0] != crc:
            return None
        frames = stored[1]
        folder = Path(check_in_store(ds.root, Path(ds.root) / SEGMENTS / "_")).parent
        folder.mkdir(exist_ok=True)
        target = folder / encoding.name(crc, len(frames))
    else:
        frames = np.asarray(ds.episode(episode, features=[encoding.key])[encoding.key])
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}.mp4")  # debris (.*.tmp-*) if killed
    from av import FFmpegError

    try:
        try:
            writer = encoding.writer(tmp)
            try:
                for start in range(0, len(frames), _GATE_FRAMES):
                    if gate is not None:
                        gate()
                    writer.add(frames[start:start + _GATE_FRAMES])
            finally:
                writer.close()
        except FFmpegError as exc:
            vcodec = writer_settings(encoding.depth, encoding.encoder, encoding.threads)[0]
            raise VideoEncodeError(f"{ds.root}: camera {encoding.key!r}, episode {episode}: {vcodec} cannot encode "
                                   f"its {'x'.join(map(str, encoding.frame_shape))} frames ({exc}); the episodes "
                                   f"stay in the store (choose another encoder with rgb_encoder= / depth_encoder=, "
                                   f"or another frame size)") from exc
        try:
            replace_file(tmp, target)
        except FileNotFoundError:  # removed as debris by a writer of the store opened meanwhile: made later
            return None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return target


def _stored_frames(ds: LeRobotZarrDataset, key: str, episode: int) -> tuple[int, np.ndarray] | None:
    """The content hash of ``episode``'s stored frames of camera ``key`` and those frames, both from the same bytes
    (a raw camera's rows; a compact camera's encoded frames, then decoded), or None: the store cannot give them
    here (an episode of a lazy store not fetched yet, a camera kept as mp4)."""
    spec = ds.array_specs[key]
    if spec.storage not in SEGMENT_STORAGES or not ds.meta.materialized_episodes[episode]:
        return None
    if spec.storage == "raw":
        frames = np.asarray(ds.episode(episode, features=[key])[key])
        return crc32c(frames), frames
    state = ds.gather_layout()["state"]
    pack, offset, n = (int(state.table.chunk[episode]), int(state.table.offset[episode]),
                       int(state.table.length[episode]))
    fd = open_array_pack(ds.root, key, spec, pack, int(state.packs.rows[pack]))
    try:
        where = f"{ds.root}: pack {pack} of feature {key!r}"
        blobs = [os.pread(fd, nbytes, start) for start, nbytes in
                 read_shard_index(fd, spec, int(state.packs.rows[pack]), offset, n, where).tolist()]
    finally:
        os.close(fd)
    crc = 0
    for blob in blobs:  # the hash the store records for compact rows: each frame's header, then its bytes
        crc = crc32c(blob, crc32c(compact_frame_header(len(blob)), crc))
    frames = np.empty((n, *spec.frame_shape), np.uint8)
    decode_batch(frame_codec(spec.codec_spec, spec.frame_shape), blobs, frames,
                 where=lambda k: f"{where}, episode {episode} frame {k}")
    return crc, frames


def encode_missing(root: str | os.PathLike, threads: int | None = None, *, prune: bool = False,
                   cameras: Iterable[str] | None = None, gate: Callable[[], None] | None = None) -> int:
    """Make the segments the store at ``root`` lacks (its video cameras kept raw or compact, or those of
    ``cameras``; every committed episode); ``prune``: remove the segments no episode has any more; ``gate``:
    :func:`make_segment`'s. Returns how many were made."""
    started = time.time()
    ds = LeRobotZarrDataset(root)
    try:
        return _encode_missing_of(ds, threads, cameras, gate, prune=prune, started=started)
    finally:
        ds.close()


def _encode_missing_of(ds: LeRobotZarrDataset, threads: int | None, cameras: Iterable[str] | None,
                       gate: Callable[[], None] | None, *, prune: bool = False, started: float = 0.0) -> int:
    """:func:`encode_missing` on ``ds`` (opened at ``started``, a ``time.time()``)."""
    made = 0
    for lacking in lacking_segments(ds, threads, cameras).values():
        for encoding, e, hashes in lacking:
            made += make_segment(ds, encoding, e, hashes=hashes, gate=gate) is not None
    if prune:
        prune_segments(ds.root, wanted_segments(ds, threads), started)
    return made


def segment_cameras(ds: LeRobotZarrDataset) -> list[str]:
    """The cameras whose episodes get segments: video cameras kept raw or compact."""
    return [k for k, spec in ds.array_specs.items() if spec.kind == "video" and spec.storage in SEGMENT_STORAGES]


def _segment_names(ds: LeRobotZarrDataset, threads: int | None, cameras: Iterable[str] | None = None
                   ) -> Iterator[tuple[CameraEncoding, int, np.ndarray, str]]:
    """Each segment the store's committed episodes have (video cameras kept raw or compact; of ``cameras`` only,
    if given): its encoding, the episode, the camera's episode hashes and the segment's name."""
    keys = segment_cameras(ds)
    if cameras is not None:
        wanted = set(cameras)
        keys = [k for k in keys if k in wanted]
    for encoding in camera_encodings(ds, keys, threads).values():
        hashes = episode_hashes(ds, encoding.key)
        for e in ds.episodes.tolist():
            if hashes[e] >= 0 and ds.meta.materialized_episodes[e]:
                yield encoding, e, hashes, encoding.name(int(hashes[e]), int(ds.meta.episode_length[e]))


def wanted_segments(ds: LeRobotZarrDataset, threads: int | None = None) -> set[str]:
    """The names of the segments of ``ds``'s committed episodes (with ``threads``' encodings)."""
    return {name for *_, name in _segment_names(ds, threads)}


def lacking_segments(ds: LeRobotZarrDataset, threads: int | None = None, cameras: Iterable[str] | None = None
                     ) -> dict[str, list[tuple[CameraEncoding, int, np.ndarray]]]:
    """Per camera (of ``cameras``; None: each), its committed episodes that have no segment yet: their encoding,
    the episode and the camera's episode hashes (:func:`make_segment`'s arguments)."""
    folder = Path(ds.root) / SEGMENTS
    out: dict[str, list[tuple[CameraEncoding, int, np.ndarray]]] = {}
    for encoding, e, hashes, name in _segment_names(ds, threads, cameras):
        if not (folder / name).is_file():
            out.setdefault(encoding.key, []).append((encoding, e, hashes))
    return out


def lacking_cameras(ds: LeRobotZarrDataset, threads: int | None = None) -> list[str]:
    """The cameras some of whose committed episodes have no segment yet."""
    return list(lacking_segments(ds, threads))


def encode_in_parallel(root: str | os.PathLike, threads: int | None = None, *, cameras: Iterable[str] | None = None,
                       timeout: float | None = FLUSH_TIMEOUT) -> None:
    """Make the segments the store at ``root`` lacks, the cameras (of ``cameras``; None: each lacking some) in
    parallel: one in this process, each other in a process of its own at this process's priority (the caller's thread
    keeps to one encoder at a time: see :func:`~lerobot_zarr.writing.export_videos.write_videos`), as LeRobot encodes
    its cameras in parallel at each ``save_episode``. ``timeout``: as :meth:`BackgroundEncoder.flush`'s; a process that
    fails or stalls is stopped, and what it did not make is left to the caller (an export encodes it)."""
    if cameras is None:
        ds = LeRobotZarrDataset(root)
        try:
            cameras = lacking_cameras(ds, threads)
        finally:
            ds.close()
    cameras = list(cameras)
    if not cameras:
        return
    helpers = [BackgroundEncoder(root, threads, nice=0, cameras=[key], prune=False) for key in cameras[1:]]
    try:
        for helper in helpers:
            helper.close()  # no more episodes: it makes its camera's segments, then exits
        encode_missing(root, threads, cameras=cameras[:1])
        finish(helpers, timeout)
    finally:
        for helper in helpers:
            if helper.process.poll() is None:
                helper.cancel()


def finish(encoders: list[BackgroundEncoder], timeout: float | None = FLUSH_TIMEOUT) -> bool:
    """Tell each encoder that no more episodes come and wait until each has made the segments of every committed
    episode and exited; True if all did. ``timeout``: seconds all of them may go without progress (no segment made
    or growing) before the ones still running are stopped (:meth:`BackgroundEncoder.cancel`), returning False:
    what they did not make is encoded by the caller."""
    for encoder in encoders:
        encoder.close()
    if not encoders:
        return True
    try:
        encoders[0]._wait(lambda: all(e.process.poll() is not None for e in encoders), timeout,
                          "the segments of every saved episode (finish)")
    except EncoderTimeoutError:
        for encoder in encoders:
            encoder.cancel()
        return False
    for encoder in encoders:
        encoder.wait()
    return all(e.process.returncode == 0 for e in encoders)


def prune_segments(root: str | os.PathLike, keep: set[str], before: float) -> int:
    """Remove the store's segments not named in ``keep`` and last changed before ``before`` (a ``time.time()``
    taken before ``keep`` was worked out from the committed episodes: a segment made since, for an episode committed
    since, is kept). Temporary files of writers are left to them. Returns how many were removed."""
    folder = Path(root) / SEGMENTS
    removed = 0
    if not folder.is_dir() or folder.is_symlink():
        return 0
    for path in folder.glob("*.mp4"):
        if path.name in keep or path.name.startswith("."):
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or a store this process cannot write
            if path.lstat().st_mtime < before:
                path.unlink()
                removed += 1
    return removed


class Gate:
    """A file lock by which a recorder holds its background encoders back while it commits an episode, so that its
    ``save_episode`` has the CPU (and the disk) to itself, as if no encoder ran: the recorder holds it exclusively
    (:meth:`closed`), an encoder takes it shared for an instant before each few frames it encodes (:meth:`wait`).
    A lock, not a signal: a recorder killed while holding it releases it (the kernel drops the lock with the
    process), never leaving its encoders stopped."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

    @contextlib.contextmanager
    def closed(self, patience: float = 1.0) -> Iterator[None]:
        """The recorder's side: encoders wait at their next look until this ends. An encoder holds the gate only
        for an instant; one stopped in that instant (SIGSTOP) is not waited for beyond ``patience`` seconds: the
        caller then goes on with the gate open."""
        if not flock_within(self.fd, patience, longest_sleep=0.001):
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def wait(self) -> None:
        """The encoder's side: return once the recorder does not hold the gate."""
        fcntl.flock(self.fd, fcntl.LOCK_SH)
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """The encoder's side, for an instant: the recorder does not commit meanwhile (it waits at :meth:`closed`)."""
        fcntl.flock(self.fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)


class BackgroundEncoder:
    """A process encoding a recording's segments (see the module docstring): started on the store at ``root``, it
    first makes the segments the committed episodes lack, then more each time it is told to (:meth:`notify`).
    Nothing waits for it but :meth:`flush` (and :func:`finish`). ``nice``: its CPU priority (:data:`ENCODER_NICE`
    by default; it also runs as a batch process, ``SCHED_BATCH``: it never preempts the recorder's threads when they
    wake); ``cameras``: the cameras it encodes (None: all); ``prune``: at start, remove segments of no committed
    episode; ``gate``: the path of the recorder's :class:`Gate`, looked at as it encodes; ``settle``: seconds without
    frames after which a stream completes its file (:meth:`~lerobot_zarr.writing.stream_encoding.Stream.settle`; None:
    only when saved). The cameras are encoded in parallel, a thread each."""

    def __init__(self, root: str | os.PathLike, threads: int | None = None, *, nice: int | None = None,
                 cameras: Iterable[str] | None = None, prune: bool = True, gate: str | os.PathLike | None = None,
                 settle: float | None = SETTLE_S):
        self.root, self.threads = Path(root), threads
        self.cameras = None if cameras is None else list(cameras)
        package = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")])))
        args = [sys.executable, "-m", "lerobot_zarr.writing.encoder_process", str(self.root)]
        if threads is not None:
            args += ["--threads", str(threads)]
        args += ["--nice", str(int(ENCODER_NICE if nice is None else nice))]
        for key in self.cameras or ():
            args += ["--camera", key]
        if not prune:
            args += ["--no-prune"]
        if gate is not None:
            args += ["--gate", str(gate)]
        if settle is not None:
            args += ["--settle", repr(float(settle))]
        self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                        close_fds=True)
        self._replies_due = 0  # replies asked for (flush, saved with reply) not read yet
        self._replies = b""  # what was read of its stdout and not yet of a whole reply
        self._replies_lock = threading.Lock()  # (asked from the recorder's messenger thread, read in its own)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _send(self, command: str) -> bool:
        if self.process.stdin is None or self.process.stdin.closed:
            return False
        try:
            self.process.stdin.write(command.encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):  # it died (or was closed meanwhile): what it did not make is
            # encoded at export
            return False
        return True

    def notify(self) -> None:
        """New episodes were committed: encode them (at once, or after the episode it is encoding)."""
        self._send("go")

    def stream(self, camera: str, path: str | os.PathLike) -> None:
        """Camera ``camera``'s frames of the episode now recorded are appended to the spill file ``path`` (raw frames
        from byte 0): encode them as they come (:class:`~lerobot_zarr.writing.stream_encoding.Stream`), dropping what it
        encoded of an earlier stream of that camera not committed."""
        self._send("stream " + json.dumps({"camera": camera, "path": os.fspath(path)}))

    def end(self, camera: str, frames: int) -> None:
        """The episode streamed of camera ``camera`` is being saved with ``frames`` frames: complete its file now
        (:meth:`~lerobot_zarr.writing.stream_encoding.Stream.end`: during the commit if every frame was encoded, else
        once it is over)."""
        self._send("end " + json.dumps({"camera": camera, "frames": int(frames)}))

    def drop(self, camera: str) -> None:
        """The episode in progress was cleared: drop what was encoded of camera ``camera``'s stream."""
        self._send("drop " + json.dumps({"camera": camera}))

    def saved(self, episode: int, *, reply: bool = False) -> None:
        """The episode streamed was committed as ``episode`` (the store's numbering): make what was encoded of it
        its segment if it holds the committed frames (else drop it), then encode what else lacks a segment
        (``reply``: then reply as to a flush: ``flush(asked=True)`` waits for it)."""
        if reply:
            self._asked(1)
        if not self._send("saved " + json.dumps({"episode": int(episode), "reply": reply})) and reply:
            self._asked(-1)

    def _asked(self, count: int) -> None:
        with self._replies_lock:  # (not held while writing to the pipe: a write may block on a stopped process)
            self._replies_due += count

    def flush(self, timeout: float | None = FLUSH_TIMEOUT, *, asked: bool = False) -> bool:
        """Wait until every episode committed so far has its segments; False if the process ended without making
        them all (killed, failed: it said why on stderr), whose missing segments an export then encodes.
        ``timeout``: seconds the encoder may go without progress (no segment made or growing) before
        :class:`~lerobot_zarr.errors.EncoderTimeoutError` (None: no bound); it is left running then, and the replies
        it owes are read by the next flush (each reply asked for is counted: a late one never answers a later
        flush). ``asked``: the reply was asked for already (``saved(..., reply=True)``), only waited for."""
        if not asked:
            self._asked(1)
            if not self._send("flush"):
                self._asked(-1)  # told to finish (close): it makes the segments of every committed episode
                self._wait(lambda: self.process.poll() is not None, timeout,
                           "to exit after encoding every saved episode")
                return self.process.returncode == 0
        ended = False

        def replied() -> bool:
            nonlocal ended
            with self._replies_lock:
                while True:  # what the pipe holds is read and counted now, not at the next look
                    while self._replies_due and b"\n" in self._replies:
                        line, _, self._replies = self._replies.partition(b"\n")
                        self._replies_due -= line.startswith(b"flushed")
                    if not self._replies_due:
                        return True
                    if self.process.stdout is None or self.process.stdout.closed:
                        ended = True
                        return True
                    fd = self.process.stdout.fileno()
                    if not select.select([fd], [], [], 0)[0]:
                        return False
                    chunk = os.read(fd, 4096)
                    if not chunk:
                        ended = True
                        return True
                    self._replies += chunk

        stdout = self.process.stdout
        self._wait(replied, timeout, "the segments of every saved episode (flush)",
                   wake=None if stdout is None or stdout.closed else stdout.fileno())
        if not ended:
            return True
        self.process.wait()
        return False

    def _wait(self, done: Callable[[], bool], timeout: float | None, what: str, wake: int | None = None) -> None:
        """Poll ``done`` until true (every 50 ms, or as soon as the descriptor ``wake`` becomes readable: a reply
        is looked at once it comes); :class:`EncoderTimeoutError` after ``timeout`` seconds without progress. The
        seconds counted are those this process polled: a gap between two looks (this process stopped, Ctrl-Z then
        ``fg``, or starved) counts as :data:`_LONGEST_LOOK` at most, so that the encoder, stopped with it, has time
        to show progress once both continue."""
        last, waited, then = self._progress(), 0.0, time.monotonic()
        while not done():
            if timeout is not None:
                now = self._progress()
                clock = time.monotonic()
                waited, then = waited + min(clock - then, _LONGEST_LOOK), clock
                if now != last:
                    last, waited = now, 0.0
                elif waited > timeout:
                    raise EncoderTimeoutError(
                        f"{self.root}: the background encoder (pid {self.pid}) made no progress for {timeout:g} s "
                        f"while waiting for {what}; it is left running (cancel_pending_videos / a push encodes "
                        f"what it lacks)", path=self.root)
            if wake is not None and self.process.poll() is None:
                select.select([wake], [], [], 0.05)
            else:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=0.05)

    def _progress(self) -> tuple:
        """What the encoder has made so far: its segments' names and sizes (a segment growing counts)."""
        folder = self.root / SEGMENTS
        try:
            return tuple(sorted((e.name, e.stat().st_size) for e in os.scandir(folder)))
        except OSError:  # no folder yet, or an entry renamed meanwhile
            return ()

    def close(self) -> None:
        """No more episodes: the process makes the segments of those committed, then exits; not waited for."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    def exit(self) -> None:
        """No more episodes, and every saved one has its segments (a flush said so): the process drops what it
        streams and exits at once, without looking for segments to make; not waited for."""
        self._send("exit")
        self.close()

    def cancel(self) -> None:
        """Stop now (a segment being made is dropped); what lacks a segment is encoded at export."""
        self.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
                self.process.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # stuck in an encoder's call, or given no CPU at its priority
                self.process.kill()
        self.wait()

    def wait(self) -> None:
        """Wait for the process to exit (after :meth:`close` or :meth:`cancel`); the temporary files of one that
        did not exit cleanly (killed, stopped, failed: a thread of it making a file is not unwound) are removed."""
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self.process.returncode != 0:
            for tmp in (self.root / SEGMENTS).glob(f".*.tmp-{self.pid}.mp4"):
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
