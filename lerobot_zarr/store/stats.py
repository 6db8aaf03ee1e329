"""Stats computed when asked: the LeRobot ``stats.json`` entries of a store's ``stats_on_demand`` features.

A store may name numeric features or uint8 cameras whose stats no commit computes (``StoreState.stats_on_demand``):
an RL buffer's cameras, whose stats would cost a commit of a short episode more than writing its frames (per
channel, from a sample of each episode's frames, as LeRobot computes an image's; float32 frames as LeRobot publishes
them, images of their pixels ``(v * 255)`` truncated: :func:`~lerobot_zarr.lerobot.format.float_image_stats`). Their
entries are absent from the root's ``stats``; :func:`on_demand_stats` computes them from the committed rows, as a
writer's commit would have: each episode's stats
(:func:`~lerobot_zarr.lerobot.format.episode_stats`), merged count-weighted
(:func:`~lerobot_zarr.lerobot.format.aggregate_stats`'s values, bit for bit, one episode in memory at a time);
episodes without the feature's rows do not count. Exports compute every episode's stats from the data anyway.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..lerobot.format import (
    CAMERA_DTYPES,
    QUANTILES,
    STAT_NAMES,
    aggregate_stats,
    episode_stats,
    float_image_stats,
    is_float_image,
    stats_json,
)
from .packs import read_raw_rows
from .state import StoreState

__all__ = ["on_demand_stats"]


def on_demand_stats(state: StoreState) -> dict[str, dict[str, list]]:
    """``stats.json`` entries of ``state``'s ``stats_on_demand`` features, from its committed rows (a feature no
    episode holds has none)."""
    out = {}
    for name in state.stats_on_demand:
        held = state.materialized_mask(name)
        for e in state.unavailable_of(name):
            held[e] = False
        if held.any():
            out[name] = stats_json(_merged(state, name, np.flatnonzero(held)))
    return out


def _merged(state: StoreState, name: str, episodes: np.ndarray) -> dict[str, np.ndarray]:
    """The merged stats of feature ``name`` over ``episodes``: :func:`_merged_numeric`, or for a camera (stats
    per channel, from a sample of each episode's frames, counted in frames sampled) the episodes' stats stacked
    and merged by :func:`~lerobot_zarr.lerobot.format.aggregate_stats` itself (they are a few numbers each)."""
    spec, table = state.arrays[name], state.table
    float_image = is_float_image(name, spec)
    if spec.kind not in CAMERA_DTYPES and not float_image:
        return _merged_numeric(state, name, episodes)
    stats_of = partial(float_image_stats, name=name) if float_image else partial(episode_stats, kind=spec.kind)
    rows = [stats_of(read_raw_rows(
        state.root, name, spec, int(table.chunk[e]), int(state.packs.rows[table.chunk[e]]), int(table.offset[e]),
        int(table.length[e]))) for e in episodes.tolist()]
    return aggregate_stats({key: np.stack([np.asarray(r[key]) for r in rows]) for key in STAT_NAMES})


def _merged_numeric(state: StoreState, name: str, episodes: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`~lerobot_zarr.lerobot.format.aggregate_stats` of the episodes' stats, bit for bit (its sums over
    episodes are sums in episode order), one episode in memory at a time: of each, only its mean and std are kept
    (for the variance, once the mean is known)."""
    spec, table = state.arrays[name], state.table
    counts = table.length[episodes]
    total = counts.sum()
    merged: dict[str, np.ndarray] = {}
    moments = []
    for e, count in zip(episodes.tolist(), counts.tolist(), strict=True):
        pack = int(table.chunk[e])
        stats = episode_stats(read_raw_rows(state.root, name, spec, pack, int(state.packs.rows[pack]),
                                            int(table.offset[e]), count), spec.kind)
        weight = count / total
        for key in ("mean", *QUANTILES):
            merged[key] = weight * stats[key] if key not in merged else merged[key] + weight * stats[key]
        merged["min"] = stats["min"] if "min" not in merged else np.minimum(merged["min"], stats["min"])
        merged["max"] = stats["max"] if "max" not in merged else np.maximum(merged["max"], stats["max"])
        moments.append((weight, stats["mean"], stats["std"]))
    variance = None
    for weight, mean, std in moments:
        term = weight * (std ** 2 + (mean - merged["mean"]) ** 2)
        variance = term if variance is None else variance + term
    merged["std"], merged["count"] = np.sqrt(variance), np.array([total])
    return {key: merged[key] for key in STAT_NAMES}
