"""LeRobot 0.6.1's rules for what its recorder is given, for the drop-in's recording side: the features
``LeRobotDataset.create`` takes (:func:`recording_features`), the checks ``add_frame`` makes of a frame
(:func:`check_frame`: LeRobot's ``ValueError`` messages, word for word) and what LeRobot's image writer makes of a
camera frame (:func:`camera_frame`: uint8 ``(H, W, 3)``, float images in [0, 1] scaled by 255 and truncated; depth
maps of one channel, uint16 millimetres or float32 metres, quantized to 12-bit codes for a depth video as LeRobot's
encoder does). Written from LeRobot's documented behaviour and tests, not copied."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..cameras.depth import Quantizer, is_depth_feature
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES

__all__ = ["LEROBOT_DEFAULT_FEATURES", "recording_features", "check_frame", "as_numpy", "camera_frame",
           "depth_unit_of", "CameraFrameError"]

logger = logging.getLogger(__name__)

#: LeRobot's own columns as its ``meta.features`` lists them (shape tuples)
LEROBOT_DEFAULT_FEATURES = {name: {"dtype": dtype, "shape": (1,), "names": None}
                            for name, dtype in DEFAULT_FEATURES.items()}


class CameraFrameError(ValueError):
    """A camera frame LeRobot's image writer cannot write (the reason is the message)."""


def recording_features(features: Mapping[str, Any], use_videos: bool) -> dict[str, dict]:
    """``meta.features`` of a dataset ``LeRobotDataset.create`` makes: a deep copy of ``features`` with LeRobot's own
    columns added (they replace any given), shapes as tuples. Feature names with '/' and video features without
    ``use_videos`` are LeRobot's ``ValueError``."""
    if not isinstance(features, Mapping):
        raise TypeError(f"features must be a dict {{name: {{'dtype', 'shape', 'names'}}}}, got "
                        f"{type(features).__name__}")
    out = {**copy.deepcopy(dict(features)), **copy.deepcopy(LEROBOT_DEFAULT_FEATURES)}
    slashed = {name: ft for name, ft in out.items() if "/" in str(name)}
    if slashed:
        raise ValueError(f"Feature names should not contain '/'. Found '/' in '{slashed}'.")
    for name, ft in out.items():
        if isinstance(ft, Mapping) and isinstance(ft.get("shape"), list):
            ft["shape"] = tuple(ft["shape"])
    videos = [name for name, ft in out.items() if isinstance(ft, Mapping) and ft.get("dtype") == "video"]
    if videos and not use_videos:
        raise ValueError(f"Features contain video keys {videos}, but 'use_videos' is set to False. Either remove "
                         f"video features from the features dict, or set 'use_videos=True'.")
    return out


def as_numpy(value: Any) -> Any:
    """A torch tensor's values as numpy (LeRobot's ``add_frame`` converts them so); anything else as it is."""
    module = type(value).__module__
    if module.startswith("torch") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def check_frame(frame: Mapping[str, Any], features: Mapping[str, Mapping[str, Any]]) -> None:
    """LeRobot's ``validate_frame``: ``task`` and every feature but LeRobot's own columns present, nothing else;
    numeric features numpy arrays of exactly their dtype and shape, cameras arrays of their shape channels first or
    last (or PIL images), strings ``str``. A ``ValueError`` lists everything wrong."""
    if "task" not in frame:
        raise ValueError("Feature mismatch in `frame` dictionary:\nMissing features: {'task'}\n")
    expected = set(features) - set(DEFAULT_FEATURES)
    actual = set(frame) - {"task"}
    message = ""
    missing, extra = expected - actual, actual - expected
    if missing or extra:
        message += "Feature mismatch in `frame` dictionary:\n"
        if missing:
            message += f"Missing features: {missing}\n"
        if extra:
            message += f"Extra features: {extra}\n"
    for name in actual & expected:
        message += _check_value(name, features[name], frame[name])
    if message:
        raise ValueError(message)


def _check_value(name: str, feature: Mapping[str, Any], value: Any) -> str:
    dtype, shape = feature["dtype"], feature["shape"]
    if dtype in CAMERA_DTYPES:
        if isinstance(value, np.ndarray):
            c, h, w = shape
            if value.ndim != 3 or (value.shape != (c, h, w) and value.shape != (h, w, c)):
                return (f"The feature '{name}' of shape '{value.shape}' does not have the expected shape "
                        f"'{(c, h, w)}' or '{(h, w, c)}'.\n")
            return ""
        if _is_pil(value):
            return ""
        return (f"The feature '{name}' is expected to be of type 'PIL.Image' or 'np.ndarray' channel first or "
                f"channel last, but type '{type(value)}' provided instead.\n")
    if dtype == "string":
        if not isinstance(value, str):
            return f"The feature '{name}' is expected to be of type 'str', but type '{type(value)}' provided instead.\n"
        return ""
    if dtype == "language":
        if value is not None:
            logger.warning(f"The feature '{name}' is a 'language' column populated by the annotation pipeline, not "
                           f"at record time. The provided value will be dropped.")
        return ""
    try:
        expected = np.dtype(dtype)
    except TypeError:
        raise NotImplementedError(f"The feature dtype '{dtype}' is not implemented yet.") from None
    if not isinstance(value, np.ndarray):
        return (f"The feature '{name}' is not a 'np.ndarray'. Expected type is '{dtype}', but type '{type(value)}' "
                f"provided instead.\n")
    message = ""
    if value.dtype != expected:
        message += f"The feature '{name}' of dtype '{value.dtype}' is not of the expected dtype '{dtype}'.\n"
    if value.shape != shape:
        message += f"The feature '{name}' of shape '{value.shape}' does not have the expected shape '{shape}'.\n"
    return message


def _is_pil(value: Any) -> bool:
    return any(cls.__module__.startswith("PIL.") and cls.__name__ == "Image" for cls in type(value).__mro__)


def depth_unit_of(value: Any) -> str:
    """LeRobot's unit of a depth frame, from its dtype: floats are metres, anything else millimetres."""
    return "m" if np.issubdtype(np.asarray(value).dtype, np.floating) else "mm"


def camera_frame(value: Any, feature: Mapping[str, Any], frame_shape: tuple[int, ...],
                 stored: np.dtype) -> np.ndarray:
    """What LeRobot's image writer makes of a camera frame, as the store keeps it: RGB uint8 ``(H, W, 3)`` (CHW
    transposed; floats must be in [0, 1], then ``(x * 255).astype(uint8)`` as LeRobot truncates); a depth map of one
    channel (``(H, W)``, ``(H, W, 1)`` or ``(1, H, W)``), uint16 or float32, as ``(H, W, 1)``: its values for a depth
    image, its 12-bit codes for a depth video (LeRobot's quantizer, from the feature's ``info``). A frame LeRobot's
    writer would fail on raises :class:`CameraFrameError` with its reason."""
    arr = np.asarray(value)
    if arr.ndim not in (2, 3):
        raise CameraFrameError(f"The array has {arr.ndim} dimensions, but 2 or 3 is expected for an image.")
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    elif arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if is_depth_feature(feature):
        if arr.ndim != 2:
            raise CameraFrameError(f"a depth map has one channel, got a frame of shape {np.shape(value)}")
        if arr.dtype not in (np.uint16, np.float32):
            raise CameraFrameError(f"Unsupported single-channel image dtype: {arr.dtype}. Supported dtypes: "
                                   f"['float32', 'uint16'].")
        arr = arr[..., None]
        if feature["dtype"] == "video":
            unit = (feature.get("info") or {}).get("depth_unit") or depth_unit_of(arr)
            arr = Quantizer.of(feature.get("info")).codes(arr, unit)
        elif arr.dtype != stored:
            raise CameraFrameError(f"a depth frame of dtype {arr.dtype}, where the camera records "
                                   f"{(feature.get('info') or {}).get('depth_unit')} ({stored}) since its first frame")
    else:
        if arr.ndim == 2:
            raise CameraFrameError(f"Unsupported single-channel image dtype: {arr.dtype}. Supported dtypes: "
                                   f"['float32', 'uint16'].")
        if arr.shape[0] == 3:
            arr = arr.transpose(1, 2, 0)
        elif arr.shape[-1] != 3:
            raise CameraFrameError(f"The image has {arr.shape[-1]} channels, but 3 is required for now.")
        if arr.dtype != np.uint8:
            if arr.size and (arr.max() > 1.0 or arr.min() < 0.0):
                raise CameraFrameError(f"The image data type is float, which requires values in the range [0.0, "
                                       f"1.0]. However, the provided range is [{arr.min().item()}, "
                                       f"{arr.max().item()}]. Please adjust the range or provide a uint8 image with "
                                       f"values in the range [0, 255].")
            arr = (arr * 255).astype(np.uint8)
    if arr.shape != tuple(frame_shape):
        raise CameraFrameError(f"a frame of {arr.shape[0]}x{arr.shape[1]} pixels, where the camera's frames are "
                               f"{frame_shape[0]}x{frame_shape[1]}")
    return arr
