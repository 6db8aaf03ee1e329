"""The fetcher of a forked process (:mod:`.relay`): ``python -m lerobot_zarr.cloud.fetcher FD`` serves the requests
that arrive on the socket ``FD`` with a :class:`~.client.Bucket` of its own per bucket and options (its engine runs
here: this process was started, not forked), each in a thread, and exits when the socket closes (its process ended
or let go of it)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import BucketError, LeRobotZarrError
from ..utils.fileio import load_json
from .client import Bucket
from .relay import FRAME, MAX_HEADER, MAX_WRITE_BYTES, recv_exactly

__all__ = ["serve"]

_IN_FLIGHT = 32


def serve(fd: int) -> None:
    """Answer the requests of the socket ``fd`` until it closes, then exit the process."""
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
                sock.sendall(FRAME.pack(len(text), len(data)) + text)
                if len(data):
                    sock.sendall(data)
        except OSError:
            os._exit(0)  # the process that asked is gone

    while True:
        head = recv_exactly(sock, FRAME.size)
        if head is None:
            break
        hlen, blen = FRAME.unpack(head)
        raw = recv_exactly(sock, hlen) if hlen <= MAX_HEADER else None
        body = recv_exactly(sock, blen) if raw is not None and blen <= MAX_WRITE_BYTES else None
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
    serve(int(sys.argv[1]))
