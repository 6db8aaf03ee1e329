"""Resize (and crop) camera frames at transcode time, so that the store holds what the policy trains on.

Interpolation is Pillow's antialiased resampling, the one torchvision's ``Resize(antialias=True)`` reproduces
(and LeRobot's image transforms use): each output pixel is a weighted mean of the input pixels under a filter
stretched by the downscaling factor, so shrinking 480x640 to 96x96 averages whole neighbourhoods instead of
sampling (no aliasing). Filters (the ``interpolation`` option, the same names as Pillow and torchvision):

- ``"bilinear"`` (default): triangle filter, support 1 input pixel when upscaling, ``in/out`` when downscaling.
- ``"bicubic"``: Keys cubic (a = -0.5), support 2 (x ``in/out`` when downscaling); sharper, may ring.
- ``"box"``: mean of the input pixels whose centres fall inside the output pixel (area averaging).

Pixel centres are aligned (``align_corners=False``); the filter is separable: along each row first, into an
8-bit image (rounded half up, clipped to 0..255), then down each column. Results are within 1 of that definition
computed in float64 (the weights are fixed-point; tested against such a reference). A crop ``(top, left, height,
width)`` is taken before resizing. Speed (480x640 -> 224x224, one thread): ~2 ms per frame, in the range of
decoding the AV1 frame; ``resize_frames`` spreads frames over the decode thread pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

from ..errors import UnsupportedDtypeError
from .frame_codecs import run_in_parallel

__all__ = ["INTERPOLATIONS", "Interpolation", "MAX_SIDE", "check_resize", "resize_frame", "resize_frames"]

Interpolation = Literal["bilinear", "bicubic", "box"]
INTERPOLATIONS = get_args(Interpolation)


def check_resize(frame_shape: Sequence[int], size: Sequence[int], *, crop: Sequence[int] | None = None,
                 interpolation: Interpolation = "bilinear") -> tuple[int, int, int]:
    """Validate a resize of frames of ``frame_shape`` (H, W, C); return the stored frame shape."""
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}")
    if len(frame_shape) != 3:
        raise ValueError(f"frames must be (height, width, channels), got {tuple(frame_shape)}")
    height, width, channels = (int(s) for s in frame_shape)
    if crop is not None:
        if len(crop) != 4 or any(int(c) != c for c in crop):
            raise ValueError(f"crop must be (top, left, height, width) integers, got {crop!r}")
        top, left, ch, cw = (int(c) for c in crop)
        if top < 0 or left < 0 or ch < 1 or cw < 1 or top + ch > height or left + cw > width:
            raise ValueError(f"crop {tuple(crop)} is outside frames of {height}x{width}")
    if isinstance(size, (str, bytes)) or len(size) != 2 or any(
            isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in size):
        raise ValueError(f"resize must be (height, width) positive integers, got {size!r}")
    if max(size) > MAX_SIDE:
        raise ValueError(f"resize {tuple(int(s) for s in size)} is larger than {MAX_SIDE} pixels on a side (a frame "
                         f"would take {int(size[0]) * int(size[1]) * channels} bytes)")
    return int(size[0]), int(size[1]), channels


MAX_SIDE = 8192  # pixels of a resized camera's height or width (8K video is 7680 wide)


def resize_frame(frame: np.ndarray, size: Sequence[int], *, crop: Sequence[int] | None = None,
                 interpolation: Interpolation = "bilinear", out: np.ndarray | None = None) -> np.ndarray:
    """One uint8 (H, W, C) frame cropped then resized to ``size`` = (height, width)."""
    if frame.dtype != np.uint8:
        raise UnsupportedDtypeError(f"resize: frames must be uint8, got {frame.dtype}")
    shape = check_resize(frame.shape, size, crop=crop, interpolation=interpolation)
    if out is None:
        out = np.empty(shape, np.uint8)
    elif out.shape != shape or out.dtype != np.uint8:
        raise ValueError(f"out must be uint8 of shape {shape}, got {out.dtype}{out.shape}")
    if crop is not None:
        top, left, ch, cw = (int(c) for c in crop)
        frame = frame[top:top + ch, left:left + cw]
    from PIL import Image  # imported here: lerobot_zarr imports without Pillow loaded

    resample = getattr(Image.Resampling, interpolation.upper())
    h, w = shape[:2]
    if frame.shape[2] == 3:
        out[...] = np.asarray(Image.fromarray(np.ascontiguousarray(frame), "RGB").resize((w, h), resample))
    else:  # gray, RGBA... channel by channel ("L" images; RGBA would be premultiplied by Pillow)
        for c in range(frame.shape[2]):
            out[..., c] = np.asarray(Image.fromarray(np.ascontiguousarray(frame[..., c]), "L").resize((w, h),
                                                                                                       resample))
    return out


def resize_frames(frames: np.ndarray, size: Sequence[int], *, crop: Sequence[int] | None = None,
                  interpolation: Interpolation = "bilinear", threads: int | None = None) -> np.ndarray:
    """Frames (N, H, W, C) uint8 cropped then resized to (N, height, width, C), in parallel over frames (Pillow
    releases the GIL while it resamples)."""
    frames = np.asarray(frames)
    if frames.ndim != 4:
        raise ValueError(f"frames must be (N, height, width, channels), got {frames.shape}")
    shape = check_resize(frames.shape[1:], size, crop=crop, interpolation=interpolation)
    out = np.empty((len(frames), *shape), np.uint8)

    def run(lo: int, hi: int) -> None:
        for k in range(lo, hi):
            resize_frame(frames[k], size, crop=crop, interpolation=interpolation, out=out[k])

    run_in_parallel(run, len(frames), threads=threads)
    return out

