"""Object storage in a process forked from one that used it (a DataLoader worker, which Linux forks by default).

obstore's engine (a tokio runtime, one per process) does not survive a fork: in the child every request waits
forever, a client made anew there included (tried: a new ``S3Store`` in the child hangs as the parent's does). So
a :class:`~.client.Bucket` in such a process hands its requests to a *fetcher*: a fresh Python process (started,
not forked, at the first request) with an engine of its own, over a socket pair.

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import (
    ArgumentError,
    BucketAuthError,
    BucketError,
    CommitConflictError,
    LeRobotZarrError,
    ObjectChangedError,
    SourceNotFoundError,
)
from ..utils.fileio import load_json
from .client import Bucket, longest_call

__all__ = ["call", "FETCHER_START_S", "LIST_BYTES", "MAX_WRITE_BYTES"]

FETCHER_START_S = 60.0  # added to each deadline: the fetcher's start (an interpreter and our imports, under load)
_FRAME = struct.Struct("!II")  # header bytes, body bytes
_MAX_HEADER = 1 << 20
LIST_BYTES = 256 << 20  # the most a listing's answer may hold
MAX_WRITE_BYTES = 1 << 30  # the most bytes a relayed write carries (a bigger object: written from a file)
_IN_FLIGHT = 32
#: errors that cross as themselves (by name); any other is a BucketError with its text
_ERRORS = {cls.__name__: cls for cls in (BucketError, BucketAuthError, ObjectChangedError, SourceNotFoundError,
                                         CommitConflictError, ArgumentError)}


def call(bucket: Bucket, op: str, args: dict[str, Any], *, body: bytes = b"", limit: int,
         nbytes: int) -> tuple[dict, bytearray]:
    """Run ``op`` of ``bucket`` in this process's fetcher (started if none runs); its answer's header and body
    (at most ``limit`` bytes). ``nbytes``: the bytes the request moves (its deadline)."""
    where = bucket.location(args.get("rel", ""))
    if len(body) > MAX_WRITE_BYTES:
        raise ArgumentError(f"{where}: {len(body)} bytes to write from a forked process, more than "
                            f"{MAX_WRITE_BYTES}; write it from a file")
    header = {"op": op, "url": str(bucket.url), "options": bucket.options, **args}
    return _fetcher().call(header, body, limit, longest_call(nbytes) + FETCHER_START_S, where)


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
            proc = subprocess.Popen([sys.executable, "-m", "lerobot_zarr.cloud.relay", str(theirs.fileno())],
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
                    self.sock.sendall(_FRAME.pack(len(data), len(body)) + data)
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
                head = _recv_exactly(self.sock, _FRAME.size)
                if head is None:
                    raise EOFError("it ended")
                hlen, blen = _FRAME.unpack(head)
                if hlen > _MAX_HEADER:
                    raise ValueError(f"an answer header of {hlen} bytes")
                header = load_json(_recv_exactly(self.sock, hlen) or b"", "the fetcher's answer", error=ValueError)
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


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
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


# the fetcher's side ---------------------------------------------------------------------------------------------
def _serve(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    send, made = threading.Lock(), threading.Lock()
    buckets: dict[str, Bucket] = {}
    pool = ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-fetcher")

    def bucket_of(header: dict) -> Bucket:
        key = json.dumps([header["url"], header["options"]], sort_keys=True)
        with made:
            if key not in buckets:
                buckets[key] = Bucket(header["url"], header["options"])
            return buckets[key]

    def answer(header: dict, body: bytes) -> None:
        rid, limit = header.get("id"), int(header.get("limit", 0))
        try:
            out, data = _run(bucket_of(header), header, body)
            if len(data) > limit:
                raise BucketError(f"{header.get('rel')}: an answer of {len(data)} bytes, over {limit}")
        except LeRobotZarrError as exc:
            out, data = {"error": type(exc).__name__, "message": str(exc), "path": exc.path}, b""
        except Exception as exc:  # noqa: BLE001  (any failure is the caller's error, never the fetcher's end)
            out, data = {"error": "BucketError", "message": f"{type(exc).__name__}: {exc}"[:2000]}, b""
        text = json.dumps({**out, "id": rid}).encode()
        try:
            with send:
                sock.sendall(_FRAME.pack(len(text), len(data)) + text)
                if len(data):
                    sock.sendall(data)
        except OSError:
            os._exit(0)  # the process that asked is gone

    while True:
        head = _recv_exactly(sock, _FRAME.size)
        if head is None:
            break
        hlen, blen = _FRAME.unpack(head)
        raw = _recv_exactly(sock, hlen) if hlen <= _MAX_HEADER else None
        body = _recv_exactly(sock, blen) if raw is not None and blen <= MAX_WRITE_BYTES else None
        if raw is None or body is None:
            break
        pool.submit(answer, load_json(raw, "a relayed request", error=BucketError), body)
    os._exit(0)  # (requests under way are dropped: their asker is gone)


def _run(bucket: Bucket, h: dict, body: bytes) -> tuple[dict, Any]:
    op, rel = h["op"], h.get("rel", "")
    if op == "read":
        data, info = bucket._read(rel, h["start"], h["stop"], h.get("etag"), whole=h.get("whole", False),
                                  copy=False)
        return {"size": info.size, "etag": info.etag}, memoryview(data)
    if op == "head":
        info = bucket.head(rel)
        return {"info": None if info is None else [info.size, info.etag]}, b""
    if op == "list":
        listed = bucket.list(rel)
        return {}, json.dumps({k: [v.size, v.etag] for k, v in listed.items()}).encode()
    if op == "write":
        data = Path(h["file"]) if "file" in h else bytes(body)
        return {"etag": bucket.write(rel, data, if_absent=h.get("if_absent", False), if_match=h.get("if_match"))}, b""
    if op == "delete":
        bucket.delete(rel)
        return {}, b""
    raise BucketError(f"unknown request {op!r:.40}")


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
