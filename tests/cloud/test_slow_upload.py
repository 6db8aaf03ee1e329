"""A write over a slow uplink: the engine (reqwest) counts the time a request's body takes to send against its read
timeout, so a body taking longer than ``LEROBOT_ZARR_BUCKET_TIMEOUT`` to send failed every time, retried or not (a
part of 8 MiB at less than 6.7 Mbit/s with the default 10 s). A write is bounded by its total deadline instead."""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("obstore", reason="object storage needs obstore (lerobot_zarr's [cloud] extra)")

import lerobot_zarr.cloud.client as client  # noqa: E402
from lerobot_zarr.cloud.client import Bucket  # noqa: E402

_RATE = 1 << 20  # bytes/s the server reads a body at


def _slow_server(sock: socket.socket, bodies: list[int]) -> None:
    """Answer each PUT with 200 and an ETag after reading its body at ``_RATE``."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                piece = conn.recv(65536)
                if not piece:  # the client went before its headers
                    return
                head += piece
            head, body = head.split(b"\r\n\r\n", 1)
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            got = len(body)
            while got < length:
                piece = conn.recv(65536)
                if not piece:
                    break
                got += len(piece)
                time.sleep(len(piece) / _RATE)
            bodies.append(got)
            conn.sendall(b'HTTP/1.1 200 OK\r\nETag: "e1"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n')


def test_a_write_whose_body_takes_longer_than_the_timeout_to_send_succeeds(monkeypatch):
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(client.TIMEOUT_ENV, "1")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setattr(client, "_ATTEMPTS", 1)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    bodies: list[int] = []
    thread = threading.Thread(target=_slow_server, args=(sock, bodies), daemon=True)
    thread.start()
    try:
        bucket = Bucket("s3://slow-uplink/x", {"endpoint": f"http://127.0.0.1:{sock.getsockname()[1]}",
                                                "access_key_id": "k", "secret_access_key": "s", "region": "us-east-1"})
        start = time.monotonic()
        assert bucket.write("obj", b"\0" * (2 * _RATE)) == '"e1"'  # 2 s to send, 1 s read timeout
        assert bodies == [2 * _RATE] and time.monotonic() - start >= 1.5
    finally:
        sock.close()
