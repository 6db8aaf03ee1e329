"""The C library, for the POSIX calls Python does not expose (mmap at a fixed address, munmap, madvise of an address
range, syncfs, fallocate to punch a hole, sync_file_range)."""

import ctypes

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.restype = ctypes.c_int
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.restype = ctypes.c_int
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
libc.fallocate.restype = ctypes.c_int
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Give back the disk of bytes ``[offset, offset + length)`` of a file (they read as zeros afterwards; its size
    is kept). False where the filesystem cannot (the bytes stay)."""
    if length <= 0:
        return True
    return libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0


_SYNC_FILE_RANGE_WRITE = 0x02
_sync_file_range = getattr(libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.restype = ctypes.c_int
    _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long, ctypes.c_uint]


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing bytes ``[offset, offset + length)`` of a file to disk without waiting for them (Linux's
    ``sync_file_range``; nothing elsewhere): a later flush then finds them written, or on their way."""
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)
