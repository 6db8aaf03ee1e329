"""The background encoder's process (:class:`~lerobot_zarr.writing.segments.BackgroundEncoder` starts it:
``python -m lerobot_zarr.writing.encoder_process ROOT ...``): it reads the recorder's commands on stdin and makes
the store's segments (:mod:`lerobot_zarr.writing.segments`), encoding streamed episodes as their frames come."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..sampling.dataset import LeRobotZarrDataset
from .segments import (
    ENCODER_NICE,
    CameraEncoding,
    Gate,
    _encode_missing_of,
    _Stream,
    camera_encodings,
    encode_missing,
    segment_cameras,
)


class _Commands:
    """The recorder's commands on a pipe, one a line, read without blocking the encoding of a stream."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.ended = fd, b"", False

    def next(self, timeout: float) -> str | None:
        """The next command, waiting at most ``timeout`` seconds for one (None: none yet; ``""``: the pipe ended)."""
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


class _Session:
    """What the background encoder's process does with the recorder's commands (see :func:`_main`)."""

    def __init__(self, root: str, threads: int | None, cameras: list[str] | None, gate: Gate | None):
        self.root, self.threads, self.cameras, self.gate = root, threads, cameras, gate
        self.streams: dict[str, _Stream] = {}
        self.encodings: dict[str, CameraEncoding] = {}
        self.count = 0
        from av import FFmpegError

        self.errors = (FFmpegError, OSError, ValueError)  # a stream's failure: the episode is encoded from the store

    def encode_missing(self, ds: LeRobotZarrDataset | None = None, prune: bool = False) -> None:
        if ds is None:
            encode_missing(self.root, self.threads, prune=prune, cameras=self.cameras, gate=self._gate_wait)
        else:
            _encode_missing_of(ds, self.threads, self.cameras, self._gate_wait, prune=prune, started=time.time())

    @property
    def _gate_wait(self) -> Callable[[], None] | None:
        return None if self.gate is None else self.gate.wait

    def command(self, line: str) -> str | None:
        """Do one command; the reply due (``flush``, ``saved`` asking for one: ``flushed``, with the episode
        saved), else None."""
        word, _, rest = line.partition(" ")
        if word == "stream":
            spec = json.loads(rest)
            self.drop(spec["camera"])
            self._start(spec["camera"], spec["path"])
        elif word == "drop":
            self.drop(json.loads(rest)["camera"])
        elif word == "end":
            spec = json.loads(rest)
            stream = self.streams.get(spec["camera"])
            try:
                if stream is not None:
                    stream.end(int(spec["frames"]))
            except self.errors:  # dropped: the episode is encoded from the store once committed
                self.drop(spec["camera"])
        elif word == "saved":
            spec = json.loads(rest)
            self._saved(int(spec["episode"]))
            return f"flushed {int(spec['episode'])}" if spec.get("reply") else None
        else:  # go, flush
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
        with contextlib.suppress(FileNotFoundError):  # the episode was cleared meanwhile: a stream comes later
            self.streams[camera] = _Stream(Path(self.root), self.encodings[camera], path, self.gate, str(self.count))

    def drop(self, camera: str | None = None) -> None:
        """Drop camera ``camera``'s stream (None: every stream)."""
        for key in list(self.streams) if camera is None else [camera]:
            stream = self.streams.pop(key, None)
            if stream is not None:
                stream.drop()

    def _saved(self, episode: int) -> None:
        ds = LeRobotZarrDataset(self.root)
        try:
            fresh = camera_encodings(ds, [k for k in self.streams if k in ds.array_specs], self.threads)
            for key in list(self.streams):
                stream = self.streams.pop(key)
                try:
                    stream.finish(ds, episode, fresh.get(key))
                except self.errors:  # what it could not make is made from the store (which says why it fails)
                    pass
                self.encodings[key] = fresh.get(key, self.encodings[key])
            self.encode_missing(ds)
        finally:
            ds.close()

    def advance(self) -> bool:
        """Encode the next few frames of each stream that has some; whether any had."""
        progressed = False
        for key, stream in list(self.streams.items()):
            try:
                progressed |= stream.advance() > 0
            except self.errors:  # dropped: the episode is encoded from the store once committed
                self.drop(key)
        return progressed


_STREAM_POLL = 0.02  # seconds between two looks at a stream's spill when it had no new frame


def _main(argv: list[str]) -> int:
    """The background encoder's process: ``ROOT [--threads N] [--nice N] [--camera KEY]... [--no-prune] [--gate
    PATH]``; commands on stdin, one a line: ``go`` (encode what lacks segments), ``flush`` (the same, then
    ``flushed`` on stdout), ``stream {"camera", "path"}`` / ``end {"camera", "frames"}`` / ``drop {"camera"}`` /
    ``saved {"episode", "reply"}`` (:meth:`BackgroundEncoder.stream`, ``end``, ``drop``, ``saved``; ``flushed
    EPISODE`` on stdout if ``reply``), ``exit`` (at once); between commands it encodes the streams' new frames; at
    the end of stdin (the recorder finished, or died) it drops the streams, encodes what lacks segments and
    exits."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lerobot_zarr.writing.encoder_process")
    parser.add_argument("root")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--nice", type=int, default=ENCODER_NICE)
    parser.add_argument("--camera", action="append", default=None)
    parser.add_argument("--no-prune", dest="prune", action="store_false")
    parser.add_argument("--gate", default=None)
    args = parser.parse_args(argv)
    # before any thread starts: the encoder's threads inherit them
    with contextlib.suppress(AttributeError, OSError):  # not on every system
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    if args.nice:
        os.nice(args.nice)
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the encoders' prints go to stderr: stdout is the replies'
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # cancelled: unwinds, temporary files removed
    session = None
    try:
        gate = None
        if args.gate is not None:
            with contextlib.suppress(FileNotFoundError):  # the recording ended meanwhile: nothing to wait for
                gate = Gate(args.gate)
        session = _Session(args.root, args.threads, args.camera, gate)
        session.encode_missing(prune=args.prune)
        commands, busy = _Commands(sys.stdin.fileno()), False
        while True:
            line = commands.next(0 if busy else _STREAM_POLL)
            if line is None:
                busy = session.advance()
                continue
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
    except Exception as exc:  # noqa: BLE001 - reported; what it did not make is encoded at export
        print(f"lerobot_zarr background encoder of {args.root}: stopped ({type(exc).__name__}: {exc}); the push "
              f"encodes the episodes it did not", file=sys.stderr)
        return 1
    finally:
        if session is not None:
            session.drop()
    return 0


if __name__ == "__main__":
    status = _main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # files closed, segments in place: no teardown (a finalize waited 0.7 s of 0.86 s for it)
