"""One folder of a bucket through obstore (the Rust ``object_store`` engine under zarr's ``ObjectStore`` and
icechunk; chosen over s3fs by measurement, ``benchmarks/bench_object_store.py --sections engines``), with the
guarantees the Hub reader has.

- Credentials and endpoint the way the AWS tools take them: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` /
  ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``), ``AWS_ALLOW_HTTP``
  for a plain-HTTP endpoint (a local server), ``AWS_PROFILE`` (a profile of ``~/.aws``, read by boto3); GCS and
  Azure take obstore's ``GOOGLE_*`` / ``AZURE_*`` variables; ``options`` (obstore's config keys) override them. HF
  Storage Buckets (``hf://buckets/ns/bucket``) go through the Hub's S3 gateway (``https://s3.hf.co/<ns>``, path
  style, us-east-1) with the S3 keys generated from a Hub token. Credentials stay in memory: never logged, never
  in an error message, never written into a store (its record names the URL and endpoint only).
- Deadlines on every request: a connect and a read timeout (``LEROBOT_ZARR_BUCKET_TIMEOUT`` seconds, default
  10; a stalled answer fails there), and a total per request of two timeouts plus its bytes at ``_MIN_RATE`` (a
  trickling one fails there). A write's read timeout is its total: the engine (reqwest) counts the upload of the
  body against the read timeout, so a part of 8 MiB sent at less than 6.7 Mbit/s failed every time. obstore
  retries 5xx answers, dropped connections and timeouts (``_RETRIES`` times, exponential backoff); after that, a
  :class:`~lerobot_zarr.errors.BucketError` naming the object.
- Bounded bodies: a read asks for a byte range of known length, at most ``_MAX_REQUEST`` bytes per request (longer
  ones are split, the pieces sent together), and a body of another length is a failed attempt (obstore does not
  check it); a whole object is read only up to the bound the caller gives.
- One version per object: reads after the first carry ``If-Match`` with the ETag it saw, so bytes of two versions
  of an object are never mixed (:class:`~lerobot_zarr.errors.ObjectChangedError` instead).
- Conditional writes: ``If-None-Match: *`` (create only) and ``If-Match: <etag>`` (replace only that version),
  refused as :class:`~lerobot_zarr.errors.CommitConflictError`.
- In a process forked from one whose engine ran (a DataLoader worker), where the engine cannot run, every request
  goes through a fetcher process of its own (:mod:`.relay`), with the same guarantees.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from ..errors import (
    ArgumentError,
    BucketAuthError,
    BucketError,
    CommitConflictError,
    ObjectChangedError,
    SourceNotFoundError,
    import_optional,
)
from .urls import BucketURL, parse_bucket_url

__all__ = ["Bucket", "ObjectInfo", "TIMEOUT_ENV", "HF_S3_ENDPOINT_ENV", "bucket_timeout", "longest_call"]

T = TypeVar("T")
TIMEOUT_ENV = "LEROBOT_ZARR_BUCKET_TIMEOUT"
HF_S3_ENDPOINT_ENV = "LEROBOT_ZARR_HF_S3_ENDPOINT"  # the HF Buckets gateway (tests point it at a local server)
_HF_S3_ENDPOINT = "https://s3.hf.co"
_RETRIES = 4
_ATTEMPTS = 3  # our own attempts on top of obstore's retries: a body of the wrong length, a wrong range
_MIN_RATE = 256 * 1024  # bytes/s a body must average (past two timeouts) before its deadline
_SMALL = 1 << 20  # requests up to this many bytes use the store with the short total deadline
_MAX_REQUEST = 16 << 20  # the most one request asks for
_IN_FLIGHT = 16
_MAX_LIST_PAGES = 10_000
_SECRET_KEYS = ("secret", "token", "password", "key")
_pool = ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-bucket")  # leaf requests only
_engine_pid: list[int | None] = [None]  # the process whose engine runs (made a client): its forks cannot use one


def _after_fork_in_child() -> None:
    global _pool  # the parent's threads are not the child's
    _pool = ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-bucket")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _relayed() -> bool:
    """Whether this process was forked from one whose engine ran: its requests go through a fetcher."""
    return _engine_pid[0] not in (None, os.getpid())


def bucket_timeout() -> float:
    """Connect and read timeout in seconds: ``$LEROBOT_ZARR_BUCKET_TIMEOUT``, default 10."""
    raw = os.environ.get(TIMEOUT_ENV)
    try:
        value = float(raw) if raw else 10.0
    except ValueError:
        raise ArgumentError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise ArgumentError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def _total(large: bool) -> float:
    """A request's total deadline: two timeouts, plus its most bytes at ``_MIN_RATE``."""
    return 2 * bucket_timeout() + (_MAX_REQUEST if large else _SMALL) / _MIN_RATE


def longest_call(nbytes: int) -> float:
    """The longest one call moving ``nbytes`` may take, every attempt and retry included (the deadline of a wait
    for it in another process)."""
    pieces = max(1, -(-nbytes // _MAX_REQUEST))
    per_attempt = _total(nbytes > _SMALL) * (_RETRIES + 2)  # obstore's retry_timeout, and the try under way then
    return pieces * _ATTEMPTS * per_attempt + sum(0.2 * 2 ** n for n in range(_ATTEMPTS))


@dataclass(frozen=True)
class ObjectInfo:
    """An object's size and ETag (its version: it changes whenever the object is written)."""

    size: int
    etag: str


class Bucket:
    """A folder of a bucket (``url``: a :class:`~.urls.BucketURL` or its text), read and written by relative
    '/'-separated paths. Thread-safe; pickles as its URL and ``options`` (another process makes its own client)."""

    def __init__(self, url: BucketURL | str, options: Mapping[str, Any] | None = None):
        self.url = url if isinstance(url, BucketURL) else parse_bucket_url(url)
        self.options = dict(options or {})
        self._stores: dict[tuple[bool, bool], Any] = {}  # (large, write) -> client
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple:
        return (Bucket, (self.url, self.options))

    def __repr__(self) -> str:
        return f"Bucket({str(self.url)!r})"

    # where ------------------------------------------------------------------------------------------------
    def location(self, rel: str = "") -> str:
        """The URL of ``rel`` (or of the folder), for messages."""
        return str(self.url) + (f"/{rel}" if rel else "")

    @property
    def endpoint(self) -> str | None:
        """The endpoint requests go to when it is not the provider's default (no credentials, no query)."""
        if self.url.scheme == "hf":
            return f"{os.environ.get(HF_S3_ENDPOINT_ENV) or _HF_S3_ENDPOINT}/{self.url.namespace}"
        if self.url.scheme == "s3":
            raw = self.options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
                "AWS_ENDPOINT_URL")
            return _public_url(raw) if raw else None
        return None

    # the engine -------------------------------------------------------------------------------------------
    def _store(self, large: bool, write: bool = False) -> Any:
        if _engine_pid[0] is None:
            _engine_pid[0] = os.getpid()
        with self._lock:
            store = self._stores.get((large, write))
            if store is None:
                store = self._stores[(large, write)] = self._make_store(large, write)
            return store

    def _make_store(self, large: bool, write: bool = False) -> Any:
        import_optional("obstore", f"reading {self.url.scheme}:// URLs")
        from obstore.store import AzureStore, GCSStore, S3Store

        timeout = bucket_timeout()
        total = _total(large)
        # (a write's read timeout runs while its body is sent: the total's bound, not a stalled answer's)
        client = {"connect_timeout": timedelta(seconds=timeout),
                  "read_timeout": timedelta(seconds=total if write else timeout), "timeout": timedelta(seconds=total)}
        retry = {"max_retries": _RETRIES, "retry_timeout": timedelta(seconds=total * (_RETRIES + 1)),
                 "backoff": {"init_backoff": timedelta(seconds=0.1), "max_backoff": timedelta(seconds=8),
                             "base": 2}}
        config = {k: v for k, v in self.options.items() if k != "profile"}
        prefix = self.url.prefix or None
        try:
            if self.url.scheme in ("s3", "hf"):
                provider = None
                if self.url.scheme == "hf":
                    config.setdefault("endpoint", self.endpoint)
                    config.setdefault("region", "us-east-1")
                    config["virtual_hosted_style_request"] = False
                else:
                    provider = _profile_provider(self.options.get("profile"), config)
                    if "region" not in config and not os.environ.get("AWS_REGION") and os.environ.get(
                            "AWS_DEFAULT_REGION"):
                        config["region"] = os.environ["AWS_DEFAULT_REGION"]
                endpoint = config.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
                    "AWS_ENDPOINT_URL") or ""
                if endpoint.startswith("http://") and os.environ.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true"):
                    client["allow_http"] = True
                return S3Store(self.url.bucket, prefix=prefix, config=config, client_options=client,
                               retry_config=retry, credential_provider=provider)
            if self.url.scheme == "gs":
                # (object_store's GCS default, which client options replace: the base URL says http or https)
                client["allow_http"] = True
                return GCSStore(self.url.bucket, prefix=prefix, config=config, client_options=client,
                                retry_config=retry)
            return AzureStore(self.url.bucket, prefix=prefix, config=config, client_options=client,
                              retry_config=retry)
        except (ValueError, TypeError) as exc:
            raise ArgumentError(f"{self.location()}: cannot configure the object store client "
                                f"({_clean(exc, self.options)})") from None
        except Exception as exc:  # obstore's configuration errors
            raise BucketError(f"{self.location()}: cannot configure the object store client "
                              f"({_clean(exc, self.options)})", path=self.location()) from None

    def _call(self, rel: str, fn: Callable[..., T], *args: Any, large: bool = False, write: bool = False,
              **kwargs: Any) -> T:
        """``fn(store, *args, **kwargs)`` with our errors; obstore has retried what deserves it. ``write``: through
        the client for writes (see the module docstring)."""
        import obstore.exceptions as oe

        where = self.location(rel)
        try:
            return fn(self._store(large, write), *args, **kwargs)
        except (oe.NotFoundError, FileNotFoundError):
            raise SourceNotFoundError(f"{where}: no such object", path=where) from None
        except (oe.PermissionDeniedError, oe.UnauthenticatedError) as exc:
            raise BucketAuthError(f"{where}: not authorized ({_clean(exc, self.options)}); check the credentials "
                                  f"(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or options=)",
                                  path=where) from None
        except (oe.PreconditionError, oe.AlreadyExistsError, oe.NotModifiedError):
            raise
        except oe.BaseError as exc:
            raise _Attempt(f"{where}: {_clean(exc, self.options)}") from None
        except (OSError, TimeoutError) as exc:  # the transport below obstore
            raise _Attempt(f"{where}: {_clean(exc, self.options)}") from None

    def _attempts(self, rel: str, attempt: Callable[[], T]) -> T:
        last: Exception | None = None
        for n in range(_ATTEMPTS):
            try:
                return attempt()
            except _Attempt as exc:
                last = exc
                if n + 1 < _ATTEMPTS:
                    time.sleep(0.2 * 2 ** n)
        where = self.location(rel)
        raise BucketError(f"{last} (failed after {_ATTEMPTS} attempts, each retried {_RETRIES} times)",
                          path=where)

    # reading ----------------------------------------------------------------------------------------------
    def head(self, rel: str) -> ObjectInfo | None:
        """The object's size and ETag, None when there is none."""
        if _relayed():
            info = self._relay("head", {"rel": rel}, limit=0)[0]["info"]
            return None if info is None else ObjectInfo(int(info[0]), str(info[1]))
        import obstore

        try:
            meta = self._attempts(rel, lambda: self._call(rel, obstore.head, rel))
        except SourceNotFoundError:
            return None
        return _info(meta, self.location(rel))

    def list(self, folder: str = "") -> dict[str, ObjectInfo]:
        """Every object below ``folder`` (the whole folder by default), by path relative to the bucket folder."""
        if _relayed():
            from ..utils.fileio import load_json
            from .relay import LIST_BYTES

            body = self._relay("list", {"rel": folder}, limit=LIST_BYTES)[1]
            listed = load_json(bytes(body), self.location(folder), error=BucketError)
            return {str(k): ObjectInfo(int(v[0]), str(v[1])) for k, v in listed.items()}
        import obstore

        prefix = folder.strip("/") or None

        def attempt() -> dict[str, ObjectInfo]:
            out: dict[str, ObjectInfo] = {}
            pages = self._call(folder, obstore.list, prefix=prefix, chunk_size=1000)
            for n, page in enumerate(_guard(pages, self, folder)):
                if n >= _MAX_LIST_PAGES:
                    raise BucketError(f"{self.location(folder)}: more than {_MAX_LIST_PAGES} pages of objects",
                                      path=self.location(folder))
                for meta in page:
                    out[meta["path"]] = _info(meta, self.location(meta["path"]))
            return out

        return self._attempts(folder, attempt)

    def read(self, rel: str, start: int, stop: int, *, etag: str | None = None, copy: bool = True) -> Any:
        """Bytes ``[start, stop)`` of an object, exactly; with ``etag``, only of that version of it. ``copy=False``:
        the engine's buffer as it came (a bytes-like object: no copy), for a caller that writes it out."""
        if stop <= start:
            return b""
        if stop - start > _MAX_REQUEST:
            pieces = [(a, min(a + _MAX_REQUEST, stop)) for a in range(start, stop, _MAX_REQUEST)]
            return b"".join(self.read_many(rel, pieces, etag=etag))
        data = self._read(rel, start, stop, etag, copy=copy)[0]
        return data

    def read_many(self, rel: str, ranges: Sequence[tuple[int, int]], *, etag: str | None = None) -> list[bytes]:
        """Several byte ranges of one object, requested together (at most ``_IN_FLIGHT`` at once)."""
        if len(ranges) <= 1:
            return [self.read(rel, a, b, etag=etag) for a, b in ranges]
        futures = [_pool.submit(self.read, rel, a, b, etag=etag) for a, b in ranges]
        return [f.result() for f in futures]

    def read_head(self, rel: str, nbytes: int) -> tuple[bytes, ObjectInfo]:
        """The first ``nbytes`` of an object (all of it when it is shorter) and its info, in one request."""
        return self._read(rel, 0, max(1, nbytes), None, whole=True)

    def read_whole(self, rel: str, *, limit: int, first: int = _SMALL) -> tuple[bytes, ObjectInfo]:
        """The whole object and its info, if it holds at most ``limit`` bytes (else a
        :class:`~lerobot_zarr.errors.BucketError`, nothing more read): one request when it holds at most
        ``first`` bytes."""
        first, info = self._read(rel, 0, min(limit, first, _MAX_REQUEST), None, whole=True)
        if info.size > limit:
            raise BucketError(f"{self.location(rel)}: {info.size} bytes, more than the {limit} allowed here",
                              path=self.location(rel))
        if info.size > len(first):
            first += self.read(rel, len(first), info.size, etag=info.etag)
        return first, info

    def _read(self, rel: str, start: int, stop: int, etag: str | None, whole: bool = False,
              copy: bool = True) -> tuple[Any, ObjectInfo]:
        if _relayed():
            answer, body = self._relay("read", {"rel": rel, "start": start, "stop": stop, "etag": etag,
                                                "whole": whole}, limit=stop - start)
            return (bytes(body) if copy else body), ObjectInfo(int(answer["size"]), str(answer["etag"]))
        import obstore
        import obstore.exceptions as oe

        where = self.location(rel)
        options: dict[str, Any] = {"range": (start, stop)}
        if etag is not None:
            options["if_match"] = etag

        def attempt() -> tuple[bytes, ObjectInfo]:
            try:
                result = self._call(rel, obstore.get, rel, options=options, large=stop - start > _SMALL)
                info = _info(result.meta, where)
                got = result.range
                want = (start, min(stop, info.size)) if whole else (start, stop)
                if tuple(got) != want:
                    raise _Attempt(f"{where}: asked for bytes {start}-{stop - 1}, the store answered {got}")
                data = result.bytes() if want[1] > want[0] else b""
                data = bytes(data) if copy else data
            except oe.PreconditionError:
                raise ObjectChangedError(f"{where}: changed while it was being read (its ETag is no longer "
                                         f"{etag}); open it again", path=where) from None
            except oe.BaseError as exc:  # raised while reading the body
                raise _Attempt(f"{where}: {_clean(exc, self.options)}") from None
            if len(data) != want[1] - want[0]:
                raise _Attempt(f"{where}: asked for {want[1] - want[0]} bytes, got {len(data)}")
            if etag is not None and info.etag != etag:
                raise ObjectChangedError(f"{where}: changed while it was being read (ETag {info.etag}, not "
                                         f"{etag}); open it again", path=where)
            return data, info

        return self._attempts(rel, attempt)

    # writing ----------------------------------------------------------------------------------------------
    def write(self, rel: str, data: bytes | Path, *, if_absent: bool = False, if_match: str | None = None) -> str:
        """Write an object (``data``: bytes, or a file uploaded in parts when big); returns its new ETag.
        ``if_absent``: only if there is none; ``if_match``: only if its ETag is still that one; else
        :class:`~lerobot_zarr.errors.CommitConflictError`."""
        if _relayed():
            args: dict[str, Any] = {"rel": rel, "if_absent": if_absent, "if_match": if_match}
            if not isinstance(data, bytes):
                args["file"] = os.path.abspath(data)
            return str(self._relay("write", args, body=data if isinstance(data, bytes) else b"", limit=0,
                                   nbytes=len(data) if isinstance(data, bytes) else Path(data).stat().st_size
                                   )[0]["etag"])
        import obstore
        import obstore.exceptions as oe

        mode: Any = "create" if if_absent else {"e_tag": if_match} if if_match is not None else "overwrite"
        where = self.location(rel)
        if if_match is not None and self.url.scheme == "gs":
            # GCS makes a write conditional on the object's generation, not its ETag: the generation of the object
            # whose ETag is still ``if_match``, then written only if it is still that generation
            try:
                meta = self._attempts(rel, lambda: self._call(rel, obstore.head, rel))
            except SourceNotFoundError:
                meta = {}
            if _quoted(str(meta.get("e_tag") or "")) != _quoted(if_match) or not meta.get("version"):
                raise CommitConflictError(f"{where}: changed since it was read (ETag no longer {if_match}); not "
                                          f"written", path=where)
            mode = {"e_tag": if_match, "version": meta["version"]}
        size = len(data) if isinstance(data, bytes) else Path(data).stat().st_size
        multipart = size > _MAX_REQUEST and mode == "overwrite"

        def attempt() -> str:
            try:
                result = self._call(rel, obstore.put, rel, data, mode=mode, use_multipart=multipart,
                                    chunk_size=8 << 20, max_concurrency=4, large=size > _SMALL, write=True)
            except (oe.PreconditionError, oe.AlreadyExistsError):
                state = "exists already" if if_absent else f"changed since it was read (ETag no longer {if_match})"
                raise CommitConflictError(f"{where}: {state}; not written", path=where) from None
            except SourceNotFoundError:
                if not multipart:
                    raise
                # the upload is gone: a completion answered too late was retried by the engine after it completed
                # (or the upload was aborted); an overwrite of the same bytes is safe to make again, whole
                raise _Attempt(f"{where}: the multipart upload vanished while it was being written") from None
            etag = result.get("e_tag") if isinstance(result, dict) else None
            if not isinstance(etag, str) or not etag:
                raise _Attempt(f"{where}: the store gave no ETag for the write")
            return _quoted(etag)

        return self._attempts(rel, attempt)

    def delete(self, rel: str) -> None:
        """Delete an object (none there is no error)."""
        if _relayed():
            self._relay("delete", {"rel": rel}, limit=0)
            return
        import obstore

        try:
            self._attempts(rel, lambda: self._call(rel, obstore.delete, rel))
        except SourceNotFoundError:
            pass

    def _relay(self, op: str, args: dict[str, Any], *, limit: int, body: bytes = b"",
               nbytes: int | None = None) -> tuple[dict, bytearray]:
        from .relay import call

        return call(self, op, args, body=body, limit=limit, deadline=longest_call(limit if nbytes is None else nbytes))


class _Attempt(Exception):
    """A failed attempt worth another one."""


def _guard(pages: Iterable[Any], bucket: Bucket, folder: str) -> Iterable[Any]:
    """obstore's listing pages, its errors as failed attempts."""
    import obstore.exceptions as oe

    iterator = iter(pages)
    while True:
        try:
            page = next(iterator)
        except StopIteration:
            return
        except oe.BaseError as exc:
            raise _Attempt(f"{bucket.location(folder)}: listing failed ({_clean(exc, bucket.options)})") from None
        yield page


def _info(meta: Mapping[str, Any], where: str) -> ObjectInfo:
    size, etag = meta.get("size"), meta.get("e_tag")
    if not isinstance(size, int) or size < 0 or not isinstance(etag, str) or not etag:
        raise BucketError(f"{where}: the store gave size {size!r:.40} and ETag {etag!r:.40}", path=where)
    return ObjectInfo(size, _quoted(etag))


def _quoted(etag: str) -> str:
    """An ETag in its quoted form: Azure's listings give them bare where its other answers quote them (found on
    Azurite), and ETags from both are compared."""
    return etag if etag.startswith(('"', 'W/"')) else f'"{etag}"'


def _profile_provider(profile: str | None, config: dict[str, Any]) -> Any:
    """A credential provider reading an AWS profile (``profile`` or ``$AWS_PROFILE``) through boto3, when no keys
    are given otherwise; None to let obstore find credentials itself (environment, instance metadata...)."""
    profile = profile or os.environ.get("AWS_PROFILE")
    if not profile or "access_key_id" in config or os.environ.get("AWS_ACCESS_KEY_ID"):
        return None
    boto3 = import_optional("boto3", f"the AWS profile {profile!r}")
    from obstore.auth.boto3 import Boto3CredentialProvider

    session = boto3.Session(profile_name=profile)
    if "region" not in config and session.region_name and not os.environ.get("AWS_REGION"):
        config["region"] = session.region_name
    return Boto3CredentialProvider(session)


def _public_url(url: str) -> str:
    """``url`` without user info, query or fragment: what may be written into a store's record or a message."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _clean(exc: BaseException, options: Mapping[str, Any]) -> str:
    """An engine error as one line for our messages: the first line only (not the debug dump), URLs without
    their query (a signature) or user info, and no value of a secret option."""
    text = str(exc).split("\n\nDebug source", 1)[0].strip().splitlines()[0] if str(exc).strip() else repr(exc)
    text = re.sub(r"(https?://)[^/@\s]+@", r"\1", text)
    text = re.sub(r"(https?://[^\s?]+)\?\S*", r"\1", text)
    for key, value in options.items():
        if isinstance(value, str) and len(value) >= 4 and any(s in key.lower() for s in _SECRET_KEYS):
            text = text.replace(value, "***")
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text[:300]
