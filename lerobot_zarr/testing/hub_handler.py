"""The test Hub's HTTP plumbing: the threaded server that tracks its connections, and the request handler that
records each request, applies injected faults and the network model, authenticates and routes to
:class:`~lerobot_zarr.testing.hub_routes.Routes`."""

from __future__ import annotations

import json
import socket
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from .hub_network import Dropped, Fault, RequestRecord, close_abruptly, deep_json, gzip_bomb, settle
from .hub_routes import Routes, ServedHub
from .hub_storage import (
    CHUNK,
    FROM_PLURAL,
    INVALID_CREDENTIALS,
    URL_PREFIX,
    ReplyError,
    check_path,
    check_repo_id,
    dumps,
    header_safe,
)

__all__ = ["Handler", "HubHTTPServer"]


class HubHTTPServer(ThreadingHTTPServer):
    """The threaded server of one :class:`~lerobot_zarr.testing.hub_server.HubServer`; it tracks open connections
    so that stopping closes them."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, handler, hub: ServedHub):
        self.hub = hub
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._conn_counter = 0
        super().__init__(address, handler)

    def track(self, conn: socket.socket) -> int:
        """Register an open connection; returns its sequence number."""
        with self._conns_lock:
            self._conns.add(conn)
            self._conn_counter += 1
            return self._conn_counter

    def untrack(self, conn: socket.socket) -> None:
        with self._conns_lock:
            self._conns.discard(conn)

    def close_all_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(Routes, BaseHTTPRequestHandler):
    """One connection's requests: recorded, faults and the network model applied, authenticated, routed."""

    protocol_version = "HTTP/1.1"
    server_version = "lerobot-zarr-test-hub/1.0"
    timeout = 120  # idle keep-alive connections are closed after this many seconds
    server: HubHTTPServer

    def log_message(self, format, *args):
        pass

    def setup(self):
        super().setup()
        # headers and body go out in separate writes: without this each response waits on a delayed ACK (~40 ms)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn_id = self.server.track(self.connection)
        self._served = 0  # requests answered on this connection

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.untrack(self.connection)

    def do_GET(self):
        self._handle("GET")

    def do_HEAD(self):
        self._handle("HEAD")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_DELETE(self):
        self._handle("DELETE")

    # plumbing ----------------------------------------------------------------------------------------------
    @property
    def hub(self) -> ServedHub:
        return self.server.hub

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        self._raw_path = split.path
        self._query_string = split.query
        self._query = parse_qs(split.query, keep_blank_values=True)
        self._rec = RequestRecord(
            method, unquote(split.path), split.query, self.headers.get("Range"), connection=self._conn_id,
            started=time.monotonic(),
        )
        self.hub.stats.add(self._rec)
        self._headers_sent = False
        self._drop_after: int | None = None
        self._fault: Fault | None = None
        self._body: bytes = b""
        self._body_consumed = False
        try:
            fault = self.hub.take_fault(method, self._rec.path)
            if method != "PUT" or fault is not None:
                self._body = self._read_body()
            self._fault = fault
            network = self.hub.network
            if network is not None:  # the round trip (and a new connection's handshake) before any answer
                rtts = 1 + (network.handshake_rtts if not self._served else 0)
                if self.hub.stopping.wait(network.latency_s * rtts):
                    raise Dropped
                if network.settle:  # and the client has sent all it can without this answer
                    settle(self.hub.stopping)
            self._served += 1
            if fault is not None:
                if fault.kind in ("500", "401", "403"):
                    raise ReplyError(int(fault.kind), f"Injected fault (HTTP {fault.kind})")
                if fault.kind == "reset":
                    raise Dropped
                if fault.kind == "drop":
                    self._drop_after = fault.after_bytes
            segments = [unquote(s) for s in split.path.split("/")[1:]]
            while len(segments) > 1 and segments[-1] == "":
                segments.pop()
            self._route(method, segments)
        except ReplyError as err:
            self._send_error(err)
        except Dropped:
            self._abort()
        except (ConnectionError, TimeoutError, socket.timeout):
            self.close_connection = True
        except Exception as err:  # a server bug: answer 500 so that the test sees it, and keep the traceback
            self.hub.errors.append(traceback.format_exc())
            if self._headers_sent:
                self._abort()
            else:
                self._send_error(ReplyError(500, f"Internal error in test hub: {err!r}"))
        finally:
            if not self._rec.ended:  # nothing was written: a dropped or reset connection
                self._rec.ended = time.monotonic()

    def _read_chunks(self) -> Iterator[bytes]:
        """The request body, de-chunked if needed; counts bytes into the record."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("truncated chunked body")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                yield from self._read_exactly(size, "truncated chunked body")
                self.rfile.readline(65537)
        else:
            yield from self._read_exactly(int(self.headers.get("Content-Length") or 0), "truncated body")
        self._body_consumed = True

    def _read_exactly(self, remaining: int, truncated: str) -> Iterator[bytes]:
        """``remaining`` bytes of the body, in pieces; counts them into the record."""
        while remaining > 0:
            data = self.rfile.read(min(remaining, CHUNK))
            if not data:
                raise ConnectionError(truncated)
            remaining -= len(data)
            self._rec.bytes_received += len(data)
            yield data

    def _read_body(self) -> bytes:
        return b"".join(self._read_chunks())

    def _stall(self) -> None:
        """A ``"stall"`` fault: wait (until the server stops at the latest), then drop the connection."""
        self.hub.unstall.wait(self._fault.seconds)
        raise Dropped

    def _send(self, data: bytes) -> None:
        """Write to the client, noting the time first: ``ended`` is then never later than the moment the client
        can have the whole answer (and send its next request, whose ``started`` follows)."""
        self._rec.ended = time.monotonic()
        self.wfile.write(data)

    def _write(self, data: bytes) -> None:
        fault = self._fault
        if fault is not None and fault.kind == "stall" and self._headers_sent:
            room = fault.after_bytes - self._rec.bytes_sent
            if room < len(data):
                if room > 0:
                    self._rec.bytes_sent += room
                    self._send(data[:room])
                    self.wfile.flush()
                self._stall()
        if fault is not None and fault.kind == "trickle" and self._headers_sent:
            piece = max(1, fault.rate // 10)
            for i in range(0, len(data), piece):
                if self.hub.stopping.wait(0.1):
                    raise Dropped
                self._rec.bytes_sent += len(data[i:i + piece])
                self._send(data[i:i + piece])
                self.wfile.flush()
            return
        if self._drop_after is not None:
            room = self._drop_after - self._rec.bytes_sent
            if room < len(data):
                if room > 0:
                    self._rec.bytes_sent += room
                    self._send(data[:room])
                raise Dropped
        network = self.hub.network
        if network is None:
            self._rec.bytes_sent += len(data)
            self._send(data)
            return
        for i in range(0, len(data), CHUNK):
            piece = data[i:i + CHUNK]
            self.hub.link.send(len(piece), network.rate, self.hub.stopping)
            self._rec.bytes_sent += len(piece)
            self._send(piece)

    def _start(self, status: int, headers: Mapping[str, str], length: int) -> bool:
        """Send the status line and headers; returns whether a body follows."""
        has_body = self.command != "HEAD" and length > 0
        if self._drop_after is not None and not has_body:
            raise Dropped  # nothing to cut short: drop before the status line
        if self._fault is not None and self._fault.kind == "stall" and (self._fault.after_bytes == 0 or not has_body):
            self._stall()  # nothing answered at all
        self._rec.status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        if not self._body_consumed and self.command == "PUT":
            self.send_header("Connection", "close")
            self.close_connection = True
        self._rec.ended = time.monotonic()  # the headers go out now (the body, if any, follows through _send)
        self.end_headers()
        self._headers_sent = True
        return has_body

    def _finish_body(self) -> None:
        if self._drop_after is not None:
            raise Dropped

    def _send_bytes(self, status: int, body: bytes, headers: Mapping[str, str] | None = None,
                    content_type: str = "application/json; charset=utf-8") -> None:  # fmt: skip
        hdrs = {"Content-Type": content_type, **(headers or {})}
        fault = self._fault
        if fault is not None and fault.kind == "deep_json" and "json" in content_type:
            body = deep_json(fault.after_bytes or 100_000)
        elif fault is not None and fault.kind == "gzip_bomb":
            body, hdrs["Content-Encoding"] = gzip_bomb(fault.after_bytes or 1 << 30), "gzip"
        if self._start(status, hdrs, len(body)):
            self._write(body)
        self._finish_body()

    def _send_json(self, obj, status: int = 200, headers: Mapping[str, str] | None = None,
                   content_type: str = "application/json; charset=utf-8") -> None:  # fmt: skip
        self._send_bytes(status, dumps(obj), headers, content_type)

    def _send_error(self, err: ReplyError) -> None:
        if self._headers_sent:
            self._abort()
            return
        headers = dict(err.headers)
        if err.code:
            headers["X-Error-Code"] = err.code
        headers.setdefault("X-Error-Message", header_safe(err.message))
        try:
            self._send_json({"error": err.message}, err.status, headers)
        except Dropped:
            self._abort()

    def _abort(self) -> None:
        close_abruptly(self)

    # auth & lookups ----------------------------------------------------------------------------------------
    def _authenticate(self) -> None:
        """Sets ``self._user`` (``None`` when anonymous) and ``self._authorized``; 401 on an unknown token."""
        tokens = self.hub.tokens
        self._user = None
        self._authorized = tokens is None
        self._read_only = False
        if tokens is None:
            return
        header = self.headers.get("Authorization")
        if not header:
            return
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or token not in tokens:
            raise ReplyError(401, INVALID_CREDENTIALS, headers={"X-Error-Message": INVALID_CREDENTIALS})
        self._user = tokens[token]
        self._authorized = True
        self._read_only = token in self.hub.read_only

    def _require_auth(self) -> None:
        """For writes: a token (401 without), and one that may write (403 for a read-only one)."""
        if not self._authorized:
            raise ReplyError(401, "You must be authenticated to access this resource (pass a token).")
        if self._read_only:
            raise ReplyError(403, "This token has read access only; writing needs a token with write access.")

    def _repo(self, repo_type: str, repo_id: str, *, write: bool = False) -> dict:
        if write:
            self._require_auth()
        try:
            check_repo_id(repo_id)
        except ValueError as e:
            raise ReplyError(400, str(e)) from None
        repo = self.hub.storage.get_repo(repo_type, repo_id)
        if repo is None:
            raise ReplyError(404, "Repository not found", "RepoNotFound")
        if repo["private"] and not self._authorized:
            raise ReplyError(401, "Repository not found", "RepoNotFound")
        return repo

    def _resolve(self, repo: dict, rev: str) -> str:
        cid = self.hub.storage.resolve(repo, rev)
        if cid is None:
            raise ReplyError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return cid

    def _json_body(self) -> dict:
        try:
            data = json.loads(self._body or b"{}")
        except ValueError:
            raise ReplyError(400, "Request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise ReplyError(400, "Request body must be a JSON object")
        return data

    @staticmethod
    def _path(path: str, *, allow_root: bool = False) -> str:
        try:
            return check_path(path, allow_root=allow_root)
        except ValueError as e:
            raise ReplyError(400, str(e)) from None

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        return f"{self.hub.endpoint}/{URL_PREFIX[repo_type]}{repo_id}"

    def _flag(self, name: str) -> bool:
        values = self._query.get(name)
        return bool(values) and values[-1].lower() in ("1", "true", "yes")

    # routing -----------------------------------------------------------------------------------------------
    def _route(self, method: str, seg: list[str]) -> None:
        if seg and seg[0] == "__lfs":
            return self._lfs_put(method, seg[1:])
        self._authenticate()
        if seg and seg[0] == "api":
            return self._route_api(method, seg[1:])
        repo_type = "model"
        if seg and seg[0] in ("datasets", "spaces"):
            repo_type, seg = FROM_PLURAL[seg[0]], seg[1:]
        if len(seg) >= 4 and seg[2] == "resolve":
            if method not in ("GET", "HEAD"):
                raise ReplyError(405, "Method not allowed")
            return self._resolve_file(repo_type, f"{seg[0]}/{seg[1]}", seg[3], "/".join(seg[4:]))
        if len(seg) == 6 and seg[1].endswith(".git") and seg[2:] == ["info", "lfs", "objects", "batch"]:
            if method != "POST":
                raise ReplyError(405, "Method not allowed")
            return self._lfs_batch(repo_type, f"{seg[0]}/{seg[1][:-4]}")
        raise ReplyError(404, "Not Found")

    def _route_api(self, method: str, seg: list[str]) -> None:
        route = (method, tuple(seg[:2]))
        if route == ("GET", ("whoami-v2",)):
            return self._whoami()
        if route == ("POST", ("validate-yaml",)):
            return self._send_json({"errors": [], "warnings": []})
        if route == ("POST", ("repos", "create")):
            return self._create_repo()
        if route == ("DELETE", ("repos", "delete")):
            return self._delete_repo()
        if len(seg) < 3 or seg[0] not in FROM_PLURAL:
            raise ReplyError(404, "Not Found")
        repo_type, repo_id, rest = FROM_PLURAL[seg[0]], f"{seg[1]}/{seg[2]}", seg[3:]
        action, args = (rest[0], rest[1:]) if rest else ("", [])
        handlers = {
            ("GET", ""): lambda: self._info(repo_type, repo_id, None),
            ("GET", "revision"): lambda: self._info(repo_type, repo_id, "/".join(args)),
            ("GET", "tree"): lambda: self._tree(repo_type, repo_id, args),
            ("POST", "paths-info"): lambda: self._paths_info(repo_type, repo_id, "/".join(args)),
            ("GET", "refs"): lambda: self._refs(repo_type, repo_id),
            ("GET", "auth-check"): lambda: self._auth_check(repo_type, repo_id, args),
            ("GET", "commits"): lambda: self._commits(repo_type, repo_id, "/".join(args) or "main"),
            ("POST", "preupload"): lambda: self._preupload(repo_type, repo_id, "/".join(args)),
            ("POST", "commit"): lambda: self._commit(repo_type, repo_id, "/".join(args)),
            ("POST", "tag"): lambda: self._create_tag(repo_type, repo_id, "/".join(args)),
            ("DELETE", "tag"): lambda: self._delete_tag(repo_type, repo_id, "/".join(args)),
            ("POST", "branch"): lambda: self._create_branch(repo_type, repo_id, "/".join(args)),
            ("DELETE", "branch"): lambda: self._delete_branch(repo_type, repo_id, "/".join(args)),
            ("PUT", "settings"): lambda: self._settings(repo_type, repo_id),
        }
        handler = handlers.get((method, action))
        if handler is None:
            if any(a == action for _, a in handlers):
                raise ReplyError(405, "Method not allowed")
            raise ReplyError(404, "Not Found")
        no_args, needs_args = ("", "refs", "settings"), ("revision", "tree", "tag", "branch")
        if (action in no_args and args) or (action in needs_args and not args):
            raise ReplyError(404, "Not Found")
        return handler()
