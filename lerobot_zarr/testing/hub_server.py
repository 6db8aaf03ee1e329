"""A small Hugging Face Hub-compatible HTTP server for tests, built on the standard library only.

The real ``huggingface_hub`` client (``HfApi``, ``hf_hub_download``, ``snapshot_download``, ``HfFileSystem``) can be
pointed at it (``HfApi(endpoint=server.endpoint)``, ``HfFileSystem(endpoint=...)``, or ``HF_ENDPOINT``). Uploads
use the legacy LFS protocol, so the client must run with Xet disabled (``HF_HUB_DISABLE_XET=1`` before import, or
``huggingface_hub.constants.HF_HUB_DISABLE_XET = True``): this server never sends Xet headers.

Usage::

    with HubServer(tmp_path / "hub", tokens={"secret": "alice"}) as hub:
        sha = hub.add_repo("org/name", "path/to/folder", tags=["v3.0"])
        HfApi(endpoint=hub.endpoint).dataset_info("org/name")
        hub.bytes_sent("/datasets/org/name/resolve/")

Storage (everything under ``storage_dir``; nothing outside it is ever read or served):

- ``blobs/<sha256[:2]>/<sha256>``: file contents, content addressed, plus ``<sha256>.meta.json`` (size, git sha1).
- ``commits/<id[:2]>/<id>.json``: one JSON document per commit, its id being the sha1 of the document; it holds
  ``parent``, ``message``, ``description``, ``author``, ``date`` and ``tree`` ``{path: {blob, size, sha256,
  git_sha1, lfs}}`` where ``git_sha1`` is the git blob sha1 of the content.
- ``repos/<type>/<namespace>/<name>.json``: ``private``, ``branches``, ``tags``, the repo's commit ids and the LFS
  objects uploaded to it (blobs are shared on disk, but as on the Hub an LFS object counts as already uploaded
  only for the repo it was uploaded or committed to).

Behaviour worth knowing (see also the ``HubServer`` docstring):

- Repo ids are ``namespace/name``. New repos get an empty initial commit on ``main`` (no ``.gitattributes``).
- A file is stored as LFS when it is bigger than 10 MiB, has a binary extension (``LFS_EXTENSIONS``) or its first
  512 bytes contain a NUL byte; empty files are always regular. Tree entries of LFS files carry
  ``lfs: {oid, size, pointerSize}`` and their ``oid`` is the git sha1 of the LFS pointer file, like on the Hub.
- ``ETag`` is the quoted sha256 for LFS files (also sent as ``X-Linked-Etag``, with ``X-Linked-Size``) and the git
  blob sha1 for regular files.
- Authentication: with ``tokens=None`` it is off (every request is authorized, ``private`` is only reported). With
  ``tokens`` set, a request carrying an unknown token gets 401 with ``X-Error-Message: Invalid credentials in
  Authorization header`` (the client raises a plain ``HfHubHTTPError`` with status 401); reading a private repo
  without a token gets 401 with ``X-Error-Code: RepoNotFound`` (the client raises ``RepositoryNotFoundError`` whose
  ``response.status_code`` is 401, the way to tell an auth failure from a missing repo, which is 404); writes
  without a token get 401. Any valid token may read and write every repo. ``/api/whoami-v2`` answers 401 unless
  the request carries a valid token (so also whenever ``tokens`` is None). Tokens listed in ``read_only`` may read
  but not write (403 on writes; ``whoami`` gives their role as ``"read"``).

Endpoints (``{t}`` = ``datasets|models|spaces``; ``{prefix}`` = ``datasets/``, ``spaces/`` or nothing for models;
``{rev}`` = branch, tag, ``refs/heads/x``, ``refs/tags/x`` or a full commit sha, URL-quoted):

- ``GET /api/{t}/{id}``, ``GET /api/{t}/{id}/revision/{rev}``: repo info with ``sha`` and ``siblings``.
- ``GET /api/{t}/{id}/tree/{rev}[/{path}]?recursive=&expand=``: entries, paginated (``tree_page_size``) with
  ``Link: <...>; rel="next"``; 404 ``EntryNotFound`` if ``path`` is not a folder. ``expand`` adds ``lastCommit``.
- ``POST /api/{t}/{id}/paths-info/{rev}`` (form or JSON ``paths``, ``expand``): entries of the paths that exist.
- ``GET /api/{t}/{id}/refs``, ``GET /api/{t}/{id}/commits/{rev}``, ``GET /api/{t}/{id}/auth-check[/write]`` (200
  if the request may read / write the repo, else 401 / 403 / 404 ``RepoNotFound``).
- ``HEAD|GET /{prefix}{id}/resolve/{rev}/{path}``: single ``Range`` (``s-e``, ``s-``, ``-n``) -> 206, 416 if
  unsatisfiable; a malformed or multi-range header is ignored (200).
- ``POST /api/repos/create``, ``DELETE /api/repos/delete``, ``PUT /api/{t}/{id}/settings`` (visibility).
- ``POST /api/{t}/{id}/preupload/{rev}``, ``POST /{prefix}{id}.git/info/lfs/objects/batch`` (upload only; the
  ``href`` is a signed URL on this server, PUT to it without Authorization, content checked against the oid),
  ``POST /api/{t}/{id}/commit/{branch}`` (ndjson; ``parentCommit`` checked -> 412; ``create_pr`` -> 400; a
  commit changing nothing is still recorded), ``POST|DELETE /api/{t}/{id}/tag/{rev}``,
  ``POST|DELETE /api/{t}/{id}/branch/{name}``, ``POST /api/validate-yaml``, ``GET /api/whoami-v2``.
- Errors are JSON ``{"error": ...}`` with ``X-Error-Message`` and, for 404s of repos, revisions and entries,
  ``X-Error-Code`` ``RepoNotFound`` / ``RevisionNotFound`` / ``EntryNotFound`` (entry errors also carry
  ``X-Repo-Commit``). Bad repo ids or paths (``..``, absolute, ``.git``, empty segments) get 400.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import heapq
import hmac
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

__all__ = ["HubServer", "HubStats", "NetworkModel", "RequestRecord", "LFS_EXTENSIONS", "LFS_THRESHOLD",
           "REPO_TYPES"]

REPO_TYPES = ("dataset", "model", "space")
_PLURAL = {"dataset": "datasets", "model": "models", "space": "spaces"}
_FROM_PLURAL = {v: k for k, v in _PLURAL.items()}
_URL_PREFIX = {"dataset": "datasets/", "model": "", "space": "spaces/"}

#: Files strictly bigger than this are stored as LFS files.
LFS_THRESHOLD = 10 * 1024 * 1024
#: Extensions always stored as LFS files (what the Hub's default .gitattributes tracks, roughly).
LFS_EXTENSIONS = frozenset(
    {
        ".parquet", ".arrow", ".mp4", ".avi", ".mkv", ".mov", ".webm", ".png", ".jpg", ".jpeg", ".gif", ".webp",
        ".bin", ".pt", ".pth", ".ckpt", ".safetensors", ".onnx", ".h5", ".hdf5", ".npy", ".npz", ".pkl", ".pickle",
        ".msgpack", ".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".lz4", ".wav", ".mp3", ".flac",
        ".ogg",
    }
)  # fmt: skip

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_RESERVED_NAMESPACES = frozenset({"api", "datasets", "models", "spaces", "__lfs"})
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
_REF_NAME_RE = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._/-]{0,199}$")
_CHUNK = 64 * 1024
_INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
_SECURITY_OK = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None}, "pickleImportScan": None}


# --------------------------------------------------------------------------------------------------- helpers


class _HubError(Exception):
    """An error answered as JSON ``{"error": message}`` with an optional ``X-Error-Code`` header."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = dict(headers or {})


class _Dropped(Exception):
    """Raised to abort a response and close its connection (fault injection)."""


def _now_iso() -> str:
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _is_lfs(path: str, size: int, sample: bytes) -> bool:
    if size == 0:
        return False
    if size > LFS_THRESHOLD or os.path.splitext(path)[1].lower() in LFS_EXTENSIONS:
        return True
    return b"\0" in sample[:512]


def _check_repo_id(repo_id: str) -> tuple[str, str]:
    if not isinstance(repo_id, str) or repo_id.count("/") != 1:
        raise ValueError(f"repo id must be 'namespace/name', got {repo_id!r}")
    ns, name = repo_id.split("/")
    for part in (ns, name):
        if not _NAME_RE.match(part) or ".." in part or part.endswith(".git"):
            raise ValueError(f"invalid repo id {repo_id!r}")
    if ns in _RESERVED_NAMESPACES:
        raise ValueError(f"invalid repo id {repo_id!r}: namespace {ns!r} is reserved")
    return ns, name


def _check_repo_type(repo_type: str | None) -> str:
    repo_type = repo_type or "model"
    if repo_type not in REPO_TYPES:
        raise ValueError(f"invalid repo type {repo_type!r}, expected one of {REPO_TYPES}")
    return repo_type


def _check_path(path: str, *, allow_root: bool = False) -> str:
    """A path inside a repo: relative, '/'-separated, without '.', '..', '.git' or empty segments."""
    if not isinstance(path, str):
        raise ValueError("path must be a string")
    if path == "" and allow_root:
        return path
    if not path or path.startswith("/") or "\\" in path or "\0" in path:
        raise ValueError(f"invalid path {path!r}")
    if any(part in ("", ".", "..", ".git") for part in path.split("/")):
        raise ValueError(f"invalid path {path!r}")
    return path


def _check_ref_name(name: str) -> str:
    if not isinstance(name, str) or not _REF_NAME_RE.match(name) or ".." in name or name.endswith(("/", ".lock")):
        raise ValueError(f"invalid ref name {name!r}")
    if "//" in name or _SHA1_RE.match(name):
        raise ValueError(f"invalid ref name {name!r}")
    return name


def _header_safe(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii").replace("\r", " ").replace("\n", " ")[:500]


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------------- stats


@dataclasses.dataclass(slots=True)
class RequestRecord:
    """One request as the server saw it. ``path`` is the URL-decoded path, ``query`` the raw query string,
    ``range`` the ``Range`` header, ``bytes_sent`` the response body bytes written (updated while streaming,
    before each write), ``bytes_received`` the request body bytes read, ``connection`` a number identifying the
    TCP connection (equal numbers: the request reused a kept-alive connection). ``status`` stays 0 when no
    status line was sent (a ``"reset"`` fault, or a ``"drop"`` fault on a response without body). ``started`` and
    ``ended`` are ``time.monotonic()`` when the request arrived and when its answer was written (0 until then):
    :meth:`HubStats.round_trips` counts the requests one after the other from them."""

    method: str
    path: str
    query: str
    range: str | None
    status: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    connection: int = 0
    started: float = 0.0
    ended: float = 0.0

    def __iter__(self):
        return iter(dataclasses.astuple(self))


class HubStats:
    """Thread-safe list of :class:`RequestRecord`, oldest first. Iterating, ``len()`` and indexing use a snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []

    def _append(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __getitem__(self, index):
        return self.snapshot()[index]

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        return [
            r
            for r in self.snapshot()
            if (method is None or r.method == method.upper()) and (path_contains is None or path_contains in r.path)
        ]

    def bytes_sent(self, path_prefix: str | None = None) -> int:
        return sum(r.bytes_sent for r in self.snapshot() if path_prefix is None or r.path.startswith(path_prefix))

    def round_trips(self, exclude: Sequence[str] = ()) -> int:
        """The longest chain of requests each sent after the previous one was answered: the round trips a client
        waited for one after the other (requests in flight together count once). Requests whose path contains
        one of ``exclude`` are left out."""
        done = sorted((r.started, r.ended) for r in self.snapshot()
                      if r.ended and not any(x in r.path for x in exclude))
        answered: list[tuple[float, int]] = []  # (ended, depth) of requests not yet known to precede the next one
        before = deepest = 0  # the deepest chain answered before the current request started; the deepest of all
        for started, ended in done:
            while answered and answered[0][0] <= started:
                before = max(before, heapq.heappop(answered)[1])
            heapq.heappush(answered, (ended, before + 1))
            deepest = max(deepest, before + 1)
        return deepest

    def reset(self) -> None:
        with self._lock:
            self._records.clear()


@dataclasses.dataclass
class _Fault:
    path_contains: str
    kind: str
    remaining: int
    after_bytes: int
    method: str | None
    seconds: float = 60.0
    rate: int = 16
    value: str = ""


@dataclasses.dataclass(frozen=True)
class NetworkModel:
    """A modelled network between the clients and the server, so that round trips and bandwidth are measured
    rather than assumed: every request waits ``latency_s`` (a round trip) before its answer starts, the first
    request of a connection ``handshake_rtts`` round trips more (TCP and TLS set-up: 2 for HTTPS over TLS 1.3),
    and all response bodies share one link of ``rate`` bytes/s (1 Gbit/s = 125e6), written in 64 KiB pieces so
    that concurrent answers share it fairly."""

    latency_s: float = 0.05
    rate: float = 125e6
    handshake_rtts: int = 0

    def __post_init__(self) -> None:
        if not (self.latency_s >= 0 and self.rate > 0 and self.handshake_rtts >= 0):
            raise ValueError(f"invalid network model {self}")


class _Link:
    """The shared link of a :class:`NetworkModel`: a virtual clock of when it is next free."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free_at = 0.0

    def send(self, nbytes: int, rate: float, stopping: threading.Event) -> None:
        """Wait until ``nbytes`` have crossed the link after everything sent before them."""
        with self._lock:
            now = time.monotonic()
            # a sender woken late may catch up by a few ms (a token bucket's burst): oversleeping does not add up
            self._free_at = max(now - 0.005, self._free_at) + nbytes / rate
            until = self._free_at
        delay = until - time.monotonic()
        if delay > 0 and stopping.wait(delay):
            raise _Dropped


_FAULT_KINDS = ("500", "401", "403", "drop", "reset", "stall", "trickle", "short", "bad_range", "bad_commit")


# --------------------------------------------------------------------------------------------------- storage


class _TreeIndex:
    """Derived views of one commit's tree: files, directories (with git tree oids) and children."""

    def __init__(self, tree: Mapping[str, dict]):
        self.files = dict(tree)
        self.file_oid: dict[str, str] = {}
        self.lfs_info: dict[str, dict] = {}
        children: dict[str, dict[str, str]] = {"": {}}
        for path, entry in self.files.items():
            if entry["lfs"]:
                pointer = _lfs_pointer(entry["sha256"], entry["size"])
                self.file_oid[path] = _git_blob_sha1(pointer)
                self.lfs_info[path] = {"oid": entry["sha256"], "size": entry["size"], "pointerSize": len(pointer)}
            else:
                self.file_oid[path] = entry["git_sha1"]
            parts = path.split("/")
            for i in range(len(parts) - 1):
                parent, d = "/".join(parts[:i]), "/".join(parts[: i + 1])
                children.setdefault(parent, {})[parts[i]] = "dir"
                children.setdefault(d, {})
            children.setdefault("/".join(parts[:-1]), {})[parts[-1]] = "file"
        self.children = children
        self.dirs: dict[str, str] = {}
        self._tree_oid("")

    def _tree_oid(self, d: str) -> str:
        items = []
        for name, kind in self.children.get(d, {}).items():
            full = f"{d}/{name}" if d else name
            if kind == "dir":
                items.append((name + "/", b"40000 " + name.encode() + b"\0" + bytes.fromhex(self._tree_oid(full))))
            else:
                items.append((name, b"100644 " + name.encode() + b"\0" + bytes.fromhex(self.file_oid[full])))
        body = b"".join(raw for _, raw in sorted(items))
        oid = hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()
        self.dirs[d] = oid
        return oid

    def is_dir(self, path: str) -> bool:
        return path in self.dirs


class _Storage:
    def __init__(self, root: Path):
        self.root = root
        for sub in ("blobs", "commits", "repos", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self._repos: dict[tuple[str, str], dict] = {}
        self._commits: dict[str, dict] = {}
        self._meta: dict[str, dict] = {}
        self._indexes: OrderedDict[str, _TreeIndex] = OrderedDict()

    # blobs -------------------------------------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        if not _SHA256_RE.match(sha256):
            raise ValueError(f"invalid sha256 {sha256!r}")
        return self.root / "blobs" / sha256[:2] / sha256

    def blob_meta(self, sha256: str) -> dict | None:
        if not _SHA256_RE.match(sha256 or ""):
            return None
        meta = self._meta.get(sha256)
        if meta is None:
            path = self.blob_path(sha256)
            meta_path = path.with_name(path.name + ".meta.json")
            if not path.is_file() or not meta_path.is_file():
                return None
            meta = json.loads(meta_path.read_bytes())
            self._meta[sha256] = meta
        return meta

    def _finish_blob(self, tmp: Path, sha256: str, size: int, git_sha1: str) -> dict:
        path = self.blob_path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size == size:
            tmp.unlink(missing_ok=True)
        else:
            os.replace(tmp, path)
        meta = {"size": size, "git_sha1": git_sha1}
        _write_atomic(path.with_name(path.name + ".meta.json"), _dumps(meta))
        self._meta[sha256] = meta
        return {"sha256": sha256, **meta}

    def put_bytes(self, data: bytes) -> dict:
        sha256 = hashlib.sha256(data).hexdigest()
        meta = self.blob_meta(sha256)
        if meta is not None:
            return {"sha256": sha256, **meta}
        tmp = self.root / "tmp" / secrets.token_hex(8)
        tmp.write_bytes(data)
        return self._finish_blob(tmp, sha256, len(data), _git_blob_sha1(data))

    def put_stream(self, chunks: Iterator[bytes], expected_size: int) -> dict:
        """Store a blob from chunks; returns its meta (the caller checks sha256/size against expectations)."""
        tmp = self.root / "tmp" / secrets.token_hex(8)
        h256, h1, size = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % expected_size), 0
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    h256.update(chunk)
                    h1.update(chunk)
                    size += len(chunk)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if size != expected_size:
            tmp.unlink(missing_ok=True)
            return {"sha256": h256.hexdigest(), "size": size, "git_sha1": None}
        return self._finish_blob(tmp, h256.hexdigest(), size, h1.hexdigest())

    def put_file(self, path: Path) -> dict:
        size = path.stat().st_size

        def chunks():
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    yield chunk

        meta = self.put_stream(chunks(), size)
        if meta["git_sha1"] is None:
            raise ValueError(f"{path} changed while being imported")
        return meta

    # commits -----------------------------------------------------------------------------------------------
    def commit_doc(self, cid: str) -> dict:
        doc = self._commits.get(cid)
        if doc is None:
            doc = json.loads((self.root / "commits" / cid[:2] / f"{cid}.json").read_bytes())
            self._commits[cid] = doc
        return doc

    def index(self, cid: str) -> _TreeIndex:
        with self.lock:
            idx = self._indexes.get(cid)
            if idx is not None:
                self._indexes.move_to_end(cid)
                return idx
        idx = _TreeIndex(self.commit_doc(cid)["tree"])
        with self.lock:
            self._indexes[cid] = idx
            while len(self._indexes) > 128:
                self._indexes.popitem(last=False)
        return idx

    def _write_commit(self, repo: dict, parent: str | None, tree: dict, message: str, description: str,
                      author: str) -> str:  # fmt: skip
        doc = {
            "repo": f"{repo['type']}:{repo['id']}",
            "parent": parent,
            "message": message,
            "description": description,
            "author": author,
            "date": _now_iso(),
            "nonce": secrets.token_hex(8),
            "tree": tree,
        }
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        cid = hashlib.sha1(data).hexdigest()
        _write_atomic(self.root / "commits" / cid[:2] / f"{cid}.json", data)
        self._commits[cid] = json.loads(data)
        return cid

    # repos -------------------------------------------------------------------------------------------------
    def _repo_file(self, repo_type: str, repo_id: str) -> Path:
        ns, name = _check_repo_id(repo_id)
        return self.root / "repos" / repo_type / ns / f"{name}.json"

    def get_repo(self, repo_type: str, repo_id: str) -> dict | None:
        with self.lock:
            key = (repo_type, repo_id)
            repo = self._repos.get(key)
            if repo is None:
                path = self._repo_file(repo_type, repo_id)
                if not path.is_file():
                    return None
                repo = json.loads(path.read_bytes())
                self._repos[key] = repo
            return repo

    def save_repo(self, repo: dict) -> None:
        _write_atomic(self._repo_file(repo["type"], repo["id"]), json.dumps(repo, indent=1).encode())

    def create_repo(self, repo_type: str, repo_id: str, *, private: bool, author: str) -> dict:
        with self.lock:
            if self.get_repo(repo_type, repo_id) is not None:
                raise FileExistsError(repo_id)
            repo = {
                "type": repo_type,
                "id": repo_id,
                "private": bool(private),
                "createdAt": _now_iso(),
                "branches": {},
                "tags": {},
                "commits": [],
                "lfs_objects": {},
            }
            cid = self._write_commit(repo, None, {}, "initial commit", "", author)
            repo["branches"]["main"] = cid
            repo["commits"].append(cid)
            self._repos[(repo_type, repo_id)] = repo
            self.save_repo(repo)
            return repo

    def delete_repo(self, repo_type: str, repo_id: str) -> bool:
        with self.lock:
            path = self._repo_file(repo_type, repo_id)
            self._repos.pop((repo_type, repo_id), None)
            if path.is_file():
                path.unlink()
                return True
            return False

    def resolve(self, repo: dict, rev: str) -> str | None:
        with self.lock:
            if rev.startswith("refs/heads/"):
                return repo["branches"].get(rev[len("refs/heads/") :])
            if rev.startswith("refs/tags/"):
                return repo["tags"].get(rev[len("refs/tags/") :])
            if rev in repo["branches"]:
                return repo["branches"][rev]
            if rev in repo["tags"]:
                return repo["tags"][rev]
            if _SHA1_RE.match(rev) and rev in repo["commits"]:
                return rev
            return None

    def commit(self, repo: dict, branch: str, ops: Sequence[tuple], *, message: str, description: str = "",
               author: str, parent_commit: str | None = None, create_branch: bool = False,
               replace_tree: bool = False) -> str:  # fmt: skip
        """Apply ops ``("add", path, entry)``, ``("delete_file", path)``, ``("delete_folder", path)`` on the head of
        ``branch`` and record a commit, even when nothing changes. Raises ``_HubError``."""
        with self.lock:
            head = repo["branches"].get(branch)
            if head is None and not create_branch:
                raise _HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            if parent_commit and (head is None or not head.startswith(parent_commit.lower())):
                raise _HubError(412, "A commit has happened since. Please refresh and try again.")
            tree = {} if (head is None or replace_tree) else dict(self.commit_doc(head)["tree"])
            for op in ops:
                kind, path = op[0], op[1]
                if kind == "add":
                    tree[path] = op[2]
                elif kind == "delete_file":
                    if path not in tree:
                        raise _HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                    del tree[path]
                elif kind == "delete_folder":
                    prefix = path.rstrip("/") + "/"
                    doomed = [p for p in tree if p.startswith(prefix)]
                    if not doomed:
                        raise _HubError(404, f"A folder with this name doesn't exist: {path}", "EntryNotFound")
                    for p in doomed:
                        del tree[p]
                else:  # pragma: no cover - internal misuse
                    raise ValueError(kind)
            for path in tree:
                parts = path.split("/")
                for i in range(1, len(parts)):
                    if "/".join(parts[:i]) in tree:
                        raise _HubError(400, f"Path conflict: {'/'.join(parts[:i])!r} is a file and a folder")
            cid = self._write_commit(repo, head, tree, message, description, author)
            repo["branches"][branch] = cid
            repo["commits"].append(cid)
            for op in ops:
                if op[0] == "add" and op[2]["lfs"]:
                    repo["lfs_objects"][op[2]["sha256"]] = op[2]["size"]
            self.save_repo(repo)
            return cid

    def has_lfs_object(self, repo: dict, oid: str, size: int | None = None) -> bool:
        """Whether ``oid`` was uploaded to (or committed in) this repo: LFS objects are per repo, as on the Hub."""
        with self.lock:
            known = repo["lfs_objects"].get(oid)
        meta = self.blob_meta(oid)
        return known is not None and meta is not None and (size is None or meta["size"] == size)

    def add_lfs_object(self, repo: dict, oid: str, size: int) -> None:
        with self.lock:
            repo["lfs_objects"][oid] = size
            self.save_repo(repo)

    def history(self, cid: str) -> list[str]:
        out = []
        while cid is not None:
            out.append(cid)
            cid = self.commit_doc(cid)["parent"]
        return out

    def last_commit(self, cid: str, path: str, is_dir: bool) -> dict:
        def key(c: str):
            idx = self.index(c)
            if is_dir:
                return idx.dirs.get(path)
            e = idx.files.get(path)
            return None if e is None else (e["sha256"], e["lfs"])

        cur = cid
        while True:
            parent = self.commit_doc(cur)["parent"]
            if parent is None or key(cur) != key(parent):
                doc = self.commit_doc(cur)
                return {"id": cur, "title": doc["message"], "date": doc["date"]}
            cur = parent


# --------------------------------------------------------------------------------------------------- HTTP


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address, handler, hub: "HubServer"):
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "lerobot-zarr-test-hub/1.0"
    timeout = 120  # idle keep-alive connections are closed after this many seconds
    server: _HTTPServer

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
    def hub(self) -> "HubServer":
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
        self.hub.stats._append(self._rec)
        self._headers_sent = False
        self._drop_after: int | None = None
        self._fault: _Fault | None = None
        self._body: bytes = b""
        self._body_consumed = False
        try:
            fault = self.hub._take_fault(method, self._rec.path)
            if method != "PUT" or fault is not None:
                self._body = self._read_body()
            self._fault = fault
            network = self.hub.network
            if network is not None:  # the round trip (and a new connection's handshake) before any answer
                rtts = 1 + (network.handshake_rtts if not self._served else 0)
                if self.hub._stopping.wait(network.latency_s * rtts):
                    raise _Dropped
            self._served += 1
            if fault is not None:
                if fault.kind in ("500", "401", "403"):
                    raise _HubError(int(fault.kind), f"Injected fault (HTTP {fault.kind})")
                if fault.kind == "reset":
                    raise _Dropped
                if fault.kind == "drop":
                    self._drop_after = fault.after_bytes
            segments = [unquote(s) for s in split.path.split("/")[1:]]
            while len(segments) > 1 and segments[-1] == "":
                segments.pop()
            self._route(method, segments)
        except _HubError as err:
            self._send_error(err)
        except _Dropped:
            self._abort()
        except (ConnectionError, TimeoutError, socket.timeout):
            self.close_connection = True
        except Exception as err:  # a server bug: answer 500 so that the test sees it, and keep the traceback
            self.hub.errors.append(traceback.format_exc())
            if self._headers_sent:
                self._abort()
            else:
                self._send_error(_HubError(500, f"Internal error in test hub: {err!r}"))
        finally:
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
            data = self.rfile.read(min(remaining, _CHUNK))
            if not data:
                raise ConnectionError(truncated)
            remaining -= len(data)
            self._rec.bytes_received += len(data)
            yield data

    def _read_body(self) -> bytes:
        return b"".join(self._read_chunks())

    def _stall(self) -> None:
        """A ``"stall"`` fault: wait (until the server stops at the latest), then drop the connection."""
        self.hub._stopping.wait(self._fault.seconds)
        raise _Dropped

    def _write(self, data: bytes) -> None:
        fault = self._fault
        if fault is not None and fault.kind == "stall" and self._headers_sent:
            room = fault.after_bytes - self._rec.bytes_sent
            if room < len(data):
                if room > 0:
                    self._rec.bytes_sent += room
                    self.wfile.write(data[:room])
                    self.wfile.flush()
                self._stall()
        if fault is not None and fault.kind == "trickle" and self._headers_sent:
            piece = max(1, fault.rate // 10)
            for i in range(0, len(data), piece):
                if self.hub._stopping.wait(0.1):
                    raise _Dropped
                self._rec.bytes_sent += len(data[i:i + piece])
                self.wfile.write(data[i:i + piece])
                self.wfile.flush()
            return
        if self._drop_after is not None:
            room = self._drop_after - self._rec.bytes_sent
            if room < len(data):
                if room > 0:
                    self._rec.bytes_sent += room
                    self.wfile.write(data[:room])
                raise _Dropped
        network = self.hub.network
        if network is None:
            self._rec.bytes_sent += len(data)
            self.wfile.write(data)
            return
        for i in range(0, len(data), _CHUNK):
            piece = data[i:i + _CHUNK]
            self.hub._link.send(len(piece), network.rate, self.hub._stopping)
            self._rec.bytes_sent += len(piece)
            self.wfile.write(piece)

    def _start(self, status: int, headers: Mapping[str, str], length: int) -> bool:
        """Send the status line and headers; returns whether a body follows."""
        has_body = self.command != "HEAD" and length > 0
        if self._drop_after is not None and not has_body:
            raise _Dropped  # nothing to cut short: drop before the status line
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
        self.end_headers()
        self._headers_sent = True
        return has_body

    def _finish_body(self) -> None:
        if self._drop_after is not None:
            raise _Dropped

    def _send_bytes(self, status: int, body: bytes, headers: Mapping[str, str] | None = None,
                    content_type: str = "application/json; charset=utf-8") -> None:  # fmt: skip
        hdrs = {"Content-Type": content_type, **(headers or {})}
        if self._start(status, hdrs, len(body)):
            self._write(body)
        self._finish_body()

    def _send_json(self, obj, status: int = 200, headers: Mapping[str, str] | None = None,
                   content_type: str = "application/json; charset=utf-8") -> None:  # fmt: skip
        self._send_bytes(status, _dumps(obj), headers, content_type)

    def _send_error(self, err: _HubError) -> None:
        if self._headers_sent:
            self._abort()
            return
        headers = dict(err.headers)
        if err.code:
            headers["X-Error-Code"] = err.code
        headers.setdefault("X-Error-Message", _header_safe(err.message))
        try:
            self._send_json({"error": err.message}, err.status, headers)
        except _Dropped:
            self._abort()

    def _abort(self) -> None:
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

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
            raise _HubError(401, _INVALID_CREDENTIALS, headers={"X-Error-Message": _INVALID_CREDENTIALS})
        self._user = tokens[token]
        self._authorized = True
        self._read_only = token in self.hub.read_only

    def _require_auth(self) -> None:
        """For writes: a token (401 without), and one that may write (403 for a read-only one)."""
        if not self._authorized:
            raise _HubError(401, "You must be authenticated to access this resource (pass a token).")
        if self._read_only:
            raise _HubError(403, "This token has read access only; writing needs a token with write access.")

    def _repo(self, repo_type: str, repo_id: str, *, write: bool = False) -> dict:
        if write:
            self._require_auth()
        try:
            _check_repo_id(repo_id)
        except ValueError as e:
            raise _HubError(400, str(e)) from None
        repo = self.hub._storage.get_repo(repo_type, repo_id)
        if repo is None:
            raise _HubError(404, "Repository not found", "RepoNotFound")
        if repo["private"] and not self._authorized:
            raise _HubError(401, "Repository not found", "RepoNotFound")
        return repo

    def _resolve(self, repo: dict, rev: str) -> str:
        cid = self.hub._storage.resolve(repo, rev)
        if cid is None:
            raise _HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return cid

    def _json_body(self) -> dict:
        try:
            data = json.loads(self._body or b"{}")
        except ValueError:
            raise _HubError(400, "Request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise _HubError(400, "Request body must be a JSON object")
        return data

    @staticmethod
    def _path(path: str, *, allow_root: bool = False) -> str:
        try:
            return _check_path(path, allow_root=allow_root)
        except ValueError as e:
            raise _HubError(400, str(e)) from None

    def _repo_url(self, repo_type: str, repo_id: str) -> str:
        return f"{self.hub.endpoint}/{_URL_PREFIX[repo_type]}{repo_id}"

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
            repo_type, seg = _FROM_PLURAL[seg[0]], seg[1:]
        if len(seg) >= 4 and seg[2] == "resolve":
            if method not in ("GET", "HEAD"):
                raise _HubError(405, "Method not allowed")
            return self._resolve_file(repo_type, f"{seg[0]}/{seg[1]}", seg[3], "/".join(seg[4:]))
        if len(seg) == 6 and seg[1].endswith(".git") and seg[2:] == ["info", "lfs", "objects", "batch"]:
            if method != "POST":
                raise _HubError(405, "Method not allowed")
            return self._lfs_batch(repo_type, f"{seg[0]}/{seg[1][:-4]}")
        raise _HubError(404, "Not Found")

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
        if len(seg) < 3 or seg[0] not in _FROM_PLURAL:
            raise _HubError(404, "Not Found")
        repo_type, repo_id, rest = _FROM_PLURAL[seg[0]], f"{seg[1]}/{seg[2]}", seg[3:]
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
                raise _HubError(405, "Method not allowed")
            raise _HubError(404, "Not Found")
        no_args, needs_args = ("", "refs", "settings"), ("revision", "tree", "tag", "branch")
        if (action in no_args and args) or (action in needs_args and not args):
            raise _HubError(404, "Not Found")
        return handler()

    # account & repos ---------------------------------------------------------------------------------------
    def _whoami(self) -> None:
        if self._user is None:
            raise _HubError(401, _INVALID_CREDENTIALS if self.hub.tokens is None else "Unauthorized")
        self._send_json(
            {
                "type": "user",
                "id": hashlib.sha1(self._user.encode()).hexdigest()[:24],
                "name": self._user,
                "fullname": self._user,
                "email": None,
                "emailVerified": False,
                "isPro": False,
                "canPay": False,
                "avatarUrl": "",
                "orgs": [],
                "auth": {"type": "access_token",
                         "accessToken": {"displayName": "test", "role": "read" if self._read_only else "write"}},
            }
        )

    def _create_repo(self) -> None:
        self._require_auth()
        body = self._json_body()
        name, org = body.get("name"), body.get("organization") or self._user
        if not isinstance(name, str) or not org:
            raise _HubError(400, "'name' (and 'organization' when anonymous) are required")
        repo_id = f"{org}/{name}"
        try:
            _check_repo_id(repo_id)
            repo_type = _check_repo_type(body.get("type"))
        except ValueError as e:
            raise _HubError(400, str(e)) from None
        visibility = body.get("visibility")
        private = bool(body.get("private")) if visibility is None else visibility == "private"
        url = self._repo_url(repo_type, repo_id)
        try:
            self.hub._storage.create_repo(repo_type, repo_id, private=private, author=self._user or "anonymous")
        except FileExistsError:
            self._send_json({"error": f"You already created this {repo_type} repo", "url": url}, 409)
            return
        self._send_json({"url": url, "name": repo_id, "id": repo_id})

    def _delete_repo(self) -> None:
        self._require_auth()
        body = self._json_body()
        name, org = body.get("name"), body.get("organization") or self._user
        try:
            repo_type = _check_repo_type(body.get("type"))
            repo_id = f"{org}/{name}"
            _check_repo_id(repo_id)
        except ValueError as e:
            raise _HubError(400, str(e)) from None
        if not self.hub._storage.delete_repo(repo_type, repo_id):
            raise _HubError(404, "Repository not found", "RepoNotFound")
        self._send_json({})

    # reading -----------------------------------------------------------------------------------------------
    def _info(self, repo_type: str, repo_id: str, rev: str | None) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id)
        cid = self._resolve(repo, rev if rev else "main")
        idx = storage.index(cid)
        doc = storage.commit_doc(cid)
        siblings = []
        for path in sorted(idx.files):
            entry = idx.files[path]
            sib = {"rfilename": path, "size": entry["size"], "blobId": idx.file_oid[path]}
            if path in idx.lfs_info:
                lfs = idx.lfs_info[path]
                sib["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
            siblings.append(sib)
        self._send_json(
            {
                "_id": hashlib.sha1(f"{repo_type}:{repo_id}".encode()).hexdigest()[:24],
                "id": repo_id,
                "author": repo_id.split("/")[0],
                "sha": self._bad_commit(cid),
                "lastModified": doc["date"],
                "createdAt": repo["createdAt"],
                "private": repo["private"],
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
                "usedStorage": sum(e["size"] for e in idx.files.values()),
            }
        )

    def _entry_json(self, idx: _TreeIndex, cid: str, path: str, expand: bool) -> dict:
        storage = self.hub._storage
        if idx.is_dir(path):
            out = {"type": "directory", "oid": idx.dirs[path], "size": 0, "path": path}
            if expand:
                out["lastCommit"] = storage.last_commit(cid, path, True)
            return out
        entry = idx.files[path]
        out = {"type": "file", "oid": idx.file_oid[path], "size": entry["size"], "path": path}
        if path in idx.lfs_info:
            out["lfs"] = dict(idx.lfs_info[path])
        if expand:
            out["lastCommit"] = storage.last_commit(cid, path, False)
            out["securityFileStatus"] = dict(_SECURITY_OK)
        return out

    def _tree(self, repo_type: str, repo_id: str, args: list[str]) -> None:
        if not args:
            raise _HubError(404, "Not Found")
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id)
        base = self._path("/".join(args[1:]).strip("/"), allow_root=True)
        recursive, expand = self._flag("recursive"), self._flag("expand")
        cursor = self._query.get("cursor", [None])[-1]
        offset = 0
        if cursor:
            try:
                state = json.loads(base64.urlsafe_b64decode(cursor.encode()))
                cid, offset = str(state["c"]), int(state["o"])
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise _HubError(400, "Invalid cursor") from None
            if cid not in repo["commits"] or offset < 0:
                raise _HubError(400, "Invalid cursor")
        else:
            cid = self._resolve(repo, args[0])
        idx = storage.index(cid)
        if base and not idx.is_dir(base):
            raise _HubError(404, f"Entry not found: {base}", "EntryNotFound", {"X-Repo-Commit": cid})
        if recursive:
            prefix = base + "/" if base else ""
            paths = sorted(p for p in [*idx.dirs, *idx.files] if p and p.startswith(prefix))
        else:
            kids = idx.children.get(base, {})
            join = (lambda n: f"{base}/{n}") if base else (lambda n: n)
            paths = [join(n) for n in sorted(kids) if kids[n] == "dir"]
            paths += [join(n) for n in sorted(kids) if kids[n] == "file"]
        page_size = max(1, self.hub.tree_page_size if not expand else min(50, self.hub.tree_page_size))
        page = paths[offset : offset + page_size]
        headers = {"X-Repo-Commit": cid}
        if offset + page_size < len(paths):
            params = [(k, v) for k, vs in self._query.items() if k != "cursor" for v in vs]
            token = base64.urlsafe_b64encode(_dumps({"c": cid, "o": offset + page_size})).decode()
            params.append(("cursor", token))
            headers["Link"] = f'<{self.hub.endpoint}{self._raw_path}?{urlencode(params)}>; rel="next"'
        self._send_json([self._entry_json(idx, cid, p, expand) for p in page], headers=headers)

    def _paths_info(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id)
        cid = self._resolve(repo, rev or "main")
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            body = self._json_body()
            paths, expand = body.get("paths") or [], bool(body.get("expand"))
        else:
            form = parse_qs(self._body.decode("utf-8", "replace"), keep_blank_values=True)
            paths = form.get("paths", [])
            expand = (form.get("expand") or ["false"])[-1].lower() in ("1", "true")
        if isinstance(paths, str):
            paths = [paths]
        idx = storage.index(cid)
        out = []
        for raw in paths:
            path = str(raw).strip("/")
            try:
                _check_path(path)
            except ValueError:
                continue
            if path in idx.files or idx.is_dir(path):
                out.append(self._entry_json(idx, cid, path, expand))
        self._send_json(out, headers={"X-Repo-Commit": cid})

    def _auth_check(self, repo_type: str, repo_id: str, args: list[str]) -> None:
        if args not in ([], ["write"]):
            raise _HubError(404, "Not Found")
        self._repo(repo_type, repo_id, write=args == ["write"])
        self._send_json({})

    def _bad_commit(self, cid: str) -> str:
        """A ``"bad_commit"`` fault answers its ``value`` wherever a commit id is due."""
        return self._fault.value if self._fault is not None and self._fault.kind == "bad_commit" else cid

    def _refs(self, repo_type: str, repo_id: str) -> None:
        repo = self._repo(repo_type, repo_id)
        with self.hub._storage.lock:
            branches, tags = sorted(repo["branches"].items()), sorted(repo["tags"].items())
        out = {
            "branches": [{"name": n, "ref": f"refs/heads/{n}", "targetCommit": self._bad_commit(c)} for n, c in branches],
            "tags": [{"name": n, "ref": f"refs/tags/{n}", "targetCommit": self._bad_commit(c)} for n, c in tags],
            "converts": [],
        }
        if self._flag("include_prs"):
            out["pullRequests"] = []
        self._send_json(out)

    def _commits(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id)
        out = []
        for cid in storage.history(self._resolve(repo, rev)):
            doc = storage.commit_doc(cid)
            out.append(
                {
                    "id": cid,
                    "title": doc["message"],
                    "message": doc["description"],
                    "authors": [{"user": doc["author"], "avatar": None}],
                    "date": doc["date"],
                }
            )
        self._send_json(out)

    def _resolve_file(self, repo_type: str, repo_id: str, rev: str, path: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id)
        cid = self._resolve(repo, rev)
        path = self._path(path)
        idx = storage.index(cid)
        entry = idx.files.get(path)
        if entry is None:
            raise _HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": cid})
        size, lfs = entry["size"], entry["lfs"]
        etag = entry["sha256"] if lfs else entry["git_sha1"]
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "ETag": f'"{etag}"',
            "X-Repo-Commit": cid,
        }
        if lfs:
            headers["X-Linked-Etag"] = f'"{etag}"'
            headers["X-Linked-Size"] = str(size)
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header and self.command == "GET":
            parsed = _parse_range(range_header, size)
            if parsed == "unsatisfiable":
                raise _HubError(416, "Requested Range Not Satisfiable", headers={"Content-Range": f"bytes */{size}"})
            if parsed is not None:
                start, end = parsed
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = max(0, end - start + 1)
        fault = self._fault
        if fault is not None and fault.kind == "short":  # a complete answer, just fewer bytes than the range
            length = min(length, fault.after_bytes)
        if fault is not None and fault.kind == "bad_range" and status == 206:  # another part of the file than asked
            shift = max(1, fault.after_bytes)
            start = start + shift if start + shift + length <= size else max(0, start - shift)
            headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
        if self._start(status, headers, length):
            with open(storage.blob_path(entry["sha256"]), "rb") as f:
                f.seek(start)
                remaining = length
                while remaining:
                    chunk = f.read(min(_CHUNK, remaining))
                    if not chunk:
                        raise ConnectionError("blob shorter than recorded")
                    self._write(chunk)
                    remaining -= len(chunk)
        self._finish_body()

    # writing -----------------------------------------------------------------------------------------------
    def _preupload(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        cid = self._resolve(repo, rev or "main")
        files = self._json_body().get("files")
        if not isinstance(files, list):
            raise _HubError(400, "'files' must be a list")
        idx = storage.index(cid)
        out = []
        for item in files:
            if not isinstance(item, dict) or not isinstance(item.get("path"), str):
                raise _HubError(400, "each file needs a 'path'")
            path = self._path(item["path"])
            try:
                sample = base64.b64decode(item.get("sample") or "")
                size = int(item.get("size") or 0)
            except (ValueError, TypeError, binascii.Error):
                raise _HubError(400, f"invalid sample or size for {path}") from None
            mode = "lfs" if _is_lfs(path, size, sample) else "regular"
            info = {"path": path, "uploadMode": mode, "shouldIgnore": False}
            existing = idx.files.get(path)
            if existing is not None:
                info["oid"] = existing["sha256"] if mode == "lfs" else existing["git_sha1"]
            out.append(info)
        self._send_json({"files": out, "commitOid": cid})

    def _lfs_batch(self, repo_type: str, repo_id: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        body = self._json_body()
        if body.get("operation") != "upload":
            raise _HubError(400, "Only the 'upload' operation is supported by this test hub")
        objects = body.get("objects")
        if not isinstance(objects, list):
            raise _HubError(400, "'objects' must be a list")
        out = []
        for obj in objects:
            oid, size = (obj or {}).get("oid"), (obj or {}).get("size")
            if not isinstance(oid, str) or not _SHA256_RE.match(oid) or not isinstance(size, int) or size < 0:
                out.append(
                    {"oid": str(oid), "size": size if isinstance(size, int) else 0,
                     "error": {"code": 422, "message": "invalid oid or size"}}
                )  # fmt: skip
                continue
            item = {"oid": oid, "size": size, "authenticated": True}
            if not storage.has_lfs_object(repo, oid, size):
                key = f"{_URL_PREFIX[repo_type]}{repo_id}/{oid}"
                href = f"{self.hub.endpoint}/__lfs/{key}?size={size}&sig={self.hub._sign(key, size)}"
                item["actions"] = {"upload": {"href": href, "expires_in": 3600}}
            out.append(item)
        self._send_json(
            {"transfer": "basic", "objects": out, "hash_algo": "sha256"},
            content_type="application/vnd.git-lfs+json",
        )

    def _lfs_put(self, method: str, seg: list[str]) -> None:
        """PUT of an LFS object to the signed URL handed out by the batch endpoint (no Authorization header)."""
        if method != "PUT":
            raise _HubError(405, "Method not allowed")
        size_s, sig = self._query.get("size", [""])[-1], self._query.get("sig", [""])[-1]
        key = "/".join(seg)
        if not size_s.isdigit() or not hmac.compare_digest(sig, self.hub._sign(key, int(size_s))):
            raise _HubError(403, "Invalid or expired upload URL")
        if seg and seg[0] in ("datasets", "spaces"):
            repo_type, seg = _FROM_PLURAL[seg[0]], seg[1:]
        else:
            repo_type = "model"
        oid, size = seg[-1], int(size_s)
        storage = self.hub._storage
        repo = storage.get_repo(repo_type, "/".join(seg[:-1]))
        if repo is None:
            raise _HubError(404, "Repository not found", "RepoNotFound")
        chunks = self._read_chunks() if not self._body_consumed else iter([self._body])
        meta = storage.put_stream(chunks, size)
        if meta["sha256"] != oid or meta["size"] != size:
            raise _HubError(400, f"Uploaded content does not match oid {oid} / size {size}")
        storage.add_lfs_object(repo, oid, size)
        self._send_bytes(200, b"", content_type="text/plain")

    def _commit(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        if self._flag("create_pr"):
            raise _HubError(400, "Pull requests are not supported by this test hub")
        branch = rev[len("refs/heads/") :] if rev.startswith("refs/heads/") else rev
        if branch not in repo["branches"]:
            if storage.resolve(repo, rev) is not None:
                raise _HubError(400, f"Can only commit to a branch, not to {rev!r}")
            raise _HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        header, ops = None, []
        for n, line in enumerate(self._body.splitlines()):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                key, value = item["key"], item["value"]
            except (ValueError, KeyError, TypeError):
                raise _HubError(400, f"Invalid ndjson line {n + 1}") from None
            if key == "header":
                header = value
            elif key == "file":
                path = self._path(str(value.get("path", "")))
                content = str(value.get("content", ""))
                try:
                    if value.get("encoding") == "base64":
                        data = base64.b64decode(content, validate=True)
                    else:
                        data = content.encode()
                except (ValueError, binascii.Error):
                    raise _HubError(400, f"Invalid base64 content for {path}") from None
                ops.append(("add", path, {**_entry(storage.put_bytes(data)), "lfs": False}))
            elif key == "lfsFile":
                path = self._path(str(value.get("path", "")))
                oid = str(value.get("oid", ""))
                if not storage.has_lfs_object(repo, oid, value.get("size")):
                    raise _HubError(422, f"LFS object {oid} for {path} was not uploaded (or has another size)")
                meta = storage.blob_meta(oid)
                ops.append(("add", path, {**_entry({"sha256": oid, **meta}), "lfs": True}))
            elif key == "deletedFile":
                ops.append(("delete_file", self._path(str(value.get("path", "")))))
            elif key == "deletedFolder":
                ops.append(("delete_folder", self._path(str(value.get("path", "")).rstrip("/"))))
            else:
                raise _HubError(400, f"Unknown operation key {key!r}")
        if not isinstance(header, dict):
            raise _HubError(400, "Missing commit header")
        cid = storage.commit(
            repo,
            branch,
            ops,
            message=str(header.get("summary") or "commit"),
            description=str(header.get("description") or ""),
            author=self._user or "anonymous",
            parent_commit=header.get("parentCommit"),
        )
        self._send_json(
            {
                "success": True,
                "commitOid": cid,
                "commitUrl": f"{self._repo_url(repo_type, repo_id)}/commit/{cid}",
                "pullRequestUrl": None,
            }
        )

    def _settings(self, repo_type: str, repo_id: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        if not self._body_consumed:
            self._body = self._read_body()
        body = self._json_body()
        with storage.lock:
            if "visibility" in body:
                repo["private"] = body["visibility"] == "private"
            elif "private" in body:
                repo["private"] = bool(body["private"])
            storage.save_repo(repo)
        self._send_json({})

    def _create_tag(self, repo_type: str, repo_id: str, rev: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        cid = self._resolve(repo, rev)
        tag = self._json_body().get("tag")
        try:
            _check_ref_name(tag)
        except ValueError as e:
            raise _HubError(400, str(e)) from None
        with storage.lock:
            if tag in repo["tags"]:
                raise _HubError(409, f"Tag {tag!r} already exists")
            repo["tags"][tag] = cid
            storage.save_repo(repo)
        self._send_json({"name": tag, "ref": f"refs/tags/{tag}", "targetCommit": cid})

    def _delete_tag(self, repo_type: str, repo_id: str, tag: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        with storage.lock:
            if tag not in repo["tags"]:
                raise _HubError(404, f"Invalid rev id: {tag}", "RevisionNotFound")
            del repo["tags"][tag]
            storage.save_repo(repo)
        self._send_json({})

    def _create_branch(self, repo_type: str, repo_id: str, branch: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        body = self._json_body()
        try:
            _check_ref_name(branch)
        except ValueError as e:
            raise _HubError(400, str(e)) from None
        start = self._resolve(repo, str(body.get("startingPoint") or "main"))
        with storage.lock:
            if branch in repo["branches"]:
                raise _HubError(409, f"Branch {branch!r} already exists")
            repo["branches"][branch] = start
            storage.save_repo(repo)
        self._send_json({})

    def _delete_branch(self, repo_type: str, repo_id: str, branch: str) -> None:
        storage = self.hub._storage
        repo = self._repo(repo_type, repo_id, write=True)
        with storage.lock:
            if branch not in repo["branches"]:
                raise _HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            if branch == "main":
                raise _HubError(403, "Cannot delete the default branch")
            del repo["branches"][branch]
            storage.save_repo(repo)
        self._send_json({})


def _entry(meta: dict) -> dict:
    return {"blob": meta["sha256"], "size": meta["size"], "sha256": meta["sha256"], "git_sha1": meta["git_sha1"]}


def _parse_range(header: str, size: int):
    """``(start, end)`` inclusive, ``None`` to ignore the header (malformed or several ranges), or
    ``"unsatisfiable"``."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not m or (not m.group(1) and not m.group(2)):
        return None
    first, last = m.group(1), m.group(2)
    if not first:
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return max(0, size - n), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        return "unsatisfiable"
    return start, min(end, size - 1)


# --------------------------------------------------------------------------------------------------- public API


class HubServer:
    """A Hub-compatible HTTP server on ``host:port`` (port 0 picks a free one) storing repos under ``storage_dir``.

    ``tokens`` maps token -> user name; requests authenticate with ``Authorization: Bearer <token>``.
    ``endpoint`` is ``http://host:port`` once started. ``tree_page_size`` (default 1000; 50 when ``expand``) is
    the page size of the tree listing, which paginates with a ``Link: <...>; rel="next"`` header.
    ``stats`` records every request (:class:`HubStats`). State persists in ``storage_dir``: a new server on the
    same directory serves the same repos. ``network`` (a :class:`NetworkModel`, settable at any time; None: as
    fast as the machine) models latency and bandwidth.
    """

    def __init__(self, storage_dir: str | os.PathLike, *, host: str = "127.0.0.1", port: int = 0,
                 tokens: Mapping[str, str] | None = None, read_only: Sequence[str] = (),
                 network: NetworkModel | None = None):  # fmt: skip
        self.storage_dir = Path(storage_dir).resolve()
        self.host, self.port = host, port
        self.tokens: dict[str, str] | None = dict(tokens) if tokens is not None else None
        self.read_only = frozenset(read_only)
        self._stopping = threading.Event()
        self.tree_page_size = 1000
        self.network = network
        self._link = _Link()
        self.stats = HubStats()
        #: Tracebacks of unexpected exceptions in request handlers (each also answered with a 500).
        self.errors: list[str] = []
        self._storage = _Storage(self.storage_dir)
        self._secret = secrets.token_bytes(32)
        self._faults: list[_Fault] = []
        self._faults_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._endpoint: str | None = None

    # lifecycle ---------------------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        if self._endpoint is None:
            raise RuntimeError("HubServer is not started")
        return self._endpoint

    def start(self) -> "HubServer":
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer((self.host, self.port), _Handler, self)
        host, port = self._httpd.server_address[:2]
        self.port = port
        self._endpoint = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name=f"hub-server-{port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()  # stalled and trickling answers end
        httpd.shutdown()
        httpd.server_close()
        httpd.close_all_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # repos -------------------------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, folder: str | os.PathLike | None = None, *, repo_type: str = "dataset",
                 private: bool = False, tags: Sequence[str] = (), branch: str = "main",
                 commit_message: str = "initial commit") -> str:  # fmt: skip
        """Create the repo if needed, then commit exactly the files of ``folder`` (recursively, skipping ``.git``
        and ``.cache/huggingface``; none when ``folder`` is None) to ``branch`` as one commit whose tree replaces
        the branch's. Sets ``private``, points each of ``tags`` at the commit and returns its sha."""
        repo_type = _check_repo_type(repo_type)
        _check_repo_id(repo_id)
        _check_ref_name(branch)
        for tag in tags:
            _check_ref_name(tag)
        storage = self._storage
        ops = []
        if folder is not None:
            root = Path(folder)
            if not root.is_dir():
                raise ValueError(f"{folder} is not a directory")
            for dirpath, dirnames, filenames in os.walk(root):
                rel_dir = Path(dirpath).relative_to(root).as_posix()
                dirnames[:] = sorted(
                    d for d in dirnames if d != ".git" and not (rel_dir == ".cache" and d == "huggingface")
                )
                for name in sorted(filenames):
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    _check_path(rel)
                    full = Path(dirpath) / name
                    with open(full, "rb") as f:
                        sample = f.read(512)
                    meta = storage.put_file(full)
                    ops.append(("add", rel, {**_entry(meta), "lfs": _is_lfs(rel, meta["size"], sample)}))
        with storage.lock:
            repo = storage.get_repo(repo_type, repo_id)
            if repo is None:
                repo = storage.create_repo(repo_type, repo_id, private=private, author="hub-server")
            repo["private"] = bool(private)
            cid = storage.commit(
                repo, branch, ops, message=commit_message, author="hub-server", create_branch=True, replace_tree=True
            )
            for tag in tags:
                repo["tags"][tag] = cid
            storage.save_repo(repo)
        return cid

    def commit_files(self, repo_id: str, files: Mapping[str, bytes], *, repo_type: str = "dataset",
                     branch: str = "main", deletions: Sequence[str] = (), message: str = "") -> str:  # fmt: skip
        """Commit ``files`` (path -> bytes, added or replaced) and ``deletions`` (file paths, or folders, given
        with or without a trailing '/') on top of ``branch``; always records a commit, even an empty one."""
        repo_type = _check_repo_type(repo_type)
        storage = self._storage
        repo = storage.get_repo(repo_type, repo_id)
        if repo is None:
            raise ValueError(f"no {repo_type} repo {repo_id!r}")
        ops = []
        with storage.lock:
            head = repo["branches"].get(branch)
            if head is None:
                raise ValueError(f"no branch {branch!r} in {repo_id!r}")
            current = storage.index(head)
        for path in deletions:
            clean = _check_path(path.rstrip("/"))
            if path.endswith("/") or (clean not in current.files and current.is_dir(clean)):
                ops.append(("delete_folder", clean))
            else:
                ops.append(("delete_file", clean))
        for path, data in files.items():
            _check_path(path)
            meta = storage.put_bytes(bytes(data))
            ops.append(("add", path, {**_entry(meta), "lfs": _is_lfs(path, meta["size"], bytes(data[:512]))}))
        try:
            return storage.commit(repo, branch, ops, message=message or "commit files", author="hub-server")
        except _HubError as e:
            raise ValueError(e.message) from None

    def refs(self, repo_id: str, *, repo_type: str = "dataset") -> dict[str, dict[str, str]]:
        """``{"branches": {name: sha}, "tags": {name: sha}}``."""
        repo = self._get_repo(repo_id, repo_type)
        with self._storage.lock:
            return {"branches": dict(repo["branches"]), "tags": dict(repo["tags"])}

    def commits(self, repo_id: str, *, repo_type: str = "dataset", revision: str = "main") -> list[dict]:
        """History of ``revision``, newest first: the commit documents with their ``id``."""
        storage = self._storage
        cid = self._resolve_rev(repo_id, repo_type, revision)
        return [{"id": c, **storage.commit_doc(c)} for c in storage.history(cid)]

    def list_files(self, repo_id: str, *, repo_type: str = "dataset", revision: str = "main") -> list[str]:
        return sorted(self._storage.index(self._resolve_rev(repo_id, repo_type, revision)).files)

    def get_file(self, repo_id: str, path: str, *, repo_type: str = "dataset", revision: str = "main") -> bytes:
        idx = self._storage.index(self._resolve_rev(repo_id, repo_type, revision))
        if path not in idx.files:
            raise FileNotFoundError(path)
        return self._storage.blob_path(idx.files[path]["sha256"]).read_bytes()

    def _get_repo(self, repo_id: str, repo_type: str) -> dict:
        repo = self._storage.get_repo(_check_repo_type(repo_type), repo_id)
        if repo is None:
            raise ValueError(f"no {repo_type} repo {repo_id!r}")
        return repo

    def _resolve_rev(self, repo_id: str, repo_type: str, revision: str) -> str:
        cid = self._storage.resolve(self._get_repo(repo_id, repo_type), revision)
        if cid is None:
            raise ValueError(f"no revision {revision!r} in {repo_id!r}")
        return cid

    # stats & faults ----------------------------------------------------------------------------------------
    def bytes_sent(self, path_prefix: str | None = None) -> int:
        """Response body bytes sent for requests whose URL-decoded path starts with ``path_prefix``."""
        return self.stats.bytes_sent(path_prefix)

    def requests(self, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        return self.stats.requests(method, path_contains)

    def reset_stats(self) -> None:
        self.stats.reset()

    def inject_fault(self, *, path_contains: str, kind: str, count: int = 1, after_bytes: int = 0,
                     method: str | None = None, seconds: float = 60.0, rate: int = 16,
                     value: str = "") -> None:  # fmt: skip
        """Make the next ``count`` requests whose URL-decoded path contains ``path_contains`` (and whose method is
        ``method``, if given) fail. Kinds:

        - ``"500"``: answer ``500`` with a JSON error body (the client retries some calls on 5xx).
        - ``"drop"``: send the status line and headers (with the full ``Content-Length``), then close the
          connection after ``after_bytes`` body bytes; a response without body (HEAD) is dropped before its
          status line.
        - ``"reset"``: close the connection without answering.
        - ``"401"``, ``"403"``: answer that status (as for a token that may not read the file).
        - ``"stall"``: send nothing for ``seconds`` (or until the server stops), then close the connection; with
          ``after_bytes`` > 0, the status line, headers and that many body bytes first.
        - ``"trickle"``: send the body at ``rate`` bytes per second (in tenths of a second).
        - ``"short"`` (file downloads): a complete answer (``Content-Length`` agreeing) of at most ``after_bytes``
          body bytes, whatever range was asked.
        - ``"bad_range"`` (range downloads): the bytes ``max(1, after_bytes)`` further into the file (or back,
          at its end), with a ``Content-Range`` saying so.
        - ``"bad_commit"`` (``/refs`` and repo info): ``value`` wherever a commit id is due.
        """
        if kind not in _FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        if count < 1 or after_bytes < 0 or seconds < 0 or rate < 1:
            raise ValueError("count and rate must be >= 1, after_bytes and seconds >= 0")
        with self._faults_lock:
            self._faults.append(_Fault(path_contains, kind, count, after_bytes, method.upper() if method else None,
                                       seconds, rate, value))

    def clear_faults(self) -> None:
        with self._faults_lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        with self._faults_lock:
            for fault in self._faults:
                if fault.path_contains in path and (fault.method is None or fault.method == method):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _sign(self, key: str, size: int) -> str:
        return hmac.new(self._secret, f"{key}:{size}".encode(), hashlib.sha256).hexdigest()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lerobot_zarr.testing.hub_server``: serve LeRobot folders (or a generated sample) as Hub dataset
    repos on 127.0.0.1 until Ctrl-C, to try the Hub commands (``lerobot-zarr info org/name``, ``convert``,
    ``push``...) without the network."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m lerobot_zarr.testing.hub_server", description=main.__doc__)
    parser.add_argument("--repo", action="append", default=[], metavar="ORG/NAME=FOLDER",
                        help="serve a LeRobot dataset folder as this repo, tagged with its codebase version "
                             "(v3.0, v2.1: what LeRobot's revision resolution picks); repeatable")
    parser.add_argument("--sample", default=None, metavar="ORG/NAME",
                        help="serve a generated LeRobot v3.0 dataset (50 episodes, a PNG camera) as this repo")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--token", default="hf_local_token",
                        help="the token that may write (push); reading needs none (default hf_local_token)")
    parser.add_argument("--storage", type=Path, default=None,
                        help="keep the served repos in this folder (default: a temporary one, deleted at the end)")
    args = parser.parse_args(argv)
    if not args.repo and not args.sample:
        parser.error("give --repo ORG/NAME=FOLDER or --sample ORG/NAME")
    with tempfile.TemporaryDirectory(prefix="lerobot_zarr-hub-") as tmp:
        storage = args.storage if args.storage is not None else Path(tmp) / "storage"
        with HubServer(storage, port=args.port, tokens={args.token: "local"}) as hub:
            repos = [spec.split("=", 1) for spec in args.repo]
            if args.sample:
                from .sample_data import write_sample_dataset

                repos.append((args.sample, str(write_sample_dataset(Path(tmp) / "sample", n_episodes=50,
                                                                     image_keys=("observation.images.cam",)))))
            for pair in repos:
                if len(pair) != 2 or not Path(pair[1], "meta", "info.json").is_file():
                    parser.error(f"--repo {'='.join(pair)}: expected ORG/NAME=FOLDER of a LeRobot dataset")
                repo_id, folder = pair
                version = json.loads(Path(folder, "meta", "info.json").read_text()).get("codebase_version")
                hub.add_repo(repo_id, folder, tags=[version] if isinstance(version, str) else [])
                print(f"serving {repo_id} ({folder}, tag {version})")
            print(f"Hub at {hub.endpoint} until Ctrl-C. In another shell:\n"
                  f"  export HF_ENDPOINT={hub.endpoint} HF_HUB_DISABLE_XET=1 HF_TOKEN={args.token}\n"
                  f"  lerobot-zarr info {repos[0][0]}", flush=True)
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
