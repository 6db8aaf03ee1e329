"""Checks of what a writer is given: LeRobot feature specs (:func:`feature_specs`), and frames and values that must
become the stored dtype without changing (:func:`as_frames`, :func:`check_assignable`): a value a dtype cannot hold
is refused with :class:`~lerobot_zarr.errors.ValueRangeError`, never stored changed."""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..cameras.depth import DEPTH_UNITS, DepthOutput, is_depth_feature
from ..errors import ArgumentError, SchemaMismatchError, UnsupportedDtypeError, ValueRangeError
from ..lerobot.format import (
    CAMERA_DTYPES,
    DEFAULT_FEATURES,
    NUMERIC_DTYPES,
    STAT_NAMES,
    episode_stats,
    float_image_stats,
    is_float_image,
    language_value,
    sample_count,
)
from ..store.state import check_array_name
from ..store.tables import MAX_FRAME_BYTES, ArraySpec, array_spec
from ..store.text import TEXT_KINDS, text_crc
from ..utils.hashing import crc32c

__all__ = ["RESERVED_NAMES", "count_arg", "feature_specs", "camera_frame_shape", "stored_values", "as_frames",
           "check_assignable", "check_fits", "stats_of_stored", "content_hash", "EpisodeFrames", "task_indices"]

RESERVED_NAMES = ("task",)  # sample keys a feature may not take (with LeRobot's own columns and '*_is_pad')
_RAW_DTYPES = frozenset(np.dtype(t).type for t in NUMERIC_DTYPES)

def count_arg(name: str, value: Any, low: int) -> int:
    """``value`` checked as an integer (not a bool) of at least ``low``; ``name`` is the argument, for the message."""
    try:
        count = None if isinstance(value, (bool, np.bool_)) else operator.index(value)
    except TypeError:
        count = None
    if count is None or count < low:
        raise ArgumentError(f"{name} must be an integer >= {low}, got {value!r:.40}")
    return count



def feature_specs(features: Mapping[str, Mapping[str, Any]]) -> tuple[dict, dict[str, ArraySpec]]:
    """LeRobot feature specs (``{"dtype", "shape", "names", "info"}``) -> info features with LeRobot's defaults added,
    and the store arrays they map to. Cameras (``image``, or ``video``: encoded to mp4 when exported) are stored raw,
    HWC whether declared ``[H, W, C]`` or ``[C, H, W]`` (info keeps the declared shape); a depth camera (``info``
    saying ``is_depth_map``) keeps one channel of its own dtype: a video's 12-bit codes (uint16), an image's uint16
    millimetres or float32 metres, as its ``info.depth_unit`` says."""
    if not isinstance(features, Mapping) or not features:
        raise SchemaMismatchError(f"features must be a non-empty mapping {{name: {{'dtype', 'shape'}}}}, got "
                                  f"{features!r:.80}")
    info: dict[str, dict] = {}
    frame_shapes: dict[str, tuple[int, ...]] = {}
    stored: dict[str, np.dtype] = {}
    for name, ft in features.items():
        if not isinstance(name, str):
            raise SchemaMismatchError(f"feature names must be strings, got {name!r}")
        if not isinstance(ft, Mapping) or "dtype" not in ft or "shape" not in ft:
            raise SchemaMismatchError(f"feature {name!r}: a feature is a dict with 'dtype' and 'shape', got {ft!r}",
                                      feature=name)
        if name in RESERVED_NAMES or name.endswith("_is_pad"):
            raise SchemaMismatchError(f"feature {name!r}: the name is taken by samples ('task' and '<feature>_is_pad' "
                                      f"keys); choose another", feature=name)
        check_array_name(name)
        dtype = str(ft["dtype"])
        if dtype not in (*CAMERA_DTYPES, *TEXT_KINDS):
            try:
                scalar = np.dtype(dtype).type
            except TypeError:
                raise UnsupportedDtypeError(f"feature {name!r}: unknown dtype {dtype!r}", feature=name) from None
            if scalar not in _RAW_DTYPES:
                raise UnsupportedDtypeError(f"feature {name!r}: dtype {dtype!r} cannot be stored as portable raw bytes "
                                            f"(use bool, int8..int64, uint8..uint64, float16, float32 or float64)",
                                            feature=name)
        try:
            shape = tuple(operator.index(s) for s in ft["shape"])
        except TypeError:
            raise SchemaMismatchError(f"feature {name!r}: shape must be a list of integers, got {ft['shape']!r:.60}",
                                      feature=name) from None
        names = ft.get("names")
        extra = ft.get("info")
        if extra is not None and not isinstance(extra, Mapping):
            raise SchemaMismatchError(f"feature {name!r}: 'info' must be a dict, got {extra!r:.60}", feature=name)
        if not shape or any(s < 1 for s in shape) or (dtype in TEXT_KINDS and shape != (1,)):
            raise SchemaMismatchError(f"feature {name!r}: shape {list(shape)} is not valid for dtype {dtype!r}",
                                      feature=name)
        frame_shape = shape
        if dtype in CAMERA_DTYPES:
            depth = is_depth_feature(ft)
            frame_shape = camera_frame_shape(name, shape, names, channels=(1,) if depth else (1, 3, 4))
            if depth:
                stored[name] = _depth_dtype(name, dtype, extra or {})
        itemsize = 1 if dtype in TEXT_KINDS else stored.get(name, np.dtype("uint8")).itemsize \
            if dtype in CAMERA_DTYPES else np.dtype(dtype).itemsize
        if len(shape) > 8 or math.prod(shape) * itemsize > MAX_FRAME_BYTES:
            raise SchemaMismatchError(f"feature {name!r}: shape {list(shape)[:9]} makes frames of "
                                      f"{math.prod(shape) * itemsize} bytes; a store holds frames of at most "
                                      f"{MAX_FRAME_BYTES} bytes and 8 dimensions", feature=name)
        if (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)
                and len(names) not in (shape[0], len(shape))):
            raise SchemaMismatchError(f"feature {name!r}: {len(names)} names {list(names)!r:.80} for shape "
                                      f"{list(shape)} (one per element of a vector, or one per axis)", feature=name)
        if dtype in CAMERA_DTYPES and names is None:
            names = ["height", "width", "channels"] if frame_shape == shape else ["channels", "height", "width"]
        info[name] = {"dtype": dtype, "shape": list(shape), "names": names}
        if extra is not None:
            try:
                info[name]["info"] = json.loads(json.dumps(extra, allow_nan=False))  # a copy, and JSON or refused
            except (TypeError, ValueError) as exc:
                raise SchemaMismatchError(f"feature {name!r}: its 'info' is not JSON ({exc})", feature=name) from None
        frame_shapes[name] = frame_shape
    for name, dtype in DEFAULT_FEATURES.items():
        if name in info and (info[name]["dtype"] != dtype or info[name]["shape"] != [1]):
            raise SchemaMismatchError(f"feature {name!r} is LeRobot's own, filled by the writer: dtype {dtype!r}, "
                                      f"shape [1]; leave it out", feature=name)
        info.setdefault(name, {"dtype": dtype, "shape": [1], "names": None})
        frame_shapes.setdefault(name, (1,))
    arrays = {name: array_spec(ft["dtype"], () if frame_shapes[name] == (1,) and ft["dtype"] not in CAMERA_DTYPES
                               else frame_shapes[name], ft["names"], stored.get(name))
              for name, ft in info.items()}
    return info, arrays


def camera_frame_shape(name: str, shape: tuple[int, ...], names: Any, channels: tuple[int, ...] = (1, 3, 4)
                       ) -> tuple[int, int, int]:
    """A camera's stored ``(H, W, C)`` from its declared shape: ``[H, W, C]``, or ``[C, H, W]`` (LeRobot takes both;
    ``names`` starting with "channels", or a first axis of ``channels`` where the last is not, say which)."""
    first = isinstance(names, (list, tuple)) and len(names) == 3 and str(names[0]).startswith("channel")
    if len(shape) == 3 and (first or shape[-1] not in channels) and shape[0] in channels:
        return shape[1], shape[2], shape[0]
    if len(shape) != 3 or shape[-1] not in channels:
        raise SchemaMismatchError(f"feature {name!r}: a camera's shape is [height, width, channels] or [channels, "
                                  f"height, width] with {' or '.join(map(str, channels))} channels, got "
                                  f"{list(shape)}", feature=name)
    return shape[0], shape[1], shape[2]


def _depth_dtype(name: str, dtype: str, info: Mapping[str, Any]) -> np.dtype:
    """How a depth camera is stored: a video's 12-bit codes as uint16; an image in its recorded unit (uint16
    millimetres, float32 metres; float32, as given, while it has none)."""
    if dtype == "video":
        return np.dtype("uint16")
    unit = info.get("depth_unit")
    if unit is not None and unit not in DEPTH_UNITS:
        raise SchemaMismatchError(f"feature {name!r}: info.depth_unit must be {' or '.join(DEPTH_UNITS)}, got "
                                  f"{unit!r:.40}", feature=name)
    return np.dtype("uint16" if unit == "mm" else "float32")


def stored_values(values: np.ndarray, spec: ArraySpec) -> np.ndarray:
    """Values already checked, as the contiguous rows of the stored dtype that are written."""
    return values if spec.is_text else np.ascontiguousarray(values, dtype=spec.dtype)


def check_fits(name: str, arr: np.ndarray, dtype: np.dtype, episode: int) -> None:
    """Refuse values the stored dtype would change: out of range, NaN/inf or fractions into integers, finite
    floats that overflow to infinity. (float64 -> float32 rounding is what a float32 feature means.)"""
    if arr.dtype == dtype or not arr.size:
        return
    where = f"feature {name!r}, episode {episode}"
    if dtype.kind == "b":
        if not np.isin(arr, (0, 1)).all():
            raise ValueRangeError(f"{where}: bool values must be 0/1 or True/False", feature=name, episode=episode)
        return
    if arr.dtype.kind == "b":
        return
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if arr.dtype.kind == "f":
            if not np.isfinite(arr).all():
                raise ValueRangeError(f"{where}: NaN or infinite values cannot be stored as {dtype}", feature=name,
                                      episode=episode)
            if (arr != np.round(arr)).any():
                raise ValueRangeError(f"{where}: fractional values cannot be stored as {dtype}", feature=name,
                                      episode=episode)
        low, high = arr.min(), arr.max()
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise ValueRangeError(f"{where}: value {bad} does not fit {dtype} [{info.min}, {info.max}]", feature=name,
                                  episode=episode)
        return
    if dtype.kind == "f" and arr.dtype.kind in "iuf":
        with np.errstate(over="ignore", invalid="ignore"):
            cast = arr.astype(dtype)
        overflow = np.isinf(cast) & ~np.isinf(arr) if arr.dtype.kind == "f" else np.isinf(cast)
        if overflow.any():
            raise ValueRangeError(f"{where}: value {arr[overflow].reshape(-1)[0]} overflows {dtype}", feature=name,
                                  episode=episode)


def as_frames(name: str, value: Any, spec: ArraySpec, episode: int) -> np.ndarray:
    """Frames of one feature as (T, *frame_shape) of the stored dtype; images may also come CHW or in [0, 1]; text
    features as a sequence of ``str`` (a language column: of its values, lists of row dicts as LeRobot gives them),
    stored as an object array of strings (a language value as its JSON text)."""
    if spec.is_text:
        return _text_frames(name, value, spec.kind, episode)
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise SchemaMismatchError(f"feature {name!r}, episode {episode}: {arr.dtype} values cannot be stored as "
                                  f"{spec.dtype}", feature=name, episode=episode)
    shape = spec.frame_shape
    depth = spec.kind in CAMERA_DTYPES and spec.dtype != np.uint8  # a depth map: values of its own dtype
    if (spec.kind == "image" or depth) and arr.ndim == 4 and arr.shape[1:] != shape \
            and arr.shape[1:] == (shape[2], shape[0], shape[1]):
        arr = np.moveaxis(arr, 1, -1)  # CHW, as LeRobot's cameras give them
    if spec.kind == "image" and not depth:
        if arr.dtype.kind == "f":
            if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0 and arr.max() <= 1):
                raise ValueRangeError(f"feature {name!r}, episode {episode}: float images must be finite and in "
                                      f"[0, 1]", feature=name, episode=episode)
            arr = np.round(arr * 255)
        elif arr.dtype != np.uint8:
            raise SchemaMismatchError(f"feature {name!r}: images must be uint8 or float in [0, 1], got {arr.dtype}",
                                      feature=name, episode=episode)
    if arr.ndim == 1 + len(shape) + 1 and shape == () and arr.shape[1:] == (1,):
        arr = arr[:, 0]  # scalars given as (T, 1)
    if arr.ndim != 1 + len(shape) or arr.shape[1:] != shape:
        raise SchemaMismatchError(f"feature {name!r}: expected frames of shape (T, {', '.join(map(str, shape))}), "
                                  f"got {arr.shape}".replace("(T, )", "(T,)"), feature=name, episode=episode)
    if spec.kind != "image" or depth:
        check_assignable(name, arr, spec.dtype, episode)
    return arr.astype(spec.dtype, copy=False)


def check_assignable(name: str, arr: np.ndarray, dtype: np.dtype, episode: int) -> None:
    """Values may become the stored dtype only without changing: integers and bools anywhere they fit, floats
    into floats (no overflow), never floats into integers or bools, never other kinds."""
    src, dst = arr.dtype.kind, dtype.kind
    allowed = src == "b" or (src in "iu" and dst in "biuf") or (src == "f" and dst == "f")
    if not allowed:
        raise SchemaMismatchError(f"feature {name!r}, episode {episode}: {arr.dtype} values cannot be stored as "
                                  f"{dtype}", feature=name, episode=episode)
    check_fits(name, arr, dtype, episode)


def stats_of_stored(spec: ArraySpec, feature: Mapping[str, Any] | None, name: str = ""
                    ) -> Callable[[np.ndarray], dict] | None:
    """How one episode's LeRobot stats of feature ``name`` are computed from its stored frames (None: a text
    feature, which has none): LeRobot's way, a depth map's in the unit it was recorded in (a video's codes
    dequantized to it, millimetres when it is not known), a float camera's as LeRobot publishes it (an image:
    :func:`~lerobot_zarr.lerobot.format.float_image_stats`)."""
    if spec.is_text:
        return None
    if is_float_image(name, spec):
        return partial(float_image_stats, name=name)
    if spec.kind in CAMERA_DTYPES and isinstance(feature, Mapping) and is_depth_feature(feature) \
            and spec.dtype != np.uint8:
        if spec.kind != "video":
            return lambda values: episode_stats(values, spec.kind, depth=True)
        unit = (feature.get("info") or {}).get("depth_unit") if isinstance(feature.get("info"), Mapping) else None
        to_unit = DepthOutput(feature, spec.kind, unit if unit in DEPTH_UNITS else "mm")
        return lambda values: episode_stats(to_unit(values), spec.kind, depth=True)
    return lambda values: episode_stats(values, spec.kind)


def content_hash(spec: ArraySpec, values: Any, start: int = 0) -> int:
    """The content hash of an episode's stored rows of a feature (what the store records; ``start``: the hash of
    rows before these, to go on from)."""
    if spec.is_text:
        if start:
            raise ValueError("a text array's hash is taken over all its rows at once")
        return text_crc(values)
    return crc32c(np.ascontiguousarray(values), start)


def _text_frames(name: str, value: Any, kind: str, episode: int) -> np.ndarray:
    values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else None
    if values is None:
        raise SchemaMismatchError(f"feature {name!r}, episode {episode}: {kind} frames are a sequence of values, got "
                                  f"{type(value).__name__}", feature=name, episode=episode)
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        if kind == "string":
            if not isinstance(v, str):
                raise SchemaMismatchError(f"feature {name!r}, episode {episode}: frame {i} is {type(v).__name__}, "
                                          f"not str", feature=name, episode=episode)
            out[i] = v
            continue
        try:
            out[i] = json.dumps(language_value(name, v), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SchemaMismatchError(f"feature {name!r}, episode {episode}: frame {i} is not a language value "
                                      f"(lists of row dicts, JSON values) ({exc})", feature=name, episode=episode) \
                from None
    return out


class EpisodeFrames:
    """One feature's frames of an episode being extended: its committed rows (a memory map) then the new ones,
    without copying the committed rows for what needs only some of them (image stats take a sample of frames)."""

    def __init__(self, head: np.ndarray | None, new: np.ndarray):
        self.head, self.new = head, new
        self.before = 0 if head is None else len(head)

    __len__ = lambda self: self.before + len(self.new)  # noqa: E731
    shape = property(lambda self: (len(self), *self.new.shape[1:]))

    def __getitem__(self, key: np.ndarray | tuple) -> np.ndarray:
        """Frames ``key`` (an index array, or one followed by slices of each frame: only those pixels read)."""
        index, rest = (np.asarray(key[0]), tuple(key[1:])) if isinstance(key, tuple) else (np.asarray(key), ())
        old = index < self.before
        new = self.new[(index[~old] - self.before, *rest)]
        if not old.any():
            return new
        out = np.empty((len(index), *new.shape[1:]), dtype=self.new.dtype)
        out[old] = self.head[(index[old], *rest)]
        out[~old] = new
        return out

    def numeric(self) -> np.ndarray:
        return self.new if self.head is None else np.concatenate([self.head, self.new])


def checked_camera_stats(given: Mapping[str, Mapping[str, Any]] | None, specs: Mapping[str, ArraySpec],
                         kept: Collection[str], frames: int) -> dict[str, dict[str, np.ndarray]]:
    """A caller's uint8 cameras' LeRobot stats of an episode of ``frames`` frames (``add_episode(camera_stats=)``),
    checked as LeRobot's ``image_stats`` would have made them: every stat, per channel (C, 1, 1) in [0, 1], ``count``
    the frames LeRobot samples; ArgumentError naming the feature otherwise, or for an entry that is not a uint8
    camera of the store (``specs``). Only those whose stats a commit keeps (``kept``) are returned."""
    out = {}
    for name, stats in (given or {}).items():
        spec = specs.get(name)
        if spec is None or spec.kind not in CAMERA_DTYPES or spec.dtype != np.uint8:
            raise ArgumentError(f"camera_stats[{name!r}]: not a uint8 camera of this store")
        if name not in kept:
            continue
        channels = spec.frame_shape[-1]
        try:
            got = {k: np.asarray(stats[k], dtype=np.float64) for k in STAT_NAMES}
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"camera_stats[{name!r}]: needs numeric {', '.join(STAT_NAMES)} ({exc})") from None
        values = [v for k, v in got.items() if k != "count"]
        if any(v.shape != (channels, 1, 1) or not np.all((v >= 0) & (v <= 1)) for v in values):
            raise ArgumentError(f"camera_stats[{name!r}]: each stat must be of shape ({channels}, 1, 1) in [0, 1]")
        if got["count"].reshape(-1).tolist() != [sample_count(frames)]:
            raise ArgumentError(f"camera_stats[{name!r}]: count must be [{sample_count(frames)}] (the frames LeRobot "
                                f"samples of {frames}), got {got['count'].tolist()}")
        out[name] = {k: np.asarray(stats[k]) for k in STAT_NAMES}
    return out


def task_indices(known: Sequence[str], task: str | Sequence[str], n: int) -> tuple[np.ndarray, list[str]]:
    """Each of ``n`` frames' task index for ``task`` (one for every frame, or one per frame), and the tasks then
    (``known`` ones, then new ones in the order they come)."""
    tasks = list(known)
    if isinstance(task, str) and task:  # one task for every frame (an RL episode's): no loop over the frames
        if task not in tasks:
            tasks.append(task)
        return np.full(n, tasks.index(task), dtype=np.int64), tasks
    per_frame = [task] * n if isinstance(task, str) else list(task) if isinstance(task, Sequence) else None
    if per_frame is None or len(per_frame) != n or not all(isinstance(t, str) and t for t in per_frame):
        raise ArgumentError(f"task must be a non-empty string or one per frame ({n}), got {task!r:.200}")
    lookup = {t: i for i, t in enumerate(tasks)}
    out = np.empty(n, dtype=np.int64)
    for i, t in enumerate(per_frame):
        if t not in lookup:
            lookup[t] = len(tasks)
            tasks.append(t)
        out[i] = lookup[t]
    return out, tasks
