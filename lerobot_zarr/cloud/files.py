"""A LeRobot dataset folder in a bucket as :class:`~lerobot_zarr.lerobot.source_files.SourceFiles`: the range reader
of :mod:`~lerobot_zarr.lerobot.range_files` over :class:`~.client.Bucket` (byte ranges, no disk cache), as a Hub
repo is read.

Its ``meta/`` is listed when it is made; every other folder (``data/chunk-001``, a camera's videos of a chunk) when a
file in it is first asked for, the folders of the files an open will read all at once
(:meth:`~lerobot_zarr.lerobot.range_files.RangeFiles.prefetch_sizes`): a first open of one episode lists the few
folders of its files whatever the count of episodes (a listing pages 1,000 objects at a time: a v2.1 folder of 2,500
episodes took 7 round trips listed whole). A listing gives each file's size and ETag; every later read of a file
carries its ETag (``If-Match``), so a file rewritten while it is read is an error, never a mix of two versions.
Trust: listed paths pass ``safe_relpath`` (an odd name outside ``meta/``, ``data/`` and ``videos/`` is ignored, one
inside them refused).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence

from ..lerobot.range_files import RangeFiles
from ..lerobot.source_files import safe_relpath
from .client import Bucket, ObjectInfo

__all__ = ["BucketFiles"]

_DATASET_FOLDERS = ("meta", "data", "videos")


class BucketFiles(RangeFiles):
    """The LeRobot folder at ``bucket`` (a :class:`~.client.Bucket`): its ``meta/`` listed when this object is made,
    ``data/`` and ``videos/`` folder by folder as their files are asked for; or with ``folders`` the files below
    those, listed now (the mp4 files of a store's cameras, ``<camera>/videos``: one listing each). ``on_fetch(nbytes,
    where)`` is told of every range fetched."""

    def __init__(self, bucket: Bucket, *, folders: Sequence[str] | None = None,
                 on_fetch: Callable[[int, str], None] | None = None, meta: Mapping[str, ObjectInfo] | None = None):
        super().__init__()
        self.bucket = bucket
        self.name = bucket.url.name
        self.folders = None if folders is None else list(folders)
        self.on_fetch = on_fetch
        self.etags: dict[str, str] = {}
        if folders is None:
            self._listed = set()
            if meta is None:
                self._ensure_listed("meta")
            else:  # (listed already, when asked what the folder is)
                self.sizes.update(self._list_folder("meta", meta))
                self._listed.add("meta")
        else:
            for folder in folders:
                self.sizes.update(self._list_folder(folder))

    def _list_folder(self, folder: str, listed: Mapping[str, ObjectInfo] | None = None) -> dict[str, int]:
        if self.folders is None and folder.split("/", 1)[0] not in _DATASET_FOLDERS:
            return {}  # README.md, a store's files...: never read
        sizes = {}
        for path, info in (self.bucket.list(folder) if listed is None else listed).items():
            if path.startswith(folder.rstrip("/") + "/"):
                rel = safe_relpath(self.location(), path, "listed object")
                sizes[rel] = info.size
                self.etags[rel] = info.etag
        return sizes

    def __reduce__(self) -> tuple:
        # to another process (a dask worker) as what it reads: the listing is made again there
        return (_remake, (self.bucket, self.folders))

    def location(self, rel: str = "") -> str:
        return self.bucket.location(rel)

    def _fetch(self, rel: str, start: int, stop: int) -> bytes:
        data = self.bucket.read(rel, start, stop, etag=self.etags[rel])
        if self.on_fetch is not None:
            self.on_fetch(len(data), rel.split("/videos/", 1)[0] if self.folders else "")
        return data

    def record(self, data_files: Iterable[str]) -> dict:
        """The folder's URL and endpoint, and a digest of the ETags and sizes of its ``meta/`` files: a folder whose
        metadata changed (LeRobot rewrites ``info.json`` and the episode table with every change) gets a new store.
        The data and video files are not in it (naming every one would list every folder: round trips growing with
        the episodes); each read of them carries the ETag its folder's listing gave."""
        h = hashlib.sha256()
        for rel in self.list("meta"):
            h.update(f"{rel}:{self.sizes[rel]}:{self.etags[rel]}\0".encode())
        return {"kind": "bucket", "url": str(self.bucket.url), "endpoint": self.bucket.endpoint,
                "fingerprint": h.hexdigest()}


def _remake(bucket: Bucket, folders: list[str] | None) -> BucketFiles:
    return BucketFiles(bucket, folders=folders)
