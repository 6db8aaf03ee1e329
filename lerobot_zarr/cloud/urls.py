"""Object-storage URLs: ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix`` and HF Storage
Buckets, ``hf://buckets/<namespace>/<bucket>/prefix`` (reached through their S3 gateway).

A URL names a folder of a bucket (the prefix, possibly empty). Its parts become request paths and, for a store
read from a bucket, the name of a local cache folder, so nothing but plain names is accepted: no ``..``, no empty
segment, no backslash, no control character.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import ArgumentError

__all__ = ["BucketURL", "parse_bucket_url", "is_bucket_url", "SCHEMES", "HF_BUCKETS_PREFIX"]

SCHEMES = ("s3", "gs", "az")
HF_BUCKETS_PREFIX = "hf://buckets/"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,254}$")  # S3: 3-63 of these; GCS up to 222; Azure 3-63
_SEGMENT = re.compile(r"^[^\x00-\x1f\x7f\\]+$")
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class BucketURL:
    """A folder of a bucket: ``scheme`` (``"s3"``, ``"gs"``, ``"az"``, or ``"hf"`` for HF Buckets, which speak
    S3), ``bucket``, ``prefix`` (``"a/b"``, no slash at either end; ``""`` for the bucket's top), ``namespace``
    (HF Buckets: the user or organisation)."""

    scheme: str
    bucket: str
    prefix: str = ""
    namespace: str | None = None

    def __str__(self) -> str:
        tail = f"/{self.prefix}" if self.prefix else ""
        if self.scheme == "hf":
            return f"{HF_BUCKETS_PREFIX}{self.namespace}/{self.bucket}{tail}"
        return f"{self.scheme}://{self.bucket}{tail}"

    def key(self, rel: str = "") -> str:
        """The object key of ``rel`` (a '/'-separated path inside the folder)."""
        return "/".join(p for p in (self.prefix, rel) if p)

    def child(self, rel: str) -> BucketURL:
        """The URL of a folder inside this one."""
        return BucketURL(self.scheme, self.bucket, self.key(_check_path(rel, str(self))), self.namespace)

    @property
    def name(self) -> str:
        """The last name of the folder (or the bucket's), for messages and cache folder names."""
        return self.prefix.rsplit("/", 1)[-1] if self.prefix else self.bucket


def is_bucket_url(source: object) -> bool:
    """Whether ``source`` is written as an object-storage URL (checked further by :func:`parse_bucket_url`)."""
    return isinstance(source, str) and (source.startswith(HF_BUCKETS_PREFIX)
                                        or any(source.startswith(f"{s}://") for s in SCHEMES))


def parse_bucket_url(source: str | os.PathLike) -> BucketURL:
    """The :class:`BucketURL` of ``source``; ``ArgumentError`` naming what is wrong with a malformed one."""
    text = os.fspath(source)
    if not is_bucket_url(text):
        raise ArgumentError(f"{text!r:.120} is not an object-storage URL (s3://, gs://, az://bucket/folder or "
                            f"hf://buckets/namespace/bucket/folder)")
    if text.startswith(HF_BUCKETS_PREFIX):
        scheme, rest = "hf", text[len(HF_BUCKETS_PREFIX):]
        namespace, _, rest = rest.partition("/")
        if not _NAMESPACE.match(namespace):
            raise ArgumentError(f"{text!r:.120}: {namespace!r} is not a Hub namespace (a user or organisation)")
    else:
        scheme, _, rest = text.partition("://")
        namespace = None
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise ArgumentError(f"{text!r:.120}: {bucket!r} is not a bucket name (lowercase letters, digits, '.', "
                            f"'-', '_')")
    prefix = prefix.rstrip("/")
    return BucketURL(scheme, bucket, _check_path(prefix, text) if prefix else "", namespace)


def _check_path(path: str, where: str) -> str:
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") or not _SEGMENT.match(p) for p in parts):
        raise ArgumentError(f"{where!r:.120}: {path!r:.80} is not a folder path (empty, '.' or '..' segments, "
                            f"backslashes and control characters are refused)")
    return path
