"""The mixture sampler's arithmetic (``lerobot_zarr.mixtures.sampler``): random-access permutations, weighted
dataset shares, passes without replacement, elastic and O(1) resumable state, and a loop killed with SIGKILL that
resumes with the same batches. No data access here except in the kill test (a mixture of two small stores)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import lerobot_zarr as lz
from lerobot_zarr.errors import ArgumentError
from lerobot_zarr.mixtures.sampler import BLOCK, MixtureSampler, MixtureSchedule, permute

MAIN = Path(__file__).resolve().parents[2]


# permutations -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 31, 64, 65, 1000, 4096, 4097, 99_991, 2 ** 20 + 3])
def test_permute_is_a_bijection_of_0_n_for_every_key(n):
    for key in (0, 1, 2 ** 63 + 12345):
        out = permute(np.arange(n), n, key)
        assert out.dtype == np.int64 and out.min() >= 0 and out.max() < n
        assert len(np.unique(out)) == n


def test_permute_past_32_bits_and_per_element_sizes():
    n = 2 ** 35 + 7
    x = np.random.default_rng(0).choice(n, 100_000, replace=False)
    out = permute(x, n, 5)
    assert out.max() < n and len(np.unique(out)) == len(x)
    sizes = np.array([3, 10, 3, 10, 1000])
    np.testing.assert_array_equal(permute(np.array([2, 9, 0, 5, 999]), sizes, 7),
                                  [permute(np.array([v]), s, 7)[0] for v, s in zip([2, 9, 0, 5, 999], sizes)])
    with pytest.raises(ArgumentError):
        permute(np.array([5]), 5, 0)


def test_permutations_look_random():
    """Where element 0 lands over many keys is uniform; within one permutation, neighbours are uncorrelated."""
    n = 100
    landing = np.array([permute(np.array([0]), n, key)[0] for key in range(20_000)])
    counts = np.bincount(landing, minlength=n)
    chi2 = ((counts - 200) ** 2 / 200).sum()
    assert chi2 < 180  # 99 degrees of freedom: p < 1e-6 above ~170
    m = 1_000_000
    p = permute(np.arange(m), m, 99).astype(np.float64)
    assert abs(np.corrcoef(p[:-1], p[1:])[0, 1]) < 0.01
    assert abs(np.corrcoef(np.arange(m), p)[0, 1]) < 0.01
    # consecutive passes of one dataset are unrelated orders
    q = permute(np.arange(m), m, 100).astype(np.float64)
    assert abs(np.corrcoef(p, q)[0, 1]) < 0.01


# the schedule -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", [[0.5, 0.3, 0.2], [0.97, 0.01, 0.02], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
def test_realized_shares_are_within_1_percent_of_the_weights_over_1e5_samples(weights):
    sizes = [1000 + 37 * k for k in range(len(weights))]
    schedule = MixtureSchedule(sizes, weights, seed=3)
    sampler = MixtureSampler(schedule, batch_size=100, rank=0, world_size=1)
    idx = np.concatenate([sampler.batch(step) for step in range(1000)])
    shares = np.bincount(np.searchsorted(schedule.offsets, idx, side="right") - 1, minlength=len(sizes)) / len(idx)
    np.testing.assert_allclose(shares, np.asarray(weights) / np.sum(weights), atol=0.01)
    # at block boundaries the counts are exact to within one sample
    counts = schedule.draws_before(6 * BLOCK)
    assert np.abs(counts - 6 * BLOCK * np.asarray(weights) / np.sum(weights)).max() < 1


def test_a_small_dataset_shows_every_frame_before_any_repeats():
    schedule = MixtureSchedule([50, 100_000, 7], [0.5, 0.3, 0.2], seed=0)
    idx = schedule.indices(np.arange(50_000))
    for k, n in [(0, 50), (2, 7)]:
        mine = idx[(idx >= schedule.offsets[k]) & (idx < schedule.offsets[k + 1])] - schedule.offsets[k]
        passes = len(mine) // n
        assert passes > 100
        orders = mine[:passes * n].reshape(passes, n)
        assert (np.sort(orders, axis=1) == np.arange(n)).all()  # every pass: each frame once
        assert len({tuple(o) for o in orders[:50].tolist()}) > 45 if n == 50 else True  # fresh orders
    big = idx[(idx >= 50) & (idx < 100_050)]
    assert len(np.unique(big)) == len(big)  # fewer draws than frames: no repeat at all


def test_a_dataset_with_weight_zero_is_never_drawn_and_weights_are_checked():
    schedule = MixtureSchedule([10, 10], [1, 0], seed=0)
    assert (schedule.indices(np.arange(5 * BLOCK + 10)) < 10).all()
    for sizes, weights, match in [([10], [1, 2], "2 weights for 1 datasets"), ([0], [1], "at least 1"),
                                  ([5, 5], [-1, 2], "non-negative"), ([5, 5], [0, 0], "not all zero"),
                                  ([5, 5], [1, 1e-14], "below 1/256")]:
        with pytest.raises(ArgumentError, match=match):
            MixtureSchedule(sizes, weights, seed=0)


def test_weights_below_one_sample_per_block_are_refused_and_those_at_it_are_served():
    """Each dataset's quota of a block of 256 is a difference of two rounded cumulative shares: a weight under
    1/256 could make one negative (a crash found at weights [0.31, 0.001, 0.689]); such weights are refused by
    name, and the smallest allowed ones (256 equal weights, 1/256 beside larger ones) draw as weighted."""
    for weights in ([0.31, 0.001, 0.689], [1.0] * 300, [1.0, 1e-3]):
        with pytest.raises(ArgumentError, match=r"'dataset 1'.*below 1/256 of the total"):
            MixtureSchedule([1000] * len(weights), weights, 0)
    for weights in ([1.0] * BLOCK, [1.0, 1 / (BLOCK - 1)], [0.31, 1 / BLOCK, 0.69 - 1 / BLOCK]):
        sizes = [97 + 3 * k for k in range(len(weights))]
        schedule = MixtureSchedule(sizes, weights, 5)
        positions = np.arange(200 * BLOCK)
        datasets, _ = schedule.datasets_and_draws(positions)
        shares = np.bincount(datasets, minlength=len(weights)) / len(positions)
        np.testing.assert_allclose(shares, np.asarray(weights) / sum(weights), atol=1 / len(positions) * 2)
        assert (schedule.counts_before(np.array([len(positions)]))[0] == np.bincount(datasets,
                                                                                    minlength=len(weights))).all()


def test_a_batch_is_the_sorted_indices_of_its_positions_for_any_range():
    """``batches`` (what a sampler yields) computes a range's samples from the draws it holds, not their order:
    the same as sorting ``indices`` of its positions, across blocks, passes of tiny datasets and 64-bit words."""
    rng = np.random.default_rng(0)
    for sizes, weights in [([300, 5000, 40], [0.2, 0.5, 0.3]), ([1, 2, 3], [1, 1, 1]), ([7] * 20, [1] * 20),
                           ([2 ** 35 + 7, 10], [0.3, 0.7]), ([100, 200, 300], [0, 1, 2]), ([50], [1])]:
        schedule = MixtureSchedule(sizes, weights, seed=4)
        for size in (1, 5, 255, 256, 257, 1000):
            starts = np.concatenate([rng.integers(0, 10 ** 7, 6), np.arange(3) * BLOCK, [2 ** 43 - size]])
            positions = (starts[:, None] + np.arange(size)).reshape(-1)
            want = np.sort(schedule.indices(positions).reshape(len(starts), size), axis=1)
            np.testing.assert_array_equal(schedule.batches(starts, size), want)
    np.testing.assert_array_equal(schedule.counts_before(np.array([0, 3, 256, 700])),
                                  [schedule.draws_before(p) for p in (0, 3, 256, 700)])
    with pytest.raises(ArgumentError, match="2\\*\\*43"):
        schedule.batches(np.array([2 ** 43 - 4]), 5)


def test_the_sequence_is_pinned():
    """Regression pin: literal indices computed by the sampler before its batches were vectorized; a change that
    moves a single sample breaks every saved state (it restores elsewhere in the sequence), so it shows here."""
    schedule = MixtureSchedule([300, 5000, 40], [0.2, 0.5, 0.3], seed=11)
    assert schedule.indices(np.arange(12)).tolist() == [5315, 3534, 105, 3921, 189, 227, 375, 5308, 5338, 4641,
                                                        1087, 1880]
    sampler = MixtureSampler(schedule, batch_size=8, rank=1, world_size=4)
    it = iter(sampler)
    assert [next(it).tolist() for _ in range(2)] == [[136, 250, 1087, 1880, 3835, 4641, 5335, 5338],
                                                     [1532, 1726, 2223, 2887, 3051, 5227, 5310, 5321]]
    assert sampler.batch(10 ** 6).tolist() == [17, 241, 651, 3574, 5312, 5323, 5324, 5336]
    whole = MixtureSampler(schedule, batch_size=256, rank=0, world_size=1)
    assert whole.batch(7)[::32].tolist() == [5, 183, 880, 1947, 3285, 4546, 5308, 5325]


# the sampler: elastic and resumable ----------------------------------------------------------------------------
def _global(schedule: MixtureSchedule, batch: int, world: int, steps: int, start: int = 0) -> list[list[int]]:
    """The global batches as the ranks of one world size see them: the samples of each (sorted, as a batch's
    order carries no meaning), and each rank's slice of the positions."""
    ranks = [MixtureSampler(schedule, batch_size=batch, rank=r, world_size=world) for r in range(world)]
    out = []
    for t in range(start, start + steps):
        for r, s in enumerate(ranks):
            positions = t * batch * world + r * batch + np.arange(batch)
            np.testing.assert_array_equal(s.batch(t), np.sort(schedule.indices(positions)))
        out.append(sorted(np.concatenate([s.batch(t) for s in ranks]).tolist()))
    return out


def test_the_global_sequence_is_the_same_on_8_4_2_and_1_ranks():
    schedule = MixtureSchedule([300, 5000, 40], [0.2, 0.5, 0.3], seed=11)
    want = _global(schedule, 64, 1, 40)
    assert _global(schedule, 8, 8, 40) == want
    assert _global(schedule, 16, 4, 40) == want
    assert _global(schedule, 32, 2, 40) == want
    # 8 ranks run 10 steps and save; 4 ranks load that state and run 10; 2 ranks then finish
    states, seen = None, []
    for world, steps in [(8, 10), (4, 10), (2, 20)]:
        samplers = [MixtureSampler(schedule, batch_size=64 // world, rank=r, world_size=world) for r in range(world)]
        if states is not None:
            for s in samplers:
                s.load_state_dict(json.loads(json.dumps(states)))
        iters = [iter(s) for s in samplers]
        for _ in range(steps):
            seen.append(sorted(np.concatenate([next(it) for it in iters]).tolist()))
        states = samplers[1].state_dict()  # any rank's state is the global position
    assert seen == want


def test_state_dict_round_trips_through_json_and_continues_exactly():
    schedule = MixtureSchedule([123, 4567, 89], [1, 2, 3], seed=5)
    sampler = MixtureSampler(schedule, batch_size=32, rank=0, world_size=1, batches_per_epoch=50)
    straight = [b.tolist() for b in sampler] + [b.tolist() for b in sampler]
    assert len(straight) == 100 and sampler.epoch == 2
    for cut in (0, 1, 17, 49, 50, 73):
        first = MixtureSampler(schedule, batch_size=32, rank=0, world_size=1, batches_per_epoch=50)
        it = iter(first)
        got = [next(it).tolist() for _ in range(min(cut, 50))]
        if cut > 50:
            it = iter(first)
            got += [next(it).tolist() for _ in range(cut - 50)]
        state = json.loads(json.dumps(first.state_dict()))
        assert len(json.dumps(state)) < 300
        second = MixtureSampler(schedule, batch_size=32, rank=0, world_size=1, batches_per_epoch=50)
        second.load_state_dict(state)
        assert len(second) == 50 - cut % 50
        got += [b.tolist() for b in second]  # the rest of the interrupted epoch
        if cut < 50:
            got += [b.tolist() for b in second]
        assert got == straight, cut


def test_restoring_is_o1_at_any_step(monkeypatch):
    schedule = MixtureSchedule([10 ** 7, 3 * 10 ** 6, 977], [0.5, 0.3, 0.2], seed=1)
    sampler = MixtureSampler(schedule, batch_size=256, rank=3, world_size=8)
    state = sampler.state_dict()
    state["position"] = 10 ** 6 * sampler.global_batch_size  # step 10^6
    # O(1) counted, not timed: the positions the schedule computes to restore and serve the first batch
    computed = []
    for method in ("counts_before", "datasets_and_draws"):
        real = getattr(MixtureSchedule, method)

        def counting(self, positions, *args, _real=real, **kwargs):
            computed.append(np.size(positions))
            return _real(self, positions, *args, **kwargs)

        monkeypatch.setattr(MixtureSchedule, method, counting)
    restored = MixtureSampler(schedule, batch_size=256, rank=3, world_size=8)
    restored.load_state_dict(state)
    batch = next(iter(restored))
    monkeypatch.undo()
    np.testing.assert_array_equal(batch, sampler.batch(10 ** 6))
    # independent check of that batch: the positions' datasets and draw numbers, counted from the block start
    positions = 10 ** 6 * 2048 + 3 * 256 + np.arange(256)
    datasets, draws = schedule.datasets_and_draws(positions)
    block = positions[0] // BLOCK
    inside, start = positions - block * BLOCK, schedule.draws_before(block * BLOCK)
    all_datasets, _ = schedule.datasets_and_draws(block * BLOCK + np.arange(BLOCK))
    for p, d, k in zip(inside[:20], datasets[:20], draws[:20]):
        assert k == start[d] + np.count_nonzero(all_datasets[:p] == d)
    # a chunk of batches at most, whatever the step (a replay would compute the 2 * 10^9 positions before it)
    assert 0 < sum(computed) <= 32768 + BLOCK, computed


def test_another_global_batch_size_continues_the_same_samples_with_a_warning():
    schedule = MixtureSchedule([300, 5000], [0.4, 0.6], seed=2)
    one = MixtureSampler(schedule, batch_size=48, rank=0, world_size=1)
    it = iter(one)
    for _ in range(5):
        next(it)
    flat = np.sort(np.concatenate([one.batch(t) for t in range(5, 15)]))
    other = MixtureSampler(schedule, batch_size=16, rank=0, world_size=2)
    with pytest.warns(lz.LeRobotZarrWarning, match="batches of 48 .* restored with 32.*from sample 240"):
        other.load_state_dict(one.state_dict())
    twin = MixtureSampler(schedule, batch_size=16, rank=1, world_size=2)
    with pytest.warns(lz.LeRobotZarrWarning):
        twin.load_state_dict(one.state_dict())
    got = np.concatenate([np.concatenate(pair) for pair, _ in zip(zip(other, twin), range(15))])
    np.testing.assert_array_equal(np.sort(got), flat)  # the same 480 samples, in batches of 32


def test_set_epoch_selects_an_epoch_but_keeps_a_restored_position_inside_it():
    schedule = MixtureSchedule([100, 200], [1, 1], seed=0)
    a = MixtureSampler(schedule, batch_size=10, rank=0, world_size=1)
    assert a.batches_per_epoch == 30 and len(a) == 30
    a.set_epoch(2)
    first = next(iter(a))
    np.testing.assert_array_equal(first, a.batch(60))
    b = MixtureSampler(schedule, batch_size=10, rank=0, world_size=1)
    state = b.state_dict()
    state["position"] = 65 * 10
    b.load_state_dict(state)
    b.set_epoch(2)  # a training loop calls it at the start of the epoch it resumes
    assert b.position == 650 and len(b) == 25
    b.set_epoch(3)
    assert b.position == 900


def test_bad_states_and_arguments_are_refused():
    schedule = MixtureSchedule([100, 200], [1, 1], seed=0)
    s = MixtureSampler(schedule, batch_size=10, rank=0, world_size=1)
    state = s.state_dict()
    for change, match in [({"format": "x"}, "not a mixture sampler state"), ({"version": 9}, "version 9"),
                          ({"sizes": [100, 201]}, "dataset 1 had 201 frames then and has 200"),
                          ({"sizes": [100]}, "mixture of 1 datasets"), ({"seed": 1}, "seed 1"),
                          ({"weights": [0.4, 0.6]}, "weights"), ({"position": -1}, "at least 0")]:
        with pytest.raises(ArgumentError, match=match):
            s.load_state_dict({**state, **change})
    for kwargs, match in [(dict(rank=2, world_size=2), r"rank must be in \[0, world_size=2\)"),
                          (dict(rank=0), "both rank and world_size"), (dict(rank=0, world_size=0), "at least 1")]:
        with pytest.raises(ArgumentError, match=match):
            MixtureSampler(schedule, batch_size=4, **kwargs)
    with pytest.raises(ArgumentError, match="batch_size"):
        MixtureSampler(schedule, batch_size=0, rank=0, world_size=1)


def test_without_a_process_group_the_rank_is_0_of_1():
    schedule = MixtureSchedule([100], [1], seed=0)
    s = MixtureSampler(schedule, batch_size=4)
    assert (s.rank, s.world_size) == (0, 1)


# a loop killed at a random step resumes with the same batches ----------------------------------------------------
LOOP = r'''
import hashlib, json, os, sys, time
import numpy as np
import lerobot_zarr as lz

a, b, checkpoint, log, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
mix = lz.open_mixture({a: 0.7, b: 0.3}, delta_timestamps={"x": [-0.1, 0.0, 0.1]})
sampler = mix.sampler(batch_size=16, seed=123, batches_per_epoch=7)
step = 0
if os.path.exists(checkpoint):
    with open(checkpoint) as f:
        saved = json.load(f)
    step = saved["step"]
    sampler.load_state_dict(saved["sampler"])
with open(log, "a") as out:
    while step < steps:
        for idx in sampler:  # epochs of 7 batches
            batch = mix.get_batch(idx)
            digest = hashlib.sha256(batch["x"].tobytes() + batch["dataset_index"].tobytes()).hexdigest()[:16]
            out.write(f"{step} {digest}\n")
            out.flush()
            step += 1
            tmp = checkpoint + ".tmp"
            with open(tmp, "w") as f:  # the training step is done: checkpoint it (atomically)
                json.dump({"step": step, "sampler": sampler.state_dict()}, f)
            os.replace(tmp, checkpoint)
            time.sleep(0.01)
            if step >= steps:
                break
'''


def _stores(tmp_path: Path) -> tuple[str, str]:
    out = []
    for name, n, seed in (("a", [30, 7, 12], 0), ("b", [5, 9], 1)):
        rng = np.random.default_rng(seed)
        with lz.create(tmp_path / name, fps=10, features={"x": {"dtype": "float32", "shape": [3]}}, durable=False,
                       min_free_bytes=0) as w:
            for length in n:
                w.add_episode({"x": rng.standard_normal((length, 3)).astype(np.float32)}, task="t")
        out.append(str(tmp_path / name))
    return out[0], out[1]


def _run(tmp_path: Path, a: str, b: str, tag: str, steps: int, kill_after: int | None = None) -> dict[int, str]:
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    checkpoint, log = tmp_path / f"{tag}.json", tmp_path / f"{tag}.log"
    env = dict(os.environ, PYTHONPATH=str(MAIN))
    args = [sys.executable, str(script), a, b, str(checkpoint), str(log), str(steps)]
    if kill_after is not None:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and len(log.read_text().splitlines()) >= kill_after:
                break
            time.sleep(0.002)
        assert proc.poll() is None, "the loop ended before it was killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
    subprocess.run(args, env=env, check=True, capture_output=True, timeout=300)
    seen: dict[int, str] = {}
    for line in log.read_text().splitlines():
        step, digest = line.split()
        assert seen.setdefault(int(step), digest) == digest, f"step {step} gave another batch after the restart"
    return seen


def test_a_loop_killed_at_a_random_step_resumes_with_the_same_batches(tmp_path):
    a, b = _stores(tmp_path)
    steps = 40
    straight = _run(tmp_path, a, b, "straight", steps)
    assert sorted(straight) == list(range(steps))
    kill_at = int(np.random.default_rng().integers(3, 35))
    resumed = _run(tmp_path, a, b, "killed", steps, kill_after=kill_at)
    assert resumed == straight, f"killed after {kill_at} logged steps"
