"""One Hub request with bounded waits, retries and our errors: the HTTP layer under the range reader, the listing
and the huggingface_hub (``HfApi``) calls.

Every request goes through huggingface_hub's own HTTP session (``get_session()``: its headers, proxies, endpoint,
token and offline switch) and error mapping (``hf_raise_for_status``), but never through its download cache.
huggingface_hub >= 1.0 (an httpx-style session).

Bounded waits: each request has a connect and a read timeout (huggingface_hub's conventions: ``HF_HUB_ETAG_TIMEOUT``
for API calls, ``HF_HUB_DOWNLOAD_TIMEOUT`` for file reads, taken from the environment at call time, else from
``huggingface_hub.constants``). :func:`request` also has a total deadline (two timeouts plus the body at
``_MIN_RATE`` bytes/s), so a server that trickles cannot hold a read for ever either. Failed attempts (timeouts,
dropped connections, 408/429/5xx, a short body, a ``Content-Range`` other than the one asked for) are retried
``_RETRIES`` times with exponential backoff (``Retry-After`` honoured up to ``_MAX_WAIT_S``), then raise
:class:`HubError` naming the file. :func:`call_api` gives an ``HfApi`` call the same timeouts, retries, errors
and a total deadline (it reads its answer itself: the call is waited for in a thread). No lock is held while
waiting on the network.

Bounded bodies, whatever client reads them: our requests read at most ``_API_BODY_MAX`` bytes (or the exact
length asked for); huggingface_hub's answers to the calls we make through it (:func:`call_api`, and publishing,
:func:`bounded_answers`) are decoded by us too, in the thread that makes them: gzip or deflate only, inflated a
piece at a time within ``_API_BODY_MAX`` (a gzip bomb stops there), a JSON answer depth-guarded before
huggingface_hub parses it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import (
    ArgumentError,
    HubAuthError,
    HubError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SourceNotFoundError,
)
from ..utils.fileio import load_json

if TYPE_CHECKING:
    from huggingface_hub import HfApi

__all__ = ["REPO_ID", "Retry", "Where", "bounded_answers", "call_api", "check_commit", "hf_api", "hub_endpoint",
           "network_errors", "parse_repo_id", "request", "request_json", "request_timeout", "session_timeouts", "short",
           "translate"]

T = TypeVar("T")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_RETRIES = 4
_BACKOFF_S = 0.25
_MAX_WAIT_S = 8.0
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # huggingface_hub's http_backoff retries these
_MIN_RATE = 32 * 1024  # bytes/s a response body must average (past two timeouts) before its deadline
_API_BUDGET_BYTES = 64 * 1024  # the body an HfApi metadata call's deadline allows for (answers are far smaller)
_API_BODY_MAX = 64 << 20  # the most an API answer (JSON) may hold


def network_errors() -> tuple[type[BaseException], ...]:
    """Exception classes of a failed connection, whichever HTTP client huggingface_hub uses."""
    return (ConnectionError, TimeoutError, _http_module().TransportError)


def parse_repo_id(repo_id: str) -> str:
    """Validate ``org/name``; the parts become local folder names, so nothing else is accepted."""
    if not isinstance(repo_id, str) or not REPO_ID.match(repo_id) or ".." in repo_id:
        raise ArgumentError(f"{repo_id!r:.120} is not a Hub dataset repo id of the form 'org/name' (letters, "
                            f"digits, '-', '_', '.'; no '..')", repo_id=repo_id if isinstance(repo_id, str) else None)
    return repo_id


def request_timeout(kind: str = "api") -> float:
    """Connect and read timeout in seconds: ``HF_HUB_ETAG_TIMEOUT`` for API calls (``kind="api"``),
    ``HF_HUB_DOWNLOAD_TIMEOUT`` for file reads (``kind="download"``), as huggingface_hub names them."""
    from huggingface_hub import constants

    name = "HF_HUB_ETAG_TIMEOUT" if kind == "api" else "HF_HUB_DOWNLOAD_TIMEOUT"
    for raw in (os.environ.get(name), getattr(constants, name, None)):
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and value > 0:
            return value
    return 10.0


def hub_endpoint(value: str | None = None) -> str:
    """The Hub's base URL: ``value``, else huggingface_hub's (``HF_ENDPOINT``), without a trailing slash."""
    from huggingface_hub import constants

    return (value or constants.ENDPOINT).rstrip("/")


def hf_api(url: str | None = None, token: str | bool | None = None) -> HfApi:
    """huggingface_hub's client for ``url`` (default: :func:`hub_endpoint`); call it through :func:`call_api`."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_endpoint(url), token=token)


def _http_module() -> Any:
    """The HTTP library of huggingface_hub's session (httpx for 1.x, httpx2 for 2.x): timeouts and errors."""
    from huggingface_hub.utils import get_session

    return sys.modules[type(get_session()).__module__.split(".")[0]]


@dataclass(frozen=True)
class Where:
    """What a request is about, for messages and error fields."""

    repo_id: str
    revision: str | None = None
    path: str | None = None

    def __str__(self) -> str:
        text = self.repo_id + (f"@{self.revision}" if self.revision else "")
        return text + (f":{self.path}" if self.path else "")

    def fields(self, **more: Any) -> dict[str, Any]:
        return {"repo_id": self.repo_id, "revision": self.revision, "path": self.path, **more}


class Retry(Exception):
    """A failed attempt that deserves another one (raised by a ``check`` of :func:`request`), with the HTTP status
    and response it got, if any, and the wait the server asked for (``Retry-After``)."""

    def __init__(self, message: str, *, status: int | None = None, response: Any = None, wait: float = 0.0):
        super().__init__(message)
        self.status, self.response, self.wait = status, response, wait


def translate(exc: Exception, where: Where) -> Exception:
    """huggingface_hub's errors -> ours (which name the repo, revision and file)."""
    from huggingface_hub import errors as hf

    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    fields = where.fields(status=status, response=response)
    if status in (401, 403):
        return HubAuthError(f"{where}: not authorized (HTTP {status}); the repo is private or gated: pass token= "
                            f"or log in with `hf auth login`", **fields)
    if isinstance(exc, hf.RevisionNotFoundError):
        return RevisionNotFoundError(f"{where.repo_id}: revision {where.revision!r} not found")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return RepoNotFoundError(f"{where.repo_id}: dataset repository not found")
    if isinstance(exc, hf.EntryNotFoundError):
        return SourceNotFoundError(f"{where}: file not found on the Hub")
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return HubError(f"{where.repo_id}: HF_HUB_OFFLINE is set and the data asked for is not in the local store",
                        **fields)
    return HubError(f"{where}: Hub request failed: {exc}", **fields)


def _retry_after(headers: Any) -> float:
    try:
        return min(float(headers.get("retry-after", 0)), _MAX_WAIT_S)
    except (TypeError, ValueError):
        return 0.0


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages quoting what a server sent."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _attempts(where: Where, attempt: Callable[[], T]) -> T:
    """``attempt()`` until it returns, at most ``_RETRIES + 1`` times with exponential backoff (``Retry-After``
    honoured up to ``_MAX_WAIT_S``): an attempt that raises :class:`Retry`, times out or loses its connection is
    tried again, anything else it raises ends the call; after the last attempt, a :class:`HubError` with the last
    failure."""
    http = _http_module()
    last: Exception | None = None
    for n in range(_RETRIES + 1):
        wait = _BACKOFF_S * 2**n
        try:
            return attempt()
        except Retry as exc:
            last, wait = exc, max(wait, exc.wait)
        except (http.TimeoutException, http.NetworkError, http.RemoteProtocolError) as exc:
            if _no_such_host(exc):  # no network (or no such host): trying again would only make the user wait
                raise HubError(f"{where}: cannot reach the Hub at {hub_endpoint()} ({exc}): no network here? "
                               f"HF_HUB_OFFLINE=1 serves what this machine already holds (stores opened before); "
                               f"HF_ENDPOINT points at a mirror or at a local test Hub (`python -m "
                               f"lerobot_zarr.testing.hub_server --sample demo/sample` prints what to export)",
                               **where.fields()) from exc
            last = exc  # stalled, dropped or reset: try again
        if n < _RETRIES:
            time.sleep(min(wait, _MAX_WAIT_S))
    raise HubError(f"{where}: failed after {_RETRIES + 1} attempts ({last or 'no answer'})",
                   **where.fields(status=getattr(last, "status", None),
                                  response=getattr(last, "response", None))) from last


def _no_such_host(exc: BaseException) -> bool:
    """Whether a failed connection failed to resolve the host's name (``socket.gaierror`` somewhere in its
    causes): offline, or a mistyped endpoint."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, socket.gaierror):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def request(method: str, url: str, where: Where, *, token: str | bool | None = None, kind: str = "api",
            headers: dict[str, str] | None = None, params: dict | None = None, expect_bytes: int | None = None,
            check: Callable[[Any], None] | None = None) -> tuple[Any, bytes]:
    """One request through huggingface_hub's session with bounded waits and retries: ``(response, body)``.

    ``expect_bytes``: the exact body length (a shorter or longer body is a failed attempt); without it the body
    may hold up to ``_API_BODY_MAX`` bytes. ``check(response)`` looks at the status and headers before the body is
    read and raises :class:`Retry` (try again) or a :class:`HubError`. HTTP errors other than 408/429/5xx raise at
    once, translated (401/403 -> :class:`HubAuthError`, missing repo / revision / file -> ``*NotFoundError``).
    """
    from huggingface_hub import errors as hf
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    timeout = request_timeout(kind)
    limit = _API_BODY_MAX if expect_bytes is None else expect_bytes
    budget = 2 * timeout + (1 << 20 if expect_bytes is None else expect_bytes) / _MIN_RATE
    all_headers = {**build_hf_headers(token=token), **(headers or {})}
    http = _http_module()

    def attempt() -> tuple[Any, bytes]:
        deadline = time.monotonic() + budget
        try:
            with (bounded_answers(where, max(limit, 1 << 20), json_guard=False),
                  get_session().stream(method, url, headers=all_headers, params=params, timeout=http.Timeout(timeout),
                                       follow_redirects=True) as response):
                status = response.status_code
                if status in _RETRY_STATUS:
                    raise Retry(f"{where}: HTTP {status}", status=status, response=response,
                                wait=_retry_after(response.headers))
                if status >= 400:  # read (bounded) here: huggingface_hub reads the error body without a limit
                    read = http.Response(status, headers=response.headers, request=response.request,
                                         content=_read_body(response, 1 << 20, deadline, where, budget))
                    try:
                        hf_raise_for_status(read)
                    except Exception as exc:  # huggingface_hub's typed HTTP errors, translated
                        raise translate(exc, where) from exc
                    raise HubError(f"{where}: HTTP {status}", **where.fields(status=status, response=read))
                if check is not None:
                    check(response)
                body = _read_body(response, limit, deadline, where, budget)
                if expect_bytes is not None and len(body) != expect_bytes:
                    raise Retry(f"{where}: asked for {expect_bytes} bytes, got {len(body)}")
                return response, body
        except hf.OfflineModeIsEnabled as exc:
            raise translate(exc, where) from exc
        except (http.TimeoutException, http.NetworkError, http.RemoteProtocolError):
            raise  # tried again
        except http.HTTPError as exc:  # not worth another attempt: a proxy error, an undecodable body...
            raise HubError(f"{where}: Hub request failed ({exc!r})", **where.fields()) from exc

    return _attempts(where, attempt)


def _read_body(response: Any, limit: int, deadline: float, where: Where, budget: float) -> bytes:
    chunks, n = [], 0
    for chunk in response.iter_bytes():
        n += len(chunk)
        if n > limit:
            raise Retry(f"{where}: the server sent more than the {limit} bytes expected")
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise Retry(f"{where}: too slow, {n} bytes after {budget:.1f} s (deadline of the request)")
    return b"".join(chunks)


def request_json(url: str, where: Where, *, token: str | bool | None = None, method: str = "GET",
                 params: dict | None = None) -> tuple[Any, Any]:
    """``(response, parsed JSON)`` of an API call (see :func:`request`)."""
    response, body = request(method, url, where, token=token, params=params)
    return response, load_json(body, f"{where}: the Hub's answer to {url}",
                               error=lambda message: HubError(message, **where.fields()))


def call_api(where: Where, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, an ``HfApi`` metadata call, with :func:`request`'s timeouts (``HF_HUB_ETAG_TIMEOUT``
    on the session), retries and errors. An answer of an unexpected shape (huggingface_hub's parse fails) is a
    :class:`HubError`.

    huggingface_hub reads the answer itself, so the total deadline (two timeouts plus ``_API_BUDGET_BYTES`` at
    ``_MIN_RATE``: these calls answer a few hundred bytes) is kept by waiting on the call in a daemon thread; an
    attempt past it counts as a stall (the thread is left to end at its read timeout)."""
    from huggingface_hub import errors as hf

    http = _http_module()

    def attempt() -> T:
        try:
            with session_timeouts("api"):
                return _within(2 * request_timeout("api") + _API_BUDGET_BYTES / _MIN_RATE, where, fn, *args,
                               **kwargs)
        except hf.OfflineModeIsEnabled as exc:
            raise translate(exc, where) from exc
        except hf.HfHubHTTPError as exc:
            response = getattr(exc, "response", None)
            status = getattr(response, "status_code", None)
            if status not in _RETRY_STATUS:
                raise translate(exc, where) from exc
            raise Retry(f"{where}: HTTP {status}", status=status, response=response,
                        wait=_retry_after(response.headers)) from exc
        except (http.TimeoutException, http.NetworkError, http.RemoteProtocolError):
            raise  # tried again
        except http.HTTPError as exc:
            raise HubError(f"{where}: Hub request failed ({exc!r})", **where.fields()) from exc
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # JSON of another shape, or none
            raise HubError(f"{where}: unexpected answer from the Hub ({short(exc)})", **where.fields()) from exc

    return _attempts(where, attempt)


def _within(budget: float, where: Where, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` run in a daemon thread and waited for ``budget`` seconds at most, else :class:`Retry`."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            with bounded_answers(where):
                box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001  (raised again in the caller's thread)
            box["error"] = exc

    thread = threading.Thread(target=run, name="lerobot_zarr-hub-api", daemon=True)
    thread.start()
    thread.join(budget)
    if thread.is_alive():
        raise Retry(f"{where}: too slow, no complete answer after {budget:.1f} s (deadline of the request)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def check_commit(value: Any, where: Where, name: str) -> str:
    """A commit id from the server, used as a folder name later: a 40-hex sha or a :class:`HubError`."""
    if not isinstance(value, str) or not _SHA.match(value):
        raise HubError(f"{where.repo_id}: the Hub gave {short(value)} as the commit of {name!r}, which is not a "
                       f"40-hex commit sha", **where.fields())
    return value


_bounded_lock = threading.Lock()
_bounded: dict[int, tuple[Any, Any, int]] = {}  # id(session) -> (session, its own timeout, users)


@contextlib.contextmanager
def session_timeouts(kind: str = "download") -> Iterator[None]:
    """Connect/read timeouts (:func:`request_timeout` of ``kind``) on huggingface_hub's shared session while the
    block runs, for the HfApi calls that pass none of their own (refs, whoami, commit, LFS upload, tag, repo
    creation). The session's own setting is put back afterwards; blocks that overlap share the first one's
    timeouts. (A session huggingface_hub re-creates inside the block, after a connection error, has its default
    again.)"""
    from huggingface_hub.utils import get_session

    session = get_session()
    key = id(session)
    with _bounded_lock:
        entry = _bounded.get(key)
        if entry is None:
            _bounded[key] = (session, session.timeout, 1)
            session.timeout = _http_module().Timeout(request_timeout(kind))
        else:
            _bounded[key] = (entry[0], entry[1], entry[2] + 1)
    try:
        yield
    finally:
        with _bounded_lock:
            session, own, users = _bounded[key]
            if users == 1:
                del _bounded[key]
                session.timeout = own
            else:
                _bounded[key] = (session, own, users - 1)


# ------------------------------------------------------------------------------------------------ bounded answers
_answers = threading.local()  # .bound: (where, limit, json_guard) while this thread's answers are bounded
_hooks_lock = threading.Lock()
_ENCODINGS = ("gzip", "x-gzip", "deflate")  # what bounded answers may use (httpx inflates br/zstd unbounded too)


@contextlib.contextmanager
def bounded_answers(where: Where, limit: int = _API_BODY_MAX, *, json_guard: bool = True) -> Iterator[None]:
    """While the block runs, the answers to the requests this thread makes through huggingface_hub's session (its
    ``HfApi`` calls, or ours) are read by us: at most ``limit`` bytes once decoded (``Retry`` past it: a gzip bomb
    inflates only that far), encoded in gzip or deflate only (asked for so; anything else is a :class:`HubError`),
    and with ``json_guard`` a JSON answer nested deeper than the depth guard is a :class:`HubError` before
    huggingface_hub parses it. Other threads' requests (a user's own downloads) are untouched."""
    from huggingface_hub.utils import get_session

    hooks = get_session().event_hooks  # the session's own lists (huggingface_hub may make a new session later)
    with _hooks_lock:
        if _ask_bounded not in hooks["request"]:
            hooks["request"].append(_ask_bounded)
        if _read_bounded not in hooks["response"]:
            hooks["response"].append(_read_bounded)
    outer = getattr(_answers, "bound", None)
    _answers.bound = (where, limit, json_guard)
    try:
        yield
    finally:
        _answers.bound = outer


def _ask_bounded(request: Any) -> None:
    """Accept only what a bounded answer may use (httpx also offers br and zstd where their packages are there)."""
    if getattr(_answers, "bound", None) is not None:
        offered = [e.strip() for e in request.headers.get("accept-encoding", "identity").split(",")]
        request.headers["Accept-Encoding"] = ", ".join(
            e for e in offered if e.split(";")[0].strip().lower() in (*_ENCODINGS, "identity")) or "identity"


def _read_bounded(response: Any) -> None:
    bound = getattr(_answers, "bound", None)
    if bound is None:
        return
    where = bound[0]
    encodings = [e.strip().lower() for e in response.headers.get("content-encoding", "").split(",")]
    encodings = [e for e in encodings if e and e != "identity"]
    refused = [e for e in encodings if e not in _ENCODINGS]
    if refused:
        response.close()
        raise HubError(f"{where}: the Hub answered in the content encoding {short(refused[0])}, which was not asked "
                       f"for (gzip or deflate)", **where.fields(status=response.status_code))
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]  # decoded by the stream below, not by the HTTP client
    is_json = bound[2] and "json" in response.headers.get("content-type", "").lower()
    response.stream = _bounded_stream_class(_http_module())(response.stream, encodings, where, bound[1], is_json)


@functools.cache
def _bounded_stream_class(http: Any) -> type:
    """A ``SyncByteStream`` of the HTTP library ``http`` (what its responses must hold) that decodes a raw stream
    within a limit and depth-guards a JSON body (see :func:`bounded_answers`)."""

    class BoundedStream(http.SyncByteStream):
        def __init__(self, raw: Any, encodings: list[str], where: Where, limit: int, is_json: bool):
            self.raw, self.encodings, self.where, self.limit, self.is_json = raw, encodings, where, limit, is_json

        def __iter__(self) -> Iterator[bytes]:
            pieces: Iterator[bytes] = iter(self.raw)
            for encoding in reversed(self.encodings):
                pieces = _inflate(pieces, encoding, self.where)
            total, kept = 0, []
            for piece in pieces:
                total += len(piece)
                if total > self.limit:
                    kept.clear()  # not held by the traceback while the call is tried again
                    raise Retry(f"{self.where}: the server sent more than the {self.limit} bytes expected (decoded)")
                if self.is_json:
                    kept.append(piece)
                yield piece
            if self.is_json:
                load_json(b"".join(kept), f"{self.where}: the Hub's answer",
                          error=lambda message: HubError(message, **self.where.fields()))

        def close(self) -> None:
            self.raw.close()

    return BoundedStream


def _inflate(pieces: Iterator[bytes], encoding: str, where: Where) -> Iterator[bytes]:
    """``pieces`` of a gzip or deflate stream, inflated at most 1 MiB at a time (so a bomb costs no more memory than
    the pieces the reader keeps). "deflate" is zlib-wrapped as the standard says, or raw as some servers send it."""
    decoder = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding != "deflate" else zlib.MAX_WBITS)
    started = False
    for data in pieces:
        while data:
            try:
                out = decoder.decompress(data, 1 << 20)
            except zlib.error as exc:
                if encoding == "deflate" and not started:
                    decoder, started = zlib.decompressobj(-zlib.MAX_WBITS), True
                    continue
                raise HubError(f"{where}: undecodable {encoding} answer from the Hub ({exc})",
                               **where.fields()) from None
            started = True
            if out:
                yield out
            data = decoder.unconsumed_tail
    yield decoder.flush()
