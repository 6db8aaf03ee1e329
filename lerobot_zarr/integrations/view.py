"""Looking at one episode: a PNG figure (curves by feature name, camera thumbnails) and, with rerun, an ``.rrd``.

Works on a store, a LeRobot folder or a Hub repo; from the Hub only that episode is fetched (into the store, like
``open_dataset(..., episodes=[n])``). Cameras kept as videos are drawn from their decoded frames. Needs the ``viz``
extra (matplotlib; rerun-sdk for ``.rrd`` and the live viewer).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..api import open_dataset
from ..errors import import_optional
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES

__all__ = ["dimension_names", "view_episode"]

Live = Literal["spawn", "serve"]  # a rerun viewer: spawned here, or served to connect to


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


GROUP = 12  # most lines per panel: wider vectors are split into panels of this many named dimensions


def _line_colors(matplotlib: Any) -> list[Any]:
    """``GROUP`` (or more) distinct colours: tab20's ten strong hues, then its light ones (matplotlib's default
    cycle has ten, so the 11th and 12th lines of a panel would repeat the first two)."""
    tab20 = matplotlib.colormaps["tab20"]
    return [tab20(i) for i in [*range(0, 20, 2), *range(1, 20, 2)]]


def _groups(labels: list[str]) -> list[tuple[int, int]]:
    """``[start, stop)`` of the panels of a vector: one if it has at most ``GROUP`` dimensions, else near-equal
    runs of at most ``GROUP``."""
    n = len(labels)
    parts = -(-n // GROUP)
    bounds = np.linspace(0, n, parts + 1).round().astype(int).tolist()
    return list(itertools.pairwise(bounds))


def view_episode(source: str | os.PathLike, episode: int, *, out: str | os.PathLike | None = None,
                 rrd: str | os.PathLike | None = None, revision: str | None = None,
                 token: str | bool | None = None, thumbnails: int = 6, live: Live | None = None,
                 wait: bool = True) -> Path:
    """Write a PNG figure of ``episode`` (default ``episode_<n>.png``) and, if ``rrd`` is given, a rerun recording.

    Panels: one per vector feature (state, action...) with a line and a legend entry per named dimension (vectors
    wider than 12 are split into several panels), one for the scalar features other than LeRobot's bookkeeping
    columns, and a strip of ``thumbnails`` frames per camera (image or video) that the store holds.
    ``live="spawn"`` also opens the episode in a rerun viewer (needs a display), ``live="serve"`` serves it to
    rerun viewers over gRPC (printing the URL) and, with ``wait``, blocks until Ctrl-C. Returns the PNG path.
    """
    if live not in (None, "spawn", "serve"):
        raise ValueError(f"live must be None, 'spawn' or 'serve', got {live!r}")
    matplotlib = import_optional("matplotlib", "drawing an episode (lerobot-zarr view)")
    if rrd is not None or live is not None:  # said before anything is fetched or drawn
        import_optional("rerun", "a rerun recording or viewer (--rrd, --spawn, --serve)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = _line_colors(matplotlib)
    ds = open_dataset(source, episodes=[episode], revision=revision, token=token, progress=False)
    arrays = ds.episode(episode)
    features = ds.meta.features
    fps = ds.meta.fps
    t = np.arange(int(ds.meta.episode_length[episode])) / fps
    skip = DEFAULT_FEATURES
    cameras = [k for k in arrays if features.get(k, {}).get("dtype") in CAMERA_DTYPES]
    vectors = [k for k, a in arrays.items() if k not in skip and a.ndim >= 2 and k not in cameras]
    scalars = [k for k, a in arrays.items() if k not in skip and a.ndim == 1]
    panels = []  # (feature, labels, [start, stop))
    for key in vectors:
        values = np.asarray(arrays[key]).reshape(len(t), -1)
        labels = dimension_names(features.get(key, {}).get("names"), values.shape[1])
        panels += [(key, labels, span) for span in _groups(labels)]
    rows = len(panels) + (1 if scalars else 0) + len(cameras)
    fig = plt.figure(figsize=(12, 2.8 * max(rows, 1)), constrained_layout=True)
    grid = fig.add_gridspec(max(rows, 1), thumbnails)
    row = 0
    for key, labels, (a, b) in panels:
        ax = fig.add_subplot(grid[row, :])
        ax.set_prop_cycle(color=colors)
        values = np.asarray(arrays[key]).reshape(len(t), -1)
        for d in range(a, b):
            ax.plot(t, values[:, d], lw=1, label=labels[d])
        ax.set_title(key if (a, b) == (0, len(labels)) else f"{key} [{a}:{b}]")
        ax.set_xlabel("time (s)")
        ax.set_ylabel(key.rsplit(".", 1)[-1])
        ax.legend(fontsize=6, ncol=1 + (b - a - 1) // 6, loc="center left", bbox_to_anchor=(1.0, 0.5))
        row += 1
    if scalars:
        ax = fig.add_subplot(grid[row, :])
        ax.set_prop_cycle(color=colors)
        for key in scalars:
            ax.plot(t, np.asarray(arrays[key]), lw=1, label=key)
        ax.set_title("scalars")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("value")
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
        row += 1
    for key in cameras:
        frames = arrays[key]
        for j, i in enumerate(np.linspace(0, len(frames) - 1, thumbnails).astype(int)):
            ax = fig.add_subplot(grid[row, j])
            ax.imshow(np.asarray(frames[i]).squeeze())
            ax.set_title(f"{key}\nt={t[i]:.2f}s" if j == 0 else f"t={t[i]:.2f}s", fontsize=7, loc="left")
            ax.axis("off")
        row += 1
    task = ds.meta.tasks[int(np.asarray(arrays["task_index"]).reshape(-1)[0])]
    fig.suptitle(f"episode {episode}: {task}  ({len(t)} frames at {fps:g} fps)")
    png = Path(out) if out is not None else Path(f"episode_{episode}.png")
    fig.savefig(png, dpi=80)
    plt.close(fig)
    if rrd is not None or live is not None:
        _log_rerun(None if rrd is None else Path(rrd), episode, arrays, features, fps, vectors, scalars, cameras,
                   live=live, wait=wait)
    return png


def _log_rerun(path: Path | None, episode: int, arrays: dict[str, np.ndarray], features: dict, fps: float,
               vectors: list[str], scalars: list[str], cameras: list[str], *, live: Live | None = None,
               wait: bool = True) -> list[Any]:
    """Log the episode to rerun (timelines ``frame_index`` and ``timestamp``): curves as columns, a scalar entity
    per named dimension; camera frames JPEG-compressed (raw 480x640 video frames would take ~1 MB each). Saved at
    ``path`` and/or spawned or served live (a recording each). Returns the recording streams."""
    import rerun as rr

    recordings = []
    if path is not None:
        rec = rr.RecordingStream("lerobot_zarr", recording_id=f"episode_{episode}")
        rec.save(path)
        recordings.append(rec)
    if live is not None:
        rec = rr.RecordingStream("lerobot_zarr", recording_id=f"episode_{episode}")
        if live == "spawn":
            rec.spawn()
        else:
            rec.url = rec.serve_grpc()
            print(f"serving episode {episode} to rerun viewers: rerun --connect {rec.url}  (Ctrl-C to stop)")
        recordings.append(rec)
    n = len(arrays["frame_index"])
    frame = np.arange(n)
    for rec in recordings:
        index = [rr.TimeColumn("frame_index", sequence=frame), rr.TimeColumn("timestamp", duration=frame / fps)]
        for key in vectors:
            values = np.asarray(arrays[key]).reshape(n, -1).astype(np.float64)
            for d, label in enumerate(dimension_names(features.get(key, {}).get("names"), values.shape[1])):
                rec.send_columns(f"{key}/{label}", index, rr.Scalars.columns(scalars=values[:, d]))
        for key in scalars:
            rec.send_columns(key, index, rr.Scalars.columns(scalars=np.asarray(arrays[key], dtype=np.float64)))
        for key in cameras:
            frames = arrays[key]
            for i in range(n):
                rec.set_time("frame_index", sequence=i)
                rec.set_time("timestamp", duration=i / fps)
                image = np.asarray(frames[i])
                rec.log(key, rr.Image(image).compress(jpeg_quality=85) if image.ndim == 3 and image.shape[2] == 3
                        else rr.Image(image))
        rec.flush()
    if live == "serve" and wait:
        import time

        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return recordings
