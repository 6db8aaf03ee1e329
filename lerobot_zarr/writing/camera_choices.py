"""How a new store keeps each camera (``storage=``, ``resize=``), checked before anything is made: raw, a frame
codec (compact, lossless, jpeg...), the source's mp4 files, resized; and the short name of such choices under which
the cache keeps a store of its own."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, get_args

import numpy as np

from ..errors import ArgumentError
from ..store.cameras import storage_name
from ..store.tables import ArraySpec

__all__ = ["CameraStorage", "CAMERA_STORAGES", "Resize", "camera_array", "every_camera", "camera_choices_key"]

# How a new store keeps a camera (``storage=``): these, or any frame codec such as "zstd:9" or "jpeg:80".
CameraStorage = Literal["raw", "compact", "lossless", "jpeg", "mp4"]
CAMERA_STORAGES = get_args(CameraStorage)
Resize = tuple[int, int] | Mapping[str, Any]


def camera_array(name: str, spec: ArraySpec, storage: CameraStorage | str | None, resize: Resize | None
                 ) -> ArraySpec:
    """How a new store keeps a camera: ``storage`` ``"raw"`` (memory-mapped frames), ``"compact"`` (zstd per
    frame), ``"lossless"`` (delta-zstd per frame), ``"jpeg"`` / ``"jpeg:Q"`` (lossy, quality Q, default 90) or
    any frame codec of :mod:`~lerobot_zarr.cameras.frame_codecs`, or ``"mp4"`` (the source's mp4 files kept, decoded on
    read; video features only); ``resize`` ``(height, width)`` or ``{"size", "crop", "interpolation"}``."""
    from ..cameras.frame_codecs import frame_codec
    from ..cameras.resize import check_resize

    choice = "raw" if storage is None else storage
    if not isinstance(choice, str) or not choice:
        raise ArgumentError(f"storage[{name!r}] must be a storage name such as {CAMERA_STORAGES}, got "
                            f"{choice!r:.40}")
    if spec.dtype != np.uint8 and (choice not in ("raw", "mp4") or resize is not None):  # a depth map
        raise ArgumentError(f"{name!r} is a depth map ({spec.dtype} frames): it is kept raw or, a video, as its mp4 "
                            f"files, at its size (frame codecs and resizing are for uint8 colour cameras)")
    if resize is not None:
        options = dict(resize) if isinstance(resize, Mapping) else {"size": resize}
        unknown = set(options) - {"size", "crop", "interpolation"}
        if unknown or "size" not in options:
            raise ArgumentError(f"resize[{name!r}] is (height, width) or {{'size', 'crop', 'interpolation'}}, got "
                                f"{resize!r:.80}")
        try:
            shape = check_resize(spec.frame_shape, options["size"], crop=options.get("crop"),
                                 interpolation=options.get("interpolation", "bilinear"))
        except (ValueError, TypeError) as exc:
            raise ArgumentError(f"resize[{name!r}]: {exc}") from None
        recorded = {"from": list(spec.frame_shape), "size": list(shape[:2]),
                    "interpolation": options.get("interpolation", "bilinear"),
                    **({"crop": [int(c) for c in options["crop"]]} if options.get("crop") is not None else {})}
        spec = replace(spec, frame_shape=shape, resize=tuple((k, tuple(v) if isinstance(v, list) else v)
                                                             for k, v in recorded.items()))
    if choice == "raw":
        return spec
    if choice == "mp4":
        if spec.kind != "video":
            raise ArgumentError(f"storage[{name!r}] = 'mp4' keeps a camera's mp4 files: {name!r} is not a video")
        return replace(spec, storage="mp4")
    codec = {"compact": "zstd", "lossless": "delta-zstd"}.get(choice, choice)
    try:
        described = frame_codec(codec, spec.frame_shape).describe()
    except (ValueError, TypeError) as exc:
        raise ArgumentError(f"storage[{name!r}] = {choice!r}: {exc} (storages: {CAMERA_STORAGES})") from None
    return replace(spec, storage="compact", codec=tuple(described.items()))


def every_camera(storage: Any, resize: Any, cameras: Sequence[str], depth: Sequence[str] = ()
                 ) -> tuple[dict | None, dict | None]:
    """``storage`` and ``resize`` as ``{camera: choice}``: a single storage name (``"jpeg"``) or a single size
    (``(224, 224)``, ``{"size": ...}``) applies to every camera but the ``depth`` maps (kept raw, at their size);
    anything but these or a mapping is refused."""
    if isinstance(storage, str) or isinstance(resize, (tuple, list)) or (
            isinstance(resize, Mapping) and "size" in resize and not any(k in cameras for k in resize)):
        cameras = [k for k in cameras if k not in depth]
    if isinstance(storage, str):
        storage = {k: storage for k in cameras}
    elif storage is not None and not isinstance(storage, Mapping):
        raise ArgumentError(f"storage must be a storage name for every camera (e.g. 'jpeg') or {{camera: name}}, "
                            f"got {type(storage).__name__}")
    one_size = isinstance(resize, (tuple, list)) or (isinstance(resize, Mapping) and "size" in resize
                                                      and not any(k in cameras for k in resize))
    if one_size:
        resize = {k: resize for k in cameras}
    elif resize is not None and not isinstance(resize, Mapping):
        raise ArgumentError(f"resize must be (height, width) for every camera or {{camera: (height, width)}}, got "
                            f"{type(resize).__name__}")
    return (dict(storage) if storage is not None else None), (dict(resize) if resize is not None else None)


def camera_choices_key(storage: Mapping[str, CameraStorage | str] | None, resize: Mapping[str, Resize] | None
                       ) -> str | None:
    """A short stable name of the camera choices ``storage``/``resize`` that change how cameras are kept (None if
    none does): the cache keeps a store per choice next to the plain one, so that an experiment never replaces
    the store every other open of the source reads. Equivalent spellings (``"jpeg"``, ``"jpeg:90"``) agree."""
    probe = ArraySpec(np.dtype("uint8"), (1 << 20, 1 << 20, 3), ("height", "width", "channels"), "video")
    storage, resize = every_camera(storage, resize, ["*"])  # one choice for every camera: named "*"
    chosen = {}
    for name in sorted({*(storage or {}), *(resize or {})}):
        kept = camera_array(name, probe, (storage or {}).get(name), None)
        sized = camera_array(name, probe, None, (resize or {}).get(name)) if (resize or {}).get(name) else None
        how = [storage_name(kept), {k: v for k, v in sized.resize_spec.items() if k != "from"} if sized else None]
        if how != ["raw", None]:
            chosen[name] = how
    if not chosen:
        return None
    return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:12]
