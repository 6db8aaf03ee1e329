"""Looking at one episode: a PNG figure (curves by feature name, camera thumbnails) and, with rerun, an ``.rrd``.

Works on a store, a LeRobot folder or a Hub repo; from the Hub only that episode is fetched (into the store, like
``open_dataset(..., episodes=[n])``). Needs the ``viz`` extra (matplotlib; rerun-sdk for ``.rrd``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .api import open_dataset

__all__ = ["view_episode", "dimension_names"]


def dimension_names(names: Any, size: int) -> list[str]:
    """Per-dimension labels from a LeRobot feature's ``names`` (a list, nested lists, a dict, or null)."""
    flat: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif x is not None:
            flat.append(str(x))

    walk(names)
    return flat if len(flat) == size else [f"dim_{k}" for k in range(size)]


def view_episode(source: str | os.PathLike, episode: int, *, out: str | os.PathLike | None = None,
                 rrd: str | os.PathLike | None = None, revision: str | None = None,
                 token: str | bool | None = None, thumbnails: int = 6) -> Path:
    """Write a PNG figure of ``episode`` (default ``episode_<n>.png``) and, if ``rrd`` is given, a rerun recording.

    Panels: one per vector feature (state, action...) with a line per named dimension, one for the scalar
    features other than LeRobot's bookkeeping columns, and a row of ``thumbnails`` frames per camera that the store
    holds. Returns the PNG path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = open_dataset(source, episodes=[episode], revision=revision, token=token, progress=False)
    arrays = ds.episode(episode)
    features = ds.meta.features
    fps = ds.meta.fps
    t = np.arange(int(ds.meta.episode_length[episode])) / fps
    skip = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
    vectors = [k for k, a in arrays.items() if k not in skip and a.ndim >= 2 and features.get(k, {}).get("dtype")
               not in ("image", "video")]
    scalars = [k for k, a in arrays.items() if k not in skip and a.ndim == 1]
    cameras = [k for k in arrays if features.get(k, {}).get("dtype") == "image"]
    rows = len(vectors) + (1 if scalars else 0) + len(cameras)
    fig = plt.figure(figsize=(12, 2.8 * max(rows, 1)), constrained_layout=True)
    grid = fig.add_gridspec(max(rows, 1), thumbnails)
    row = 0
    for key in vectors:
        ax = fig.add_subplot(grid[row, :])
        values = np.asarray(arrays[key]).reshape(len(t), -1)
        labels = dimension_names(features.get(key, {}).get("names"), values.shape[1])
        for d in range(values.shape[1]):
            ax.plot(t, values[:, d], lw=1, label=labels[d])
        ax.set_title(key)
        ax.set_xlabel("time (s)")
        if values.shape[1] <= 16:
            ax.legend(fontsize=6, ncol=4, loc="upper right")
        row += 1
    if scalars:
        ax = fig.add_subplot(grid[row, :])
        for key in scalars:
            ax.plot(t, np.asarray(arrays[key]), lw=1, label=key)
        ax.set_title("scalars")
        ax.legend(fontsize=6)
        row += 1
    for key in cameras:
        frames = np.asarray(arrays[key])
        for j, i in enumerate(np.linspace(0, len(frames) - 1, thumbnails).astype(int)):
            ax = fig.add_subplot(grid[row, j])
            ax.imshow(frames[i].squeeze())
            ax.set_title(f"{key} t={t[i]:.2f}s", fontsize=7)
            ax.axis("off")
        row += 1
    task = ds.meta.tasks[int(np.asarray(arrays["task_index"]).reshape(-1)[0])]
    fig.suptitle(f"episode {episode}: {task}  ({len(t)} frames at {fps:g} fps)")
    png = Path(out) if out is not None else Path(f"episode_{episode}.png")
    fig.savefig(png, dpi=80)
    plt.close(fig)
    if rrd is not None:
        _log_rerun(Path(rrd), episode, arrays, features, fps, vectors, scalars, cameras)
    return png


def _log_rerun(path: Path, episode: int, arrays: dict[str, np.ndarray], features: dict, fps: float,
               vectors: list[str], scalars: list[str], cameras: list[str]) -> None:
    """Log the episode to a rerun recording saved at ``path`` (timeline ``frame_index``; seconds too)."""
    import rerun as rr

    rec = rr.RecordingStream("lerobot_zarr", recording_id=f"episode_{episode}")
    rec.save(path)
    n = len(arrays["frame_index"])
    for i in range(n):
        rec.set_time("frame_index", sequence=i)
        rec.set_time("timestamp", duration=i / fps)
        for key in vectors:
            values = np.asarray(arrays[key][i]).reshape(-1)
            for d, label in enumerate(dimension_names(features.get(key, {}).get("names"), values.size)):
                rec.log(f"{key}/{label}", rr.Scalars(float(values[d])))
        for key in scalars:
            rec.log(key, rr.Scalars(float(arrays[key][i])))
        for key in cameras:
            rec.log(key, rr.Image(np.asarray(arrays[key][i])))
    rec.flush()
