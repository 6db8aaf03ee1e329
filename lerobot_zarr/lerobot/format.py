"""LeRobot's dataset format: its constants, path templates and ``features`` entries, and its statistics.

Numpy only (no pyarrow): the reader (:mod:`lerobot_zarr.lerobot.source`), the writers of LeRobot's files
(:mod:`lerobot_zarr.lerobot.writers`, which also holds the parquet encodings) and the store's writer build on it.
"""

from __future__ import annotations

import json
import re
import string
import warnings
from collections.abc import Collection
from typing import Any

import numpy as np

from ..cameras.video import TOLERANCE_S
from ..errors import LeRobotZarrWarning

__all__ = ["QUANTILES", "STAT_NAMES", "DEFAULT_FEATURES", "CAMERA_DTYPES", "NUMERIC_DTYPES", "TEXT_DTYPES",
           "LANGUAGE_PERSISTENT", "LANGUAGE_EVENTS", "language_value", "V3_DATA_PATH", "V3_VIDEO_PATH",
           "V21_DATA_PATH", "V21_VIDEO_PATH", "CHUNKS_SIZE", "check_path_template", "data_file_rel", "video_file_rel",
           "default_features", "video_info", "per_episode_stats", "aggregate_stats", "stats_json", "episode_stats",
           "episodes_stats", "image_stats", "image_histogram", "histogram_dtype", "sampled_histogram",
           "histogram_stats", "depth_map_stats", "bad_timestamp_steps", "sample_count", "merge_episode_stats"]

CHUNKS_SIZE = 1000
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
STAT_NAMES = ("min", "max", "mean", "std", "count", *QUANTILES)
# The five features lerobot adds to every dataset, in its column order.
DEFAULT_FEATURES = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}
# LeRobot's dtypes of camera features (frames of shape (H, W, C), uint8); also the store's kinds of camera arrays.
CAMERA_DTYPES = frozenset({"image", "video"})
# LeRobot's dtypes of features holding text: a ``str`` per frame, or its language columns (a list of row dicts per
# frame); the store's kinds of text arrays (variable-length UTF-8 per frame)
TEXT_DTYPES = frozenset({"string", "language"})
LANGUAGE_PERSISTENT = "language_persistent"  # LeRobot's language columns, and the fields of their rows
LANGUAGE_EVENTS = "language_events"
_ROW_FIELDS = {LANGUAGE_PERSISTENT: ("role", "content", "style", "timestamp", "camera", "tool_calls"),
               LANGUAGE_EVENTS: ("role", "content", "style", "camera", "tool_calls")}
# dtypes of numeric features: raw bytes that read the same everywhere (no platform-sized longdouble)
NUMERIC_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                            "float16", "float32", "float64"})
V3_DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
V3_VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
V21_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V21_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
_INT_SPEC = re.compile(r"0?\d{0,2}d")  # "", "d", "03d", "06d": a plain integer of at most 99 digits


def check_path_template(template: object, fields: Collection[str]) -> str:
    """An info.json path template (``data_path``, ``video_path``) checked before it is ever formatted: a string
    whose replacement fields are only ``fields`` (LeRobot's names), by plain name (no attribute access or
    indexing), without conversion, and with a plain integer format spec of bounded width (``{chunk_index:03d}``)
    for the integer fields, none for ``video_key``. Raises ``ValueError`` saying what is wrong."""
    if not isinstance(template, str) or not template or len(template) > 1024:
        raise ValueError(f"{template!r:.80} is not a path template")
    for _, name, spec, conversion in string.Formatter().parse(template):  # ValueError on unbalanced braces
        if name is None:
            continue
        if name not in fields:
            raise ValueError(f"field {{{name}}} is not one of {sorted(fields)}")
        if conversion is not None:
            raise ValueError(f"field {{{name}}} has a conversion (!{conversion})")
        if spec and (name == "video_key" or not _INT_SPEC.fullmatch(spec)):
            raise ValueError(f"field {{{name}}} has format spec {spec!r:.40}; only plain integer specs like '03d' "
                             f"are allowed" + (", none for video_key" if name == "video_key" else ""))
    return template


def language_value(name: str, value: Any) -> Any:
    """A language column's value of one frame (Arrow's Python value) as LeRobot returns it: its ``datasets`` cast
    to LeRobot's row schema keeps the fields of the column's rows in their order (a missing one None, another one
    dropped), the persistent rows' ``timestamp`` as float32, and ``tool_calls`` as Python objects (JSON text
    parsed). Columns of other names keep their value."""
    fields = _ROW_FIELDS.get(name)
    if fields is None or value is None:
        return value
    if not isinstance(value, list):
        raise ValueError(f"expected a list of rows, got {type(value).__name__}")
    rows = []
    for row in value:
        if row is None:
            rows.append(None)
            continue
        if not isinstance(row, dict):
            raise ValueError(f"expected rows as structs, got {type(row).__name__}")
        out = {field: row.get(field) for field in fields}
        if out.get("timestamp") is not None:
            out["timestamp"] = float(np.float32(out["timestamp"]))
        calls = out["tool_calls"]
        if calls is not None:
            if not isinstance(calls, list):
                raise ValueError(f"tool_calls must be a list, got {type(calls).__name__}")
            out["tool_calls"] = [json.loads(c) if isinstance(c, str) else c for c in calls]
        rows.append(out)
    return rows


def data_file_rel(number: int) -> str:
    """Path of the ``number``-th v3.0 data file (0, 1, ...): ``data/chunk-CCC/file-FFF.parquet``."""
    chunk, file = divmod(number, CHUNKS_SIZE)
    return V3_DATA_PATH.format(chunk_index=chunk, file_index=file)


def video_file_rel(key: str, chunk: int, file: int) -> str:
    """Path of a camera's v3.0 video file."""
    return V3_VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)


def default_features() -> dict[str, dict]:
    """The ``features`` entries of the five columns LeRobot adds to every dataset, in its order."""
    return {key: {"dtype": dtype, "shape": [1], "names": None} for key, dtype in DEFAULT_FEATURES.items()}


def video_info(height: int, width: int, channels: int, fps: float, pix_fmt: str = "yuv420p") -> dict:
    """The ``info`` of a video feature in info.json, for LeRobot's AV1 encoding."""
    return {"video.height": height, "video.width": width, "video.codec": "av1", "video.pix_fmt": pix_fmt,
            "video.is_depth_map": False, "video.fps": fps, "video.channels": channels, "has_audio": False}


def per_episode_stats(values: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """Per-episode min, max, mean, std, count and quantiles of ``values`` (frames of all episodes in order).

    As LeRobot 0.6.1 reduces a numeric feature: over every axis but the last (a frame of shape (2, 3) gives stats of
    shape (3,), over its 2 rows of each frame; ``count`` stays the number of frames), the values promoted as
    LeRobot promotes them (``numpy.result_type(dtype, float32)``: integers and bools become floats, min and max too;
    float32 min and max stay float32; not where every episode has fewer than 2 rows: LeRobot's stats of a single
    row keep its dtype). Results have shape (n_episodes, values.shape[-1]), (n_episodes, 1) for 1-D
    ``values`` and for count; the others are float64. Quantiles interpolate like ``numpy.quantile``.
    """
    n_episodes = len(lengths)
    width = values.shape[-1] if values.ndim > 1 else 1
    per_frame = int(np.prod(values.shape[1:-1], dtype=np.int64)) if values.ndim > 2 else 1
    flat = values.reshape(-1, width)  # LeRobot's rows: every axis but the last
    counts = lengths
    lengths = lengths * per_frame
    flat = _promoted(flat, lengths)
    starts = np.cumsum(lengths) - lengths
    episode_of_row = np.repeat(np.arange(n_episodes), lengths)
    as_float = flat.astype(np.float64)
    mean = np.add.reduceat(as_float, starts, axis=0) / lengths[:, None]
    variance = np.add.reduceat((as_float - mean[episode_of_row]) ** 2, starts, axis=0) / lengths[:, None]
    stats = {
        "min": np.minimum.reduceat(flat, starts, axis=0),
        "max": np.maximum.reduceat(flat, starts, axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
    }
    for start, stop in zip(starts.tolist(), (starts + lengths).tolist(), strict=True):
        as_float[start:stop].sort(axis=0)
    for name, q in QUANTILES.items():
        position = q * (lengths - 1)
        below = np.floor(position).astype(np.int64)
        above = np.minimum(below + 1, lengths - 1)
        fraction = (position - below)[:, None]
        low, high = as_float[starts + below], as_float[starts + above]
        stats[name] = low + (high - low) * fraction
    result = {name: array.reshape(n_episodes, width) for name, array in stats.items()}
    result["count"] = counts.reshape(n_episodes, 1).astype(np.int64)
    return {name: result[name] for name in STAT_NAMES}


def _promoted(rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``rows`` as LeRobot 0.6.1 computes stats of them: promoted to ``result_type(dtype, float32)``, unless every
    episode has fewer than 2 rows (its ``_compute_basic_stats`` then takes min and max of the values as they are)."""
    if len(lengths) and (np.asarray(lengths) < 2).all():
        return rows
    return rows.astype(np.result_type(rows.dtype, np.float32), copy=False)


def sample_count(n: int) -> int:
    """How many of an episode's ``n`` frames LeRobot samples for image stats (their ``count``)."""
    return max(min(n, 100), min(int(n ** 0.75), 10_000))


def _sample_indices(n: int) -> np.ndarray:
    """LeRobot's choice of frames for image stats: about n**0.75 evenly spaced frames (at least 100 or all)."""
    return np.round(np.linspace(0, n - 1, sample_count(n))).astype(np.int64)


def _sampled(frames: Any) -> np.ndarray:
    """LeRobot's sample of camera frames (T, H, W, C): some frames, downsampled past 300 pixels; only the pixels
    sampled are read (``frames``: an array, a memory map, or anything indexed as one)."""
    height, width = frames.shape[1:3]
    index = _sample_indices(len(frames))
    step = _step(height, width)
    return frames[index, ::step, ::step] if step > 1 else frames[index]


def _step(height: int, width: int) -> int:
    """LeRobot's downsampling of camera frames for their stats: every ``step``-th row and column (1: none)."""
    if max(height, width) >= 300:
        return int(width / 150) if width > height else int(height / 150)
    return 1


def image_histogram(frame: np.ndarray) -> np.ndarray:
    """One uint8 camera frame (H, W, C) as :func:`image_stats` samples it: per channel, the count of each of the 256
    values (C, 256) in its downsampled pixels. The sum over an episode's frames that LeRobot samples (its
    :func:`sampled_histogram`) gives :func:`image_stats` exactly, without reading the frames again."""
    step = _step(*frame.shape[:2])
    return _channel_counts(frame[::step, ::step])


def histogram_dtype(height: int, width: int) -> np.dtype:
    """The smallest unsigned dtype holding every count of :func:`image_histogram` of a (``height``, ``width``)
    frame (its downsampled pixels': uint16 for 480x640, whose 120x160 pixels are counted)."""
    step = _step(height, width)
    pixels = -(-height // step) * -(-width // step)
    return np.dtype(np.uint16 if pixels <= np.iinfo(np.uint16).max else np.uint32)


def _channel_counts(pixels: np.ndarray) -> np.ndarray:
    """Per channel (the last axis) of uint8 ``pixels``, the count of each of the 256 values (C, 256)."""
    flat = pixels.reshape(-1, pixels.shape[-1])
    return np.stack([np.bincount(flat[:, c], minlength=256) for c in range(flat.shape[1])])


def sampled_histogram(histograms: np.ndarray) -> tuple[np.ndarray, int]:
    """The histogram (C, 256) of LeRobot's sample of an episode's frames, from each frame's
    (:func:`image_histogram`, stacked: T, C, 256), and how many frames it sampled."""
    index = _sample_indices(len(histograms))
    return histograms[index].sum(axis=0), len(index)


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 (T, H, W, C) frames scaled to [0, 1], shape (C, 1, 1), as LeRobot computes them
    (on its sample of frames, downsampled past 300 pixels; ``count`` is the number of frames sampled).

    Exact for uint8 and fast: every statistic comes from one 256-bin histogram per channel."""
    return _pixel_stats(_sampled(frames))


def is_float_image(name: str, spec: Any) -> bool:
    """Whether a stored feature (``spec``: an ``ArraySpec``) is a float camera LeRobot publishes as an image: a key
    naming an image (LeRobot's ``aggregate_stats`` takes only a camera's per-channel stats for those), float frames
    of 1 or 3 channels first (its replay buffer's ``guess_feature_info`` makes them ``image`` features)."""
    return ("image" in name and spec.kind not in CAMERA_DTYPES and np.dtype(spec.dtype).kind == "f"
            and len(spec.frame_shape) == 3 and spec.frame_shape[0] in (1, 3))


def float_image_stats(frames: np.ndarray, name: str = "") -> dict[str, np.ndarray]:
    """Stats of float (T, C, H, W) camera frames (of feature ``name``) as LeRobot 0.6.1 publishes such a camera
    (its replay buffer's ``to_lerobot_dataset``: an ``image`` feature whose PNG pixels are ``(v * 255)`` truncated
    to uint8): :func:`image_stats` of those pixels, on LeRobot's sample of frames, shape (C, 1, 1). LeRobot's
    writer refuses values outside [0, 1] (or not finite); here they count as clipped to it (0 for NaN), with a
    warning."""
    sample = np.asarray(_sampled(np.moveaxis(frames, 1, -1)), dtype=np.float32)  # (only the sampled frames read)
    values = np.clip(sample, 0, 1)
    values[np.isnan(values)] = 0
    if not np.array_equal(values, sample):
        warnings.warn(f"feature {name!r}: float camera values outside [0, 1] (or NaN), which LeRobot's writer "
                      f"refuses: its stats count them clipped to [0, 1] (NaN as 0)", LeRobotZarrWarning, stacklevel=2)
    return _pixel_stats((values * np.float32(255)).astype(np.uint8))


def _pixel_stats(sample: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`image_stats` of LeRobot's sample of uint8 (T, H, W, C) frames."""
    return histogram_stats(_channel_counts(sample), len(sample))


def histogram_stats(histograms: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """:func:`image_stats` of the sampled pixels whose per-channel histograms (C, 256) are ``histograms``, of
    ``frames`` frames."""
    channels = len(histograms)
    levels = np.arange(256, dtype=np.float64)
    out = {name: np.empty(channels) for name in STAT_NAMES if name != "count"}
    for c in range(channels):
        hist = histograms[c]
        n = int(hist.sum())
        seen = np.flatnonzero(hist)
        cumulative = np.cumsum(hist)
        mean = hist @ levels / n
        out["min"][c], out["max"][c], out["mean"][c] = seen[0], seen[-1], mean
        out["std"][c] = np.sqrt(hist @ (levels - mean) ** 2 / n)
        for name, q in QUANTILES.items():
            position = q * (n - 1)
            below = int(np.floor(position))
            low = np.searchsorted(cumulative, below, side="right")
            high = np.searchsorted(cumulative, min(below + 1, n - 1), side="right")
            out[name][c] = low + (high - low) * (position - below)
    stats = {name: (values / 255.0).reshape(channels, 1, 1) for name, values in out.items()}
    stats["count"] = np.array([frames])
    return {name: stats[name] for name in STAT_NAMES}


def depth_map_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Stats of depth frames (T, H, W, 1) in their unit, as LeRobot computes a depth camera's: on its sample of
    frames (downsampled past 300 pixels), not scaled, shape (1, 1, 1); ``count`` is the number of frames sampled."""
    sample = _sampled(frames)
    flat = sample.reshape(-1, 1).astype(np.float64)
    stats = per_episode_stats(flat, np.array([len(flat)]))
    out = {name: value.reshape(1, 1, 1) for name, value in stats.items() if name != "count"}
    out["count"] = np.array([len(sample)])
    return {name: out[name] for name in STAT_NAMES}


def episode_stats(values: np.ndarray, kind: str, depth: bool = False) -> dict[str, np.ndarray]:
    """One episode's stats of one feature, shaped like LeRobot's (images: :func:`image_stats`; depth maps, in
    their unit: :func:`depth_map_stats`)."""
    if depth:
        return depth_map_stats(values)
    if kind in CAMERA_DTYPES:
        return image_stats(values)
    return {k: v[0] for k, v in per_episode_stats(values, np.array([len(values)])).items()}


def episodes_stats(features: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """:func:`episode_stats` of several numeric features of one episode (the same number of frames each), equal to
    it bit for bit (:func:`stacked_stats` of one episode)."""
    if not features:
        return []
    return [{k: v[0] for k, v in stats.items()} for stats in stacked_stats(features, np.array([len(features[0])]))]


def stacked_stats(features: list[np.ndarray], lengths: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Per-episode stats of several numeric features over several episodes (``lengths``: the frames of each, in
    order; the features' frames of all episodes), each stat stacked (row i: episode i's, bit for bit
    :func:`episode_stats` of its frames): one pass over the features' columns side by side (a feature's columns are
    computed independently of the others'; this saves numpy's per-call cost, which dominates for RL episodes'
    dozen small features). Features of more than one axis per frame (reduced over all but their last) are computed
    alone; where some episodes have one frame (LeRobot keeps such an episode's dtype) each episode is computed
    alone, and rows of mixed dtypes are promoted."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) > 1 and (lengths < 2).any():
        bounds = (np.cumsum(lengths) - lengths).tolist()
        rows = [stacked_stats([v[s:s + n] for v in features], np.array([n]))
                for s, n in zip(bounds, lengths.tolist(), strict=True)]
        return [{k: np.concatenate([r[i][k] for r in rows]) for k in STAT_NAMES} for i in range(len(features))]
    out: list[dict[str, np.ndarray] | None] = [per_episode_stats(v, lengths) if v.ndim > 2 else None
                                               for v in features]
    flats = {i: v.reshape(len(v), -1) for i, v in enumerate(features) if out[i] is None}
    merged = per_episode_stats(np.concatenate([f.astype(np.float64) for f in flats.values()], axis=1), lengths) \
        if flats else {}
    starts = np.cumsum(lengths) - lengths
    at = 0
    for i, flat in flats.items():
        flat = _promoted(flat, lengths)
        width = flat.shape[1]
        stats = {name: merged[name][:, at:at + width] for name in STAT_NAMES if name != "count"}
        stats["min"] = np.minimum.reduceat(flat, starts, axis=0)
        stats["max"] = np.maximum.reduceat(flat, starts, axis=0)
        stats["count"] = merged["count"]
        out[i] = {name: stats[name] for name in STAT_NAMES}
        at += width
    return out


def aggregate_stats(stats: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Dataset stats from per-episode stats: count-weighted merge (parallel variance, weighted quantiles; the
    quantiles only where the episodes have them)."""
    counts = stats["count"][:, 0]
    weights = (counts / counts.sum()).reshape(-1, *[1] * (stats["mean"].ndim - 1))
    mean = (weights * stats["mean"]).sum(axis=0)
    variance = (weights * (stats["std"] ** 2 + (stats["mean"] - mean) ** 2)).sum(axis=0)
    merged = {
        "min": stats["min"].min(axis=0),
        "max": stats["max"].max(axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": np.array([counts.sum()]),
    }
    merged.update({name: (weights * stats[name]).sum(axis=0) for name in QUANTILES if name in stats})
    return merged


def stats_json(stats: dict[str, np.ndarray], row: int | None = None) -> dict[str, list]:
    """Stats of one episode (``row``) or of the dataset as JSON-ready nested lists."""
    return {name: (array if row is None else array[row]).tolist() for name, array in stats.items()}


def bad_timestamp_steps(ts: np.ndarray, fps: float) -> np.ndarray:
    """Positions ``i`` where ``ts[i + 1] - ts[i]`` is not 1/fps within LeRobot's ``tolerance_s`` (plus the rounding
    of the stored float type, which float32 makes coarser than 1e-4 s past ~2000 s); NaN steps are bad too."""
    ts = np.asarray(ts).reshape(-1)
    if len(ts) < 2:
        return np.zeros(0, dtype=np.int64)
    step = np.diff(ts.astype(np.float64))
    slack = TOLERANCE_S + (2 * np.spacing(np.abs(ts[1:])).astype(np.float64) if ts.dtype.kind == "f" else 0.0)
    return np.flatnonzero(~(np.abs(step - 1.0 / fps) <= slack))


def merge_episode_stats(episode_stats: list[dict]) -> dict:
    """Dataset stats from per-episode stats (v2.1 ``episodes_stats.jsonl``), merged the way LeRobot does."""
    merged: dict[str, dict] = {}
    for key in sorted({k for s in episode_stats for k in s}):
        rows = [s[key] for s in episode_stats if key in s]
        stacked = {name: np.stack([np.asarray(r[name], dtype=np.int64 if name == "count" else np.float64)
                                   for r in rows])
                   for name in STAT_NAMES if name == "count" or all(name in r for r in rows)}
        stacked["count"] = stacked["count"].reshape(len(rows), -1)[:, :1]
        if stacked["count"].sum() > 0:
            merged[key] = stats_json(aggregate_stats(stacked))
    return merged
