"""Hub I/O: resolve a revision the way LeRobot does, list a dataset repo, and read byte ranges of its files.

Every request goes through huggingface_hub's own HTTP session (``get_session()``: its headers, proxies, endpoint,
token and offline switch) and error mapping (``hf_raise_for_status``), but never through its download cache:
parquet files are opened as range-reading file objects, so only footers and the row groups asked for cross the
network, and the local store stays the only local copy. huggingface_hub >= 1.0 (an httpx-style session).

Bounded waits: each request has a connect and a read timeout (huggingface_hub's conventions: ``HF_HUB_ETAG_TIMEOUT``
for API calls, ``HF_HUB_DOWNLOAD_TIMEOUT`` for file reads, taken from the environment at call time, else from
``huggingface_hub.constants``) and a total deadline (two timeouts plus the body at ``_MIN_RATE`` bytes/s), so a
server that trickles cannot hold a read for ever either. Failed attempts (timeouts, dropped connections,
408/429/5xx, a short body, a ``Content-Range`` other than the one asked for) are retried ``_RETRIES`` times with
exponential backoff (``Retry-After`` honoured up to ``_MAX_WAIT_S``), then raise :class:`HubError` naming the
file. No lock is held while waiting on the network.

Trust: nothing the server sends becomes a local path unchecked. Commits must be 40-hex shas; tree paths pass
``safe_relpath`` (an odd name outside ``meta/``, ``data/`` and ``videos/`` is ignored, one inside them refused);
pagination links must stay on the endpoint (they are sent the token).
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote, urlsplit

from ..utils.fileio import load_json
from ..errors import (
    ArgumentError,
    CorruptSourceError,
    HubAuthError,
    HubError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SourceNotFoundError,
)
from ..lerobot.source_files import SourceFiles, safe_relpath
from ..lerobot.index_file import INDEX_FILE

if TYPE_CHECKING:  # pyarrow is imported where a parquet file is read
    import pyarrow.parquet as pq

__all__ = ["HubFiles", "resolve_revision", "parse_repo_id", "network_errors", "request", "request_json",
           "request_timeout", "session_timeouts", "check_commit", "REPO_ID"]

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_RETRIES = 4
_BACKOFF_S = 0.25
_MAX_WAIT_S = 8.0
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # huggingface_hub's http_backoff retries these
_MIN_RATE = 32 * 1024  # bytes/s a response body must average (past two timeouts) before its deadline
_API_BODY_MAX = 64 << 20  # the most an API answer (JSON) may hold
_MAX_PAGES = 10_000
# Read-ahead of file objects (videos): the first read after a seek, and the most a sequential read grows to.
# Measured in benchmarks/bench_hub.py (AV1 mp4, a one-episode and a whole open): without read-ahead a whole open
# makes ~4x the requests; starting at 256 KiB instead of 64 KiB read 2.4x the bytes for one episode.
_READ_AHEAD = (64 << 10, 8 << 20)
_SHARED_BLOCKS_BYTES = 64 << 20  # blocks shared by the readers of one file (a whole open: ~half the bytes)
_HELD_BYTES = 256 << 20  # bytes fetched ahead of their reads (whole files, footers' tails, ranges), oldest out
_FOOTER_GUESS = 64 * 1024  # tail read for a footer of unknown size (a LeRobot data file's is ~120 B per column
# chunk: 400 episodes x 7 columns is 330 KiB, hence footer_hint)
# Round trips against bytes: at 50 ms and 1 Gbit/s one round trip costs as much as ~6 MB. A metadata file up to
# _WHOLE_FILE_MAX is read whole in one request: where its parts are is unknown before its footer, and in a LeRobot
# episode table (row groups of 10 episodes, LeRobot splits the table at 100 MB) the stats columns lie between the
# ones we read in every row group, so reading those costs the whole file and two more round trips anyway. Only a
# bigger one (a table of one row group, written by another tool) is read footer first, then the columns needed.
# Ranges of a file closer than _COALESCE_GAP are read as one, and one read makes at most _MAX_RANGES requests per
# file.
_WHOLE_FILE_MAX = 128 << 20
_COALESCE_GAP = 1 << 20
_MAX_RANGES = 16
_IN_FLIGHT = 8  # requests in flight at once
_DATASET_FOLDERS = ("meta", "data", "videos")  # what LeRobotSource reads; odd names elsewhere are ignored
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


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


class _Retry(Exception):
    """A failed attempt that deserves another one."""


def _translate(exc: Exception, where: Where) -> Exception:
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


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def request(method: str, url: str, where: Where, *, token: str | bool | None = None, kind: str = "api",
            headers: dict[str, str] | None = None, params: dict | None = None, expect_bytes: int | None = None,
            check: Callable[[Any], None] | None = None) -> tuple[Any, bytes]:
    """One request through huggingface_hub's session with bounded waits and retries: ``(response, body)``.

    ``expect_bytes``: the exact body length (a shorter or longer body is a failed attempt); without it the body
    may hold up to ``_API_BODY_MAX`` bytes. ``check(response)`` looks at the status and headers before the body is
    read and raises ``_Retry`` (try again) or a :class:`HubError`. HTTP errors other than 408/429/5xx raise at once,
    translated (401/403 -> :class:`HubAuthError`, missing repo / revision / file -> ``*NotFoundError``).
    """
    from huggingface_hub import errors as hf
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    timeout = request_timeout(kind)
    limit = _API_BODY_MAX if expect_bytes is None else expect_bytes
    budget = 2 * timeout + (1 << 20 if expect_bytes is None else expect_bytes) / _MIN_RATE
    all_headers = {**build_hf_headers(token=token), **(headers or {})}
    last: Exception | None = None
    for attempt in range(_RETRIES + 1):
        wait = _BACKOFF_S * 2**attempt
        session = get_session()
        http = sys.modules[type(session).__module__.split(".")[0]]
        deadline = time.monotonic() + budget
        try:
            with session.stream(method, url, headers=all_headers, params=params, timeout=http.Timeout(timeout),
                                follow_redirects=True) as response:
                status = response.status_code
                if status in _RETRY_STATUS:
                    last = HubError(f"{where}: HTTP {status}", **where.fields(status=status, response=response))
                    wait = max(wait, _retry_after(response.headers))
                elif status >= 400:  # read (bounded) here: huggingface_hub reads the error body without a limit
                    read = http.Response(status, headers=response.headers, request=response.request,
                                         content=_read_body(response, 1 << 20, deadline, where, budget))
                    try:
                        hf_raise_for_status(read)
                    except Exception as exc:  # huggingface_hub's typed HTTP errors, translated
                        raise _translate(exc, where) from exc
                    raise HubError(f"{where}: HTTP {status}", **where.fields(status=status, response=read))
                else:
                    if check is not None:
                        check(response)
                    body = _read_body(response, limit, deadline, where, budget)
                    if expect_bytes is not None and len(body) != expect_bytes:
                        raise _Retry(f"{where}: asked for {expect_bytes} bytes, got {len(body)}")
                    return response, body
        except _Retry as exc:
            last = exc
        except hf.OfflineModeIsEnabled as exc:
            raise _translate(exc, where) from exc
        except (http.TimeoutException, http.NetworkError, http.RemoteProtocolError) as exc:
            last = exc  # stalled, dropped or reset: try again
        except http.HTTPError as exc:  # not worth another attempt: a proxy error, an undecodable body...
            raise HubError(f"{where}: Hub request failed ({exc!r})", **where.fields()) from exc
        if attempt < _RETRIES:
            time.sleep(min(wait, _MAX_WAIT_S))
    status = getattr(last, "status", None)
    raise HubError(f"{where}: failed after {_RETRIES + 1} attempts ({last or 'no answer'})",
                   **where.fields(status=status, response=getattr(last, "response", None))) from last


def _read_body(response: Any, limit: int, deadline: float, where: Where, budget: float) -> bytes:
    chunks, n = [], 0
    for chunk in response.iter_bytes():
        n += len(chunk)
        if n > limit:
            raise _Retry(f"{where}: the server sent more than the {limit} bytes expected")
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _Retry(f"{where}: too slow, {n} bytes after {budget:.1f} s (deadline of the request)")
    return b"".join(chunks)


def request_json(url: str, where: Where, *, token: str | bool | None = None, method: str = "GET",
                 params: dict | None = None) -> tuple[Any, Any]:
    """``(response, parsed JSON)`` of an API call (see :func:`request`)."""
    response, body = request(method, url, where, token=token, params=params)
    return response, load_json(body, f"{where}: the Hub's answer to {url}",
                               error=lambda message: HubError(message, **where.fields()))


def check_commit(value: Any, where: Where, name: str) -> str:
    """A commit id from the server, used as a folder name later: a 40-hex sha or a :class:`HubError`."""
    if not isinstance(value, str) or not _SHA.match(value):
        raise HubError(f"{where.repo_id}: the Hub gave {_short(value)} as the commit of {name!r}, which is not a "
                       f"40-hex commit sha", **where.fields())
    return value


def _endpoint(endpoint: str | None) -> str:
    from huggingface_hub import constants

    return (endpoint or constants.ENDPOINT).rstrip("/")


def _next_link(link: str | None, endpoint: str, where: Where) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, refused unless on the endpoint (it is sent the token)."""
    if not link:
        return None
    for part in link.split(","):
        m = re.fullmatch(r'\s*<([^>]*)>\s*;\s*rel="?next"?\s*', part)
        if m:
            url, base = urlsplit(m.group(1)), urlsplit(endpoint)
            if (url.scheme, url.netloc) != (base.scheme, base.netloc):
                raise HubError(f"{where}: the tree listing links to {_short(m.group(1))}, outside {endpoint}",
                               **where.fields())
            return m.group(1)
    return None


def resolve_revision(repo_id: str, revision: str | None = None, *, token: str | bool | None = None,
                     endpoint: str | None = None) -> tuple[str, str]:
    """``(revision, commit sha)``. Without a revision, like LeRobot: tag ``v3.0`` if present, else the highest
    ``v3.x`` tag, else the highest ``v2.x`` tag (which we read too), else the main branch."""
    endpoint = _endpoint(endpoint)
    where = Where(repo_id, revision)
    _, refs = request_json(f"{endpoint}/api/datasets/{repo_id}/refs", where, token=token)
    branches, tags = _refs(refs, "branches", where), _refs(refs, "tags", where)
    if revision is None:
        revision = _default_revision(tags) or ("main" if "main" in branches else next(iter(branches), None))
        if revision is None:
            raise RevisionNotFoundError(f"{repo_id}: repository has no branch and no version tag")
        where = Where(repo_id, revision)
    if revision in tags:
        return revision, check_commit(tags[revision], where, revision)
    if revision in branches:
        return revision, check_commit(branches[revision], where, revision)
    if not _SHA.match(revision):
        raise RevisionNotFoundError(f"{repo_id}: revision {revision!r} is neither a branch, a tag nor a commit "
                                    f"(tags: {sorted(tags)}, branches: {sorted(branches)})")
    _, info = request_json(f"{endpoint}/api/datasets/{repo_id}/revision/{revision}", where, token=token)
    return revision, check_commit(info.get("sha") if isinstance(info, dict) else None, where, revision)


def _refs(refs: Any, kind: str, where: Where) -> dict[str, Any]:
    """``{name: target commit}`` of the branches or tags in a ``/refs`` answer (commits checked when used)."""
    entries = refs.get(kind) if isinstance(refs, dict) else None
    if not isinstance(entries, list):
        raise HubError(f"{where.repo_id}: the Hub's list of refs has no {kind!r} list", **where.fields())
    return {e["name"]: e.get("targetCommit") for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)}


def _default_revision(tags: Iterable[str]) -> str | None:
    versions = []
    for tag in tags:
        m = re.fullmatch(r"v(\d+)\.(\d+)", tag)
        if m:
            versions.append((int(m.group(1)), int(m.group(2)), tag))
    for major in (3, 2):
        same = sorted(v for v in versions if v[0] == major)
        if (3, 0, "v3.0") in same:
            return "v3.0"
        if same:
            return same[-1][2]
    return None


def list_tree(repo_id: str, revision: str, *, token: str | bool | None = None,
              endpoint: str | None = None) -> list[dict]:
    """Every entry of a repo's tree at ``revision`` (``/tree?recursive=true``, following its pages)."""
    endpoint = _endpoint(endpoint)
    where = Where(repo_id, revision)
    url: str | None = f"{endpoint}/api/datasets/{repo_id}/tree/{quote(revision, safe='')}"
    params: dict | None = {"recursive": "true", "expand": "false"}
    entries: list = []
    for _ in range(_MAX_PAGES):
        response, page = request_json(url, where, token=token, params=params)
        if not isinstance(page, list):
            raise HubError(f"{where}: the tree listing is not a list", **where.fields())
        entries += page
        url, params = _next_link(response.headers.get("link"), endpoint, where), None
        if url is None:
            return entries
    raise HubError(f"{where}: the tree listing has more than {_MAX_PAGES} pages", **where.fields())


class HubFiles(SourceFiles):
    """A dataset repository at one commit, read with HTTP range requests and no disk cache.

    Requests that do not depend on each other go out together: the tree listing with our index file (its name is
    fixed), the metadata files with each other (:meth:`prefetch`), the footers and row groups of several data
    files (:meth:`prefetch_footers`, :meth:`prefetch_ranges`); bytes fetched ahead are held until read."""

    concurrency = _IN_FLIGHT

    def __init__(self, repo_id: str, commit: str, *, revision: str | None = None, token: str | bool | None = None,
                 endpoint: str | None = None):
        self.repo_id = parse_repo_id(repo_id)
        self.commit = check_commit(commit, Where(repo_id, revision), revision or "the store's source")
        self.revision = revision or commit
        self.token = token
        self.endpoint = _endpoint(endpoint)
        self.name = repo_id.replace("/", "--")
        self._footers: dict[str, pq.FileMetaData] = {}
        self._footer_sizes: dict[str, int] = {}  # exact, from our index
        self._footer_hints: dict[str, int] = {}  # estimated by the reader (footer_hint)
        self._lock = threading.Lock()  # guards the two caches below; never held while waiting on the network
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # recent read-ahead blocks
        self._held: OrderedDict[tuple[str, int], bytes] = OrderedDict()  # fetched ahead of their reads
        self.sizes: dict[str, int] = {}
        self.oids: dict[str, str] = {}  # sha256 of LFS files, git blob sha1 of the others
        # our index file is read alongside the listing (one round trip for both): if the repo has one, it is all
        # the metadata an open needs; if not, the answer is a 404 and LeRobot's files are read
        pool = ThreadPoolExecutor(1, thread_name_prefix="lerobot_zarr-hub")
        index = pool.submit(self._fetch_unsized, INDEX_FILE)
        pool.shutdown(wait=False)  # a listing that fails does not wait for the index's answer
        for entry in list_tree(repo_id, commit, token=token, endpoint=self.endpoint):
            self._add_entry(entry)
        try:  # (answered with the listing: no request of this object is left in flight once it is made)
            data = index.result()
        except (FileNotFoundError, HubError):
            data = None  # none, or not readable now: read (or refused) like any other file when needed
        if data is not None and self.sizes.get(INDEX_FILE) == len(data):
            self._hold(INDEX_FILE, 0, data)

    def _add_entry(self, entry: Any) -> None:
        if not isinstance(entry, dict) or entry.get("type") != "file":
            return
        path, size = entry.get("path"), entry.get("size")
        top = path.replace("\\", "/").split("/", 1)[0] if isinstance(path, str) else None
        try:
            rel = safe_relpath(self.location(), path if isinstance(path, str) else "", "repository file")
        except CorruptSourceError:
            if top in _DATASET_FOLDERS:
                raise
            return  # a name we never read (docs/a\b.txt): ignored
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            if top in _DATASET_FOLDERS:
                raise CorruptSourceError(f"{self.location(rel)}: the tree listing gives it size {_short(size)}")
            return
        lfs = entry.get("lfs")
        oid = lfs.get("oid") if isinstance(lfs, dict) else entry.get("oid")
        self.sizes[rel] = size
        self.oids[rel] = oid if isinstance(oid, str) else ""

    def __reduce__(self) -> tuple:
        # to another process (a dask worker) as what it reads: the listing is made again there
        return (_hub_files, (self.repo_id, self.commit, self.revision, self.token, self.endpoint))

    def location(self, rel: str = "") -> str:
        return f"{self.repo_id}@{self.revision}" + (f":{rel}" if rel else "")

    def url(self, rel: str) -> str:
        return f"{self.endpoint}/datasets/{self.repo_id}/resolve/{self.commit}/{quote(rel)}"

    def exists(self, rel: str) -> bool:
        return rel in self.sizes

    def size(self, rel: str) -> int:
        try:
            return self.sizes[rel]
        except KeyError:
            raise FileNotFoundError(f"{self.location(rel)}: no such file in the repository") from None

    def get(self, rel: str, start: int = 0, stop: int | None = None) -> bytes:
        """Bytes ``[start, stop)`` of a file (to its end without ``stop``), with bounded waits and retries: from
        bytes fetched ahead when they hold the range (or its end: then only the rest is fetched)."""
        size = self.size(rel)
        stop = size if stop is None else min(stop, size)
        if start >= stop:
            return b""
        tail: tuple[int, bytes] | None = None
        with self._lock:
            for (held_rel, a), data in self._held.items():
                if held_rel != rel or stop > a + len(data) or a >= stop:
                    continue
                if a <= start:
                    return data[start - a:stop - a]
                if tail is None or a < tail[0]:
                    tail = (a, data)
        if tail is not None:  # the end of the range came with the footer: fetch the rest only
            return self._fetch(rel, start, tail[0]) + tail[1][:stop - tail[0]]
        return self._fetch(rel, start, stop)

    def _hold(self, rel: str, start: int, data: bytes) -> None:
        stop = start + len(data)
        with self._lock:
            for key in [(r, a) for (r, a), d in self._held.items() if r == rel and start <= a and a + len(d) <= stop]:
                del self._held[key]  # inside the new piece
            self._held[(rel, start)] = data
            _trim(self._held, _HELD_BYTES, len)

    def _whole(self, rel: str) -> bytes | None:
        """The whole file, if it was fetched ahead."""
        size = self.sizes.get(rel)
        with self._lock:
            data = self._held.get((rel, 0))
        return data if data is not None and len(data) == size else None

    def _holds(self, rel: str, start: int, stop: int) -> bool:
        with self._lock:
            return any(r == rel and a <= start and stop <= a + len(d) for (r, a), d in self._held.items())

    def release(self, rel: str) -> None:
        """Forget the bytes of ``rel`` fetched ahead (the reader has what it needed)."""
        with self._lock:
            for key in [key for key in self._held if key[0] == rel]:
                del self._held[key]

    def _fetch_unsized(self, rel: str) -> bytes:
        """A whole file whose size is not known yet (a 404 raises SourceNotFoundError, a FileNotFoundError)."""
        where = Where(self.repo_id, self.revision, rel)
        _, data = request("GET", self.url(rel), where, token=self.token, kind="download",
                          headers={"Accept-Encoding": "identity"})
        return data

    def prefetch(self, rels: Iterable[str]) -> None:
        """Fetch these files now, all at once (several requests in flight), to be read later: whole, but for
        parquet files bigger than ``_WHOLE_FILE_MAX`` their footer only. Files the repo does not have are
        skipped."""
        todo = [rel for rel in dict.fromkeys(rels) if rel in self.sizes]
        self._in_parallel([functools.partial(self._prefetch_one, rel) for rel in todo])

    def _prefetch_one(self, rel: str) -> None:
        size = self.sizes[rel]
        if size <= _WHOLE_FILE_MAX or not rel.endswith(".parquet"):  # (the rest of a JSON file is read anyway)
            if not self._holds(rel, 0, size):
                self._hold(rel, 0, self._fetch(rel, 0, size))
        else:  # a footer of a few row groups fits a small read of the tail (a big one takes a second read)
            self._footer_hints.setdefault(rel, min(1 << 20, max(_FOOTER_GUESS, size // 128)))
            self._footer(rel)

    def prefetch_footers(self, rels: Iterable[str]) -> None:
        """Read the parquet footers of these files, all at once."""
        todo = [rel for rel in dict.fromkeys(rels) if rel not in self._footers]
        self._in_parallel([functools.partial(self._footer, rel) for rel in todo])

    def prefetch_ranges(self, ranges: Mapping[str, Iterable[tuple[int, int]]]) -> None:
        """Fetch byte ranges ``[start, stop)`` of files now, all together, to be read later: ranges of a file
        closer than ``_COALESCE_GAP`` are read as one, with at most ``_MAX_RANGES`` requests per file."""
        wanted = []
        for rel, rs in ranges.items():
            merged = [(a, b) for a, b in coalesce(rs, _COALESCE_GAP, _MAX_RANGES) if not self._holds(rel, a, b)]
            if sum(b - a for a, b in merged) > self.size(rel) // 2:
                merged = [(0, self.size(rel))]  # most of the file (its parts spread over it): all of it, at once
            wanted += [(rel, a, b) for a, b in merged]
        self._in_parallel([functools.partial(self._fetch_ahead, rel, a, b) for rel, a, b in wanted])

    def _fetch_ahead(self, rel: str, start: int, stop: int) -> None:
        self._hold(rel, start, self.get(rel, start, stop))

    @staticmethod
    def _in_parallel(calls: Sequence[Callable[[], Any]]) -> None:
        """Run the calls at once, ``_IN_FLIGHT`` at a time; the first exception is raised once all are done."""
        if len(calls) <= 1:
            for call in calls:
                call()
            return
        with ThreadPoolExecutor(min(_IN_FLIGHT, len(calls)), thread_name_prefix="lerobot_zarr-hub") as pool:
            futures = [pool.submit(call) for call in calls]
        for future in futures:
            future.result()

    def footer_hint(self, rel: str, nbytes: int) -> None:
        """An estimate of a footer's length (from what the reader knows: row groups and columns), so that one
        request usually fetches it whole; the index's exact lengths take precedence."""
        self._footer_hints[rel] = int(nbytes)

    def _fetch(self, rel: str, start: int, stop: int) -> bytes:
        if start >= stop:
            return b""
        size = self.sizes[rel]
        where = Where(self.repo_id, self.revision, rel)
        headers = {"Accept-Encoding": "identity"}
        ranged = start > 0 or stop < size
        if ranged:
            headers["Range"] = f"bytes={start}-{stop - 1}"

        def check(response: Any) -> None:
            if not ranged:
                return
            if response.status_code != 206:
                raise HubError(f"{where}: asked for bytes {start}-{stop - 1}, the server answered HTTP "
                               f"{response.status_code} without the range (it must honour Range requests)",
                               **where.fields(status=response.status_code, response=response))
            answered = response.headers.get("content-range", "")
            m = _CONTENT_RANGE.fullmatch(answered.strip())
            if not m or (int(m[1]), int(m[2])) != (start, stop - 1) or m[3] not in ("*", str(size)):
                raise _Retry(f"{where}: asked for bytes {start}-{stop - 1}/{size}, the server answered "
                             f"Content-Range {_short(answered)}")

        _, data = request("GET", self.url(rel), where, token=self.token, kind="download", headers=headers,
                          expect_bytes=stop - start, check=check)
        return data

    def read_bytes(self, rel: str) -> bytes:
        data = self.get(rel)
        self.release(rel)
        return data

    def block(self, rel: str, start: int, stop: int) -> tuple[int, bytes]:
        """Bytes from ``start`` to at least ``stop``: from a block read recently by any reader of the same file
        if one holds ``[start, stop)`` (episodes next to each other in one mp4 share blocks), else fetched."""
        with self._lock:
            for key, data in reversed(self._blocks.items()):
                if key[0] == rel and key[1] <= start and stop <= key[1] + len(data):
                    return key[1], data
        data = self.get(rel, start, stop)
        with self._lock:
            self._blocks[(rel, start)] = data
            _trim(self._blocks, _SHARED_BLOCKS_BYTES, len)
        return start, data

    def parquet(self, rel: str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
        import pyarrow.parquet as pq

        if self.size(rel) < 12:
            raise CorruptSourceError(f"{self.location(rel)}: {self.size(rel)} bytes is too small to be parquet")
        whole = self._whole(rel)
        if whole is not None:  # read from memory (many small reads through Python would cost more than the parse)
            import pyarrow as pa

            return pq.ParquetFile(pa.BufferReader(whole), metadata=metadata or self._footer(rel))
        return pq.ParquetFile(_RangeFile(self, rel), metadata=metadata or self._footer(rel), pre_buffer=True)

    def open(self, rel: str) -> BinaryIO:
        """The file over range requests with read-ahead: a decoder's many small reads become few requests, and
        a seek (to the mp4 index at the end, to an episode's frames) reads little past what it needs."""
        return _RangeFile(self, rel, block=_READ_AHEAD[0])

    def _footer(self, rel: str) -> pq.FileMetaData:
        """Read just the parquet footer: its tail first (one small request), the rest only if it is longer.
        Footers are kept for the life of this object (one commit: they cannot change)."""
        if rel not in self._footers:
            self._footers[rel] = self._read_footer(rel)
        return self._footers[rel]

    def _read_footer(self, rel: str) -> pq.FileMetaData:
        import pyarrow as pa
        import pyarrow.parquet as pq

        size = self.size(rel)
        exact = self._footer_sizes.get(rel)
        guess = exact if exact is not None else max(_FOOTER_GUESS, self._footer_hints.get(rel, 0))
        start = max(0, size - guess)
        tail = self.get(rel, start, size)
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise CorruptSourceError(f"{self.location(rel)}: not a parquet file (no PAR1 magic at its end)")
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 8 > size - 4:
            raise CorruptSourceError(f"{self.location(rel)}: parquet footer of {length} bytes does not fit the file")
        if length + 8 > len(tail):
            start = size - 8 - length
            tail = self.get(rel, start, size - len(tail)) + tail
        self._hold(rel, start, tail)  # later reads inside the tail (a small file's columns) are served from it
        try:
            return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-8 - length:]))
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptSourceError(f"{self.location(rel)}: unreadable parquet footer ({exc})") from exc

    def matches(self, rel: str, identity: dict[str, str]) -> bool:
        """Whether the repo's file is the one ``identity`` ({"sha256", "git_sha1"}) describes."""
        return bool(self.oids.get(rel)) and self.oids[rel] in (identity.get("sha256"), identity.get("git_sha1"))

    def seed_footer(self, rel: str, metadata: pq.FileMetaData | None = None, size: int | None = None) -> None:
        """What our index file knows of a footer: the footer itself (no request for it), or its size in bytes
        (one exact range request)."""
        if metadata is not None:
            self._footers[rel] = metadata
        if size is not None:
            self._footer_sizes[rel] = int(size)

    def list(self, folder: str) -> list[str]:
        prefix = folder.rstrip("/") + "/"
        return sorted(p for p in self.sizes if p.startswith(prefix))

    def record(self, data_files: Iterable[str]) -> dict:
        # the commit, not the name it was reached by: "main" and "v3.0" at the same commit share a store
        return {"kind": "hub", "repo_id": self.repo_id, "commit": self.commit, "endpoint": self.endpoint}


def coalesce(ranges: Iterable[tuple[int, int]], gap: int, most: int) -> list[tuple[int, int]]:
    """Sorted byte ranges ``[start, stop)`` merged where they overlap or lie less than ``gap`` apart, then across
    their smallest gaps until at most ``most`` remain."""
    merged: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if merged and a - merged[-1][1] < gap:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    while len(merged) > max(1, most):
        i = min(range(len(merged) - 1), key=lambda j: merged[j + 1][0] - merged[j][1])
        merged[i:i + 2] = [[merged[i][0], max(merged[i][1], merged[i + 1][1])]]
    return [(a, b) for a, b in merged]


def _trim(cache: OrderedDict, limit: int, nbytes: Callable[[Any], int]) -> None:
    """Drop the oldest entries of ``cache`` until its values hold at most ``limit`` bytes (keeps the newest)."""
    while len(cache) > 1 and sum(nbytes(v) for v in cache.values()) > limit:
        cache.popitem(last=False)


def _hub_files(repo_id: str, commit: str, revision: str, token: str | bool | None, endpoint: str) -> HubFiles:
    return HubFiles(repo_id, commit, revision=revision, token=token, endpoint=endpoint)


class _RangeFile(io.RawIOBase):
    """A seekable read-only file over HTTP range requests. Without ``block`` each read is one request (pyarrow
    coalesces its reads of a row group into few large ones); with it, reads fetch at least ``block`` bytes and
    later reads inside them are served from that buffer."""

    def __init__(self, files: HubFiles, rel: str, *, block: int = 0):
        super().__init__()
        self.files, self.rel = files, rel
        self.length = files.size(rel)
        self.pos = 0
        self.block = block
        self._buffer, self._buffer_start = b"", 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def size(self) -> int:
        return self.length

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        stop = self.length if size is None or size < 0 else min(self.length, self.pos + size)
        if stop <= self.pos:
            return b""
        if not self.block:
            data = self.files.get(self.rel, self.pos, stop)
        else:
            start, end = self._buffer_start, self._buffer_start + len(self._buffer)
            head = self._buffer[self.pos - start:stop - start] if start <= self.pos < end else b""
            if self.pos + len(head) < stop:
                # reading on from the buffer: read further ahead next time; after a seek: start small again
                fetch = self.pos + len(head)
                self.block = min(2 * self.block, _READ_AHEAD[1]) if self._buffer and fetch == end else _READ_AHEAD[0]
                self._buffer_start, self._buffer = self.files.block(
                    self.rel, fetch, max(stop, min(self.length, fetch + self.block)))
                head += self._buffer[fetch - self._buffer_start:stop - self._buffer_start]
            data = head
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)


# ------------------------------------------------------------------------------------------------ huggingface_hub calls

_bounded_lock = threading.Lock()
_bounded: dict[int, tuple[Any, Any, int]] = {}  # id(session) -> (session, its own timeout, users)


@contextlib.contextmanager
def session_timeouts() -> Iterator[None]:
    """Connect/read timeouts (``HF_HUB_DOWNLOAD_TIMEOUT``) on huggingface_hub's shared session while the block runs,
    for the HfApi calls that pass none of their own (commit, LFS upload, tag, repo creation). The session's own
    setting is put back afterwards. (A session huggingface_hub re-creates inside the block, after a connection
    error, has its default again.)"""
    from huggingface_hub.utils import get_session

    session = get_session()
    key = id(session)
    with _bounded_lock:
        entry = _bounded.get(key)
        if entry is None:
            _bounded[key] = (session, session.timeout, 1)
            session.timeout = _http_module().Timeout(request_timeout("download"))
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


@contextlib.contextmanager
def quiet_progress(quiet: bool) -> Iterator[None]:
    """huggingface_hub's progress bars off while the block runs when ``quiet``; its settings are put back after
    (they are process-wide: a bar another thread opens meanwhile is hidden too)."""
    if not quiet:
        yield
        return
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    states = getattr(sys.modules.get("huggingface_hub.utils.tqdm"), "progress_bar_states", None)
    saved = dict(states) if isinstance(states, dict) else None
    was_disabled = are_progress_bars_disabled()
    with contextlib.suppress(Exception), _no_warnings():
        disable_progress_bars()
    try:
        yield
    finally:
        if saved is not None:
            states.clear()
            states.update(saved)
        elif not was_disabled:
            with contextlib.suppress(Exception), _no_warnings():
                enable_progress_bars()


@contextlib.contextmanager
def _no_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
