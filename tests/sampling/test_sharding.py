"""``lerobot_zarr.sampling.sharding`` on its own: splitting episodes across the ranks of a training job.

Checked against a naive reference of the documented rule, longest first to the rank with the fewest frames so far
(ties to the lowest rank), written here with plain loops: every episode goes to exactly one rank, each rank gets
the frames the rule gives it (whatever order the seed deals equal lengths in), the split is a pure function of
the lengths and the seed (every rank computes the same split, in any process), and ``episodes_for_rank`` is
``split_episodes``' row for that rank.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobot_zarr.sampling.sharding import episodes_for_rank, split_episodes

FAST = settings(max_examples=100, deadline=None)
REPO = Path(__file__).resolve().parents[2]


def naive_loads(lengths: list[int], world_size: int) -> list[int]:
    """Frames per rank of the longest-first rule: episodes by decreasing length, each to the rank holding the
    fewest frames so far, the lowest such rank on a tie. Which of several equal-length episodes comes first does
    not change the loads."""
    loads = [0] * world_size
    for n in sorted(lengths, reverse=True):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        loads[rank] += n
    return loads


def naive_split(lengths: list[int], world_size: int) -> list[list[int]]:
    """The split itself when no two episodes have the same length (the seed then changes nothing)."""
    parts: list[list[int]] = [[] for _ in range(world_size)]
    loads = [0] * world_size
    for e in sorted(range(len(lengths)), key=lambda e: -lengths[e]):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        parts[rank].append(e)
        loads[rank] += lengths[e]
    return [sorted(p) for p in parts]


@st.composite
def jobs(draw, distinct: bool = False):
    world_size = draw(st.integers(1, 6))
    n = draw(st.integers(world_size, 25))
    lengths = st.lists(st.integers(1, 500), min_size=n, max_size=n, unique=distinct)
    return draw(lengths), world_size, draw(st.integers(0, 2**32 - 1))


@FAST
@given(job=jobs())
def test_every_episode_once_and_each_rank_gets_the_frames_of_the_longest_first_rule(job):
    lengths, world_size, seed = job
    parts = split_episodes(lengths, world_size, seed=seed)
    assert len(parts) == world_size
    assert sorted(e for p in parts for e in p) == list(range(len(lengths)))
    assert all(p == sorted(p) and p for p in parts)
    assert [sum(lengths[e] for e in p) for p in parts] == naive_loads(lengths, world_size)
    loads = [sum(lengths[e] for e in p) for p in parts]
    assert max(loads) - min(loads) <= max(lengths)  # the greedy rule's balance bound


@FAST
@given(job=jobs(distinct=True))
def test_distinct_lengths_split_exactly_as_the_rule_says_whatever_the_seed(job):
    lengths, world_size, seed = job
    assert split_episodes(lengths, world_size, seed=seed) == naive_split(lengths, world_size)


@FAST
@given(job=jobs())
def test_every_rank_computes_the_same_split(job):
    lengths, world_size, seed = job
    parts = split_episodes(np.array(lengths, dtype=np.int32), world_size, seed=seed)
    assert parts == split_episodes(lengths, world_size, seed=seed) == split_episodes(tuple(lengths), world_size,
                                                                                     seed=seed)
    assert [episodes_for_rank(lengths, r, world_size, seed=seed) for r in range(world_size)] == parts


def test_the_split_is_the_same_in_another_process():
    """Ranks are separate processes (other hash seeds, other import orders): the split depends on nothing else."""
    rng = np.random.default_rng(5)
    lengths = rng.choice([50, 80, 120], size=40).tolist()  # many ties: the seed decides among equal lengths
    code = (f"from lerobot_zarr import split_episodes\n"
            f"print(split_episodes({lengths!r}, 3, seed=11))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "123"}).stdout
    assert out.strip() == str(split_episodes(lengths, 3, seed=11))


def test_the_seed_deals_equal_lengths_differently():
    lengths = [100] * 12
    splits = {str(split_episodes(lengths, 3, seed=s)) for s in range(8)}
    assert len(splits) > 1
    assert all(len(p) == 4 for s in range(8) for p in split_episodes(lengths, 3, seed=s))


def test_one_rank_gets_everything():
    assert split_episodes([3, 1, 2], 1) == [[0, 1, 2]]
    assert episodes_for_rank([3, 1, 2], 0, 1) == [0, 1, 2]


@pytest.mark.parametrize("lengths, world_size", [([1, 2], 0), ([1, 2], -1), ([1, 2], 3), ([], 1)])
def test_impossible_splits_are_refused(lengths, world_size):
    with pytest.raises(ValueError):
        split_episodes(lengths, world_size)


@pytest.mark.parametrize("rank", [-1, 2, 5])
def test_a_rank_outside_the_job_is_refused(rank):
    with pytest.raises(ValueError, match="rank"):
        episodes_for_rank([1, 2, 3], rank, 2)
