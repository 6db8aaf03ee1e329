"""Hub I/O: resolve a revision the way LeRobot does, list a dataset repo, and read byte ranges of its files.

Everything goes through the real ``huggingface_hub`` client (its session, headers, endpoint, token and offline
settings) but never through its download cache: parquet files are opened as range-reading file objects, so
only footers and the row groups asked for cross the network, and the local store stays the only local copy.
"""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Iterable
from typing import BinaryIO
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import CorruptSourceError, HubAuthError, HubError, RepoNotFoundError, RevisionNotFoundError
from .files import SourceFiles
from .source import safe_relpath

__all__ = ["HubFiles", "resolve_revision", "parse_repo_id", "network_errors", "REPO_ID"]

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_RETRIES = 4
_READ_AHEAD = (256 << 10, 8 << 20)
_SHARED_BLOCKS_BYTES = 64 << 20  # first read after a seek, and the most a sequential read grows to
_FOOTER_GUESS = 16 * 1024
_BACKOFF_S = 0.25


def network_errors() -> tuple[type[BaseException], ...]:
    """Exception classes of a failed connection, whichever HTTP client huggingface_hub uses."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for name in ("httpx2", "httpx", "requests"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        for attr in ("TransportError", "ConnectionError", "Timeout"):
            cls = getattr(module, attr, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                errors.append(cls)
    return tuple(errors)


def parse_repo_id(repo_id: str) -> str:
    """Validate ``org/name``; the parts become local folder names, so nothing else is accepted."""
    if not isinstance(repo_id, str) or not REPO_ID.match(repo_id) or ".." in repo_id:
        raise ValueError(f"{repo_id!r} is not a Hub dataset repo id of the form 'org/name'")
    return repo_id


def _translate(exc: Exception, repo_id: str, revision: str | None) -> Exception:
    """huggingface_hub's errors -> ours (which name the repo and revision)."""
    from huggingface_hub import errors as hf

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 401 or status == 403:
        return HubAuthError(f"{repo_id}: not authorized (HTTP {status}); the repo is private or gated: pass token= "
                            f"or log in with `hf auth login`")
    if isinstance(exc, hf.RevisionNotFoundError):
        return RevisionNotFoundError(f"{repo_id}: revision {revision!r} not found")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return RepoNotFoundError(f"{repo_id}: dataset repository not found")
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return HubError(f"{repo_id}: HF_HUB_OFFLINE is set and the data asked for is not in the local store")
    return HubError(f"{repo_id}@{revision}: Hub request failed: {exc}")


def resolve_revision(repo_id: str, revision: str | None = None, *, token: str | bool | None = None,
                     endpoint: str | None = None) -> tuple[str, str]:
    """``(revision, commit sha)``. Without a revision, like LeRobot: tag ``v3.0`` if present, else the highest
    ``v3.x`` tag, else the highest ``v2.x`` tag (which we read too), else the main branch."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    try:
        refs = api.list_repo_refs(repo_id, repo_type="dataset")
        branches = {b.name: b.target_commit for b in refs.branches}
        tags = {t.name: t.target_commit for t in refs.tags}
        if revision is None:
            revision = _default_revision(tags) or ("main" if "main" in branches else next(iter(branches), None))
            if revision is None:
                raise RevisionNotFoundError(f"{repo_id}: repository has no branch and no version tag")
        if revision in tags:
            return revision, tags[revision]
        if revision in branches:
            return revision, branches[revision]
        if not _SHA.match(revision):
            raise RevisionNotFoundError(f"{repo_id}: revision {revision!r} is neither a branch, a tag nor a commit "
                                        f"(tags: {sorted(tags)}, branches: {sorted(branches)})")
        return revision, api.dataset_info(repo_id, revision=revision).sha
    except (RevisionNotFoundError, RepoNotFoundError):
        raise
    except Exception as exc:  # huggingface_hub and network errors, translated
        raise _translate(exc, repo_id, revision) from exc


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


class HubFiles(SourceFiles):
    """A dataset repository at one commit, read with HTTP range requests and no disk cache."""

    concurrency = 4

    def __init__(self, repo_id: str, commit: str, *, revision: str | None = None, token: str | bool | None = None,
                 endpoint: str | None = None):
        from huggingface_hub import HfApi, constants

        self.repo_id = parse_repo_id(repo_id)
        self.commit = commit
        self.revision = revision or commit
        self.token = token
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self.name = repo_id.replace("/", "--")
        self._footers: dict[str, pq.FileMetaData] = {}
        self._blocks: dict[tuple[str, int], bytes] = {}  # recent read-ahead blocks, oldest first
        self._blocks_lock = threading.Lock()
        self._footer_sizes: dict[str, int] = {}
        api = HfApi(endpoint=self.endpoint, token=token)
        try:
            entries = list(api.list_repo_tree(repo_id, recursive=True, revision=commit, repo_type="dataset"))
        except Exception as exc:
            raise _translate(exc, repo_id, self.revision) from exc
        self.sizes: dict[str, int] = {}
        self.oids: dict[str, str] = {}  # sha256 of LFS files, git blob sha1 of the others
        for entry in entries:
            if getattr(entry, "size", None) is not None and not hasattr(entry, "tree_id"):
                rel = safe_relpath(self.location(), entry.path, "repository file")
                self.sizes[rel] = int(entry.size)
                lfs = getattr(entry, "lfs", None)
                self.oids[rel] = (lfs.sha256 if lfs is not None else entry.blob_id) or ""

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
        """Bytes ``[start, stop)`` of a file (to its end without ``stop``), with bounded retries."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        size = self.size(rel)
        stop = size if stop is None else min(stop, size)
        if start >= stop:
            return b""
        headers = build_hf_headers(token=self.token)
        if start or stop < size:
            headers["Range"] = f"bytes={start}-{stop - 1}"
        last: Exception | None = None
        for attempt in range(_RETRIES + 1):
            try:
                response = get_session().get(self.url(rel), headers=headers, follow_redirects=True)
                if response.status_code >= 500 or response.status_code in (408, 429):
                    last = HubError(f"{self.location(rel)}: HTTP {response.status_code}")
                else:
                    hf_raise_for_status(response)
                    data = response.content
                    if len(data) != stop - start:
                        raise HubError(f"{self.location(rel)}: asked for bytes [{start}, {stop}), got {len(data)}")
                    return data
            except HubError:
                raise
            except Exception as exc:
                from huggingface_hub import errors as hf

                if isinstance(exc, (hf.HfHubHTTPError, hf.OfflineModeIsEnabled)):
                    raise _translate(exc, self.repo_id, self.revision) from exc
                last = exc  # connection dropped or reset: try again
            time.sleep(_BACKOFF_S * 2**attempt)
        raise HubError(f"{self.location(rel)}: download failed after {_RETRIES + 1} attempts ({last})")

    def read_bytes(self, rel: str) -> bytes:
        return self.get(rel)

    def block(self, rel: str, start: int, stop: int) -> tuple[int, bytes]:
        """Bytes from ``start`` to at least ``stop``: from a block read recently by any reader of the same file
        if one holds ``[start, stop)`` (episodes next to each other in one mp4 share blocks), else fetched."""
        with self._blocks_lock:
            for key, data in reversed(self._blocks.items()):
                if key[0] == rel and key[1] <= start and stop <= key[1] + len(data):
                    return key[1], data
        data = self.get(rel, start, stop)
        with self._blocks_lock:
            self._blocks[(rel, start)] = data
            while sum(len(d) for d in self._blocks.values()) > _SHARED_BLOCKS_BYTES:
                self._blocks.pop(next(iter(self._blocks)))
        return start, data

    def parquet(self, rel: str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
        if self.size(rel) < 12:
            raise CorruptSourceError(f"{self.location(rel)}: {self.size(rel)} bytes is too small to be parquet")
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
        size = self.size(rel)
        guess = self._footer_sizes.get(rel, _FOOTER_GUESS)  # exact when our index recorded it
        tail = self.get(rel, max(0, size - guess), size)
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise CorruptSourceError(f"{self.location(rel)}: not a parquet file (no PAR1 magic at its end)")
        length = int.from_bytes(tail[-8:-4], "little")
        if length + 8 > size - 4:
            raise CorruptSourceError(f"{self.location(rel)}: parquet footer of {length} bytes does not fit the file")
        if length + 8 > len(tail):
            tail = self.get(rel, size - 8 - length, size - len(tail)) + tail
        footer = tail[-8 - length:]
        try:
            return pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
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
