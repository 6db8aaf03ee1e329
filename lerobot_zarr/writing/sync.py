"""Publishing a store to a bucket (``ds.push_store("s3://...")``, ``lerobot-zarr sync STORE s3://...``), and
copying one from a bucket to a folder.

A bucket holds a store in the store's own layout (zarr and xarray read it there, and so does
``open_dataset("s3://...")``). A publication is a commit of the bucket's store:

1. a lease (``.lerobot_zarr-sync.json``, created only if absent): one publisher at a time. A lease whose process
   is gone (same host) or which expired is taken over, conditionally on the one read;
2. the bucket's root is read (its ETag), and must be the one this store published last (recorded in the store's
   ``.sync/``), or absent: a root another writer published is never replaced (``force=True`` replaces it, still
   only that version of it);
3. every file of the commit but the root, those the bucket does not hold already (same ETag as recorded after
   the last upload, or the same MD5 for an object uploaded in one part), several at once;
4. the root last, with ``If-Match`` (or ``If-None-Match: *``): readers see the old commit or the new, never half of
   one; a root changed since step 2 is a :class:`~lerobot_zarr.errors.CommitConflictError`, nothing lost.

Nothing changes before steps 1 and 2 passed (the bucket reachable, the credentials accepted, the root one this
store may replace): only then is a commit log its writer left folded into one commit, so a publication refused
leaves the store as it was. A publication killed at any point leaves the bucket at its last commit (the root was
not replaced), and the next run uploads what is missing.

Retired objects (packs a commit no longer refers to) are deleted two commits later: the bucket keeps a manifest
(``.lerobot_zarr-commits.json``: the files of the last commits published, by the digest of their root, written
before the root), and after a commit the objects that earlier commits of the manifest listed and neither this commit
nor the one it replaced refers to are deleted, under the lease (checked still ours first). A reader of the commit
replaced reads on; a reader of an older one gets a typed error for a deleted object (``SourceNotFoundError``) and
opens the bucket again. When the commit replaced is not in the manifest (published by another tool or an older
version), nothing is deleted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cloud.client import Bucket, ObjectInfo
from ..errors import (
    ArgumentError,
    CommitConflictError,
    CorruptStoreError,
    LeRobotZarrError,
    SourceNotFoundError,
    StoreNotFoundError,
)
from ..store.cameras import is_link_record
from ..store.state import MAX_ROOT_BYTES, ROOT, has_commit_point, read_state
from ..utils.fileio import WriterLock, atomic_write, load_json, read_bounded
from ..utils.progress import progress_bar
from .transaction import WriteTransaction

__all__ = ["SyncReport", "push_store", "pull_store", "LEASE", "MANIFEST", "LEASE_SECONDS", "LEASE_RENEW_SECONDS"]

LEASE = ".lerobot_zarr-sync.json"
MANIFEST = ".lerobot_zarr-commits.json"  # the files of the last commits published (retired ones deleted after)
_MANIFEST_COMMITS = 3  # commits the manifest remembers: the one replaced, the new one, and the one before them
_MAX_MANIFEST = 256 << 20
LEASE_SECONDS = 6 * 3600.0  # a lease not renewed for this long is taken over (its publisher is taken for dead)
LEASE_RENEW_SECONDS = LEASE_SECONDS / 4  # how often a publication renews its lease
_RECORDS = ".sync"
# not published: the writer's lock and scratch, and the background encoder's segments (a local cache of exports);
# nor are the records of hard-linked mp4 files (is_link_record: about this machine's source files)
_SKIP_TOP = {".lock", ".editing", ".retired", _RECORDS, ".lerobot_zarr-creating", ".frame_live-pending", ".segments"}
_IN_FLIGHT = 8
_ONE_PART = 16 << 20  # files up to this size are uploaded in one request (their ETag is their MD5)


@dataclass
class SyncReport:
    """What a publication (or copy) did: ``uploaded`` / ``skipped`` files and bytes, the retired objects of older
    commits ``deleted``, the root's new ``etag``, and whether there was anything to do (``committed``)."""

    url: str
    uploaded: list[str] = field(default_factory=list)
    uploaded_bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # retired objects of older commits
    committed: bool = False
    etag: str | None = None


def push_store(store: str | os.PathLike, url: str | Bucket, *, force: bool = False, progress: bool = True,
               options: dict | None = None, lock: bool = True, on_file: Callable[[str], None] | None = None
               ) -> SyncReport:
    """Publish the committed state of the store at ``store`` to the bucket folder ``url`` (see the module
    docstring). ``lock``: hold the store's writer lock meanwhile (a writer publishing its own store passes False);
    ``on_file`` is called after each file uploaded (tests interrupt there)."""
    root = Path(store).expanduser()
    if not has_commit_point(root):
        raise StoreNotFoundError(f"{root}: not a lerobot_zarr store (no committed zarr.json)", path=root)
    bucket = url if isinstance(url, Bucket) else Bucket(url, options)
    read_state(root)  # a lazy store's unresolved episodes (format 5) resolved before the lock: a store published whole
    if lock:
        with WriterLock(root, blocking=False):
            return _push(root, bucket, force, progress, on_file, fold=True)
    if read_state(root).logged:
        raise ArgumentError(f"{root}: its writer commits to a commit log; fold it into the root first "
                            f"(WritableDataset.fold_log, or close the writer), or push with lock=True", path=root)
    return _push(root, bucket, force, progress, on_file, fold=False)


def _push(root: Path, bucket: Bucket, force: bool, progress: bool, on_file: Callable[[str], None] | None, *,
          fold: bool) -> SyncReport:
    """Everything is checked before anything changes: the store's files (no link), the bucket (reachable, the
    credentials, no other publication: the lease; its root's ETag, the precondition of the root's write), and only
    then is a commit log folded (``fold``: the caller holds the writer lock), the files uploaded, the root written."""
    report = SyncReport(str(bucket.url))
    record = _read_record(_record_path(root, bucket))
    _store_files(root)  # (a link in the store is refused before any request)
    with _Lease(bucket, f"{root.resolve()}") as lease:
        remote = bucket.head(ROOT)
        current = bucket.read_whole(ROOT, limit=MAX_ROOT_BYTES)[0] if remote is not None else None
        foreign = remote is not None and remote.etag != record.get("root_etag")
        if foreign and not force and (read_state(root).logged or current != _committed_root(root)):
            # (a store with a log would publish its log folded: a format-3 root no other store published)
            raise CommitConflictError(
                f"{bucket.location()}: holds a commit this store did not publish (or published before another "
                f"writer did); nothing was uploaded and the store was not changed. Open the bucket's store to see "
                f"it, or pass force=True (`--force`) to replace it with this store's", path=bucket.location())
        if fold:
            _fold_log(root)  # a store whose writer appended commits to its log and was killed: one whole commit
        doc = _committed_root(root)
        state = read_state(root)
        listing = bucket.list()
        files = _store_files(root)
        todo = []
        for rel, (size, mtime) in files.items():
            have = listing.get(rel)
            known = record.get("files", {}).get(rel)
            if have is not None and have.size == size and (
                    (known and known == [size, mtime, have.etag]) or _same_md5(root / rel, have)):
                report.skipped.append(rel)
            else:
                todo.append(rel)
        uploaded: dict[str, list] = {rel: [*files[rel], listing[rel].etag] for rel in report.skipped}
        bar = progress_bar(sum(files[rel][0] for rel in todo), f"publishing {root.name} to {bucket.location()}",
                           progress, unit="B")

        def upload(rel: str) -> None:
            path = root / rel
            etag = bucket.write(rel, path.read_bytes() if files[rel][0] <= _ONE_PART else path)
            uploaded[rel] = [*files[rel], etag]
            bar.update(files[rel][0])
            if on_file is not None:
                on_file(rel)

        try:
            with ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-sync") as pool:
                for future in [pool.submit(upload, rel) for rel in todo]:
                    future.result()
        finally:
            bar.close()
        report.uploaded = todo
        report.uploaded_bytes = sum(files[rel][0] for rel in todo)
        manifest = _read_manifest(bucket)
        ours = {"root": _digest(doc), "files": sorted(files)}
        if manifest is not None:  # before the root: a commit is in it before it is visible
            kept = [c for c in manifest if c["root"] != ours["root"]][-(_MANIFEST_COMMITS - 1):] + [ours]
            if kept != manifest:
                bucket.write(MANIFEST, json.dumps({"commits": kept}).encode())
        if remote is not None and not todo and current == doc:
            report.etag = remote.etag  # the bucket holds this commit already
        else:
            try:
                report.etag = bucket.write(ROOT, doc, if_absent=remote is None,
                                           if_match=remote.etag if remote is not None else None)
            except CommitConflictError:
                now, info = bucket.read_whole(ROOT, limit=MAX_ROOT_BYTES)
                if now != doc:
                    raise
                report.etag = info.etag  # ours: the write was retried after it had landed
            report.committed = True
        _write_record(root, bucket, report.etag, state.generation, uploaded)
        if manifest is not None and report.committed:  # (a commit replaced ``current``: its files are kept)
            report.deleted = _delete_retired(bucket, lease, manifest, ours, current, listing)
    return report


def _fold_log(root: Path) -> None:
    """A store whose root is format 4 (its writer appended commits to the log and was killed): the log folded
    into a format-3 root first (one commit; the caller holds the writer lock), so that what is published is one
    whole commit that any reader reads."""
    state = read_state(root)
    if state.logged:
        WriteTransaction(state).recover()


def _committed_root(root: Path) -> bytes:
    return read_bounded(root / ROOT, MAX_ROOT_BYTES, what="root zarr.json")


def _digest(doc: bytes) -> str:
    return hashlib.sha256(doc).hexdigest()


def _read_manifest(bucket: Bucket) -> list[dict[str, Any]] | None:
    """The commits the bucket's manifest lists (``[]`` when it has none); None when it cannot be read as one (then
    nothing is deleted, and it is not replaced)."""
    try:
        data, _ = bucket.read_whole(MANIFEST, limit=_MAX_MANIFEST)
    except SourceNotFoundError:
        return []
    try:
        doc = load_json(data, bucket.location(MANIFEST), error=ValueError)
    except ValueError:
        return None
    commits = doc.get("commits") if isinstance(doc, dict) else None
    if not isinstance(commits, list) or not all(
            isinstance(c, dict) and isinstance(c.get("root"), str) and isinstance(c.get("files"), list)
            and all(isinstance(f, str) for f in c["files"]) for c in commits):
        return None
    return commits


def _delete_retired(bucket: Bucket, lease: _Lease, manifest: list[dict[str, Any]], ours: dict[str, Any],
                    replaced: bytes | None, listing: dict[str, ObjectInfo]) -> list[str]:
    """After a commit: delete the objects earlier commits of the manifest listed that neither this commit nor the
    one it replaced refers to (a reader of that one reads on). Nothing when the commit replaced is unknown, or the
    lease is no longer ours."""
    by_root = {c["root"]: c for c in manifest}
    if replaced is not None and _digest(replaced) not in by_root:
        return []  # its files are not known: any object may be one of them
    keep = set(ours["files"]) | (set(by_root[_digest(replaced)]["files"]) if replaced is not None else set())
    stale = sorted({f for c in manifest for f in c["files"]} - keep - {ROOT, LEASE, MANIFEST} & listing.keys())
    if not stale:
        return []
    try:
        lease.renew()  # (ours still: no other publication started meanwhile)
    except CommitConflictError:
        return []
    with ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-sync") as pool:
        for future in [pool.submit(bucket.delete, rel) for rel in stale]:
            future.result()
    return stale


def pull_store(url: str | Bucket, store: str | os.PathLike, *, progress: bool = True,
               options: dict | None = None) -> Path:
    """Copy the store in the bucket folder ``url`` to a new local folder ``store``: every object of its commit,
    the root last (a copy interrupted is no store; run it again)."""
    bucket = url if isinstance(url, Bucket) else Bucket(url, options)
    root = Path(store).expanduser()
    if has_commit_point(root):
        raise CorruptStoreError(f"{root}: holds a store already; pick a new folder", path=root)
    doc, root_info = bucket.read_whole(ROOT, limit=MAX_ROOT_BYTES)
    listing = {rel: info for rel, info in bucket.list().items()
               if rel not in (ROOT, LEASE, MANIFEST) and rel.split("/", 1)[0] not in _SKIP_TOP
               and not is_link_record(rel.rsplit("/", 1)[-1])}
    root.mkdir(parents=True, exist_ok=True)
    bar = progress_bar(sum(i.size for i in listing.values()), f"copying {bucket.location()}", progress, unit="B")

    got: dict[str, list] = {}

    def download(rel: str, info: ObjectInfo) -> None:
        data = bucket.read(rel, 0, info.size, etag=info.etag)
        atomic_write(root / rel, data, durable=False, root=root)
        st = os.lstat(root / rel)
        got[rel] = [st.st_size, st.st_mtime_ns, info.etag]
        bar.update(info.size)

    try:
        with ThreadPoolExecutor(_IN_FLIGHT, thread_name_prefix="lerobot_zarr-sync") as pool:
            for future in [pool.submit(download, rel, info) for rel, info in listing.items()]:
                future.result()
    finally:
        bar.close()
    atomic_write(root / ROOT, doc, durable=True, root=root)
    state = read_state(root)  # what was copied is a store
    _write_record(root, bucket, root_info.etag, state.generation, got)  # a later push_store builds on this commit
    return root


def _record_path(root: Path, bucket: Bucket) -> Path:
    """Where the store keeps what it last published to (or copied from) ``bucket``: no credential, the URL and
    endpoint only."""
    ident = f"{bucket.url}\0{bucket.endpoint or ''}"
    return root / _RECORDS / f"{hashlib.sha256(ident.encode()).hexdigest()[:24]}.json"


def _write_record(root: Path, bucket: Bucket, etag: str | None, generation: int, files: dict[str, list]) -> None:
    record = {"url": str(bucket.url), "endpoint": bucket.endpoint, "root_etag": etag, "generation": generation,
              "files": files}
    path = _record_path(root, bucket)
    path.parent.mkdir(exist_ok=True)
    atomic_write(path, json.dumps(record).encode(), durable=False, root=root)


def _read_record(path: Path) -> dict:
    try:
        doc = load_json(read_bounded(path, 256 << 20, what="sync record"), str(path))
    except (FileNotFoundError, SourceNotFoundError):
        return {}
    except (OSError, ValueError):
        return {}  # unreadable: every file is compared by content instead
    return doc if isinstance(doc, dict) and isinstance(doc.get("files", {}), dict) else {}


def _store_files(root: Path) -> dict[str, tuple[int, int]]:
    """``{path: (size, mtime_ns)}`` of the files a commit of the store consists of, but the root."""
    out = {}
    for folder, dirs, names in os.walk(root, followlinks=False):
        rel_folder = os.path.relpath(folder, root)
        if rel_folder == ".":
            dirs[:] = [d for d in dirs if d not in _SKIP_TOP]
        for name in names:
            rel = name if rel_folder == "." else f"{rel_folder}/{name}".replace(os.sep, "/")
            if rel in (ROOT, LEASE, MANIFEST) or rel in _SKIP_TOP or ".tmp-" in name or is_link_record(name):
                continue
            st = os.lstat(os.path.join(folder, name))
            if not os.path.isfile(os.path.join(folder, name)) or os.path.islink(os.path.join(folder, name)):
                raise CorruptStoreError(f"{root / rel}: not a regular file; a store holds no link", path=root / rel)
            out[rel] = (st.st_size, st.st_mtime_ns)
    return out


def _same_md5(path: Path, info: ObjectInfo) -> bool:
    """Whether the object (uploaded in one part: its ETag is its MD5) holds the file's bytes."""
    etag = info.etag.strip('"')
    if len(etag) != 32 or "-" in etag:
        return False
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest() == etag


class _Lease:
    """One publisher at a time: the lease object, made if absent; renewed every ``LEASE_RENEW_SECONDS`` while the
    publication runs (a thread); taken over if its holder's process is gone (same host) or it was not renewed for
    ``LEASE_SECONDS``; deleted when done. A lease lost all the same (taken over) costs no commit: the root is
    written with ``If-Match``."""

    def __init__(self, bucket: Bucket, store: str):
        self.bucket, self.store = bucket, store
        now = time.time()
        self.doc = {"id": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(), "store": store,
                    "since": now, "renewed": now}
        self.etag: str | None = None
        self._done = threading.Event()
        self._renewer = threading.Thread(target=self._keep, name="lerobot_zarr-lease", daemon=True)

    def __enter__(self) -> _Lease:
        self.etag = self._take()
        self._renewer.start()
        return self

    def _take(self) -> str:
        data = json.dumps(self.doc).encode()
        try:
            return self.bucket.write(LEASE, data, if_absent=True)
        except CommitConflictError:
            pass
        try:
            held, info = self.bucket.read_whole(LEASE, limit=1 << 16)
        except SourceNotFoundError:  # released meanwhile
            return self.bucket.write(LEASE, data, if_absent=True)
        holder = _parse_lease(held)
        if holder.get("id") == self.doc["id"]:
            return info.etag  # ours: the write was retried after it had landed
        if not self._stale(holder):
            raise CommitConflictError(
                f"{self.bucket.location()}: another publication is under way (host {holder.get('host')!r:.40}, "
                f"process {holder.get('pid')!r:.20}, since {time.ctime(holder.get('since', 0))}); nothing was "
                f"uploaded. Run again when it is done", path=self.bucket.location())
        return self.bucket.write(LEASE, data, if_match=info.etag)  # taken over, unless another did it first

    def renew(self) -> None:
        """Write the lease again with the time now, if it is still ours (``CommitConflictError`` if not)."""
        self.doc["renewed"] = time.time()
        self.etag = self.bucket.write(LEASE, json.dumps(self.doc).encode(), if_match=self.etag)

    def _keep(self) -> None:
        while not self._done.wait(LEASE_RENEW_SECONDS):
            try:
                self.renew()
            except CommitConflictError:  # taken over (the root's If-Match still keeps the other's commit)
                return
            except (LeRobotZarrError, OSError):  # the bucket unreachable now: the next period tries again
                continue

    @staticmethod
    def _stale(holder: dict[str, Any]) -> bool:
        since = holder.get("renewed", holder.get("since"))
        if not isinstance(since, (int, float)) or not math.isfinite(since) or time.time() - since > LEASE_SECONDS:
            return True
        pid = holder.get("pid")
        if holder.get("host") == socket.gethostname() and isinstance(pid, int) and pid > 0:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
        return False

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._renewer.join()
        try:
            held, _ = self.bucket.read_whole(LEASE, limit=1 << 16)
        except (SourceNotFoundError, OSError):
            return
        if _parse_lease(held).get("id") == self.doc["id"]:
            self.bucket.delete(LEASE)


def _parse_lease(data: bytes) -> dict[str, Any]:
    """A lease's document, ``{}`` for one that cannot be read (not JSON, nested too deeply, not an object)."""
    try:
        doc = load_json(data, LEASE, error=ValueError)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
