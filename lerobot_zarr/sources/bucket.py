"""A folder of a bucket (``s3://``, ``gs://``, ``az://``, ``hf://buckets/...``): a store there (read without
copying it, :mod:`.remote_store`), or a LeRobot dataset folder (read by byte ranges like a Hub repo, transcoded
into the cache's ``buckets/<name>-<key>`` store, keyed by its URL and the ETags of its files).

Which of the two the folder is is asked of the bucket once (its ``zarr.json`` read and its ``meta/`` listed,
together: a store is served from that root, a LeRobot folder's reader starts from that listing).
HF Buckets are the Hub's: ``HF_HUB_OFFLINE`` keeps them unread too; a LeRobot folder there is then served from the
newest store the cache holds of it (its key needs the folder's ETags: unknown offline), as a Hub repo is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..cloud.client import Bucket
from ..cloud.urls import is_bucket_url, parse_bucket_url
from ..errors import ArgumentError, NotMaterializedError, SourceNotFoundError, StoreError
from ..store.state import ROOT, has_commit_point, read_state
from .base import Source, origin, register
from .home import cache_home
from .local import keyed_cache_path
from .mirror import read_root

__all__ = ["BucketSource"]

_INFO = "meta/info.json"


@register
class BucketSource(Source):
    """A folder of a bucket holding a store or a LeRobot dataset. ``options``: obstore's configuration keys
    (credentials, endpoint, region...), over those found in the environment."""

    kind = "bucket"
    record_kind = "bucket"
    cache_folder = "buckets"

    def __init__(self, bucket: Bucket):
        self.bucket = bucket
        self._what: str | None = None  # "store" or "folder", once asked
        self._meta: dict | None = None  # the listing of a LeRobot folder's meta/, made when asked what it is
        self._root: bytes | None = None  # a store's root zarr.json, read when asked what it is

    @classmethod
    def guess_can_open(cls, spec: str | os.PathLike) -> bool:
        return is_bucket_url(spec)

    @classmethod
    def open(cls, spec, *, revision=None, token=None, options=None) -> BucketSource:
        if revision is not None:
            raise ArgumentError(f"{spec}: revision={revision!r} applies to Hub repositories, not to a bucket")
        return cls(Bucket(parse_bucket_url(spec), options))

    def offline(self) -> str | None:
        if self.bucket.url.scheme == "hf":
            from huggingface_hub import constants

            if constants.is_offline_mode():
                return "HF_HUB_OFFLINE is set"
        return None

    def what(self) -> str:
        """``"store"`` or ``"folder"`` (a LeRobot dataset): asked of the bucket the first time."""
        if self._what is None:
            why = self.offline()
            if why:
                raise NotMaterializedError(f"{self}: {why}: the bucket is not read, and no store of it is held here "
                                           f"(never opened on this machine)")
            with ThreadPoolExecutor(2, thread_name_prefix="lerobot_zarr-probe") as pool:
                meta = pool.submit(self.bucket.list, "meta")
                try:
                    root: bytes | None = read_root(self.bucket)
                except SourceNotFoundError:
                    root = None
                meta = meta.result()
            if root is not None:
                self._what, self._root = "store", root
            elif _INFO in meta:
                self._what, self._meta = "folder", meta
            else:
                raise SourceNotFoundError(f"{self}: neither a lerobot_zarr store (zarr.json) nor a LeRobot dataset "
                                          f"folder (meta/info.json) there", path=str(self))
        return self._what

    def remote(self, *, cache_bytes: int | None = None, root_doc: bytes | None = None):
        if self.offline() and self._held() is not None:
            return None  # a LeRobot folder, held as a store here
        if self.what() != "store":
            return None
        from .home import mirror_home
        from .remote_store import RemoteStore

        if root_doc is None:  # the root read when asked what the folder is, once (a second reads the current one)
            root_doc, self._root = self._root, None
        return RemoteStore(self.bucket, mirror_home(), cache_bytes=cache_bytes, root_doc=root_doc)

    def files(self):
        if self.what() != "folder":
            raise ArgumentError(f"{self}: is a store, not a LeRobot dataset folder")
        from ..cloud.files import BucketFiles

        meta, self._meta = self._meta, None  # (once: a second reader lists again, as the folder may have changed)
        return BucketFiles(self.bucket, meta=meta)

    def cache_path(self) -> Path:
        why = self.offline()
        if why:
            held = self._held()
            if held is None:
                raise NotMaterializedError(f"{self}: {why} and no store of it is held here (never opened on this "
                                           f"machine)")
            return held
        return keyed_cache_path(self.cache_folder, self.dataset().record(), "url")

    def known_record(self) -> dict | None:
        held = self._held() if self.offline() else None
        return origin(read_state(held, resolve=False).source) if held is not None else None

    def _held(self) -> Path | None:
        """The newest store of the cache made from this folder at this endpoint (plain: no camera choices)."""
        url, endpoint = str(self.bucket.url), self.bucket.endpoint
        best: tuple[float, Path] | None = None
        for path in self.cached_stores(cache_home() / self.cache_folder):
            if "+" in path.name or not has_commit_point(path):
                continue
            try:
                record = origin(read_state(path, resolve=False).source)
                when = (path / ROOT).stat().st_mtime
            except (StoreError, OSError):
                continue
            if record.get("kind") == "bucket" and record.get("url") == url and record.get("endpoint") == endpoint \
                    and (best is None or when > best[0]):
                best = (when, path)
        return best[1] if best is not None else None

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, token: str | bool | None = None) -> BucketSource:
        # the endpoint and credentials configured now: the record holds neither secret nor key
        return cls(Bucket(parse_bucket_url(str(record.get("url")))))

    @classmethod
    def describe(cls, record: Mapping[str, Any]) -> str:
        endpoint = record.get("endpoint")
        return f"LeRobot folder {record.get('url')}" + (f" on {endpoint}" if endpoint else "")

    @classmethod
    def same(cls, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        """The same folder with the same files (by ETag), wherever the endpoint is."""
        return (a.get("url"), a.get("fingerprint")) == (b.get("url"), b.get("fingerprint"))

    @classmethod
    def cache_entry(cls, path, record):
        return (str(record.get("url", "")) if record else ""), None, ()

    def __str__(self) -> str:
        return str(self.bucket.url)
