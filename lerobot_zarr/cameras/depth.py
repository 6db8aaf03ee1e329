"""Depth cameras as LeRobot 0.6.1 records and returns them (its ``depth_utils`` and ``configs/video.py``).

A feature is a depth map when its ``info`` says ``is_depth_map`` (or the legacy ``video.is_depth_map``, in
``info`` or ``video_info``). As **video**, LeRobot quantizes depth to 12-bit codes (0..4095), a log or linear map
between ``depth_min`` and ``depth_max`` metres (``video.depth_min``, ``video.depth_max``, ``video.shift``,
``video.use_log`` in the feature's ``info``; LeRobot's defaults where absent) encoded as ``gray12le`` HEVC; the store
keeps the codes (uint16) losslessly and :class:`DepthOutput` dequantizes them on read. As an **image**, depth is
uint16 millimetres or float32 metres (``info.depth_unit``), kept in its own dtype.

Items are float32 in the unit asked (``"mm"``, LeRobot's default, or ``"m"``): dequantized codes are LeRobot's
``dequantize_depth`` of its torch path (float32 arithmetic, clipped to ``[depth_min, depth_max]``; millimetres
rounded to whole numbers); image depth is the stored value, times 1000 or divided by 1000 in float32 when its
recorded unit differs from the one asked (as stored when it has none, LeRobot's rule). Dequantizing is one lookup
in a table of the 65536 possible codes, computed once per camera.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from ..errors import warn_once

__all__ = ["DEPTH_UNITS", "DepthUnit", "DEPTH_QMAX", "MM_PER_METRE", "DEPTH_PIX_FMT", "is_depth_feature",
           "Quantizer", "DepthOutput", "depth_stats", "unservable_depth"]

DepthUnit = Literal["mm", "m"]
DEPTH_UNITS = get_args(DepthUnit)
DEPTH_QMAX = 4095  # 12-bit codes
MM_PER_METRE = 1000.0
DEPTH_PIX_FMT = "gray12le"  # LeRobot's depth pixel format, and the one its decoder asks frames in
_DEFAULTS = {"depth_min": 0.01, "depth_max": 10.0, "shift": 3.5, "use_log": True}  # LeRobot 0.6.1's
_UINT16_MAX = 65535.0


def is_depth_feature(feature: Mapping[str, Any]) -> bool:
    """Whether a LeRobot ``features`` entry is a depth map (LeRobot's ``meta.depth_keys`` rule)."""
    info = feature.get("info") if isinstance(feature.get("info"), Mapping) else {}
    video_info = feature.get("video_info") if isinstance(feature.get("video_info"), Mapping) else {}
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map") or video_info.get("video.is_depth_map"))


@dataclass(frozen=True)
class Quantizer:
    """LeRobot's depth quantizer of a video feature (metres), read from its ``info`` (``video.<field>``)."""

    depth_min: float = _DEFAULTS["depth_min"]
    depth_max: float = _DEFAULTS["depth_max"]
    shift: float = _DEFAULTS["shift"]
    use_log: bool = _DEFAULTS["use_log"]

    @classmethod
    def of(cls, info: Mapping[str, Any] | None) -> Quantizer:
        """The quantizer a feature's ``info`` records (missing or null keys take LeRobot's defaults); a value
        of the wrong type raises ``ValueError`` naming it."""
        info = info if isinstance(info, Mapping) else {}
        values: dict[str, Any] = {}
        for name, default in _DEFAULTS.items():
            value = info.get(f"video.{name}")
            if value is None:
                continue
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ValueError(f"video.{name} must be true or false, got {value!r:.40}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"video.{name} must be a finite number, got {value!r:.40}")
            values[name] = float(value) if not isinstance(default, bool) else value
        quantizer = cls(**values)
        if quantizer.use_log and quantizer.depth_min + quantizer.shift <= 0:
            raise ValueError(f"depth_min + shift must be positive for the log quantizer, got {quantizer.depth_min} + "
                             f"{quantizer.shift}")
        if not quantizer.depth_max > quantizer.depth_min:
            raise ValueError(f"depth_max ({quantizer.depth_max}) must exceed depth_min ({quantizer.depth_min})")
        return quantizer

    def info(self) -> dict[str, Any]:
        """The ``video.<field>`` keys LeRobot writes for this quantizer."""
        return {f"video.{name}": getattr(self, name) for name in _DEFAULTS}

    def codes(self, depth: np.ndarray, unit: DepthUnit) -> np.ndarray:
        """LeRobot's quantizer (``quantize_depth``): depth in ``unit`` to uint16 12-bit codes, computed in float32
        in that unit as LeRobot computes them (so the codes are the ones its recorder writes)."""
        values = np.asarray(depth).astype(np.float32)
        scale = 1.0 if unit == "m" else MM_PER_METRE
        low, high = np.float32(self.depth_min * scale), np.float32(self.depth_max * scale)
        if self.use_log:
            shift = np.float32(self.shift * scale)
            log_min, log_max = math.log(float(low + shift)), math.log(float(high + shift))
            norm = (np.log(values + shift) - log_min) / (log_max - log_min)
        else:
            norm = (values - low) / (high - low)
        return np.rint(norm * DEPTH_QMAX).clip(0, DEPTH_QMAX).astype(np.uint16)

    def table(self, unit: DepthUnit, exp: Any = None) -> np.ndarray:
        """float32 depth in ``unit`` of every uint16 code (65536 entries: codes past 4095 clip to ``depth_max``
        as LeRobot's arithmetic does). LeRobot computes in float32 with torch: the same operations here, each
        rounded to float32; its ``exp`` is torch's, used when torch is already imported (else a correctly rounded
        one, within one ulp of it)."""
        if self.use_log:
            log_min, log_max = math.log(self.depth_min + self.shift), math.log(self.depth_max + self.shift)
            scale, offset = (log_max - log_min) / DEPTH_QMAX, log_min
        else:
            scale, offset = (self.depth_max - self.depth_min) / DEPTH_QMAX, self.depth_min
        codes = np.arange(65536, dtype=np.float32)
        buf = codes * np.float32(scale) + np.float32(offset)  # two float32 roundings, as torch's mul_ then add_
        if self.use_log:
            buf = (exp or _exp_float32)(buf) - np.float32(self.shift)
        buf = np.clip(buf, np.float32(self.depth_min), np.float32(self.depth_max))
        if unit == "mm":
            buf = np.clip(np.rint(buf * np.float32(MM_PER_METRE)), 0.0, _UINT16_MAX).astype(np.float32)
        return buf.astype(np.float32)


def _exp_float32(values: np.ndarray) -> np.ndarray:
    """float32 exp: torch's when torch is imported (LeRobot's own results on this machine), else float64's exp
    rounded to float32 (numpy's float32 exp is less accurate: it differs from torch's in a third of the codes)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).exp_().numpy()
        except (AttributeError, RuntimeError, TypeError):  # a partial or stub torch: the numpy way
            pass
    return np.exp(values.astype(np.float64)).astype(np.float32)


class DepthOutput:
    """One depth camera's stored frames (uint16 codes of a video, or an image's uint16 / float32) as float32 depth
    in the unit asked, in LeRobot's way (see the module)."""

    def __init__(self, feature: Mapping[str, Any], kind: str, unit: DepthUnit):
        if unit not in DEPTH_UNITS:
            raise ValueError(f"depth_unit must be one of {DEPTH_UNITS}, got {unit!r:.40}")
        info = feature.get("info") if isinstance(feature.get("info"), Mapping) else {}
        self.kind, self.unit = kind, unit
        self.table = Quantizer.of(info).table(unit) if kind == "video" else None
        recorded = info.get("depth_unit")
        # an image's recorded unit when it differs from the one asked (none: served as stored, LeRobot's rule)
        self.convert = recorded if kind != "video" and recorded in DEPTH_UNITS and recorded != unit else None

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        """float32 depth of stored ``frames`` (any leading axes), a new array."""
        if self.table is not None:
            return self.table[frames]
        # 8-bit colour images recorded into a depth feature (unservable_depth): LeRobot's ToTensor, u8.float() / 255,
        # then its unit rule
        colour = getattr(frames, "dtype", None) == np.uint8
        out = np.divide(frames, np.float32(255), dtype=np.float32) if colour else np.asarray(frames, np.float32)
        if self.convert is None:
            return out.copy() if out is frames else out
        # LeRobot: metres times 1000, millimetres divided by 1000 (not times 1/1000), in float32
        return out * np.float32(MM_PER_METRE) if self.convert == "m" else out / np.float32(MM_PER_METRE)


def unservable_depth(root: Any, name: str, spec: Any) -> str | None:
    """Why the store array of depth feature ``name`` (``spec``: its ``ArraySpec``) cannot be served, or None. 8-bit
    frames of one channel are an earlier lerobot_zarr's lossy depth; of 3 or 4 channels (an image), the colour
    images the source recorded into it (LeRobot's writer takes them; LeRobot serves them as colour, pixels / 255,
    and so does :class:`DepthOutput`), which are served with a warning."""
    if spec.dtype != np.uint8:
        return None
    if spec.kind == "image" and spec.frame_shape[-1:] in ((3,), (4,)):
        warn_once(str(root), f"{root}: image feature {name!r} is declared a depth map but holds 8-bit colour images "
                             f"(as its source recorded them): served as LeRobot serves them, pixels / 255 as float32 "
                             f"({spec.frame_shape[-1]} channels), not as depth")
        return None
    return ("a depth map stored by an earlier lerobot_zarr as 8-bit frames, which lose the depth (it read the 12-bit "
            "video as 8-bit gray, depth images as uint8): make the store again from its source")


def depth_stats(stats: Mapping[str, Any], stored_unit: Any, unit: DepthUnit) -> Any:
    """A depth feature's stats (LeRobot's ``{min, max, mean, ...}`` lists) rescaled from the unit they were
    recorded in to ``unit``, every entry but ``count`` (LeRobot's ``rescale_depth_stats``, float64); as they are
    when the recorded unit is unknown or the same."""
    if stored_unit not in DEPTH_UNITS or stored_unit == unit or not isinstance(stats, Mapping):
        return stats
    factor = MM_PER_METRE if stored_unit == "m" else 1.0 / MM_PER_METRE
    out = {}
    for name, value in stats.items():
        try:
            out[name] = value if name == "count" else (np.asarray(value, dtype=np.float64) * factor).tolist()
        except (TypeError, ValueError):
            out[name] = value
    return out
