"""The episode being recorded, encoded as its frames come (:class:`Stream`): a background encoder's
(:mod:`lerobot_zarr.writing.encoder_process`) work on one camera's spill file, kept as the episode's segment
(:mod:`lerobot_zarr.writing.segments`) only once the episode is committed with exactly the frames encoded."""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
import time
from pathlib import Path

import numpy as np

from ..cameras.video import Mp4Joiner, VideoWriter
from ..sampling.dataset import LeRobotZarrDataset
from ..utils.fileio import replace_file
from ..utils.hashing import crc32c
from .segments import _GATE_FRAMES, SEGMENTS, CameraEncoding, Gate, episode_hashes

__all__ = ["Stream", "committed_frames", "progress_path"]


class Stream:
    """One camera's episode being recorded, encoded while its frames come (the background encoder's ``stream``
    command): the frames the recorder appends to its spill file (raw frames from byte 0) are read as soon as the
    file holds them whole and fed to an encoder writing a temporary file (debris if killed), their CRC-32C computed
    from the very bytes encoded. The file becomes the episode's segment only once the episode is committed with
    exactly those frames (:meth:`finish`: their count and the content hash the store recorded); anything else drops
    it (:meth:`drop`), and the episode is encoded from the store as any other.

    A stream given no frame for a while (:meth:`settle`: the recording paused, as in ``lerobot-record``'s reset
    before ``save_episode``) completes its file then (the encoder flushed: the frames it held back are encoded
    meanwhile, not in ``save_episode``), as a part: frames coming after it go to a new part, and the parts are
    joined without re-encoding (:class:`~lerobot_zarr.cameras.video.Mp4Joiner`) when the segment is made.

    The spill is read while it is the recorder's (its path still names the file opened): the recorder may then make
    it a pack of the store (sized to the pack first, then renamed, in its commit), so its size is looked at under
    the recorder's :class:`Gate`; after that, frames are read only up to the committed episode's count."""

    def __init__(self, root: Path, encoding: CameraEncoding, path: str, gate: Gate | None, tag: str):
        self.encoding, self.path, self.gate = encoding, path, gate
        self.fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.inode = os.fstat(self.fd).st_ino
        self.frame_bytes = int(np.prod(encoding.frame_shape)) * np.dtype(encoding.dtype).itemsize
        self.frames = self.crc = 0
        self.live = True  # the spill is still the recorder's episode in progress
        self.folder, self.tag = Path(root) / SEGMENTS, tag
        self.writer: VideoWriter | None = None
        self.parts: list[tuple[Path, int]] = []  # the files completed so far (the last one being written) and frames
        self.ended: int | None = None  # the frames the files were completed with (:meth:`end`)
        self.fed: float | None = None  # when the spill last gave frames
        self.gaps: collections.deque = collections.deque(maxlen=31)  # the times between its last gives
        # for the recorder (its backpressure), beside the spill: the frames taken so far and those given back
        # encoded, 8 bytes each, little-endian (:meth:`_say_progress`)
        try:
            self.progress = os.open(progress_path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                                    | os.O_CLOEXEC, 0o644)
        except OSError:  # (the recording ended meanwhile)
            self.progress = -1

    def _whole_frames(self) -> int:
        """The frames the spill holds whole while it is the recorder's episode in progress; once it is not (taken
        as a pack, or replaced), those read so far."""
        if not self.live:
            return self.frames
        with self.gate.shared() if self.gate is not None else contextlib.nullcontext():
            try:
                self.live = os.stat(self.path, follow_symlinks=False).st_ino == self.inode
            except FileNotFoundError:
                self.live = False
            size = os.fstat(self.fd).st_size
        return size // self.frame_bytes if self.live else self.frames

    def advance(self, limit: int | None = None) -> int:
        """Encode the next few frames the spill holds (up to frame ``limit``, the committed episode's count, when
        given); returns how many (0: none yet, or the file is completed; -1: the file ends before ``limit``)."""
        if self.ended is not None:
            return -1 if limit is not None and limit > self.frames else 0
        if limit is None:
            stop = self._whole_frames()
        else:
            stop = limit
            if self.gate is not None:
                self.gate.wait()
        k = min(stop - self.frames, _GATE_FRAMES)
        if k <= 0:
            return 0
        frames = np.empty((k, *self.encoding.frame_shape), np.dtype(self.encoding.dtype))
        view, got = memoryview(frames).cast("B"), 0
        while got < len(view):
            n = os.preadv(self.fd, [view[got:]], self.frames * self.frame_bytes + got)
            if n <= 0:
                return -1
            got += n
        now = time.monotonic()
        if self.fed is not None:
            self.gaps.append(now - self.fed)
        self.fed = now
        self.crc = crc32c(frames, self.crc)
        if self.writer is None:  # a new part (the first, or one after the stream settled)
            path = self.folder / f".stream-{self.tag}-{len(self.parts)}.tmp-{os.getpid()}.mp4"  # debris if killed
            self.folder.mkdir(exist_ok=True)  # (the file is there from its first frames on: FFmpeg opens it at
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
            self.writer = self.encoding.writer(path)  # its first packet)
            self.parts.append((path, 0))
        for frame in frames:  # progress said per frame: the recorder's backpressure waits for no more than one
            self.writer.add(frame[None])
            self.frames += 1
            self.parts[-1] = (self.parts[-1][0], self.parts[-1][1] + 1)
            self._say_progress()
        return k

    def _say_progress(self) -> None:
        """The frames given to the encoder and those it gave back encoded (the parts completed: all of theirs)."""
        if self.progress >= 0:
            out = self.frames - (self.writer.frames - self.writer.packets if self.writer is not None else 0)
            os.pwrite(self.progress, self.frames.to_bytes(8, "little") + out.to_bytes(8, "little"), 0)

    def settle(self, idle: float) -> bool:
        """Once the spill gave no frame for ``idle`` seconds (:data:`~lerobot_zarr.writing.segments.SETTLE_S`), or 4
        times the median time between its last gives if longer (a slow loop is not taken for a pause, nor is a
        pause taken for its pace; every frame it holds is encoded: the caller looked), complete the part being
        written: the encoder is flushed now, not in ``save_episode``. Whether it did."""
        if self.writer is None or self.fed is None:
            return False
        interval = statistics.median(self.gaps) if self.gaps else 0.0
        if time.monotonic() - self.fed < max(idle, 4 * interval):
            return False
        writer, self.writer = self.writer, None
        writer.close()
        self._say_progress()
        return True

    def finish(self, committed: tuple[int, int] | None, encoding: CameraEncoding | None) -> Path | None:
        """An episode was committed from this spill, ``committed`` its frames' count and content hash
        (:func:`committed_frames`; None: none to take): encode what is left of it and make the file its segment
        if its frames are the committed ones and ``encoding`` (the camera's in the store) is the one encoded with;
        else drop it. Returns the segment, or None."""
        try:
            if encoding != self.encoding or committed is None:
                return None
            n, crc = committed
            if self.ended is not None and self.ended != n:
                return None
            while self.frames < n:
                if self.advance(limit=n) < 0:
                    return None
            if crc < 0 or self.frames != n or self.crc != crc or not self.parts:
                return None
            if self.writer is not None:
                writer, self.writer = self.writer, None
                writer.close()
            target = self.folder / self.encoding.name(crc, n)
            try:
                replace_file(self._joined(), target)
            except FileNotFoundError:  # removed as debris by a writer of the store opened meanwhile
                return None
            return target
        finally:
            self.drop()

    def _joined(self) -> Path:
        """The parts as one file (the only one, or a new one they are joined into)."""
        if len(self.parts) == 1:
            return self.parts[0][0]
        path = self.folder / f".stream-{self.tag}.tmp-{os.getpid()}.mp4"
        parts = list(self.parts)
        self.parts.append((path, 0))  # (removed with the parts: the join, or the rename, failed)
        joiner = Mp4Joiner(path, self.encoding.fps)
        try:
            for part, frames in parts:
                joiner.add(part, frames)
        finally:
            joiner.close()
        return path

    def end(self, frames: int) -> None:
        """The recorder is saving the episode with ``frames`` frames (its commit under way): once they are all
        encoded (frames left wait at the gate until the commit is over), the encoder is flushed and the file
        completed now, rather than at :meth:`finish`, which then only checks it against the commit and makes it the
        segment (with every frame encoded before, the flush overlaps the commit)."""
        while self.frames < frames:
            if self.advance(limit=frames) <= 0:
                return
        if self.frames == frames and self.ended is None:
            if self.writer is not None:
                writer, self.writer = self.writer, None
                writer.close()
                self._say_progress()
            self.ended = frames

    def drop(self) -> None:
        """Stop: the files made so far are removed (idempotent)."""
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close(flush=False)
        parts, self.parts = self.parts, []
        for path, _ in parts:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.progress >= 0:
            os.close(self.progress)
            self.progress = -1


def committed_frames(ds: LeRobotZarrDataset, key: str, episode: int) -> tuple[int, int] | None:
    """Camera ``key``'s frames of the committed episode ``episode`` of ``ds`` as a stream's file is checked
    against (:meth:`Stream.finish`): their count and content hash; None where no stream makes its segment (not
    kept raw, not held, no such episode)."""
    if (not 0 <= episode < len(ds.meta.episode_length) or ds.array_specs[key].storage != "raw"
            or not ds.meta.materialized_episodes[episode]):
        return None
    return int(ds.meta.episode_length[episode]), int(episode_hashes(ds, key)[episode])


def progress_path(spill: str | os.PathLike) -> str:
    """Where the background encoder streaming the spill file ``spill`` says how many of its frames it took so far
    and how many it gave back encoded (8 bytes each, little-endian; written after each frame)."""
    return f"{os.fspath(spill)}.encoded"
