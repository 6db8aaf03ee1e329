"""Decoded video frames converted straight into a caller's array, with the libswscale PyAV itself loaded.

PyAV's conversion (:func:`lerobot_zarr.cameras.video.frame_pixels`) allocates a new frame for every conversion:
at 480x640 the allocator hands back memory the system just took back (page faults while swscale writes it), and
the caller then copies the pixels into its batch. :class:`FrameConverter` calls the same ``sws_scale`` (through
ctypes, the GIL released) with the batch row as destination, once per frame.

The values must be PyAV's: a conversion setting (source pixel format, size, colorspace and range, target format)
is trusted only after its first frame converted both ways gave the same bytes and wrote nothing past the row
(swscale's vector code may store past a line's end at some widths); a setting that differs, a PyAV whose libraries
are not found (anything but Linux's /proc), or a destination that is not one C-contiguous row, goes through
PyAV's conversion and a copy, as before.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import numpy as np

from .video import frame_pixels

__all__ = ["FrameConverter"]

_SWS_BILINEAR = 2  # PyAV's default interpolation (the same for an unscaled conversion)
_SENTINEL = 0x5A
_PLANES = ctypes.c_void_p * 4
_STRIDES = ctypes.c_int * 4
_trusted: dict[tuple, bool] = {}  # conversion setting -> whether the direct conversion gave PyAV's bytes
_lib: list[Any] = []  # [the bound libraries, or None]: found once per process
_lib_lock = threading.Lock()


class _Libs:
    def __init__(self, swscale: str, avutil: str):
        self.sws = ctypes.CDLL(swscale)
        self.avutil = ctypes.CDLL(avutil)
        self.avutil.av_get_pix_fmt.restype = ctypes.c_int
        self.avutil.av_get_pix_fmt.argtypes = [ctypes.c_char_p]
        self.sws.sws_getContext.restype = ctypes.c_void_p
        self.sws.sws_getContext.argtypes = [ctypes.c_int] * 7 + [ctypes.c_void_p] * 3
        self.sws.sws_scale.restype = ctypes.c_int
        self.sws.sws_scale.argtypes = [ctypes.c_void_p, _PLANES, _STRIDES, ctypes.c_int, ctypes.c_int, _PLANES,
                                       _STRIDES]
        self.sws.sws_freeContext.restype = None
        self.sws.sws_freeContext.argtypes = [ctypes.c_void_p]


def _pyav_libraries(mapped: list[str] | None = None) -> tuple[str, str] | None:
    """Paths of the libswscale and libavutil PyAV's reformatter runs with, among the files mapped in this process
    (``mapped``: their paths; default, from /proc/self/maps): those PyAV's wheel bundles (``av.libs/``, or inside
    the package), else the only ones mapped; None if that does not settle it (other packages bundle their own:
    OpenCV's wheels, torchcodec beside the system's)."""
    import av
    import av.video.reformatter  # noqa: F401  (maps PyAV's libswscale)

    if mapped is None:
        try:
            with open("/proc/self/maps") as maps:
                mapped = [parts[5].strip() for parts in (line.split(None, 5) for line in maps) if len(parts) == 6]
        except OSError:
            return None
    package = os.path.dirname(os.path.abspath(av.__file__))
    own = (package + ".libs" + os.sep, package + os.sep)
    found = []
    for name in ("libswscale", "libavutil"):
        mine = sorted({p for p in mapped if os.path.basename(p).startswith((name + "-", name + "."))})
        bundled = [p for p in mine if p.startswith(own)]
        if len(bundled) == 1:
            found.append(bundled[0])
        elif not bundled and len(mine) == 1:
            found.append(mine[0])
        else:
            return None
    if os.path.dirname(found[0]) != os.path.dirname(found[1]):
        return None
    return found[0], found[1]


def _libs() -> _Libs | None:
    with _lib_lock:
        if not _lib:
            try:
                paths = _pyav_libraries()
                _lib.append(_Libs(*paths) if paths else None)
            except (OSError, AttributeError):  # a library that does not load or lacks a function
                _lib.append(None)
        return _lib[0]


class FrameConverter:
    """Converts decoded frames (``av.VideoFrame``) to pixel format ``fmt`` into a given (H, W, C) array, with the
    values of ``frame_pixels(frame, fmt, reformatter)``. One per thread at a time (it keeps a swscale context)."""

    def __init__(self, fmt: str, reformatter: Any = None):
        self.fmt = fmt
        self.reformatter = reformatter
        self._ctx: int | None = None
        self._ctx_key: tuple | None = None
        self._free: Any = None  # sws_freeContext
        self._scale_fn: Any = None  # sws_scale
        self._direct_key: tuple | None = None  # the trusted setting the context converts (no look-ups needed)
        self._src, self._src_strides, self._dst, self._dst_strides = _PLANES(), _STRIDES(), _PLANES(), _STRIDES()
        self.direct = 0  # frames converted straight into the destination (for tests and benchmarks)

    def convert_into(self, frame: Any, dst: np.ndarray) -> None:
        """Write the pixels of ``frame`` into ``dst`` (its shape: the frame's height and width and the format's
        channels, checked by the caller)."""
        key = (frame.format.name, frame.width, frame.height, int(frame.colorspace), int(frame.color_range),
               self.fmt, dst.dtype.str)
        if key == self._direct_key and dst.flags.c_contiguous and \
                self._sws_scale(frame, dst.ctypes.data, dst.nbytes // key[2]):
            self.direct += 1
            return
        trusted = _trusted.get(key)
        if trusted is False or not dst.flags.c_contiguous or (libs := _libs()) is None:
            dst[...] = frame_pixels(frame, self.fmt, self.reformatter).reshape(dst.shape)
            return
        line = dst.nbytes // frame.height  # bytes of a row of pixels
        if trusted is None:
            reference = frame_pixels(frame, self.fmt, self.reformatter)
            scratch = np.full(dst.nbytes + 256, _SENTINEL, np.uint8)
            ok = reference.nbytes == dst.nbytes and self._scale(libs, key, frame, scratch.ctypes.data, line) and \
                bool((scratch[dst.nbytes:] == _SENTINEL).all()) and \
                np.array_equal(scratch[:dst.nbytes].view(dst.dtype).reshape(reference.shape), reference)
            _trusted[key] = ok
            dst[...] = reference.reshape(dst.shape)
            return
        if not self._scale(libs, key, frame, dst.ctypes.data, line):
            dst[...] = frame_pixels(frame, self.fmt, self.reformatter).reshape(dst.shape)
            return
        self._direct_key = key
        self.direct += 1

    def _scale(self, libs: _Libs, key: tuple, frame: Any, address: int, line: int) -> bool:
        width, height = frame.width, frame.height
        if self._ctx_key != key[:3] + key[5:6]:
            self.close()
            src_fmt = libs.avutil.av_get_pix_fmt(key[0].encode())
            dst_fmt = libs.avutil.av_get_pix_fmt(self.fmt.encode())
            if src_fmt < 0 or dst_fmt < 0:
                return False
            self._ctx = libs.sws.sws_getContext(width, height, src_fmt, width, height, dst_fmt, _SWS_BILINEAR,
                                                None, None, None)
            if not self._ctx:
                return False
            self._ctx_key, self._free, self._scale_fn = key[:3] + key[5:6], libs.sws.sws_freeContext, \
                libs.sws.sws_scale
        return self._sws_scale(frame, address, line)

    def _sws_scale(self, frame: Any, address: int, line: int) -> bool:
        """``sws_scale`` of ``frame`` with the context made for its setting, into ``line``-byte rows at
        ``address``."""
        planes = frame.planes
        if len(planes) > 4:
            return False
        src, strides = self._src, self._src_strides
        for i, plane in enumerate(planes):
            src[i], strides[i] = plane.buffer_ptr, plane.line_size
        self._dst[0], self._dst_strides[0] = address, line
        height = frame.height
        return self._scale_fn(self._ctx, src, strides, 0, height, self._dst, self._dst_strides) == height

    def close(self) -> None:
        """Free the swscale context (a later conversion makes a new one)."""
        if self._ctx:
            self._free(self._ctx)
        self._ctx, self._ctx_key, self._direct_key = None, None, None

    def __del__(self) -> None:
        self.close()
