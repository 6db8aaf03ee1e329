"""Plumbing every layer uses: safe file operations on untrusted stores and the writer lock (:mod:`.fileio`),
CRC-32C content hashes (:mod:`.hashing`), bounded background work (:mod:`.background`), progress bars
(:mod:`.progress`) and the C library calls Python lacks (:mod:`.libc`)."""

from .background import in_threads, prefetched
from .fileio import WriterLock, atomic_write, check_in_store, load_json, open_nofollow, read_bounded
from .hashing import Crc32c, crc32c
from .progress import progress_bar

__all__ = ["WriterLock", "atomic_write", "check_in_store", "load_json", "open_nofollow", "read_bounded", "Crc32c",
           "crc32c", "in_threads", "prefetched", "progress_bar"]
