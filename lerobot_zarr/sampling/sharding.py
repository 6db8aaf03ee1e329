"""Splitting a dataset's episodes across the machines (ranks) of a training job.

Each rank opens only its episodes (``open_dataset(repo_id, episodes=episodes_for_rank(...))``), so each machine
downloads and stores only what it samples; the split is a pure function of the episode lengths and the seed,
the same on every rank without any communication.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError

__all__ = ["deal", "episodes_for_rank", "split_episodes"]


def deal(order: Sequence[int], lengths: Sequence[int] | np.ndarray, n_shards: int) -> list[list[int]]:
    """Deal episodes (in ``order``) to ``n_shards`` shards of about equal frames: longest first (ties in
    ``order``), each to the shard with the fewest frames so far (ties to the lowest shard). Each shard keeps its
    episodes in ``order``. The one balancing rule: ranks (:func:`split_episodes`) and the shards of
    :mod:`~lerobot_zarr.sampling.streams` both use it."""
    position = {e: k for k, e in enumerate(order)}
    by_length = sorted(order, key=lambda e: (-int(lengths[e]), position[e]))
    heap = [(0, s) for s in range(n_shards)]
    owner: dict[int, int] = {}
    for e in by_length:
        load, shard = heapq.heappop(heap)
        owner[e] = shard
        heapq.heappush(heap, (load + int(lengths[e]), shard))
    shards: list[list[int]] = [[] for _ in range(n_shards)]
    for e in order:
        shards[owner[e]].append(e)
    return shards


def split_episodes(lengths: Sequence[int] | np.ndarray, world_size: int, *, seed: int = 0) -> list[list[int]]:
    """Deal episodes out to ``world_size`` ranks with about the same number of frames each.

    Episodes are shuffled with ``seed``, then each goes, longest first, to the rank with the fewest frames so far
    (ties to the lowest rank). Every episode goes to exactly one rank; each rank's list is sorted."""
    world_size = operator.index(world_size)
    if world_size < 1:
        raise ArgumentError(f"world_size must be at least 1, got {world_size}")
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if len(lengths) < world_size:
        raise ArgumentError(f"{len(lengths)} episodes cannot be split across {world_size} ranks")
    order = np.random.default_rng(seed).permutation(len(lengths)).tolist()
    return [sorted(part) for part in deal(order, lengths, world_size)]


def episodes_for_rank(lengths: Sequence[int] | np.ndarray, rank: int, world_size: int, *, seed: int = 0
                      ) -> list[int]:
    """This rank's episodes of :func:`split_episodes` (``lengths``: e.g. ``inspect(repo_id).episode_length``)."""
    rank = operator.index(rank)
    if not 0 <= rank < world_size:
        raise ArgumentError(f"rank must be in [0, {world_size}), got {rank}")
    return split_episodes(lengths, world_size, seed=seed)[rank]
