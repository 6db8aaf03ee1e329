"""Object storage in a process forked from one that used it (a DataLoader worker, which Linux forks by default).

obstore's engine (a tokio runtime, one per process) does not survive a fork: in the child every request waits
forever, a client made anew there included (tried: a new ``S3Store`` in the child hangs as the parent's does). So
a :class:`~.client.Bucket` in such a process hands its requests to a *fetcher* (:mod:`.fetcher`): a fresh Python
process (started, not forked, at the first request) with an engine of its own, over a socket pair.

- The fetcher runs each request through its own :class:`~.client.Bucket` (deadlines, retries, bounded bodies,
  ETags, typed errors: the same code as in any process) and answers the result. Bytes cross the socket only:
  nothing is written to disk, and the client's options (which may hold keys) travel only there.
- Bounded: each request states the most bytes its answer may carry; an answer over it ends the fetcher (an error
  for every request waiting). A wait for an answer has a deadline: the longest the request may take in the fetcher
  (every attempt and retry, :func:`~.client.longest_call`) plus the fetcher's start.
- Lifetime: the fetcher serves until the process that started it closes the socket or dies (end of file), then
  exits. A fetcher that dies fails the requests waiting on it (a :class:`~lerobot_zarr.errors.BucketError`: the
  caller marks nothing present, so nothing is half served), and the next request starts another.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from ..errors import (
    ArgumentError,
    BucketAuthError,
    BucketError,
    CommitConflictError,
    ObjectChangedError,
    SourceNotFoundError,
)
from ..utils.fileio import load_json

__all__ = ["call", "FETCHER_START_S", "LIST_BYTES", "MAX_WRITE_BYTES", "MAX_HEADER", "FRAME", "recv_exactly"]

FETCHER_START_S = 60.0  # added to each deadline: the fetcher's start (an interpreter and our imports, under load)
FRAME = struct.Struct("!II")  # header bytes, body bytes
MAX_HEADER = 1 << 20
LIST_BYTES = 256 << 20  # the most a listing's answer may hold
MAX_WRITE_BYTES = 1 << 30  # the most bytes a relayed write carries (a bigger object: written from a file)
#: errors that cross as themselves (by name); any other is a BucketError with its text
_ERRORS = {cls.__name__: cls for cls in (BucketError, BucketAuthError, ObjectChangedError, SourceNotFoundError,
                                         CommitConflictError, ArgumentError)}


def call(bucket: Any, op: str, args: dict[str, Any], *, body: bytes = b"", limit: int,
         deadline: float) -> tuple[dict, bytearray]:
    """Run ``op`` of ``bucket`` (a :class:`~.client.Bucket`) in this process's fetcher (started if none runs); its
    answer's header and body (at most ``limit`` bytes), waited for at most ``deadline`` seconds (the longest the
    call may take there) plus the fetcher's start."""
    where = bucket.location(args.get("rel", ""))
    if len(body) > MAX_WRITE_BYTES:
        raise ArgumentError(f"{where}: {len(body)} bytes to write from a forked process, more than "
                            f"{MAX_WRITE_BYTES}; write it from a file")
    header = {"op": op, "url": str(bucket.url), "options": bucket.options, **args}
    return _fetcher().call(header, body, limit, deadline + FETCHER_START_S, where)


_current: list[_Fetcher | None] = [None]
_current_lock = threading.Lock()


def _fetcher() -> _Fetcher:
    with _current_lock:
        fetcher = _current[0]
        if fetcher is None or fetcher.pid != os.getpid() or fetcher.failed is not None:
            fetcher = _current[0] = _Fetcher.start()
        return fetcher


def _reset_after_fork() -> None:
    global _current_lock
    _current_lock = threading.Lock()
    if _current[0] is not None:  # a fetcher of the parent's answers the parent only (and ends with it: this
        _current[0].sock.close()  # process's copy of its socket closed)
    _current[0] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


class _Wait:
    def __init__(self, limit: int):
        self.limit = limit
        self.done = threading.Event()
        self.header: dict | None = None
        self.body = bytearray()


class _Fetcher:
    """A fetcher process and this process's end of its socket (shared by its threads: requests are numbered)."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen) -> None:
        self.pid = os.getpid()
        self.failed: str | None = None
        self.sock, self.proc = sock, proc
        self._send = threading.Lock()
        self._lock = threading.Lock()
        self._waiting: dict[int, _Wait] = {}
        self._ids = itertools.count()
        threading.Thread(target=self._read, name="lerobot_zarr-relay", daemon=True).start()

    @classmethod
    def start(cls) -> _Fetcher:
        """A new fetcher process (this very lerobot_zarr, whatever ``sys.path`` says), its socket end passed down."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        package_parent = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "lerobot_zarr.cloud.fetcher", str(theirs.fileno())],
                                    pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            raise BucketError(f"cannot start the object storage fetcher of a forked process ({exc})") from None
        finally:
            theirs.close()
        return cls(ours, proc)

    def call(self, header: dict, body: bytes, limit: int, deadline: float, where: str) -> tuple[dict, bytearray]:
        wait = _Wait(limit)
        with self._lock:
            if self.failed is not None:
                raise BucketError(f"{where}: {self.failed}", path=where)
            rid = next(self._ids)
            self._waiting[rid] = wait
        try:
            try:
                data = json.dumps({**header, "id": rid, "limit": limit}).encode()
            except TypeError:
                raise ArgumentError(f"{where}: the client options must be text, numbers or booleans to reach the "
                                    f"object store from a forked process") from None
            try:
                with self._send:
                    self.sock.sendall(FRAME.pack(len(data), len(body)) + data)
                    if body:
                        self.sock.sendall(body)
            except OSError as exc:
                self._fail(f"the object storage fetcher of this forked process is gone ({exc})")
            if not wait.done.wait(deadline):
                raise BucketError(f"{where}: no answer from the object storage fetcher of this forked process "
                                  f"within {deadline:g} s", path=where)
        finally:
            with self._lock:
                self._waiting.pop(rid, None)
        answer = wait.header
        if answer is None:
            raise BucketError(f"{where}: {self.failed}", path=where)
        if "error" in answer:
            cls = _ERRORS.get(answer["error"], BucketError)
            raise cls(str(answer.get("message", ""))[:2000], path=answer.get("path"))
        return answer, wait.body

    def _read(self) -> None:
        """The answers, each to the request waiting for it (one that gave up: read and dropped)."""
        try:
            while True:
                head = recv_exactly(self.sock, FRAME.size)
                if head is None:
                    raise EOFError("it ended")
                hlen, blen = FRAME.unpack(head)
                if hlen > MAX_HEADER:
                    raise ValueError(f"an answer header of {hlen} bytes")
                header = load_json(recv_exactly(self.sock, hlen) or b"", "the fetcher's answer", error=ValueError)
                if not isinstance(header, dict):
                    raise ValueError("an answer header that is not an object")
                with self._lock:
                    wait = self._waiting.get(header.get("id"))
                limit = wait.limit if wait is not None else LIST_BYTES
                if blen > limit:
                    raise ValueError(f"an answer of {blen} bytes to a request of at most {limit}")
                body = bytearray(blen)
                if blen and not _recv_into(self.sock, body):
                    raise EOFError("it ended mid-answer")
                if wait is not None:
                    wait.header, wait.body = header, body
                    wait.done.set()
        except (OSError, EOFError, ValueError) as exc:
            self._fail(f"the object storage fetcher of this forked process failed ({exc})")

    def _fail(self, why: str) -> None:
        with self._lock:
            if self.failed is None:
                self.failed = why
            waiting = list(self._waiting.values())
        for wait in waiting:
            wait.done.set()  # (no header: the error)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        threading.Thread(target=self.proc.wait, daemon=True).start()  # reaped


def recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray(n)
    return bytes(buf) if _recv_into(sock, buf) else None


def _recv_into(sock: socket.socket, buf: bytearray) -> bool:
    view, got = memoryview(buf), 0
    while got < len(buf):
        k = sock.recv_into(view[got:])
        if k == 0:
            return False
        got += k
    return True
