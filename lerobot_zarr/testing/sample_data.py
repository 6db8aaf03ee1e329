"""Synthetic LeRobot datasets for the README demo, the tests and the benchmarks.

:func:`write_sample_dataset` writes a dataset in LeRobot's v3.0 or v2.1 layout that looks like what lerobot itself
writes: same folders and file names, same ``info.json`` keys, same parquet column names, types and row groups, same
episode table and statistics. Frame data is random but reproducible (same arguments give identical bytes), numeric
columns are built with vectorised numpy, so a million frames take a few seconds.
"""

from __future__ import annotations

import io
import json
import math
import os
import pathlib
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from ..lerobot.format import (
    CHUNKS_SIZE,
    DEFAULT_FEATURES,
    STAT_NAMES,
    V21_DATA_PATH,
    V21_VIDEO_PATH,
    default_features,
    per_episode_stats,
    stats_json,
    video_file_rel,
    video_info,
)
from ..lerobot.writers import (
    DataFiles,
    huggingface_metadata,
    nested_list,
    pandas_metadata,
    write_episodes_table,
    write_info,
    write_json,
    write_stats,
    write_tasks,
)

__all__ = ["write_sample_dataset", "camera_frames", "note_of", "language_of", "depth_image", "depth_codes",
           "NOTE_KEY", "DEPTH_UNIT"]

DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200
ROBOT_TYPE = "synthetic_arm"
DEFAULT_LENGTHS = (20, 60)
GRID_KEY = "observation.grid"
GRID_SHAPE = (3, 4)
NOTE_KEY = "observation.note"  # the string feature of text_features=True
DEPTH_UNIT = "mm"  # depth images are uint16 millimetres, depth videos 12-bit codes of LeRobot's default quantizer
_WORDS = ("", "grasp", "déplacer → ☕")


def note_of(episode: int, frame: int) -> str:
    """The ``observation.note`` string of a frame (text_features=True): repeated and unique values, empty ones."""
    return f"episode {episode} frame {frame}" if frame % 2 == 0 else _WORDS[(episode + frame) % 3]


def language_of(column: str, episode: int, frame: int) -> list[dict]:
    """A frame's value of ``language_persistent`` or ``language_events`` (text_features=True), as LeRobot gives it:
    the episode's persistent rows on every frame, events on frame 1 only (an interjection and a spoken tool call)."""
    if column == "language_persistent":
        return [{"role": "assistant", "content": f"plan of episode {episode}", "style": "plan", "timestamp": 0.0,
                 "camera": None, "tool_calls": None},
                {"role": "assistant", "content": "reach the cup", "style": "subtask", "timestamp": 0.0,
                 "camera": None, "tool_calls": None}]
    if frame != 1:
        return []
    return [{"role": "user", "content": "faster please", "style": "interjection", "camera": None, "tool_calls": None},
            {"role": "assistant", "content": None, "style": None, "camera": None,
             "tool_calls": [{"function": {"arguments": {"text": f"ok {episode}"}, "name": "say"}, "type": "function"}]}]


def depth_image(episode: int, frame: int, shape: Sequence[int]) -> np.ndarray:
    """A depth image's uint16 millimetres (depth_keys), (H, W, 1)."""
    height, width, _ = shape
    y, x = np.mgrid[0:height, 0:width]
    return ((300 + 97 * y + 41 * x + 13 * frame + 211 * episode) % 9000 + 20).astype(np.uint16)[..., None]


def depth_codes(key_number: int, episode: int, frame: int, shape: Sequence[int]) -> np.ndarray:
    """A depth video frame's 12-bit codes (depth_video_keys), (H, W, 1) uint16."""
    height, width, _ = shape
    y, x = np.mgrid[0:height, 0:width]
    return ((64 * y + 16 * x + 3 * frame + 101 * episode + 7 * key_number) % 4096).astype(np.uint16)[..., None]



def write_sample_dataset(
    path: str | os.PathLike,
    *,
    version: Literal["v3.0", "v2.1"] = "v3.0",
    n_episodes: int = 6,
    lengths: Sequence[int] | tuple[int, int] | None = None,
    fps: int = 30,
    seed: int = 0,
    state_dim: int = 6,
    action_dim: int = 6,
    vector_type: Literal["fixed_size_list", "list"] = "fixed_size_list",
    image_keys: Sequence[str] = (),
    image_shape: tuple[int, int, int] = (24, 32, 3),
    image_format: Literal["png", "jpeg"] = "png",
    extra_nd: bool = False,
    video_keys: Sequence[str] = (),
    write_videos: bool = False,
    tasks: Sequence[str] = ("pick the cube", "place the cube"),
    episodes_per_file: int | None = None,
    row_group_per_episode: bool = True,
    write_stats: bool = True,
    episodes_row_group: int | None = None,
    text_features: bool = False,
    depth_keys: Sequence[str] = (),
    depth_video_keys: Sequence[str] = (),
    episode_tasks: bool = True,
) -> pathlib.Path:
    """Write a synthetic LeRobot dataset into the empty or missing folder ``path`` and return its path.

    Args:
        path: Dataset root; created if missing, must be empty if it exists.
        version: ``"v3.0"`` (data files holding many episodes) or ``"v2.1"`` (one data file per episode).
        n_episodes: Number of episodes.
        lengths: Frames per episode: a list of ``n_episodes`` ints, or a 2-tuple ``(lo, hi)`` giving an inclusive
            range the lengths are drawn from with ``seed`` (a 2-tuple is always a range). Default ``(20, 60)``.
        fps: Frames per second; ``timestamp = frame_index / fps``.
        seed: Seed of every random draw (lengths, vectors, images).
        state_dim: Size of the float32 vector ``observation.state``.
        action_dim: Size of the float32 vector ``action``.
        vector_type: ``"fixed_size_list"`` (lerobot's own files, with ``huggingface`` schema metadata) or
            ``"list"`` (pandas-written files: variable ``list<float>`` and pandas schema metadata).
        image_keys: Image features stored in the data parquet as ``struct<bytes: binary, path: string>``.
        image_shape: ``(height, width, channels)`` of the uint8 images; channels 1, 3 or 4.
        image_format: ``"png"`` (lossless) or ``"jpeg"``.
        extra_nd: Add the float32 feature ``observation.grid`` of shape (3, 4), stored as nested lists.
        video_keys: Features of dtype ``video`` declared in ``info.json``, of shape ``image_shape``.
        write_videos: Also write their mp4 files (AV1 with LeRobot's settings, needs PyAV): v3.0 concatenates
            the episodes of a data file per camera, v2.1 writes one file per episode. Otherwise no mp4 exists.
        tasks: Task strings; episode ``e`` performs ``tasks[e % len(tasks)]``. Only tasks in use are listed.
        episodes_per_file: v3.0 only: episodes per data file (``None``: all episodes in one file).
        row_group_per_episode: v3.0: one row group per episode (lerobot's way) or one per data file.
        write_stats: Write statistics (v3.0: ``meta/stats.json`` and ``stats/*`` episode columns; v2.1:
            ``meta/episodes_stats.jsonl``).
        episodes_row_group: v3.0: episodes per row group of ``meta/episodes`` (``None``: one row group). LeRobot's
            recorder writes 10 (it flushes its episode metadata every 10 episodes): with ``write_stats`` that is
            the layout of the datasets on the Hub.
        text_features: Add the ``string`` feature ``observation.note`` (:func:`note_of`) and LeRobot's language
            columns ``language_persistent`` / ``language_events`` as ``lerobot-annotate`` writes them
            (:func:`language_of`, ``tools`` in info.json).
        depth_keys: Depth ``image`` features (``is_depth_map``, ``depth_unit`` mm) of shape ``image_shape`` with one
            channel: uint16 TIFF images (:func:`depth_image`).
        depth_video_keys: Depth ``video`` features: with ``write_videos``, 12-bit HEVC (``gray12le``, lossless) of
            :func:`depth_codes`, LeRobot's default quantizer keys in info.json (v3.0 only).
        episode_tasks: v3.0: write the ``tasks`` column of ``meta/episodes`` (LeRobot's
            ``convert_image_to_video_dataset`` writes none).

    Raises:
        ValueError: An argument is invalid or ``path`` is a file or a non-empty folder.
    """
    root = pathlib.Path(path)
    _check_options(
        root, version, fps, seed, state_dim, action_dim, vector_type, image_keys, image_shape, image_format,
        video_keys, tasks, episodes_per_file,
    )
    if episodes_row_group is not None:
        _check_int("episodes_row_group", episodes_row_group, 1)
    lengths_rng, data_rng, image_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    episode_lengths = _episode_lengths(lengths_rng, n_episodes, lengths)
    used_tasks = list(tasks)[: min(len(tasks), n_episodes)]

    if (depth_video_keys and version != "v3.0") or set(depth_keys) & set(depth_video_keys):
        raise ValueError("depth_video_keys need version 'v3.0' and keys of their own")
    frames = _numeric_frames(data_rng, episode_lengths, fps, state_dim, action_dim, extra_nd, len(used_tasks))
    images = {
        key: _image_column(image_rng, episode_lengths, image_shape, image_format, key_number, write_stats)
        for key_number, key in enumerate(image_keys)
    }
    depth_shape = (*image_shape[:2], 1)
    images.update({key: _depth_column(episode_lengths, depth_shape, write_stats) for key in depth_keys})
    fixed = vector_type == "fixed_size_list"
    table = _frames_table(frames, images, fixed, version)
    if text_features:
        table = _with_text(table, episode_lengths)

    features = _features(state_dim, action_dim, extra_nd, image_keys, image_shape, video_keys, fps)
    features.update(_extra_features(text_features, depth_keys, depth_video_keys, depth_shape, fps))
    features = {**{k: v for k, v in features.items() if k not in DEFAULT_FEATURES},
                **{k: features[k] for k in DEFAULT_FEATURES}}
    episode_stats: dict[str, dict[str, np.ndarray]] = {}
    if write_stats:
        episode_stats = {key: per_episode_stats(values, episode_lengths) for key, values in frames.items()}
        episode_stats.update({key: stats for key, (_, stats) in images.items()})
        episode_stats = {key: episode_stats[key] for key in features if key in episode_stats}

    root.mkdir(parents=True, exist_ok=True)
    if version == "v3.0":
        _write_v3(
            root, table, episode_lengths, features, used_tasks, [*video_keys, *depth_video_keys], fps,
            episodes_per_file, row_group_per_episode, episode_stats, episodes_row_group, episode_tasks,
            {"tools": [_SAY_TOOL]} if text_features else None,
        )
    else:
        _write_v21(root, table, episode_lengths, features, used_tasks, video_keys, fps, episode_stats)
    if write_videos:
        _write_videos(root, version, video_keys, episode_lengths, image_shape, fps, episodes_per_file, seed)
        _write_depth_videos(root, depth_video_keys, episode_lengths, depth_shape, fps, episodes_per_file)
    return root


_SAY_TOOL = {"type": "function", "function": {"name": "say", "description": "Speak a short utterance.",
                                               "parameters": {"type": "object", "properties": {"text": {
                                                   "type": "string"}}, "required": ["text"]}}}


def _with_text(table: pa.Table, lengths: np.ndarray) -> pa.Table:
    """The table with ``observation.note`` after the vectors and the language columns last, as lerobot-annotate
    appends them (its writer lets Arrow infer their types from the rows)."""
    frames = [(e, i) for e, n in enumerate(lengths.tolist()) for i in range(n)]
    position = table.schema.get_field_index("timestamp")
    table = table.add_column(position, NOTE_KEY, pa.array([note_of(e, i) for e, i in frames], pa.string()))
    for column in ("language_persistent", "language_events"):
        table = table.append_column(column, pa.array([language_of(column, e, i) for e, i in frames]))
    return table


def _depth_column(lengths: np.ndarray, shape: tuple[int, int, int], with_stats: bool
                  ) -> tuple[pa.StructArray, dict[str, np.ndarray]]:
    """Depth images as LeRobot embeds them (uncompressed 16-bit TIFF in struct<bytes, path>) and their
    per-episode stats in millimetres, per channel (1, 1, 1), not scaled."""
    encoded, names, per_episode = [], [], []
    for episode, length in enumerate(lengths.tolist()):
        pixels = np.stack([depth_image(episode, i, shape) for i in range(length)])
        for i, frame in enumerate(pixels):
            buffer = io.BytesIO()
            Image.fromarray(frame[..., 0]).save(buffer, format="TIFF", compression="raw")
            encoded.append(buffer.getvalue())
            names.append(f"frame-{i:06d}.tiff")
        if with_stats:
            stats = per_episode_stats(pixels.reshape(-1, 1).astype(np.float64), np.array([pixels[..., 0].size]))
            stats = {name: values[0].reshape(1, 1, 1) for name, values in stats.items() if name != "count"}
            stats["count"] = np.array([length])
            per_episode.append(stats)
    column = pa.StructArray.from_arrays([pa.array(encoded, pa.binary()), pa.array(names, pa.string())],
                                        names=["bytes", "path"])
    return column, ({name: np.stack([s[name] for s in per_episode]) for name in STAT_NAMES} if per_episode else {})


def _extra_features(text: bool, depth_keys: Sequence[str], depth_video_keys: Sequence[str],
                    shape: tuple[int, int, int], fps: int) -> dict[str, dict]:
    from ..cameras.depth import Quantizer

    names = ["height", "width", "channels"]
    out: dict[str, dict] = {}
    if text:
        out[NOTE_KEY] = {"dtype": "string", "shape": [1], "names": None}
    for key in depth_keys:
        out[key] = {"dtype": "image", "shape": list(shape), "names": names,
                    "info": {"is_depth_map": True, "depth_unit": DEPTH_UNIT}}
    for key in depth_video_keys:
        info = {**video_info(*shape, fps, "gray12le"), "video.codec": "hevc", **Quantizer().info(),
                "is_depth_map": True, "depth_unit": DEPTH_UNIT}
        info.pop("video.is_depth_map")
        out[key] = {"dtype": "video", "shape": list(shape), "names": names, "info": info}
    if text:
        out.update({c: {"dtype": "language", "shape": [1], "names": None}
                    for c in ("language_persistent", "language_events")})
    return out


def _write_depth_videos(root: pathlib.Path, keys: Sequence[str], lengths: np.ndarray, shape: tuple[int, int, int],
                        fps: int, episodes_per_file: int | None) -> None:
    from ..cameras.video import VideoWriter

    n_episodes = len(lengths)
    per_file = episodes_per_file or n_episodes
    for key_number, key in enumerate(keys):
        for number in range(math.ceil(n_episodes / per_file)):
            path = root / video_file_rel(key, *divmod(number, CHUNKS_SIZE))
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = VideoWriter(path, fps, shape[1], shape[0], 1, depth=True)
            for e in range(number * per_file, min((number + 1) * per_file, n_episodes)):
                writer.add(np.stack([depth_codes(key_number, e, i, shape) for i in range(int(lengths[e]))]))
            writer.close()


def camera_frames(key_number: int, episode: int, length: int, shape: Sequence[int], seed: int) -> np.ndarray:
    """The frames written into a generated video: a moving gradient with a little noise (easy to encode)."""
    height, width, channels = shape
    rng = np.random.default_rng([seed, key_number, episode])
    y, x = np.mgrid[0:height, 0:width]
    t = np.arange(length)[:, None, None, None]
    phase = np.arange(channels)[None, None, None, :] * 40 + episode * 17 + key_number * 31
    frames = (x[None, :, :, None] * 3 + y[None, :, :, None] * 2 + t * 5 + phase) % 256
    frames = frames + rng.integers(0, 8, size=(length, height, width, channels))
    return np.clip(frames, 0, 255).astype(np.uint8)


def _write_videos(root: pathlib.Path, version: str, video_keys: Sequence[str], lengths: np.ndarray,
                  shape: Sequence[int], fps: int, episodes_per_file: int | None, seed: int) -> None:
    from ..cameras.video import VideoWriter

    height, width, channels = shape
    n_episodes = len(lengths)
    for key_number, key in enumerate(video_keys):
        if version == "v2.1":
            for e, length in enumerate(lengths.tolist()):
                path = root / V21_VIDEO_PATH.format(episode_chunk=e // CHUNKS_SIZE, video_key=key, episode_index=e)
                path.parent.mkdir(parents=True, exist_ok=True)
                writer = VideoWriter(path, fps, width, height, channels)
                writer.add(camera_frames(key_number, e, length, shape, seed))
                writer.close()
            continue
        per_file = episodes_per_file or n_episodes
        for number in range(math.ceil(n_episodes / per_file)):
            path = root / video_file_rel(key, *divmod(number, CHUNKS_SIZE))
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = VideoWriter(path, fps, width, height, channels)
            for e in range(number * per_file, min((number + 1) * per_file, n_episodes)):
                writer.add(camera_frames(key_number, e, int(lengths[e]), shape, seed))
            writer.close()


# --------------------------------------------------------------------------------------------- argument checks


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_int(name: str, value: object, minimum: int) -> None:
    if not _is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_names(name: str, values: Sequence[str]) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise ValueError(f"{name} must be a sequence of strings, got {values!r}")
    for value in values:
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must hold non-empty strings, got {value!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} has duplicates: {list(values)!r}")
    return list(values)


def _check_options(
    root: pathlib.Path,
    version: str,
    fps: int,
    seed: int,
    state_dim: int,
    action_dim: int,
    vector_type: str,
    image_keys: Sequence[str],
    image_shape: tuple[int, int, int],
    image_format: str,
    video_keys: Sequence[str],
    tasks: Sequence[str],
    episodes_per_file: int | None,
) -> None:
    """Raise ValueError for any invalid argument of write_sample_dataset except lengths."""
    if version not in ("v3.0", "v2.1"):
        raise ValueError(f"version must be 'v3.0' or 'v2.1', got {version!r}")
    _check_int("fps", fps, 1)
    _check_int("seed", seed, 0)
    _check_int("state_dim", state_dim, 1)
    _check_int("action_dim", action_dim, 1)
    if vector_type not in ("fixed_size_list", "list"):
        raise ValueError(f"vector_type must be 'fixed_size_list' or 'list', got {vector_type!r}")
    camera_keys = _check_names("image_keys", image_keys) + _check_names("video_keys", video_keys)
    taken = {"observation.state", "action", GRID_KEY, *DEFAULT_FEATURES}
    clashes = [key for key in camera_keys if key in taken] + [key for key in video_keys if key in image_keys]
    if clashes:
        raise ValueError(f"image/video keys clash with other features: {clashes!r}")
    if any("/" in key for key in camera_keys):
        raise ValueError(f"image/video keys cannot contain '/' (it separates episode column names): {camera_keys!r}")
    if (
        not isinstance(image_shape, Sequence)
        or len(image_shape) != 3
        or not all(_is_int(size) and size >= 1 for size in image_shape)
    ):
        raise ValueError(f"image_shape must be (height, width, channels) of positive ints, got {image_shape!r}")
    if image_shape[2] not in (1, 3, 4):
        raise ValueError(f"image channels must be 1, 3 or 4, got {image_shape[2]}")
    if image_format not in ("png", "jpeg"):
        raise ValueError(f"image_format must be 'png' or 'jpeg', got {image_format!r}")
    if image_format == "jpeg" and image_shape[2] == 4:
        raise ValueError("jpeg images cannot have 4 channels")
    if not _check_names("tasks", tasks):
        raise ValueError("tasks must hold at least one task")
    if episodes_per_file is not None:
        if version != "v3.0":
            raise ValueError("episodes_per_file applies to version 'v3.0' only")
        _check_int("episodes_per_file", episodes_per_file, 1)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"{root} must be an empty folder or not exist")


def _episode_lengths(
    rng: np.random.Generator, n_episodes: int, lengths: Sequence[int] | tuple[int, int] | None
) -> np.ndarray:
    """Validated frame count of every episode (int64 array of n_episodes values >= 1)."""
    _check_int("n_episodes", n_episodes, 1)
    if lengths is None:
        lengths = DEFAULT_LENGTHS
    if isinstance(lengths, tuple) and len(lengths) == 2:
        low, high = lengths
        if not (_is_int(low) and _is_int(high) and 1 <= low <= high):
            raise ValueError(f"lengths range (lo, hi) needs integers 1 <= lo <= hi, got {lengths!r}")
        return rng.integers(low, high, size=n_episodes, endpoint=True, dtype=np.int64)
    if isinstance(lengths, str) or not isinstance(lengths, (Sequence, np.ndarray)):
        raise ValueError(f"lengths must be a list of ints, a (lo, hi) tuple or None, got {lengths!r}")
    if len(lengths) != n_episodes or not all(_is_int(length) and length >= 1 for length in lengths):
        raise ValueError(f"lengths must hold {n_episodes} integers >= 1 (one per episode), got {lengths!r}")
    return np.asarray(lengths, dtype=np.int64)


# ------------------------------------------------------------------------------------------------- frame data


def _numeric_frames(
    rng: np.random.Generator,
    lengths: np.ndarray,
    fps: int,
    state_dim: int,
    action_dim: int,
    extra_nd: bool,
    n_tasks: int,
) -> dict[str, np.ndarray]:
    """All numeric columns, frames of all episodes in global index order, in lerobot's column order."""
    total = int(lengths.sum())
    episode_index = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    frame_index = np.arange(total, dtype=np.int64) - starts[episode_index]
    seconds = (frame_index / fps).astype(np.float32)

    def trajectory(dim: int) -> np.ndarray:
        """Per-episode offset + a sine per dimension + normal noise, as float32 (total, dim)."""
        offset = rng.normal(0.0, 1.0, (len(lengths), dim)).astype(np.float32)
        amplitude = rng.uniform(0.1, 0.5, dim).astype(np.float32)
        angular_speed = (2 * np.pi * rng.uniform(0.2, 1.5, dim)).astype(np.float32)
        values = np.sin(seconds[:, None] * angular_speed)
        values *= amplitude
        values += offset[episode_index]
        values += np.float32(0.02) * rng.standard_normal((total, dim), dtype=np.float32)
        values[0] = 0.0  # the robot starts at rest: an exact zero row
        return values

    frames = {"observation.state": trajectory(state_dim), "action": trajectory(action_dim)}
    if extra_nd:
        frames[GRID_KEY] = trajectory(math.prod(GRID_SHAPE)).reshape(total, *GRID_SHAPE)
    frames.update(
        timestamp=seconds,
        frame_index=frame_index,
        episode_index=episode_index,
        index=np.arange(total, dtype=np.int64),
        task_index=episode_index % n_tasks,
    )
    return frames


def _episode_images(
    rng: np.random.Generator, length: int, shape: tuple[int, int, int], episode: int, key_number: int
) -> np.ndarray:
    """uint8 frames (length, H, W, C): diagonal gradient stripes that move over time, plus noise."""
    height, width, channels = shape
    rows = np.arange(height)[:, None, None] * (255.0 / height)
    cols = np.arange(width)[None, :, None] * (255.0 / width)
    channel = np.arange(channels)[None, None, :]
    base = rows * (channel + 1) + cols * (channels - channel)
    shift = (np.arange(length) * 4 + episode * 29 + key_number * 67)[:, None, None, None]
    noise = rng.integers(0, 24, size=(length, *shape))
    return ((base + shift + noise) % 256).astype(np.uint8)


def _encode_image(frame: np.ndarray, image_format: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame[:, :, 0] if frame.shape[2] == 1 else frame).save(buffer, format=image_format.upper())
    return buffer.getvalue()


def _image_column(
    rng: np.random.Generator,
    lengths: np.ndarray,
    shape: tuple[int, int, int],
    image_format: str,
    key_number: int,
    with_stats: bool,
) -> tuple[pa.StructArray, dict[str, np.ndarray]]:
    """Encoded images of all frames as struct<bytes, path>, and their per-episode stats (empty without stats).

    Stats are per channel, shape (C, 1, 1), of the pixel values scaled to [0, 1], as lerobot stores them; like
    lerobot's they describe the pixels before encoding (JPEG alters them slightly).
    """
    extension = "png" if image_format == "png" else "jpg"
    channels = shape[2]
    encoded: list[bytes] = []
    names: list[str] = []
    per_episode: list[dict[str, np.ndarray]] = []
    for episode, length in enumerate(lengths.tolist()):
        pixels = _episode_images(rng, length, shape, episode, key_number)
        encoded.extend(_encode_image(frame, image_format) for frame in pixels)
        names.extend(f"frame_{frame_index:06d}.{extension}" for frame_index in range(length))
        if with_stats:
            pixel_values = pixels.reshape(-1, channels) / 255.0
            stats = per_episode_stats(pixel_values, np.array([len(pixel_values)]))
            stats = {name: values[0].reshape(channels, 1, 1) for name, values in stats.items() if name != "count"}
            stats["count"] = np.array([length])  # frames, not pixels
            per_episode.append(stats)
    column = pa.StructArray.from_arrays(
        [pa.array(encoded, pa.binary()), pa.array(names, pa.string())], names=["bytes", "path"]
    )
    if not per_episode:
        return column, {}
    return column, {name: np.stack([stats[name] for stats in per_episode]) for name in STAT_NAMES}


def _frames_table(
    frames: dict[str, np.ndarray],
    images: dict[str, tuple[pa.StructArray, dict[str, np.ndarray]]],
    fixed: bool,
    version: str,
) -> pa.Table:
    """Data table of all frames: vectors, images, then the five default columns, with schema metadata."""
    columns = {key: nested_list(values, fixed) for key, values in frames.items() if key not in DEFAULT_FEATURES}
    columns.update({key: column for key, (column, _) in images.items()})
    columns.update({key: pa.array(frames[key]) for key in DEFAULT_FEATURES})
    table = pa.table(columns)
    if fixed:
        return table.replace_schema_metadata({"huggingface": huggingface_metadata(table.schema, version)})
    return table.replace_schema_metadata({"pandas": pandas_metadata(table.schema, index_column=None)})


# ------------------------------------------------------------------------------------------------- statistics


# --------------------------------------------------------------------------------------------------- metadata


def _features(
    state_dim: int,
    action_dim: int,
    extra_nd: bool,
    image_keys: Sequence[str],
    image_shape: tuple[int, int, int],
    video_keys: Sequence[str],
    fps: int,
) -> dict[str, dict]:
    """The ``features`` entry of info.json, in data column order (video features before the defaults)."""
    features: dict[str, dict] = {
        "observation.state": {
            "dtype": "float32", "shape": [state_dim], "names": [f"joint_{i}" for i in range(state_dim)]
        },
        "action": {"dtype": "float32", "shape": [action_dim], "names": [f"joint_{i}" for i in range(action_dim)]},
    }
    if extra_nd:
        features[GRID_KEY] = {"dtype": "float32", "shape": list(GRID_SHAPE), "names": ["rows", "columns"]}
    camera_names = ["height", "width", "channels"]
    for key in image_keys:
        features[key] = {"dtype": "image", "shape": list(image_shape), "names": camera_names}
    for key in video_keys:
        features[key] = {"dtype": "video", "shape": list(image_shape), "names": camera_names,
                         "info": video_info(*image_shape, fps)}
    features.update(default_features())
    return features


def _write_jsonl(file: pathlib.Path, rows: list[dict]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def _write_v3(
    root: pathlib.Path,
    table: pa.Table,
    lengths: np.ndarray,
    features: dict[str, dict],
    tasks: list[str],
    video_keys: Sequence[str],
    fps: int,
    episodes_per_file: int | None,
    row_group_per_episode: bool,
    episode_stats: dict[str, dict[str, np.ndarray]],
    episodes_row_group: int | None = None,
    episode_tasks: bool = True,
    extra_info: dict | None = None,
) -> None:
    """Write the v3.0 layout: data files of many episodes, episodes parquet, tasks parquet, info and stats."""
    n_episodes = len(lengths)
    per_file = episodes_per_file or n_episodes
    starts = np.cumsum(lengths) - lengths
    file_number = np.arange(n_episodes) // per_file
    files = DataFiles(root)
    for number in range(int(file_number[-1]) + 1):
        first, stop = number * per_file, min((number + 1) * per_file, n_episodes)
        rows = table.slice(int(starts[first]), int(lengths[first:stop].sum()))
        files.new_file()
        if not row_group_per_episode:
            files.add(rows)
            continue
        for offset, length in zip((starts[first:stop] - starts[first]).tolist(), lengths[first:stop].tolist(),
                                  strict=True):
            files.add(rows.slice(offset, length))
    files.close()

    chunk_index, file_index = np.divmod(file_number, CHUNKS_SIZE)
    # Videos are split like the data files; each episode's time range restarts at 0 in a new file.
    start_in_file = starts - starts[file_number * per_file]
    write_episodes_table(
        root,
        tasks=[[tasks[e % len(tasks)]] for e in range(n_episodes)] if episode_tasks else None,
        lengths=lengths,
        data_files=(chunk_index, file_index),
        videos={key: (chunk_index, file_index, start_in_file / fps, (start_in_file + lengths) / fps)
                for key in video_keys},
        stats=episode_stats,
        row_group_size=episodes_row_group,
    )
    write_tasks(root, tasks)
    if episode_stats:
        write_stats(root, episode_stats)
    write_info(root, robot_type=ROBOT_TYPE, lengths=lengths, total_tasks=len(tasks), fps=fps, features=features,
               data_files_size_in_mb=DATA_FILES_SIZE_IN_MB, video_files_size_in_mb=VIDEO_FILES_SIZE_IN_MB,
               extra=extra_info)


def _write_v21(
    root: pathlib.Path,
    table: pa.Table,
    lengths: np.ndarray,
    features: dict[str, dict],
    tasks: list[str],
    video_keys: Sequence[str],
    fps: int,
    episode_stats: dict[str, dict[str, np.ndarray]],
) -> None:
    """Write the v2.1 layout: one data file per episode and jsonl metadata (no stats.json)."""
    n_episodes = len(lengths)
    starts = (np.cumsum(lengths) - lengths).tolist()
    for episode, (start, length) in enumerate(zip(starts, lengths.tolist(), strict=True)):
        file = root / V21_DATA_PATH.format(episode_chunk=episode // CHUNKS_SIZE, episode_index=episode)
        file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(start, length), file, row_group_size=length)

    meta = root / "meta"
    _write_jsonl(
        meta / "episodes.jsonl",
        [
            {"episode_index": e, "tasks": [tasks[e % len(tasks)]], "length": length}
            for e, length in enumerate(lengths.tolist())
        ],
    )
    _write_jsonl(meta / "tasks.jsonl", [{"task_index": i, "task": task} for i, task in enumerate(tasks)])
    if episode_stats:
        no_quantiles = {
            key: {name: stats[name] for name in ("min", "max", "mean", "std", "count")}
            for key, stats in episode_stats.items()
        }
        _write_jsonl(
            meta / "episodes_stats.jsonl",
            [
                {"episode_index": e, "stats": {key: stats_json(stats, e) for key, stats in no_quantiles.items()}}
                for e in range(n_episodes)
            ],
        )
    write_json(
        meta / "info.json",
        {
            "codebase_version": "v2.1",
            "robot_type": ROBOT_TYPE,
            "total_episodes": n_episodes,
            "total_frames": int(lengths.sum()),
            "total_tasks": len(tasks),
            "total_videos": n_episodes * len(video_keys),
            "total_chunks": math.ceil(n_episodes / CHUNKS_SIZE),
            "chunks_size": CHUNKS_SIZE,
            "fps": fps,
            "splits": {"train": f"0:{n_episodes}"},
            "data_path": V21_DATA_PATH,
            "video_path": V21_VIDEO_PATH if video_keys else None,
            "features": features,
        },
    )
