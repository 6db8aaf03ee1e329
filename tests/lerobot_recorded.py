"""Small LeRobot datasets recorded with LeRobot 0.6.1's own public API, one per kind of feature it writes.

Each kind is written by LeRobot itself (``LeRobotDataset.create``, ``add_frame``, ``save_episode``, ``finalize``;
``lerobot-annotate``'s ``LanguageColumnsWriter`` for language columns; ``convert_image_to_video_dataset`` for an
episode table without ``tasks``), so our reader meets exactly the files LeRobot produces. Tiny frames, few episodes
(lengths 4, 1 and 3 unless the kind says otherwise): each takes about a second to record.

Use the session fixture ``lerobot_recorded`` (it skips without lerobot): ``folder = lerobot_recorded("string")``
records the kind once per session and returns its folder (read only: open it, never write into it). ``KINDS`` names
them all. The values are seeded: a kind records the same values every time.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO_ID = "recorded/kind"
FPS = 10
LENGTHS = (4, 1, 3)
VIDEO_SHAPE = (32, 64, 3)  # SVT-AV1 needs 32 pixels at least (HEVC crashed at 32x48); not square
IMAGE_SHAPE = (6, 8, 3)
DEPTH_SHAPE = (16, 24, 1)  # HEVC (the depth encoder) needs 16 pixels at least
NUMERIC_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                  "float32", "float64")
ND_SHAPES = {"nd.array2d": ("float32", (2, 3)), "nd.array3d": ("int64", (2, 1, 3)),
             "nd.array4d": ("uint8", (1, 2, 2, 2)), "nd.array5d": ("float64", (2, 1, 1, 2, 2))}
CAMERA_NAMES = ["height", "width", "channels"]


def _values(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values spanning a dtype's range (its extremes included now and then)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        # LeRobot's stats go through float64: it cannot record 64-bit integers past 2**53
        low, top = max(int(info.min), -(1 << 53)), min(int(info.max), 1 << 53)
        out = rng.integers(low, top, size=shape, dtype=dt, endpoint=True)
        flat = out.reshape(-1)
        if flat.size > 1:
            flat[0], flat[-1] = low, top
        return out
    scale = {2: 1e3, 4: 1e6, 8: 1e12}[dt.itemsize]
    return ((rng.random(shape) - 0.5) * scale).astype(dt)


def _frames(rng: np.random.Generator, n: int, shape: tuple[int, ...]) -> list[np.ndarray]:
    """Camera frames that compress well (smooth ramps plus noise): what a codec keeps close to the original."""
    h, w, c = shape
    base = (np.add.outer(np.arange(h) * 4, np.arange(w) * 3)[..., None] + np.arange(c) * 40) % 256
    return [((base + 9 * k + rng.integers(0, 3, shape)) % 256).astype(np.uint8) for k in range(n)]


def _depth_mm(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """uint16 depth in millimetres, 300..6000 (inside LeRobot's default quantizer range, 10 mm..10 m)."""
    h, w, _ = DEPTH_SHAPE
    base = 300 + np.add.outer(np.arange(h) * 150, np.arange(w) * 90)[..., None]
    return [(base + 40 * k + rng.integers(0, 20, DEPTH_SHAPE)).astype(np.uint16) for k in range(n)]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """LeRobot and the encoders chatter on stdout/stderr and in logs: keep test output readable."""
    level = logging.root.level
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)
        logging.root.setLevel(level)


def _record(root: Path, features: dict, frame: Callable[[int, int, np.random.Generator], dict], *,
            lengths: tuple[int, ...] = LENGTHS, use_videos: bool = True, **create: Any) -> Path:
    """Record ``lengths`` episodes with LeRobot's API; ``frame(episode, index, rng)`` gives each frame (with its
    ``task``)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    rng = np.random.default_rng(len(root.name))
    ds = (_RECORDER or LeRobotDataset).create(REPO_ID, fps=FPS, features=features, root=root, use_videos=use_videos,
                                              **create)
    for e, n in enumerate(lengths):
        for i in range(n):
            ds.add_frame(frame(e, i, rng))
        ds.save_episode()
    ds.finalize()
    return root


def _camera(dtype: str, shape: tuple[int, ...], info: dict | None = None) -> dict:
    return {"dtype": dtype, "shape": shape, "names": CAMERA_NAMES, **({"info": info} if info else {})}


def numeric(root: Path) -> Path:
    """Every numeric dtype LeRobot takes, as a scalar (shape (1,)) and as a vector (shape (3,))."""
    features = {f"s.{d}": {"dtype": d, "shape": (1,), "names": None} for d in NUMERIC_DTYPES}
    features.update({f"v.{d}": {"dtype": d, "shape": (3,), "names": [f"{d}_{k}" for k in range(3)]}
                     for d in NUMERIC_DTYPES})
    return _record(root, features, lambda e, i, rng: {
        **{k: _values(rng, ft["dtype"], ft["shape"]) for k, ft in features.items()}, "task": f"numeric {e % 2}"})


def nd(root: Path) -> Path:
    """2-D to 5-D numeric features: ``datasets`` writes them as Array2D..Array5D extension columns."""
    features = {k: {"dtype": d, "shape": s, "names": None} for k, (d, s) in ND_SHAPES.items()}
    # (no 1-frame episode: LeRobot 0.6.1 cannot merge the stats of a 1-frame episode of an N-D feature)
    return _record(root, features, lambda e, i, rng: {
        **{k: _values(rng, d, s) for k, (d, s) in ND_SHAPES.items()}, "task": "nd"}, lengths=(4, 2, 3))


def string(root: Path) -> Path:
    """A ``string`` feature (one ``str`` per frame, repeated and unique values, non-ASCII and empty ones)."""
    features = {"note": {"dtype": "string", "shape": (1,), "names": None},
                "state": {"dtype": "float32", "shape": (2,), "names": None}}
    words = ["", "grasp", "déplacer → ☕", "grasp"]
    return _record(root, features, lambda e, i, rng: {
        "note": words[(e + i) % 4] if i % 2 else f"episode {e} frame {i}",
        "state": rng.random(2, dtype=np.float32), "task": "strings"})


def language(root: Path) -> Path:
    """``language_persistent`` and ``language_events`` written by ``lerobot-annotate``'s writer from staged
    module outputs (plans, subtasks and memory; interjections, a spoken tool call, a VQA on a camera)."""
    from lerobot.annotations.steerable_pipeline.executor import Executor
    from lerobot.annotations.steerable_pipeline.reader import iter_episodes
    from lerobot.annotations.steerable_pipeline.staging import EpisodeStaging
    from lerobot.annotations.steerable_pipeline.writer import LanguageColumnsWriter, speech_atom

    features = {"state": {"dtype": "float32", "shape": (2,), "names": None}}
    _record(root, features, lambda e, i, rng: {"state": rng.random(2, dtype=np.float32), "task": "tidy up"})
    records = list(iter_episodes(root))
    staging = root.parent / f"{root.name}-staging"
    for record in records:
        ts = record.frame_timestamps
        stage = EpisodeStaging(staging, record.episode_index)
        stage.write("plan", [
            {"role": "assistant", "content": f"plan of episode {record.episode_index}", "style": "plan",
             "timestamp": ts[0]},
            {"role": "assistant", "content": "reach the cup", "style": "subtask", "timestamp": ts[0]},
            *([{"role": "assistant", "content": "cup reached", "style": "memory", "timestamp": ts[-1]}]
              if len(ts) > 1 else []),
        ])
        if len(ts) > 1:
            stage.write("interjections", [
                {"role": "user", "content": "faster please", "style": "interjection", "timestamp": ts[1]},
                speech_atom(ts[1], "ok, faster"),
            ])
            stage.write("vqa", [{"role": "user", "content": "what is visible?", "style": "vqa",
                                 "timestamp": ts[-1], "camera": "observation.images.top"}])
    LanguageColumnsWriter().write_all(records, staging, root)
    Executor._ensure_annotation_metadata_in_info(root)
    shutil.rmtree(staging)
    return root


def image(root: Path) -> Path:
    """An RGB ``image`` camera (PNG in the parquet) next to a state vector."""
    features = {"observation.images.top": _camera("image", IMAGE_SHAPE),
                "observation.state": {"dtype": "float32", "shape": (2,), "names": None}}
    return _record(root, features, lambda e, i, rng: {
        "observation.images.top": _frames(rng, 1, IMAGE_SHAPE)[0], "observation.state": rng.random(2, np.float32),
        "task": "images"}, use_videos=False)


def _video(root: Path, vcodec: str, lengths: tuple[int, ...] = LENGTHS, **create: Any) -> Path:
    from lerobot.configs.video import RGBEncoderConfig

    features = {"observation.images.top": _camera("video", VIDEO_SHAPE),
                "observation.state": {"dtype": "float32", "shape": (2,), "names": None}}
    return _record(root, features, lambda e, i, rng: {
        "observation.images.top": _frames(rng, 1, VIDEO_SHAPE)[0], "observation.state": rng.random(2, np.float32),
        "task": "videos"}, lengths=lengths, rgb_encoder=RGBEncoderConfig(vcodec=vcodec), **create)


def video_av1(root: Path) -> Path:
    """A ``video`` camera encoded as LeRobot does by default (SVT-AV1)."""
    return _video(root, "libsvtav1")


def video_h264(root: Path) -> Path:
    """h264 (no 1-frame episode: LeRobot 0.6.1 cannot append one to an h264 file, "non monotonically increasing
    dts")."""
    return _video(root, "h264", lengths=(4, 2, 3))


def video_hevc(root: Path) -> Path:
    """HEVC (episodes of 3 frames at least: LeRobot 0.6.1 cannot concatenate shorter ones, "non monotonically
    increasing dts")."""
    return _video(root, "hevc", lengths=(4, 3, 5))


def video_streaming(root: Path) -> Path:
    """SVT-AV1 with LeRobot's streaming encoder (frames encoded as they are added; no 1-frame episode: LeRobot
    0.6.1's streaming stats of one frame have another shape and its episode table cannot be written)."""
    return _video(root, "libsvtav1", lengths=(4, 2, 3), streaming_encoding=True)


def _depth_video(root: Path, use_log: bool, unit: str) -> Path:
    from lerobot.configs.video import DepthEncoderConfig

    features = {"observation.images.depth": _camera("video", DEPTH_SHAPE, {"is_depth_map": True}),
                "observation.state": {"dtype": "float32", "shape": (2,), "names": None}}

    def frame(e: int, i: int, rng: np.random.Generator) -> dict:
        depth = _depth_mm(rng, 1)[0]
        return {"observation.images.depth": depth if unit == "mm" else depth.astype(np.float32) / 1000,
                "observation.state": rng.random(2, np.float32), "task": "depth"}

    # HEVC, LeRobot's depth codec: episodes of 3 frames at least (see video_hevc)
    return _record(root, features, frame, lengths=(4, 3, 5), depth_encoder=DepthEncoderConfig(use_log=use_log))


def depth_video_log(root: Path) -> Path:
    """A depth camera as 12-bit HEVC video, LeRobot's default log quantizer, recorded from uint16 millimetres."""
    return _depth_video(root, True, "mm")


def depth_video_linear(root: Path) -> Path:
    """A depth camera as 12-bit HEVC video, the linear quantizer, recorded from float32 metres."""
    return _depth_video(root, False, "m")


def _depth_image(root: Path, unit: str) -> Path:
    features = {"observation.images.depth": _camera("image", DEPTH_SHAPE, {"is_depth_map": True}),
                "observation.state": {"dtype": "float32", "shape": (2,), "names": None}}

    def frame(e: int, i: int, rng: np.random.Generator) -> dict:
        depth = _depth_mm(rng, 1)[0]
        return {"observation.images.depth": depth if unit == "mm" else depth.astype(np.float32) / 1000,
                "observation.state": rng.random(2, np.float32), "task": "depth"}

    return _record(root, features, frame, use_videos=False)


def depth_image_uint16(root: Path) -> Path:
    """A depth ``image`` feature recorded as uint16 millimetres (16-bit TIFF in the parquet)."""
    return _depth_image(root, "mm")


def depth_image_float32(root: Path) -> Path:
    """A depth ``image`` feature recorded as float32 metres (32-bit float TIFF in the parquet)."""
    return _depth_image(root, "m")


def depth_image_rgb(root: Path) -> Path:
    """8-bit RGB frames recorded into a depth ``image`` feature (declared ``(H, W, 3)``, ``is_depth_map``): LeRobot's
    writer takes them (PNG) and its reader serves them as colour images, pixels / 255 (its own test fixtures write
    such frames into a feature declared ``(H, W, 1)``)."""
    features = {"observation.images.depth": _camera("image", IMAGE_SHAPE, {"is_depth_map": True}),
                "observation.state": {"dtype": "float32", "shape": (2,), "names": None}}
    return _record(root, features, lambda e, i, rng: {
        "observation.images.depth": _frames(rng, 1, IMAGE_SHAPE)[0], "observation.state": rng.random(2, np.float32),
        "task": "colour in a depth feature"}, use_videos=False)


def task_switch(root: Path) -> Path:
    """Tasks that change inside episodes (and come back), with a video camera."""
    features = {"observation.images.top": _camera("video", VIDEO_SHAPE),
                "action": {"dtype": "float32", "shape": (3,), "names": None}}
    return _record(root, features, lambda e, i, rng: {
        "observation.images.top": _frames(rng, 1, VIDEO_SHAPE)[0], "action": rng.random(3, np.float32),
        "task": ("pick", "place", "pick again")[(e + i) % 3]}, lengths=(5, 1, 4))


def one_frame(root: Path) -> Path:
    """Episodes of one frame each (windows pad on both sides), with a video camera."""
    features = {"observation.images.top": _camera("video", VIDEO_SHAPE),
                "action": {"dtype": "float32", "shape": (3,), "names": None}}
    return _record(root, features, lambda e, i, rng: {
        "observation.images.top": _frames(rng, 1, VIDEO_SHAPE)[0], "action": rng.random(3, np.float32),
        "task": f"single {e}"}, lengths=(1, 1, 1))


def no_tasks_table(root: Path) -> Path:
    """The output of LeRobot's ``convert_image_to_video_dataset``: cameras as video, and a ``meta/episodes``
    table without the ``tasks`` column (LeRobot takes tasks from ``task_index``)."""
    from lerobot.datasets.dataset_tools import convert_image_to_video_dataset
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    source = root.parent / f"{root.name}-images"
    features = {"observation.images.top": _camera("image", VIDEO_SHAPE),
                "observation.state": {"dtype": "float32", "shape": (2,), "names": None}}
    _record(source, features, lambda e, i, rng: {
        "observation.images.top": _frames(rng, 1, VIDEO_SHAPE)[0], "observation.state": rng.random(2, np.float32),
        "task": ("first", "second")[e % 2]}, use_videos=False)
    convert_image_to_video_dataset(LeRobotDataset(REPO_ID, root=source), output_dir=root, repo_id=REPO_ID,
                                   num_workers=1)
    shutil.rmtree(source)
    return root


KINDS: dict[str, Callable[[Path], Path]] = {f.__name__: f for f in (
    numeric, nd, string, language, image, video_av1, video_h264, video_hevc, video_streaming, depth_video_log,
    depth_video_linear, depth_image_uint16, depth_image_float32, depth_image_rgb, task_switch, one_frame,
    no_tasks_table)}


_RECORDER: Any = None  # the class that records (None: LeRobot's)


def record(kind: str, parent: Path, recorder: Any = None) -> Path:
    """Record ``kind`` into ``parent/kind`` with LeRobot (the folder must not exist), or with ``recorder`` (a class
    with LeRobot's recording API: the drop-in) on the same frames; return the folder."""
    global _RECORDER
    _RECORDER = recorder
    try:
        with _quiet():
            return KINDS[kind](Path(parent) / kind)
    finally:
        _RECORDER = None


@pytest.fixture(scope="session")
def lerobot_recorded(tmp_path_factory) -> Callable[[str], Path]:
    """``kind -> folder``: a dataset of that kind recorded by LeRobot, once per session (read only)."""
    pytest.importorskip("lerobot", reason="recording datasets needs lerobot (LeRobot's own writer)")
    pytest.importorskip("av", reason="recording datasets needs PyAV")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parent = tmp_path_factory.mktemp("lerobot_recorded")
    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            made[kind] = record(kind, parent)
        return made[kind]

    return get
