"""The doctor's checks against naive references: glitches (``jump``) by brute force over every run, the batch
checks over many episodes at once against one episode at a time, moments merged around different shifts against
numpy, frame runs, stats, timestamps, camera frames and a video's log."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lerobot_zarr.cameras.video import DecodeLog
from lerobot_zarr.doctor.cameras import FrameWatch, video_defects
from lerobot_zarr.doctor.checks import Context, Moments, NumericChecks, _glitch
from lerobot_zarr.doctor.kinds import THRESHOLDS, frame_ranges
from lerobot_zarr.doctor.reduce import stats_defects

RATIO, MOST, QUANTA = THRESHOLDS["jump_ratio"], int(THRESHOLDS["jump_frames"]), THRESHOLDS["jump_quanta"]
SHORTEST = int(THRESHOLDS["jump_min_frames"])


def brute_glitches(v: np.ndarray) -> set[tuple[int, int]]:
    """Every run [a, b) of at most MOST frames inside the episode whose values lie beyond all the others by more
    than RATIO times the others' range (at least QUANTA of the smallest nonzero step), straight from the
    definition."""
    n = len(v)
    moves = np.abs(np.diff(v))
    moves = moves[moves > 0]
    floor = QUANTA * moves.min() if moves.size else 0.0
    out = set()
    for a in range(1, n - 1):
        for b in range(a + 1, min(a + MOST, n - 1) + 1):
            run, rest = v[a:b], np.concatenate([v[:a], v[b:]])
            scale = max(rest.max() - rest.min(), floor)
            if run.min() - rest.max() > RATIO * scale or rest.min() - run.max() > RATIO * scale:
                out.add((a, b))
    return out


def trajectories(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    """Smooth, noisy, stepped, quantized and constant channels, some with glitches of 1-4 frames, some at the
    edges."""
    out = []
    for _ in range(count):
        n = int(rng.integers(3, 40))
        kind = rng.integers(0, 5)
        t = np.arange(n)
        if kind == 0:
            v = np.sin(t / rng.uniform(2, 10)) + rng.normal(0, 0.02, n)
        elif kind == 1:
            v = np.where(t > rng.integers(0, n), 196.0, 0.0)  # a gripper: one step, no glitch
        elif kind == 2:
            v = np.round(rng.normal(50, 1, n))  # a quantized sensor flickering by a step
        elif kind == 3:
            v = np.full(n, rng.normal())
        else:
            v = np.cumsum(rng.normal(0, 1, n))
        if rng.random() < 0.6:
            k = int(rng.integers(1, 5))
            a = int(rng.integers(0, max(1, n - k + 1)))
            v[a:a + k] += rng.choice([-1, 1]) * rng.uniform(0.5, 200) * (np.ptp(v) + 1)
        out.append(v.astype(np.float64))
    return out


def test_glitch_finds_a_shortest_glitch_exactly_where_the_definition_does():
    rng = np.random.default_rng(7)
    seen = 0
    for v in trajectories(rng, 600):
        want = brute_glitches(v)
        got = _glitch(v, MOST, RATIO, QUANTA)
        if not want:
            assert got is None, (v, got)
            continue
        seen += 1
        assert got is not None, (v, want)
        assert got[0] in want and got[0][1] - got[0][0] == min(b - a for a, b in want), (v, got, want)
    assert seen > 100


def _context(names=None, stats=None, lenient=False, starts=None) -> Context:
    kinds = {"x": "numeric", "timestamp": "numeric", "frame_index": "numeric", "episode_index": "numeric",
             "index": "numeric", "task_index": "numeric"}
    return Context(30.0, kinds, names or {}, stats or {}, 2, np.asarray(starts if starts is not None else [0]),
                   lenient)


def _episode(e: int, values: np.ndarray, start: int = 0) -> dict[str, np.ndarray]:
    n = len(values)
    return {"x": values, "timestamp": (np.arange(n) / 30).astype(np.float32), "frame_index": np.arange(n),
            "episode_index": np.full(n, e), "index": start + np.arange(n), "task_index": np.zeros(n, np.int64)}


def test_batches_of_episodes_find_what_each_episode_alone_finds():
    """The batch checks (one reduceat per feature, the jump pre-filter) against the same checks run one episode
    at a time, and the jump findings against the brute force on every channel."""
    rng = np.random.default_rng(3)
    channels = trajectories(rng, 240)
    episodes = []
    for e in range(60):  # 60 episodes of 4 channels (cut to a common length each)
        parts = channels[4 * e:4 * e + 4]
        n = min(len(p) for p in parts)
        x = np.stack([p[:n] for p in parts], axis=1).astype(np.float32)
        if e % 7 == 0:
            x[n // 2, 1] = np.nan
        if e % 11 == 5:  # a stalled stream (at least a second long)
            x = np.tile(x[:1], (45, 1))
        episodes.append(x)
    starts = np.cumsum([0, *[len(x) for x in episodes]])[:-1]
    ctx = _context(starts=starts)
    frames = [_episode(e, x, int(starts[e])) for e, x in enumerate(episodes)]
    together, moments = NumericChecks(ctx).run(list(range(60)), frames)
    alone = [d for e in range(60) for d in NumericChecks(ctx).run([e], [frames[e]])[0]]
    key = lambda d: (d.kind, d.episode, d.feature, d.frames, d.channels)  # noqa: E731
    assert sorted(map(key, together)) == sorted(map(key, alone))
    assert {d.kind for d in together} >= {"nan", "constant", "jump"}
    jumps = {(d.episode, c, d.frames[0]) for d in together if d.kind == "jump" for c in d.channels}
    for e, x in enumerate(episodes):
        for c in range(x.shape[1]):
            v = x[:, c].astype(np.float64)
            want = brute_glitches(v) if np.isfinite(v).all() and len(v) >= SHORTEST else set()
            mine = {run for (ee, cc, run) in jumps if (ee, cc) == (e, c)}
            assert bool(want) == bool(mine), (e, c, v, want, mine)
            assert mine <= want
    all_x = np.concatenate(episodes).astype(np.float64)
    m = moments.features["x"]
    np.testing.assert_array_equal(m["low"], all_x.min(axis=0))  # NaN where a NaN is: no min there
    np.testing.assert_array_equal(m["high"], all_x.max(axis=0))


def test_moments_merged_around_other_shifts_give_numpy_mean_and_std():
    rng = np.random.default_rng(1)
    parts = [rng.normal(1000, 0.01, (n, 3)) for n in (5, 50, 500)]
    moments = Moments()
    for i, part in enumerate(parts):
        shift = np.full(3, 1000.0 + i)  # each part summed around another shift
        d = part - shift
        moments.add("a", {"count": np.full(3, len(part), float), "shift": shift, "sum": d.sum(0),
                          "sumsq": (d * d).sum(0), "low": part.min(0), "high": part.max(0)})
    data = np.concatenate(parts)
    m = moments.features["a"]
    mean = m["shift"] + m["sum"] / m["count"]
    std = np.sqrt(m["sumsq"] / m["count"] - (m["sum"] / m["count"]) ** 2)
    np.testing.assert_allclose(mean, data.mean(0), rtol=0, atol=1e-9)
    np.testing.assert_allclose(std, data.std(0), rtol=1e-6)


def test_stats_match_numpy_and_a_wrong_one_is_named():
    rng = np.random.default_rng(2)
    x = rng.normal(5, 2, (1000, 3)).astype(np.float32)
    stats = {"x": {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.astype(np.float64).mean(0).tolist(),
                   "std": x.astype(np.float64).std(0).tolist(), "count": [1000]}}
    ctx = _context(stats=stats)
    _, moments = NumericChecks(ctx).run([0], [_episode(0, x)])
    assert stats_defects(stats, moments, {}) == []
    stats["x"]["std"][1] *= 1.05
    stats["x"]["max"][2] += 1e-3
    found = stats_defects(stats, moments, {"x": ["a", "b", "c"]})
    assert sorted((d.detail.split("'s ")[1].split()[0], d.channels) for d in found) == [("max", (2,)),
                                                                                         ("std", (1,))]


def test_frame_ranges_are_the_runs_of_the_frames():
    rng = np.random.default_rng(4)
    for _ in range(200):
        frames = np.flatnonzero(rng.random(50) < rng.random())
        runs = frame_ranges(frames)
        assert [f for a, b in runs for f in range(a, b)] == frames.tolist()
        assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(runs))


def test_lenient_timestamps_name_gaps_duplicates_backwards_and_drift():
    ctx = _context(lenient=True, starts=[0, 40, 80, 120])
    base = (np.arange(40) / 30).astype(np.float32)
    gap, dup, back, drift = base.copy(), base.copy(), base.copy(), base.copy()
    gap[10:] += np.float32(1 / 30)
    dup[12] = dup[11]
    back[[20, 21]] = back[[21, 20]]
    drift += np.float32(0.01)  # every step right, every timestamp 10 ms late
    frames = []
    for e, ts in enumerate((gap, dup, back, drift)):
        f = _episode(e, np.zeros((40, 2), np.float32) + np.arange(40)[:, None], 40 * e)
        f["timestamp"] = ts
        frames.append(f)
    found = {(d.kind, d.episode, d.frames) for d in NumericChecks(ctx).run([0, 1, 2, 3], frames)[0]}
    assert found == {("timestamp_gap", 0, ((10, 11),)), ("timestamp_duplicate", 1, ((12, 13),)),
                     ("timestamp_gap", 1, ((13, 14),)), ("timestamp_backwards", 2, ((21, 22),)),
                     ("timestamp_gap", 2, ((20, 21), (22, 23))), ("timestamp_drift", 3, ((0, 40),))}


@pytest.mark.parametrize("frozen, black", [((5, 40), (50, 53)), ((0, 30), ()), ((), (0, 60))])
def test_frame_watch_sees_the_same_in_a_stream_and_in_a_whole_episode(frozen, black):
    rng = np.random.default_rng(5)
    frames = rng.integers(10, 250, (60, 6, 8, 3), dtype=np.uint8)
    if frozen:
        frames[frozen[0]:frozen[1]] = frames[frozen[0]]
    if black:
        frames[black[0]:black[1]] = 0
    whole, stream = FrameWatch(0, "cam", 30.0), FrameWatch(0, "cam", 30.0)
    whole.see_all(frames)
    for frame in frames:
        stream.see(frame.tobytes())
    got = {(d.kind, d.frames) for d in whole.defects()}
    assert got == {(d.kind, d.frames) for d in stream.defects()}
    want = set()
    if frozen and frozen[1] - frozen[0] >= 30:
        want.add(("frozen_frames", (frozen,)))
    if black:
        want.add(("black_frames", (black,)))
        if black[1] - black[0] >= 30:
            want.add(("frozen_frames", (black,)))
    assert got == want


def test_a_video_log_is_read_as_rows_without_frames():
    queries = 2.0 + np.arange(50) / 30
    log = DecodeLog(times=queries.copy(), unused=[float(queries[20] + 0.5 / 30)], last=float(queries[39]))
    log.times[40:] = queries[39]  # past the end: the last frame
    log.times[10:13] += 0.004  # three rows whose frame is 4 ms off
    found = {(d.kind, d.frames) for d in video_defects(3, "cam", queries, log, "late frames")}
    assert found == {("video_short", ((40, 50),)), ("video_timestamps", ((10, 13),)),
                     ("video_extra_frames", ((20, 21),))}
    missing = video_defects(3, "cam", queries, DecodeLog(), "video file x.mp4 not found")
    assert [(d.kind, d.frames, d.detail) for d in missing] == [("video_missing", ((0, 50),),
                                                                "video file x.mp4 not found")]
