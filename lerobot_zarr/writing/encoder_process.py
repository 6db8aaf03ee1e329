"""The background encoder's process (:class:`~lerobot_zarr.writing.segments.BackgroundEncoder` starts it:
``python -m lerobot_zarr.writing.encoder_process ROOT ...``): it reads the recorder's commands on stdin and makes
the store's segments (:mod:`lerobot_zarr.writing.segments`), encoding streamed episodes as their frames come."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..sampling.dataset import LeRobotZarrDataset
from .segments import (
    ENCODER_NICE,
    CameraEncoding,
    Gate,
    camera_encodings,
    lacking_segments,
    make_segment,
    prune_segments,
    segment_cameras,
    wanted_segments,
)
from .stream_encoding import Stream, committed_frames


class _Commands:
    """The recorder's commands on a pipe, one a line, read without blocking the encoding of a stream."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.ended = fd, b"", False

    def next(self, timeout: float | None = None) -> str | None:
        """The next command, waiting at most ``timeout`` seconds for one (None: until one comes; returns None: none
        yet, ``""``: the pipe ended)."""
        while b"\n" not in self.buffer:
            if self.ended or not select.select([self.fd], [], [], timeout)[0]:
                return "" if self.ended else None
            chunk = os.read(self.fd, 65536)
            if not chunk:  # the recorder finished, or died (a part line it wrote is no command)
                self.ended = True
                return ""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


class _Worker:
    """One camera of the process: its stream (the episode recorded, :class:`Stream`) and the segments it is told
    to make, in a thread of its own, in order. The cameras' encoders so run in parallel (as LeRobot's encoder
    threads: PyAV and the encoders release the GIL) in one process: one interpreter's start and one opening of the
    store per commit, not one per camera. A task that fails (a frame the encoder refuses...) stops this camera's
    work only: said on stderr, its stream dropped, what it lacks made at export; the process then exits 1."""

    def __init__(self, session: _Session, camera: str):
        self.session, self.camera = session, camera
        self.gate: Gate | None = None
        if session.gate_path is not None:
            with contextlib.suppress(FileNotFoundError):  # its own descriptor: flock is per open file
                self.gate = Gate(session.gate_path)
        self.stream: Stream | None = None
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.failure: Exception | None = None
        self.thread = threading.Thread(target=self._run, name=f"lerobot_zarr-encoder-{camera}", daemon=True)
        self.thread.start()

    def post(self, task: Callable[[], None] | threading.Event) -> None:
        self.tasks.put(task)

    def sync(self) -> None:
        """Wait until what was posted before is done."""
        done = threading.Event()
        self.post(done)
        while not done.wait(0.05) and self.thread.is_alive():
            pass

    def _run(self) -> None:
        busy = False
        while True:
            try:
                task = self.tasks.get(block=not busy, timeout=None if busy else _STREAM_POLL)
            except queue.Empty:
                busy = self._advance()
                continue
            if task is None:
                return
            if isinstance(task, threading.Event):  # (sync)
                task.set()
                continue
            if self.failure is None:
                try:
                    task()
                except Exception as exc:  # noqa: BLE001  (this camera stops; the others go on)
                    self._fail(exc)
            busy = self.stream is not None

    def _fail(self, exc: Exception) -> None:
        self.failure = exc
        print(f"lerobot_zarr background encoder of {self.session.root}: camera {self.camera!r} stopped "
              f"({type(exc).__name__}: {exc}); the push encodes the episodes it did not", file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            self.drop()

    def _advance(self) -> bool:
        """Encode the next few frames of the stream, if any; whether there were some (none for a while: the
        stream completes its file, :meth:`Stream.settle`)."""
        if self.stream is None or self.failure is not None:
            return False
        try:
            if self.stream.advance() > 0:
                return True
            if self.session.settle is not None:
                self.stream.settle(self.session.settle)
        except self.session.errors:  # dropped: the episode is encoded from the store once committed
            self.drop()
        except Exception as exc:  # noqa: BLE001  (this camera stops; the others go on)
            self._fail(exc)
        return False

    def start(self, encoding: CameraEncoding, path: str, tag: str) -> None:
        self.drop()
        with contextlib.suppress(FileNotFoundError):  # the episode was cleared meanwhile: a stream comes later
            self.stream = Stream(Path(self.session.root), encoding, path, self.gate, tag)

    def end(self, frames: int) -> None:
        if self.stream is not None:
            try:
                self.stream.end(frames)
            except self.session.errors:  # dropped: the episode is encoded from the store once committed
                self.drop()

    def finish(self, committed: tuple[int, int] | None, encoding: CameraEncoding | None) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(*self.session.errors):  # what it could not make is made from the store
                stream.finish(committed, encoding)

    def drop(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.drop()

    def make(self, lacking: list[tuple[CameraEncoding, int, Any]]) -> None:
        """Make the segments ``lacking`` (encoding, episode, the camera's episode hashes) from the store, each
        unless made meanwhile."""
        ds = LeRobotZarrDataset(self.session.root)
        try:
            for encoding, episode, hashes in lacking:
                make_segment(ds, encoding, episode, hashes=hashes,
                             gate=None if self.gate is None else self.gate.wait)
        finally:
            ds.close()


class _Session:
    """What the background encoder's process does with the recorder's commands (see :func:`_main`): one
    :class:`_Worker` per camera does the camera's work."""

    def __init__(self, root: str, threads: int | None, cameras: list[str] | None, gate: str | None,
                 settle: float | None = None):
        self.root, self.threads, self.cameras, self.gate_path, self.settle = root, threads, cameras, gate, settle
        self.workers: dict[str, _Worker] = {}
        self.encodings: dict[str, CameraEncoding] = {}
        self.count = 0
        from av import FFmpegError

        self.errors = (FFmpegError, OSError, ValueError)  # a stream's failure: the episode is encoded from the store

    def worker(self, camera: str) -> _Worker:
        if camera not in self.workers:
            self.workers[camera] = _Worker(self, camera)
        return self.workers[camera]

    def sync(self, cameras: Iterable[str] | None = None) -> None:
        for camera in list(self.workers) if cameras is None else cameras:
            self.workers[camera].sync()

    @property
    def failed(self) -> bool:
        """Whether a camera's work stopped on a failure (said on stderr)."""
        return any(worker.failure is not None for worker in self.workers.values())

    def encode_missing(self, ds: LeRobotZarrDataset | None = None, prune: bool = False) -> None:
        """Make the segments the committed episodes lack, the cameras in parallel (``prune``: then remove those of
        no committed episode)."""
        started = time.time()
        own = ds is None
        ds = LeRobotZarrDataset(self.root) if own else ds
        try:
            lacking = lacking_segments(ds, self.threads, self.cameras)
            for camera, items in lacking.items():
                worker = self.worker(camera)
                worker.post(lambda worker=worker, items=items: worker.make(items))
            self.sync(lacking)
            if prune:
                prune_segments(ds.root, wanted_segments(ds, self.threads), started)
        finally:
            if own:
                ds.close()

    def command(self, line: str) -> str | None:
        """Do one command (a camera's: handed to its worker, in order); the reply due (``flush``, ``saved``
        asking for one: ``flushed``, with the episode saved), else None."""
        word, _, rest = line.partition(" ")
        if word == "stream":
            spec = json.loads(rest)
            self._start(spec["camera"], spec["path"])
        elif word == "drop":
            camera = json.loads(rest)["camera"]
            if camera in self.workers:
                self.workers[camera].post(self.workers[camera].drop)
        elif word == "end":
            spec = json.loads(rest)
            if spec["camera"] in self.workers:
                worker = self.workers[spec["camera"]]
                worker.post(lambda: worker.end(int(spec["frames"])))
        elif word == "saved":
            spec = json.loads(rest)
            self._saved(int(spec["episode"]))
            return f"flushed {int(spec['episode'])}" if spec.get("reply") else None
        else:  # go, flush
            self.sync()
            self.encode_missing()
        return "flushed" if word == "flush" else None

    def _start(self, camera: str, path: str) -> None:
        if self.cameras is not None and camera not in self.cameras:
            return
        if camera not in self.encodings:
            ds = LeRobotZarrDataset(self.root)
            try:
                if camera not in segment_cameras(ds) or ds.array_specs[camera].storage != "raw":
                    return
                self.encodings.update(camera_encodings(ds, [camera], self.threads))
            finally:
                ds.close()
        self.count += 1
        worker, encoding, tag = self.worker(camera), self.encodings[camera], str(self.count)
        worker.post(lambda: worker.start(encoding, path, tag))

    def drop(self, *, wait: bool = True) -> None:
        """Drop every camera's stream (``wait``: until dropped)."""
        for worker in self.workers.values():
            worker.post(worker.drop)
        if wait:
            self.sync()

    def _saved(self, episode: int) -> None:
        """The episode streamed was committed as ``episode``: each camera's stream becomes its segment (checked
        against the committed frames), the cameras in parallel; then what else lacks a segment is made."""
        self.sync()  # (its streams ended: their files are complete, or being completed)
        ds = LeRobotZarrDataset(self.root)
        try:
            streamed = [k for k, w in self.workers.items() if w.stream is not None]
            fresh = camera_encodings(ds, [k for k in streamed if k in ds.array_specs], self.threads)
            for key in streamed:
                worker = self.workers[key]
                committed = committed_frames(ds, key, episode) if key in fresh else None
                worker.post(lambda worker=worker, c=committed, e=fresh.get(key): worker.finish(c, e))
                self.encodings[key] = fresh.get(key, self.encodings[key])
            self.sync(streamed)
            self.encode_missing(ds)
        finally:
            ds.close()


_STREAM_POLL = 0.02  # seconds between two looks at a stream's spill when it had no new frame


def _main(argv: list[str]) -> int:
    """The background encoder's process: ``ROOT [--threads N] [--nice N] [--camera KEY]... [--no-prune] [--gate
    PATH] [--settle SECONDS]``; commands on stdin, one a line: ``go`` (encode what lacks segments), ``flush`` (the
    same, then ``flushed`` on stdout), ``stream {"camera", "path"}`` / ``end {"camera", "frames"}`` / ``drop
    {"camera"}`` / ``saved {"episode", "reply"}`` (:meth:`BackgroundEncoder.stream`, ``end``, ``drop``, ``saved``;
    ``flushed EPISODE`` on stdout if ``reply``), ``exit`` (at once); each camera's work is done by a thread of its
    own (:class:`_Worker`), which encodes its stream's new frames between commands; at the end of stdin (the
    recorder finished, or died) it drops the streams, encodes what lacks segments and exits."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lerobot_zarr.writing.encoder_process")
    parser.add_argument("root")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--nice", type=int, default=ENCODER_NICE)
    parser.add_argument("--camera", action="append", default=None)
    parser.add_argument("--no-prune", dest="prune", action="store_false")
    parser.add_argument("--gate", default=None)
    parser.add_argument("--settle", type=float, default=None)
    args = parser.parse_args(argv)
    # before any thread starts: the encoder's threads inherit them
    with contextlib.suppress(AttributeError, OSError):  # not on every system
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    if args.nice:
        os.nice(args.nice)
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the encoders' prints go to stderr: stdout is the replies'
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # cancelled: its temporary files are removed by
    # BackgroundEncoder.wait (a worker's make_segment is not unwound: threads are not interrupted)
    session, cancelled = None, False
    try:
        session = _Session(args.root, args.threads, args.camera, args.gate, args.settle)
        session.encode_missing(prune=args.prune)
        commands = _Commands(sys.stdin.fileno())
        while True:
            line = commands.next()
            if line == "exit":  # (BackgroundEncoder.exit) nothing left to make
                return 0
            if not line:
                break
            answer = session.command(line)
            if answer is not None:
                reply.write(answer + "\n")
                reply.flush()
        session.drop()  # an episode not committed (or its commit not told): encoded from the store if committed
        session.encode_missing()
        return 1 if session.failed else 0
    except SystemExit:
        cancelled = True
        raise
    except Exception as exc:  # noqa: BLE001 - reported; what it did not make is encoded at export
        print(f"lerobot_zarr background encoder of {args.root}: stopped ({type(exc).__name__}: {exc}); the push "
              f"encodes the episodes it did not", file=sys.stderr)
        return 1
    finally:
        if session is not None:
            with contextlib.suppress(Exception):  # (what failed was reported above)
                session.drop(wait=not cancelled)


if __name__ == "__main__":
    status = _main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # files closed, segments in place: no teardown (a finalize waited 0.7 s of 0.86 s for it)
