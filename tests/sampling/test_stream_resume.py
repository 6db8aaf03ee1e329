"""``stream(...).state_dict()`` / ``load_state_dict()``: an interrupted epoch continues exactly (no sample repeated
or skipped), for one rank and several, per sample and per batch, in padding and with DataLoader-style workers
(emulated with ``worker=``; the torch DataLoader itself is in tests/mixtures/test_mixture_torch.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lerobot_zarr as lz
from lerobot_zarr.errors import ArgumentError
from lerobot_zarr.sampling import streams as streaming


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume") / "store"
    rng = np.random.default_rng(0)
    with lz.create(root, fps=10, features={"x": {"dtype": "float32", "shape": [2]}}, durable=False,
                   min_free_bytes=0) as w:
        for n in rng.integers(1, 40, 23):
            w.add_episode({"x": rng.standard_normal((n, 2)).astype(np.float32)}, task="t")
    return str(root)


def _keys(item: dict) -> list[tuple[int, int]]:
    """(episode, frame) of a sample, or of every sample of a batch."""
    e, f = np.atleast_1d(item["episode_index"]).tolist(), np.atleast_1d(item["frame_index"]).tolist()
    return list(zip(e, f))


def _epoch(s) -> list[list[tuple[int, int]]]:
    return [_keys(item) for item in s]


CONFIGS = [dict(), dict(shuffle=False), dict(buffer_episodes=1), dict(batch_size=5),
           dict(world_size=3, rank=2), dict(world_size=3, rank=0, drop_last=True),
           dict(world_size=30, rank=29), dict(world_size=2, rank=1, batch_size=16)]


@pytest.mark.parametrize("kwargs", CONFIGS)
def test_an_interrupted_epoch_continues_exactly(store, kwargs):
    straight = lz.stream(store, seed=3, delta_timestamps={"x": [-0.1, 0.0]}, **kwargs)
    epochs = [_epoch(straight) for _ in range(2)]
    n = len(epochs[0])
    for cut in sorted({0, 1, n // 3, n - 1, n}):
        first = lz.stream(store, seed=3, delta_timestamps={"x": [-0.1, 0.0]}, **kwargs)
        it = iter(first)
        got = [_keys(next(it)) for _ in range(cut)]
        state = json.loads(json.dumps(first.state_dict()))
        again = lz.stream(store, seed=3, delta_timestamps={"x": [-0.1, 0.0]}, **kwargs)
        again.load_state_dict(state)
        if cut < n:
            got += _epoch(again)
            assert got == epochs[0], cut
            assert _epoch(again) == epochs[1]  # and the next epoch is the one it would have been
        else:
            assert state["epoch"] == 1 and state["items"] == 0
            assert _epoch(again) == epochs[1]


def test_a_state_saved_on_one_rank_restores_every_rank(store):
    world = 4
    straight = [_epoch(lz.stream(store, seed=1, world_size=world, rank=r)) for r in range(world)]
    assert len({len(s) for s in straight}) == 1  # ranks yield equal counts
    rank0 = lz.stream(store, seed=1, world_size=world, rank=0)
    it = iter(rank0)
    for _ in range(37):
        next(it)
    state = json.loads(json.dumps(rank0.state_dict()))
    for r in range(world):
        s = lz.stream(store, seed=1, world_size=world, rank=r)
        s.load_state_dict(state)
        assert _epoch(s) == straight[r][37:], r


@pytest.mark.parametrize("batch_size", [None, 6])
def test_dataloader_workers_resume_their_share(store, batch_size):
    """Workers hand items over in turn (as a DataLoader does); the state counts what was delivered."""
    workers = 3
    make = lambda w: lz.SampleStream(store, seed=2, world_size=2, rank=1, worker=(w, workers), batch_size=batch_size)
    per_worker = [_epoch(make(w)) for w in range(workers)]
    delivered = _interleave(per_worker)
    for cut in (0, 5, len(delivered) // 2, len(delivered) - 1):
        state = json.loads(json.dumps(make(0).state_at(0, cut, num_workers=workers)))
        rest = []
        for w in range(workers):
            s = make(w)
            s.load_state_dict(state)
            rest.append(_epoch(s))
        assert _interleave(rest) == delivered[cut:], cut
    with pytest.raises(ArgumentError, match="saved with 3 DataLoader workers per rank and is resumed with 2"):
        s = lz.SampleStream(store, seed=2, world_size=2, rank=1, worker=(0, 2), batch_size=batch_size)
        s.load_state_dict(state)
        next(iter(s))


def _interleave(per_worker: list[list]) -> list:
    """A DataLoader's order over iterable-dataset workers: one item of each in turn, exhausted ones skipped."""
    out, its = [], [iter(w) for w in per_worker]
    while its:
        for it in list(its):
            try:
                out.append(next(it))
            except StopIteration:
                its.remove(it)
    return out


def test_resuming_reads_only_the_episodes_still_needed(store, monkeypatch):
    reads: list[int] = []
    original = streaming._StoreReader.episode
    monkeypatch.setattr(streaming._StoreReader, "episode", lambda self, e: reads.append(e) or original(self, e))
    s = lz.stream(store, seed=0, buffer_episodes=2)
    order = s.shard(0, (0, 1))
    it = iter(s)
    for _ in range(int(s.lengths[order].sum()) - 30):
        next(it)
    it.close()
    state = s.state_dict()
    reads.clear()
    again = lz.stream(store, seed=0, buffer_episodes=2)
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == 30
    assert set(reads) <= set(order[-4:]) and len(reads) == len(set(reads))  # the last few episodes, once each


def test_states_of_another_stream_are_refused(store):
    s = lz.stream(store, seed=1, world_size=2, rank=0)
    state = s.state_dict()
    for kwargs, match in [(dict(seed=2), "seed=1"), (dict(world_size=3), "world_size=2"),
                          (dict(episodes=list(range(10))), "episodes"), (dict(batch_size=4), "batch_size=None"),
                          (dict(shuffle=False), "shuffle=True")]:
        other = lz.stream(store, **{"seed": 1, "world_size": 2, "rank": 0, **kwargs})
        with pytest.raises(ArgumentError, match=match):
            other.load_state_dict(state)
    for bad, match in [({"format": "x"}, "not a stream state"), ({**state, "version": 2}, "version 2"),
                       ({**state, "items": -1}, "must be counts")]:
        with pytest.raises(ArgumentError, match=match):
            s.load_state_dict(bad)


def test_set_epoch_to_another_epoch_drops_a_loaded_state(store):
    s = lz.stream(store, seed=0)
    it = iter(s)
    for _ in range(10):
        next(it)
    state = s.state_dict()
    fresh = lz.stream(store, seed=0)
    fresh.load_state_dict(state)
    fresh.set_epoch(0)  # the epoch it resumes: still resumes
    assert len(list(fresh)) == len(s) - 10
    fresh.load_state_dict(state)
    fresh.set_epoch(1)
    assert len(list(fresh)) == len(s)
