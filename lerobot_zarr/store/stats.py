"""Stats computed when asked: the LeRobot ``stats.json`` entries of a store's ``stats_on_demand`` features.

A store may name numeric features whose stats no commit computes (``StoreState.stats_on_demand``): an RL buffer's
float32 cameras, whose per-element stats (LeRobot's rule for a float feature: every element of a ``[3, H, W]``
frame its own column) would cost a commit far more than writing the frames. Their entries are absent from the
root's ``stats``; :func:`on_demand_stats` computes them from the committed rows, as a writer's commit would have:
each episode's stats by LeRobot's rule for the feature (:func:`~lerobot_zarr.lerobot.format.episode_stats`), merged
count-weighted (:func:`~lerobot_zarr.lerobot.format.aggregate_stats`); episodes without the feature's rows do not
count. Exports compute every episode's stats from the data anyway.
"""

from __future__ import annotations

import numpy as np

from ..lerobot.format import STAT_NAMES, aggregate_stats, episode_stats, stats_json
from .packs import read_raw_rows
from .state import StoreState

__all__ = ["on_demand_stats"]


def on_demand_stats(state: StoreState) -> dict[str, dict[str, list]]:
    """``stats.json`` entries of ``state``'s ``stats_on_demand`` features, from its committed rows (a feature no
    episode holds has none)."""
    out = {}
    table = state.table
    for name in state.stats_on_demand:
        spec = state.arrays[name]
        held = state.materialized_mask(name)
        for e in state.unavailable_of(name):
            held[e] = False
        rows = []
        for e in np.flatnonzero(held).tolist():
            pack = int(table.chunk[e])
            values = read_raw_rows(state.root, name, spec, pack, int(state.packs.rows[pack]), int(table.offset[e]),
                                   int(table.length[e]))
            rows.append(episode_stats(values, spec.kind))
        if rows:
            out[name] = stats_json(aggregate_stats({k: np.stack([r[k] for r in rows]) for k in STAT_NAMES}))
    return out
