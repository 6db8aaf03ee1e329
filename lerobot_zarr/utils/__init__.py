"""Plumbing every layer uses: safe file operations on untrusted stores and the writer lock (:mod:`.fileio`),
CRC-32C content hashes (:mod:`.hashing`), bounded background work (:mod:`.background`), progress bars
(:mod:`.progress`), big output arrays in reused memory (:mod:`.buffers`) and the C library calls Python lacks
(:mod:`.libc`)."""

from .lazy import lazy_face

__all__ = ["WriterLock", "atomic_write", "check_in_store", "load_json", "open_nofollow", "read_bounded", "Crc32c",
           "crc32c", "in_threads", "prefetched", "progress_bar", "recycled_empty"]

__getattr__, __dir__ = lazy_face(__name__, {
    "WriterLock": "fileio", "atomic_write": "fileio", "check_in_store": "fileio", "load_json": "fileio",
    "open_nofollow": "fileio", "read_bounded": "fileio", "Crc32c": "hashing", "crc32c": "hashing",
    "in_threads": "background", "prefetched": "background", "progress_bar": "progress", "recycled_empty": "buffers"
})
