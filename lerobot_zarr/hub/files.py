"""A Hub dataset repository at one commit as :class:`~lerobot_zarr.lerobot.source_files.SourceFiles`: the range
reader of :mod:`~lerobot_zarr.lerobot.range_files` over HTTP (no disk cache), its listing and our index file.

Each request goes through
:func:`~lerobot_zarr.hub.http.request` (bounded waits, retries, our errors). Trust: tree paths pass
``safe_relpath`` (an odd name outside ``meta/``, ``data/`` and ``videos/`` is ignored, one inside them refused).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from ..errors import CorruptSourceError, HubError
from ..lerobot.index_file import INDEX_FILE
from ..lerobot.range_files import RangeFiles
from ..lerobot.source_files import safe_relpath
from .http import Retry, Where, check_commit, hub_endpoint, parse_repo_id, request, short
from .revisions import list_tree

__all__ = ["HubFiles", "fetch_file", "file_url"]

_DATASET_FOLDERS = ("meta", "data", "videos")  # what LeRobotSource reads; odd names elsewhere are ignored
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


def file_url(endpoint: str, repo_id: str, commit: str, rel: str) -> str:
    """The URL of a dataset repo's file at a commit (``/resolve/``)."""
    return f"{endpoint}/datasets/{repo_id}/resolve/{commit}/{quote(rel)}"


def fetch_file(repo_id: str, commit: str, rel: str, *, token: str | bool | None = None,
               endpoint: str | None = None, revision: str | None = None) -> bytes:
    """A whole file whose size is not known yet, in one request (a 404 raises SourceNotFoundError, a
    FileNotFoundError); ``revision`` names it in errors."""
    where = Where(repo_id, revision or commit, rel)
    _, data = request("GET", file_url(hub_endpoint(endpoint), repo_id, commit, rel), where, token=token,
                      kind="download", headers={"Accept-Encoding": "identity"})
    return data


class HubFiles(RangeFiles):
    """A dataset repository at one commit, read with HTTP range requests and no disk cache.

    Requests that do not depend on each other go out together: the tree listing with our index file (its name is
    fixed), the metadata files with each other (:meth:`prefetch`), the footers and row groups of several data
    files (:meth:`prefetch_footers`, :meth:`prefetch_ranges`); bytes fetched ahead are held until read."""

    def __init__(self, repo_id: str, commit: str, *, revision: str | None = None, token: str | bool | None = None,
                 endpoint: str | None = None):
        self.repo_id = parse_repo_id(repo_id)
        self.commit = check_commit(commit, Where(repo_id, revision), revision or "the store's source")
        self.revision = revision or commit
        self.token = token
        self.endpoint = hub_endpoint(endpoint)
        self.name = repo_id.replace("/", "--")
        super().__init__()
        self.oids: dict[str, str] = {}  # sha256 of LFS files, git blob sha1 of the others
        # our index file is read alongside the listing (one round trip for both): if the repo has one, it is all
        # the metadata an open needs; if not, the answer is a 404 and LeRobot's files are read
        pool = ThreadPoolExecutor(1, thread_name_prefix="lerobot_zarr-hub")
        index = pool.submit(fetch_file, repo_id, commit, INDEX_FILE, token=token, endpoint=self.endpoint,
                            revision=self.revision)
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
                raise CorruptSourceError(f"{self.location(rel)}: the tree listing gives it size {short(size)}")
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
        return file_url(self.endpoint, self.repo_id, self.commit, rel)

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
                raise Retry(f"{where}: asked for bytes {start}-{stop - 1}/{size}, the server answered "
                             f"Content-Range {short(answered)}")

        _, data = request("GET", self.url(rel), where, token=self.token, kind="download", headers=headers,
                          expect_bytes=stop - start, check=check)
        return data

    def matches(self, rel: str, identity: dict[str, str]) -> bool:
        """Whether the repo's file is the one ``identity`` ({"sha256", "git_sha1"}) describes."""
        return bool(self.oids.get(rel)) and self.oids[rel] in (identity.get("sha256"), identity.get("git_sha1"))

    def record(self, data_files: Iterable[str]) -> dict:
        # the commit, not the name it was reached by: "main" and "v3.0" at the same commit share a store
        return {"kind": "hub", "repo_id": self.repo_id, "commit": self.commit, "endpoint": self.endpoint}


def _hub_files(repo_id: str, commit: str, revision: str, token: str | bool | None, endpoint: str) -> HubFiles:
    return HubFiles(repo_id, commit, revision=revision, token=token, endpoint=endpoint)
