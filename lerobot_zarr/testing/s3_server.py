"""An S3-compatible server for tests: moto's S3 (``moto[s3]``, from PyPI) behind the test Hub's network model.

moto answers the S3 API (buckets, objects, ranges, listings, multipart uploads, conditional writes with
``If-Match`` / ``If-None-Match``); this module serves it over HTTP on 127.0.0.1 with what the test Hub has
(:mod:`.hub_network`): a record of every request (:class:`~.hub_network.HubStats`), injected faults (stalls, short
or wrong answers, 5xx, dropped connections) and a :class:`~.hub_network.NetworkModel` (a round trip per request and
one shared link for every answer).

Three things differ from moto's own server (``moto_server``): connections set ``TCP_NODELAY`` (headers and body go
out in separate writes; without it each answer waits on a delayed ACK, ~40 ms); a ranged ``GET`` is answered with
the bytes of the range read from moto's object, where moto copies the whole object for every range (32 ms for a
32 MiB pack: the server, not the client, would be measured); and a plain ranged ``GET`` of an object that exists
(no condition, no query) is answered from moto's object and its headers without moto's request handling (a few ms
of Python per request). moto decides everything else: writes, listings, conditions, a missing key, an
unsatisfiable range, errors.

HF Storage Buckets are S3 behind a gateway whose endpoint is scoped to a namespace (``https://s3.hf.co/<ns>``,
path-style): ``namespaces`` makes this server answer ``/<ns>/<bucket>/<key>`` the same way.

Usage::

    with S3Server(network=NetworkModel(latency_s=0.02)) as s3:
        s3.create_bucket("data")
        os.environ.update(s3.client_env())   # AWS_ENDPOINT_URL, keys, region, AWS_ALLOW_HTTP

``python -m lerobot_zarr.testing.s3_server`` serves until stopped (for a benchmark, in a process of its own);
``GET /__stats`` answers its record as JSON, ``POST /__reset`` clears it, ``POST /__network?latency=&rate=`` sets
the model.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from .hub_network import (
    FAULT_KINDS,
    Dropped,
    Fault,
    Faults,
    HubStats,
    Link,
    NetworkModel,
    RequestRecord,
    close_abruptly,
    settle,
)

__all__ = ["S3Server", "ACCESS_KEY", "SECRET_KEY", "REGION"]

ACCESS_KEY = "lerobot-zarr-test-key"
SECRET_KEY = "lerobot-zarr-test-secret"
REGION = "us-east-1"
_CHUNK = 64 * 1024
_CONTROL = "/__"  # this server's own endpoints (not S3)


def _moto_app():
    try:
        from moto.moto_server.werkzeug_app import create_backend_app
    except ImportError as exc:  # the test extra brings moto[s3], flask and flask-cors
        raise ImportError(f"the test S3 server needs moto[s3], flask and flask-cors ({exc}): "
                          f"pip install 'moto[s3]' flask flask-cors") from exc
    return create_backend_app("s3")  # S3 only: moto's dispatcher would look for the service of every request


def _moto_key(bucket: str, key: str):
    """moto's object ``key`` of ``bucket`` (the account moto uses for requests signed with any key)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    return s3_backends[DEFAULT_ACCOUNT_ID]["aws"].get_object(bucket, key)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256  # many connections opened at once (a client's parallel ranges) wait, not dropped

    def handle_error(self, request, client_address) -> None:
        """A client that went away (killed, timed out) is no server error: nothing printed; others are recorded."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, TimeoutError)):
            self.owner.errors.append(traceback.format_exc())

    def __init__(self, address, handler, owner: S3Server):
        self.owner = owner
        self.conns: set[socket.socket] = set()
        self.conns_lock = threading.Lock()
        self.counter = 0
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "lerobot-zarr-test-s3/1.0"
    timeout = 120
    server: _Server

    def log_message(self, format, *args):
        pass

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.conns_lock:
            self.server.conns.add(self.connection)
            self.server.counter += 1
            self._conn_id = self.server.counter
        self._served = 0

    def finish(self):
        try:
            super().finish()
        finally:
            with self.server.conns_lock:
                self.server.conns.discard(self.connection)

    def do_GET(self):
        self._handle("GET")

    def do_HEAD(self):
        self._handle("HEAD")

    def do_PUT(self):
        self._handle("PUT")

    def do_POST(self):
        self._handle("POST")

    def do_DELETE(self):
        self._handle("DELETE")

    # --------------------------------------------------------------------------------------------------------
    def _handle(self, method: str) -> None:
        owner = self.server.owner
        split = urlsplit(self.path)
        path = split.path
        if path.startswith(_CONTROL):
            return self._control(method, path, split.query)
        for ns in owner.namespaces:  # an HF Buckets-style endpoint scoped to a namespace
            if path.startswith(f"/{ns}/"):
                path = path[len(ns) + 1:]
                break
        rec = RequestRecord(method, unquote(path), split.query, self.headers.get("Range"), connection=self._conn_id,
                            started=time.monotonic())
        owner.stats.add(rec)
        self._rec, self._sent_headers = rec, False
        try:
            body = self._read_body(rec)
            fault = owner.take_fault(method, rec.path, split.query)
            network = owner.network
            if network is not None:
                rtts = 1 + (network.handshake_rtts if not self._served else 0)
                if owner.stopping.wait(network.latency_s * rtts):
                    raise Dropped
                if network.settle:  # and the client (in this process) has sent all it can without this answer
                    settle(owner.stopping)
            self._served += 1
            if fault is not None and fault.kind in ("500", "503", "401", "403"):
                status = int(fault.kind)
                return self._answer(status, {"Content-Type": "application/xml"},
                                    b"<Error><Code>InjectedFault</Code></Error>", None)
            if fault is not None and fault.kind == "reset":
                raise Dropped
            upload = parse_qs(split.query).get("uploadId", [""])[0] if method == "POST" else ""
            if upload and upload in owner.completed_late:  # as AWS S3: an upload completed is no more
                return self._answer(404, {"Content-Type": "application/xml"}, b"<Error><Code>NoSuchUpload</Code>"
                                    b"<Message>The specified upload does not exist.</Message></Error>", None)
            status, headers, data = self._moto(method, path, split.query, body)
            if fault is not None and fault.kind == "late" and upload and status == 200:  # completed, answered 500
                owner.completed_late.add(upload)
                status, headers, data = 500, {"Content-Type": "application/xml"}, b"<Error><Code>InternalError</Code>" \
                    b"</Error>"
            self._answer(status, headers, data, fault)
        except Dropped:
            self._abort()
        except (ConnectionError, TimeoutError, socket.timeout):
            self.close_connection = True
        except Exception as err:  # a server bug: 500, keep the traceback for the test
            owner.errors.append(traceback.format_exc())
            if self._sent_headers:
                self._abort()
            else:
                self._answer(500, {"Content-Type": "text/plain"}, f"test S3 server error: {err!r}".encode(), None)
        finally:
            if not rec.ended:
                rec.ended = time.monotonic()

    def _read_body(self, rec: RequestRecord) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
            data = b"".join(parts)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(n) if n else b""
            if len(data) != n:
                raise ConnectionError("truncated request body")
        rec.bytes_received = len(data)
        return data

    def _moto(self, method: str, path: str, query: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """moto's answer; a ranged GET is asked as a HEAD (moto's status and headers for the range) and its bytes
        read from the object's buffer. A plain ranged GET of an object that exists (no condition, no query) is
        answered from moto's object itself, with its headers, without moto's request handling (a few ms per request
        of Python: the server would be what a benchmark of many small ranges measures). Writes one at a time."""
        fast = self._plain_range(method, path, query)
        if fast is not None:
            return fast
        if method in ("PUT", "POST", "DELETE"):  # moto's writes are not safe at once: a PUT retried by a client
            with self.server.owner.writing:      # whose first try timed out closes the first's buffer under it
                return self._ask_moto(method, path, query, body)
        return self._ask_moto(method, path, query, body)

    def _ask_moto(self, method: str, path: str, query: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        from werkzeug.test import EnvironBuilder, run_wsgi_app

        headers = {k: v for k, v in self._forwarded().items()
                   if k.lower() not in ("content-length", "transfer-encoding")}
        ranged = method == "GET" and "range" in {k.lower() for k in headers}
        environ = EnvironBuilder(path=path, base_url=f"http://{self.headers.get('Host', 'localhost')}",
                                 query_string=query, method="HEAD" if ranged else method, headers=headers,
                                 data=body).get_environ()
        app_iter, status, answer = run_wsgi_app(self.server.owner.app, environ, buffered=True)
        try:
            data = b"" if ranged else b"".join(app_iter)
        finally:
            close = getattr(app_iter, "close", None)
            if close is not None:
                close()
        code = int(status.split()[0])
        drop = ("server", "date") if method == "HEAD" else ("content-length", "server", "date")
        out = {k: v for k, v in answer.items() if k.lower() not in drop}
        if ranged:
            if code == 206:
                first, last = (int(x) for x in answer["Content-Range"].split()[1].split("/")[0].split("-"))
                data = self._range(path, first, last + 1)
            elif code == 200:  # moto ignores this Range: the whole object
                return self._whole(path, query, body)
            else:
                data = b""
        return code, out, data

    def _forwarded(self) -> dict[str, str]:
        """The request's headers as moto is asked them."""
        return dict(self.headers.items())

    def _whole(self, path: str, query: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        from werkzeug.test import EnvironBuilder, run_wsgi_app

        headers = {k: v for k, v in self._forwarded().items() if k.lower() not in ("content-length", "range")}
        environ = EnvironBuilder(path=path, base_url=f"http://{self.headers.get('Host', 'localhost')}",
                                 query_string=query, method="GET", headers=headers, data=body).get_environ()
        app_iter, status, answer = run_wsgi_app(self.server.owner.app, environ, buffered=True)
        data = b"".join(app_iter)
        return int(status.split()[0]), {k: v for k, v in answer.items()
                                        if k.lower() not in ("content-length", "server", "date")}, data

    def _plain_range(self, method: str, path: str, query: str) -> tuple[int, dict[str, str], bytes] | None:
        """A ``GET`` with a satisfiable ``Range: bytes=a-b`` of an existing object and nothing else to decide
        (no query, no condition): ``206`` with the object's headers as moto gives them; else None (moto answers)."""
        if method != "GET" or query or not self.server.owner.fast_ranges:
            return None
        names = {k.lower() for k in self.headers}
        if names & {"if-match", "if-none-match", "if-modified-since", "if-unmodified-since", "x-amz-checksum-mode"}:
            return None
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", "").strip())
        bucket, _, key = path.lstrip("/").partition("/")
        if not m or not key:
            return None
        try:
            obj = _moto_key(bucket, unquote(key))
        except Exception:  # noqa: BLE001  (no such bucket: moto says so)
            return None
        if obj is None:
            return None
        first, last = int(m.group(1)), int(m.group(2))
        size = obj.size
        if first > last or first >= size:
            return None
        last = min(last, size - 1)
        headers = {k: v for k, v in obj.response_dict.items() if k.lower() != "content-length"}
        headers.update({"Content-Type": obj.metadata.get("Content-Type", "binary/octet-stream"),
                        "Accept-Ranges": "bytes", "Content-Range": f"bytes {first}-{last}/{size}"})
        return 206, headers, self._range(path, first, last + 1)

    @staticmethod
    def _range(path: str, start: int, stop: int) -> bytes:
        bucket, _, key = path.lstrip("/").partition("/")
        obj = _moto_key(bucket, unquote(key))
        with obj.lock:
            obj._value_buffer.seek(start)
            return obj._value_buffer.read(stop - start)

    def _answer(self, status: int, headers: Mapping[str, str], data: bytes, fault: Fault | None) -> None:
        """Send the answer through the injected fault and the network model."""
        rec = self._rec
        if fault is not None and fault.kind == "short" and data:
            data = data[:max(0, min(fault.after_bytes, len(data) - 1))]  # a complete answer, too short
        if fault is not None and fault.kind == "bad_range" and status == 206:
            rng = headers.get("Content-Range") or headers.get("content-range", "")
            first, last = (int(x) for x in rng.split()[1].split("/")[0].split("-"))
            total = rng.split("/")[1]
            shift = max(1, fault.after_bytes)
            headers = {k: v for k, v in headers.items() if k.lower() != "content-range"}
            headers["Content-Range"] = f"bytes {first + shift}-{last + shift}/{total}"
        if fault is not None and fault.kind == "stall" and (fault.after_bytes == 0 or not data):
            self._stall(fault)
        rec.status = status
        self.send_response(status)
        for key, value in headers.items():
            if key.lower() != "content-length":
                self.send_header(key, value)
        length = len(data) if fault is None or fault.kind != "long" else len(data) + max(1, fault.after_bytes)
        if self.command == "HEAD":  # moto's: the object's (or the range's) length
            length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), 0))
        self.send_header("Content-Length", str(length))
        rec.ended = time.monotonic()
        self.end_headers()
        self._sent_headers = True
        if self.command == "HEAD" or not data:
            return
        owner = self.server.owner
        for i in range(0, len(data), _CHUNK):
            piece = data[i:i + _CHUNK]
            if fault is not None and fault.kind in ("stall", "drop"):
                room = fault.after_bytes - rec.bytes_sent
                if room < len(piece):
                    if room > 0:
                        self._send(piece[:room])
                    if fault.kind == "stall":
                        self.wfile.flush()
                        self._stall(fault)
                    raise Dropped
            if fault is not None and fault.kind == "trickle":
                step = max(1, fault.rate // 10)
                for j in range(0, len(piece), step):
                    if owner.stopping.wait(0.1):
                        raise Dropped
                    self._send(piece[j:j + step])
                    self.wfile.flush()
                continue
            if owner.network is not None:
                owner.link.send(len(piece), owner.network.rate, owner.stopping)
            self._send(piece)
        if fault is not None and fault.kind == "long":  # promised more than it sends: the client waits, then EOF
            raise Dropped

    def _send(self, piece: bytes) -> None:
        self._rec.ended = time.monotonic()
        self._rec.bytes_sent += len(piece)
        self.wfile.write(piece)

    def _stall(self, fault: Fault) -> None:
        self.server.owner.stopping.wait(fault.seconds)
        raise Dropped

    def _abort(self) -> None:
        close_abruptly(self)

    def _control(self, method: str, path: str, query: str) -> None:
        owner = self.server.owner
        self._read_body(RequestRecord(method, path, query, None))
        if path == "/__stats":
            records = owner.stats.snapshot()
            out = {"requests": len(records), "bytes_sent": sum(r.bytes_sent for r in records),
                   "bytes_received": sum(r.bytes_received for r in records),
                   "round_trips": owner.stats.round_trips(),
                   "by_method": {m: sum(r.method == m for r in records) for m in {r.method for r in records}}}
            body = json.dumps(out).encode()
        elif path == "/__reset" and method == "POST":
            owner.stats.reset()
            body = b"{}"
        elif path == "/__network" and method == "POST":
            q = {k: v[0] for k, v in parse_qs(query).items()}
            owner.network = NetworkModel(float(q.get("latency", 0)), float(q.get("rate", 125e6))) if q else None
            body = b"{}"
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class S3Server:
    """moto's S3 on ``host:port`` (0: a free port) behind a :class:`~.hub_network.NetworkModel` (``network``,
    settable at any time; None: as fast as the machine), recording every request in ``stats``. Buckets live in
    this process's moto backend (shared by every server of the process: give buckets unique names).
    ``namespaces``: path prefixes of HF Buckets-style endpoints (``/<ns>/<bucket>/<key>``). ``fast_ranges``: plain
    ranged GETs answered from moto's objects directly (see :meth:`_Handler._plain_range`)."""

    handler: type[BaseHTTPRequestHandler] = _Handler  # (another API in front of moto: its own handler)

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, network: NetworkModel | None = None,
                 namespaces: Sequence[str] = (), fast_ranges: bool = True):
        self.host, self.port = host, port
        self.fast_ranges = fast_ranges
        self.network = network
        self.namespaces = tuple(namespaces)
        self.link = Link()
        self.stats = HubStats()
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.writing = threading.Lock()  # held while moto writes (see _Handler._moto)
        self.completed_late: set[str] = set()  # multipart uploads completed under a "late" fault
        self.app = _moto_app()
        self._faults = Faults()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        if self._httpd is None:
            raise RuntimeError("S3Server is not started")
        return f"http://{self.host}:{self.port}"

    def start(self) -> S3Server:
        if self._httpd is None:
            self.stopping.clear()
            self._httpd = _Server((self.host, self.port), self.handler, self)
            self.port = self._httpd.server_address[1]
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                            name=f"s3-server-{self.port}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with httpd.conns_lock:
            conns = list(httpd.conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def client_env(self, namespace: str | None = None) -> dict[str, str]:
        """The environment an S3 client (obstore, boto3, the AWS CLI) needs to reach this server."""
        endpoint = self.endpoint + (f"/{namespace}" if namespace else "")
        return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}

    def create_bucket(self, name: str) -> None:
        """Create a bucket (moto's backend, no request recorded)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        s3_backends[DEFAULT_ACCOUNT_ID]["aws"].create_bucket(name, REGION)

    def objects(self, bucket: str, prefix: str = "") -> dict[str, bytes]:
        """Every object of ``bucket`` under ``prefix`` (moto's backend, no request recorded)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        keys = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].get_bucket(bucket).keys
        return {name: keys[name].value for name in list(keys) if name.startswith(prefix)}

    def bytes_sent(self, path_prefix: str | None = None) -> int:
        return self.stats.bytes_sent(path_prefix)

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        return self.stats.requests(method, path_contains)

    def reset_stats(self) -> None:
        self.stats.reset()

    def inject_fault(self, *, path_contains: str, kind: str, count: int = 1, after_bytes: int = 0,
                     method: str | None = None, seconds: float = 60.0, rate: int = 16, query_contains: str = ""
                     ) -> None:
        """Make the next ``count`` requests whose path contains ``path_contains`` (and query ``query_contains``, of
        ``method``) fail: kinds as the test Hub's (:meth:`~.hub_server.HubServer.inject_fault`: ``"500"``,
        ``"401"``, ``"403"``, ``"drop"``, ``"reset"``, ``"stall"``, ``"trickle"``, ``"short"``, ``"bad_range"``),
        plus ``"503"``, ``"long"`` (a ``Content-Length`` ``after_bytes`` more than the body sent, then the
        connection closes) and ``"late"`` (a multipart upload's completion: done, but answered 500, as a completion
        answered too late; a retry of it meets AWS S3's answer, 404 ``NoSuchUpload``, where moto would complete it
        again)."""
        if kind not in (*FAULT_KINDS, "503", "long", "late") or kind == "bad_commit":
            raise ValueError(f"unknown fault kind {kind!r}")
        self._faults.add(Fault(path_contains, kind, count, after_bytes, method.upper() if method else None, seconds,
                               rate, query_contains=query_contains))

    def clear_faults(self) -> None:
        self._faults.clear()

    def take_fault(self, method: str, path: str, query: str = "") -> Fault | None:
        return self._faults.take(method, path, query)


def _buckets(values: Iterable[str]) -> list[str]:
    return [v for value in values for v in value.split(",") if v]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lerobot_zarr.testing.s3_server``: serve moto's S3 on 127.0.0.1 until stopped (SIGTERM or
    Ctrl-C); prints the environment a client needs, then ``ready``."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m lerobot_zarr.testing.s3_server", description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    parser.add_argument("--latency", type=float, default=None, help="seconds per request (the network model)")
    parser.add_argument("--rate", type=float, default=125e6, help="bytes/s of the shared link (default 1 Gbit/s)")
    parser.add_argument("--namespace", action="append", default=[], help="an HF Buckets-style path prefix")
    args = parser.parse_args(argv)
    network = NetworkModel(args.latency, args.rate) if args.latency is not None else None
    with S3Server(port=args.port, network=network, namespaces=args.namespace) as server:
        for bucket in _buckets(args.bucket):
            server.create_bucket(bucket)
        for key, value in server.client_env().items():
            print(f"{key}={value}")
        print("ready", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: server.stopping.set())
        try:
            server.stopping.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
