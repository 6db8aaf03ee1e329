"""The doctor's reductions at the end, over what the per-episode pass kept: episodes with the same data (by their
content hashes, confirmed on the data), tasks that differ only by case or whitespace, stats.json against the
recomputed moments, and channels that never change."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..lerobot.format import DEFAULT_FEATURES
from .checks import Moments, channel_names
from .kinds import THRESHOLDS, Defect

__all__ = ["duplicate_episodes", "duplicate_tasks", "stats_defects", "dead_channels"]


def duplicate_episodes(keys: np.ndarray, lengths: np.ndarray, same: Callable[[int, int], bool] | None = None
                       ) -> list[Defect]:
    """Episodes whose data equals an earlier episode's: grouped by their row of ``keys`` ((episodes, k) int64: the
    length and the content hashes of the data features, -1 where unknown; episodes whose row is all -1 are left
    out), each candidate confirmed by ``same(first, e)`` (a comparison of the data itself) where given."""
    known = np.flatnonzero((keys >= 0).any(axis=1)) if keys.size else np.zeros(0, np.int64)
    if not known.size:
        return []
    _, group, counts = np.unique(keys[known], axis=0, return_inverse=True, return_counts=True)
    out = []
    for g in np.flatnonzero(counts > 1).tolist():
        first, *later = known[group.reshape(-1) == g].tolist()
        for e in later:
            if same is None or same(first, e):
                n = int(lengths[e])
                out.append(Defect("duplicate_episode", e, None, ((0, n),), float(first),
                                  f"the same data as episode {first} ({n} frames)"))
    return out


def duplicate_tasks(tasks: Sequence[str]) -> list[Defect]:
    """Task strings equal once case and runs of whitespace are ignored (``"Pick the cube"`` and ``"pick the
    cube "``): one finding per group, naming their task indices."""
    groups: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        groups.setdefault(" ".join(task.split()).casefold(), []).append(i)
    return [Defect("duplicate_task", None, "task", (), float(len(ids)), f"task indices {ids} differ only by case or "
                   f"whitespace: " + ", ".join(repr(tasks[i])[:60] for i in ids))
            for ids in groups.values() if len(ids) > 1]


def stats_defects(stats: Mapping[str, Any], moments: Moments, names: Mapping[str, Any],
                  thresholds: Mapping[str, float] = THRESHOLDS) -> list[Defect]:
    """stats.json against the data: per numeric feature the ``count`` (frames), ``min``, ``max``, ``mean`` and
    ``std`` (LeRobot's: population std) of every channel. ``min``/``max`` are compared to ``range_rtol`` of the
    channel's range, ``mean`` and ``std`` to ``stats_rtol`` of its std (plus 1e-5 of the values' size: float32
    sums); quantiles are not recomputed. ``moments`` must cover every episode."""
    rtol = thresholds["stats_rtol"]
    out = []
    for name, m in moments.features.items():
        given = stats.get(name)
        if not isinstance(given, Mapping):
            continue
        n = m["count"]
        if not n.size or n[0] <= 0:
            continue
        mean_off = m["sum"] / n
        data = {"min": m["low"], "max": m["high"], "mean": m["shift"] + mean_off,
                "std": np.sqrt(np.maximum(m["sumsq"] / n - mean_off ** 2, 0.0))}
        spread = np.maximum(data["max"] - data["min"], 0.0)
        size = np.maximum(np.abs(data["min"]), np.abs(data["max"]))
        # min and max are exact wherever they were computed; LeRobot sums float32 values in float32, so its mean
        # and std drift by up to ~1e-5 of the values' size
        room = {"min": thresholds["range_rtol"] * spread + 1e-7 * size, "mean": rtol * data["std"] + 1e-5 * size}
        room["max"], room["std"] = room["min"], room["mean"]
        scale = {"min": spread, "max": spread, "mean": data["std"], "std": data["std"]}
        try:
            count = int(np.asarray(given.get("count", [n[0]])).reshape(-1)[0])
        except (TypeError, ValueError):
            count = -1
        if count != int(n[0]):
            out.append(Defect("stats_mismatch", None, name, (), float(count),
                              f"stats.json counts {count} frames, the data has {int(n[0])}"))
        for stat in ("min", "max", "mean", "std"):
            try:
                value = np.asarray(given[stat], dtype=np.float64).reshape(-1)
            except (KeyError, TypeError, ValueError):
                continue
            if value.size != n.size:
                out.append(Defect("stats_mismatch", None, name, (), float(value.size),
                                  f"stats.json's {stat} has {value.size} values, the feature {n.size} channels"))
                continue
            ours = data[stat]
            with np.errstate(invalid="ignore", over="ignore"):  # infinite values: their ``nan`` findings say so
                error = np.abs(value - ours) / np.maximum(scale[stat], 1e-12)
                bad = np.flatnonzero(~(np.abs(value - ours) <= room[stat]) & np.isfinite(ours))
            if bad.size:
                worst = int(bad[np.nanargmax(np.where(np.isfinite(error[bad]), error[bad], np.inf))])
                out.append(Defect("stats_mismatch", None, name, (), float(error[worst]),
                                  f"stats.json's {stat} differs from the data's on {bad.size} channels "
                                  f"{channel_names(names.get(name), bad.tolist())}: channel {worst} has "
                                  f"{value[worst]:.6g}, the data {ours[worst]:.6g}", tuple(bad.tolist())))
    return out


def dead_channels(moments: Moments, names: Mapping[str, Any]) -> list[Defect]:
    """Channels of features (not LeRobot's own columns) with one value in every frame of the dataset."""
    out = []
    for name, m in moments.features.items():
        if name in DEFAULT_FEATURES:
            continue
        dead = np.flatnonzero(m["low"] == m["high"])
        if dead.size:
            out.append(Defect("dead_channel", None, name, (), float(dead.size),
                              f"{dead.size} of {m['low'].size} channels never change: "
                              f"{channel_names(names.get(name), dead.tolist())}", tuple(dead.tolist())))
    return out
