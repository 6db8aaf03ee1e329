"""Stats computed when asked: the LeRobot ``stats.json`` entries of a store's ``stats_on_demand`` features.

A store may name numeric features whose stats no commit computes (``StoreState.stats_on_demand``): an RL buffer's
float32 cameras, whose per-element stats (each element of a ``[3, H, W]`` frame a column of its own, as this
library computes any N-D numeric feature's: LeRobot's rule for float vectors) would cost a commit far more than
writing the frames. Their entries are absent from the root's ``stats``; :func:`on_demand_stats` computes them from
the committed rows, as a writer's commit would have: each episode's stats
(:func:`~lerobot_zarr.lerobot.format.episode_stats`), merged count-weighted
(:func:`~lerobot_zarr.lerobot.format.aggregate_stats`'s values, bit for bit, one episode in memory at a time);
episodes without the feature's rows do not count. Exports compute every episode's stats from the data anyway.
"""

from __future__ import annotations

import numpy as np

from ..lerobot.format import QUANTILES, STAT_NAMES, episode_stats, stats_json
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
