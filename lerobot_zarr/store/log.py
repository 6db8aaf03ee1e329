"""The commit log: per-episode commits appended to ``.commit-log`` instead of replacing the root (see the contract in
:mod:`lerobot_zarr.store`). This module frames and reads the records; what a record means (applying it to the root
state) is :mod:`.state`'s, appending one as a commit is :mod:`.committing`'s.

A record is ``MAGIC``, the payload's length and its CRC-32C (little-endian uint32 each), then the payload (JSON):
one ``write`` each. A record cut short (a writer killed while appending) or damaged fails its length or checksum;
it and anything after it are not read (they were never committed: a writer appends only after the valid ones)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

from ..errors import CorruptStoreError
from ..utils.fileio import MAX_JSON_DEPTH, disk_error, fsync_dir, load_json, open_nofollow, pwrite_all
from ..utils.hashing import crc32c

__all__ = ["LOG_FILE", "MAX_LOG_BYTES", "MAX_RECORD_BYTES", "LogRecords", "encode_record", "append_record",
           "parse_records", "read_log", "remove_log"]

LOG_FILE = ".commit-log"
MAGIC = b"LZC1"
_HEADER = struct.Struct("<4sII")
MAX_RECORD_BYTES = 1 << 20  # one episode's record: its table row, new packs and tasks, content hashes
MAX_LOG_BYTES = 64 << 20  # writers fold the log into the root long before (see FOLD_RECORDS / FOLD_BYTES)
FOLD_RECORDS = 64  # a writer folds the log into the root when it holds this many records ...
FOLD_BYTES = 1 << 20  # ... or this many bytes


class LogRecords(list):
    """The valid records of a log, in order (payloads), with ``size``: the bytes they take, and ``ignored``: the
    bytes after them (a record cut short by a killed writer, or damage)."""

    size: int = 0
    ignored: int = 0


def encode_record(payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, separators=(",", ":")).encode()
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"a commit record of {len(data)} bytes is over {MAX_RECORD_BYTES}")
    return _HEADER.pack(MAGIC, len(data), crc32c(data)) + data


def parse_records(data: bytes, where: str) -> LogRecords:
    """The records of a log file's bytes, up to the first that is cut short or fails its checksum."""
    out = LogRecords()
    at = 0
    while at + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, at)
        end = at + _HEADER.size + length
        if magic != MAGIC or length > MAX_RECORD_BYTES or end > len(data):
            break
        payload = data[at + _HEADER.size:end]
        if crc32c(payload) != crc:
            break
        doc = load_json(payload, f"{where} (record {len(out)})", max_depth=MAX_JSON_DEPTH)
        if not isinstance(doc, dict):
            raise CorruptStoreError(f"{where}: record {len(out)} is not an object", path=where)
        out.append(doc)
        at = end
    out.size, out.ignored = at, len(data) - at
    return out


def read_log(root: str | os.PathLike) -> bytes:
    """The bytes of the store's log (empty when there is none), opened without following links."""
    path = Path(root) / LOG_FILE
    try:
        fd = open_nofollow(path, os.O_RDONLY, root=root)
    except FileNotFoundError:
        return b""
    try:
        size = os.fstat(fd).st_size
        if size > MAX_LOG_BYTES:
            raise CorruptStoreError(f"{path}: {size} bytes, over the {MAX_LOG_BYTES} a commit log may hold",
                                    path=path)
        chunks, at = [], 0
        while at < size:
            chunk = os.pread(fd, size - at, at)
            if not chunk:
                break
            chunks.append(chunk)
            at += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def append_record(root: str | os.PathLike, record: bytes, at: int, *, durable: bool) -> None:
    """Write ``record`` at byte ``at`` of the log (the end of its valid records: what a killed writer left after
    them is overwritten, then cut off), in one write; ``durable``: fsync it (and the folder, for a new log)."""
    path = Path(root) / LOG_FILE
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT, root=root)
    try:
        created = os.fstat(fd).st_size == 0
        pwrite_all(fd, record, at, path)
        if os.fstat(fd).st_size > at + len(record):
            os.ftruncate(fd, at + len(record))
        if durable:
            os.fsync(fd)
            if created:
                fsync_dir(path.parent)
    except OSError as exc:
        raise disk_error(exc, path) from None
    finally:
        os.close(fd)


def remove_log(root: str | os.PathLike) -> None:
    """Remove the log once a root holding all its records is committed."""
    try:
        os.unlink(Path(root) / LOG_FILE)
    except FileNotFoundError:
        pass
