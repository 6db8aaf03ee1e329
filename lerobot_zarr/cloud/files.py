"""A LeRobot dataset folder in a bucket as :class:`~lerobot_zarr.lerobot.source_files.SourceFiles`: the range reader
of :mod:`~lerobot_zarr.lerobot.range_files` over :class:`~.client.Bucket` (byte ranges, no disk cache), as a Hub
repo is read.

The folder is listed once (a page per 1,000 objects: a LeRobot v3.0 folder of 20,000 episodes fits one), which
gives every file's size and ETag; every later read of a file carries its ETag (``If-Match``), so a file rewritten
while it is read is an error, never a mix of two versions. Trust: listed paths pass ``safe_relpath`` (an odd name
outside ``meta/``, ``data/`` and ``videos/`` is ignored, one inside them refused).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

from ..errors import CorruptSourceError
from ..lerobot.range_files import RangeFiles
from ..lerobot.source_files import safe_relpath
from .client import Bucket

__all__ = ["BucketFiles"]

_DATASET_FOLDERS = ("meta", "data", "videos")


class BucketFiles(RangeFiles):
    """The LeRobot folder at ``bucket`` (a :class:`~.client.Bucket`), as listed when this object is made: its
    ``meta/``, ``data/`` and ``videos/``, or with ``folders`` the files below those (the mp4 files of a store's
    cameras, ``<camera>/videos``: one listing each). ``on_fetch(nbytes, where)`` is told of every range
    fetched."""

    def __init__(self, bucket: Bucket, *, folders: Sequence[str] | None = None,
                 on_fetch: Callable[[int, str], None] | None = None):
        super().__init__()
        self.bucket = bucket
        self.name = bucket.url.name
        self.folders = None if folders is None else list(folders)
        self.on_fetch = on_fetch
        self.etags: dict[str, str] = {}
        if folders is None:
            listed = [(path, info) for path, info in bucket.list().items()
                      if path.split("/", 1)[0] in _DATASET_FOLDERS]  # README.md, a store's files...: never read
        else:
            listed = [(path, info) for folder in folders for path, info in bucket.list(folder).items()
                      if path.startswith(folder.rstrip("/") + "/")]
        for path, info in listed:
            rel = safe_relpath(self.location(), path, "listed object")
            self.sizes[rel] = info.size
            self.etags[rel] = info.etag

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
        """The folder's URL and endpoint, and a digest of the ETags and sizes of its metadata files and of the data
        files read: a changed object (a new ETag) gets a new store."""
        h = hashlib.sha256()
        for rel in sorted({*self.list("meta"), *data_files}):
            if rel not in self.sizes:
                raise CorruptSourceError(f"{self.location(rel)}: not in the folder's listing")
            h.update(f"{rel}:{self.sizes[rel]}:{self.etags[rel]}\0".encode())
        return {"kind": "bucket", "url": str(self.bucket.url), "endpoint": self.bucket.endpoint,
                "fingerprint": h.hexdigest()}


def _remake(bucket: Bucket, folders: list[str] | None) -> BucketFiles:
    return BucketFiles(bucket, folders=folders)
