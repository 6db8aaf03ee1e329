"""``lerobot_zarr.sampling.windows`` on its own (the one window kernel every reader uses), against a naive
per-sample reference of LeRobot's semantics written here with plain Python loops, no data access.

LeRobot (``LeRobotDataset``): each delta of ``delta_timestamps[key]`` must be within 1e-4 s of a multiple of 1/fps
and becomes the frame offset ``round(delta * fps)``. For dataset index ``i`` of an episode of rows
``[ep_start, ep_end)`` and offset ``o``, the window reads row ``max(ep_start, min(ep_end - 1, i + o))``, and
``<key>_is_pad`` is ``i + o < ep_start or i + o >= ep_end``: padded positions repeat the edge frame.
(tests/sampling/test_lerobot_semantics.py checks the same rule end to end, through ``ds[i]`` on stored data.)
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobot_zarr.errors import DeltaTimestampsError, NotMaterializedError
from lerobot_zarr.sampling.windows import Window, window_offsets, windows

FAST = settings(max_examples=100, deadline=None)
TOLERANCE_S = 1e-4  # LeRobot's tolerance_s


def naive_offsets(deltas: list[float], fps: float) -> list[int]:
    """LeRobot's check_delta_timestamps + get_delta_indices, one delta at a time."""
    out = []
    for d in deltas:
        if abs(d - round(d * fps) / fps) > TOLERANCE_S:
            raise ValueError(f"{d} is not a multiple of 1/fps")
        out.append(round(d * fps))
    return out


def naive_window(i: int, ep_start: int, ep_end: int, offsets: list[int]) -> tuple[list[int], list[bool]]:
    """Rows read by the window of dataset index ``i`` and its padding mask, one offset at a time."""
    rows, pad = [], []
    for o in offsets:
        rows.append(max(ep_start, min(ep_end - 1, i + o)))
        pad.append(i + o < ep_start or i + o >= ep_end)
    return rows, pad


FPS = st.sampled_from([5, 10, 15, 24, 25, 30, 50, 60, 100, 29.97])
offsets_st = st.lists(st.integers(-25, 25), min_size=1, max_size=8)


@FAST
@given(fps=FPS, frames=st.lists(st.tuples(st.integers(-200, 200), st.floats(-0.9, 0.9)), min_size=1, max_size=6))
def test_deltas_within_the_tolerance_become_lerobots_offsets(fps, frames):
    deltas = [k / fps + jitter * TOLERANCE_S for k, jitter in frames]
    got = window_offsets({"obs": deltas}, fps, known=["obs", "action"], missing={})
    assert list(got) == ["obs"] and got["obs"].dtype == np.int64
    assert got["obs"].tolist() == naive_offsets(deltas, fps) == [k for k, _ in frames]


@FAST
@given(fps=FPS, k=st.integers(-200, 200), side=st.sampled_from([-1, 1]), far=st.floats(1.1, 40))
def test_deltas_off_the_frame_grid_are_refused_like_lerobot(fps, k, side, far):
    off = side * min(far * TOLERANCE_S, 0.45 / fps)  # past the tolerance, and still nearest to frame k
    delta = k / fps + off
    with pytest.raises(ValueError):
        naive_offsets([delta], fps)
    with pytest.raises(DeltaTimestampsError, match="not a multiple of 1/fps") as caught:
        window_offsets({"obs": [0.0, delta]}, fps, known=["obs"], missing={})
    assert caught.value.feature == "obs"


def test_several_features_keep_their_own_offsets_in_order():
    got = window_offsets({"action": [0.0, 0.1, 0.2], "obs": [-0.1, 0.0], "cam": [0.3, -0.3, 0.0]}, 10,
                         known=["obs", "action", "cam"], missing={})
    assert {k: v.tolist() for k, v in got.items()} == {"action": [0, 1, 2], "obs": [-1, 0], "cam": [3, -3, 0]}


def test_no_delta_timestamps_means_no_windows():
    assert window_offsets(None, 10, known=["obs"], missing={}) == {}


@pytest.mark.parametrize("deltas, needle", [
    ([[0.0, 0.1]], None), ({"obs": "0.1"}, "list of seconds"), ({"obs": 0.1}, "list of seconds"),
    ({"obs": b"\x00"}, "list of seconds"), ({"obs": ["a"]}, "list of seconds"), ({"obs": []}, "non-empty"),
    ({"obs": [float("nan")]}, "finite"), ({"obs": [float("inf")]}, "finite"), ({"obs": [1e10]}, "finite"),
    ({"obs": [[0.0], [0.1]]}, "flat list"), ({"nope": [0.0]}, "unknown feature 'nope'"),
])
def test_bad_delta_timestamps_are_delta_timestamps_errors(deltas, needle):
    with pytest.raises(DeltaTimestampsError, match=needle or "mapping"):
        window_offsets(deltas, 10, known=["obs"], missing={})


def test_a_feature_the_samples_lack_is_not_materialized_and_says_why():
    with pytest.raises(NotMaterializedError, match="cam.*the video extra is missing") as caught:
        window_offsets({"cam": [0.0]}, 10, known=["obs", "cam"], missing={"cam": "the video extra is missing"})
    assert caught.value.feature == "cam"


@FAST
@given(offsets=offsets_st, length=st.integers(1, 30), data=st.data())
def test_window_frames_against_the_naive_per_sample_loop(offsets, length, data):
    w = Window("obs", np.array(offsets))
    local = data.draw(st.integers(0, length - 1))
    rows, pad = w.frames(local, length)
    assert (rows.tolist(), pad.tolist()) == naive_window(local, 0, length, offsets)


@FAST
@given(offsets=offsets_st, lengths=st.lists(st.integers(1, 20), min_size=1, max_size=6), data=st.data())
def test_window_batches_against_the_naive_per_sample_loop(offsets, lengths, data):
    """Frames of several episodes stored one after the other: ``frames_batch`` in episode-local frames and
    ``rows_batch`` in rows of storage, for a random batch (repeats and any order)."""
    w = Window("obs", np.array(offsets))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    picks = data.draw(st.lists(st.tuples(st.integers(0, len(lengths) - 1), st.floats(0, 1, exclude_max=True)),
                               min_size=1, max_size=12))
    ep = np.array([e for e, _ in picks])
    local = np.array([int(u * lengths[e]) for e, u in picks])
    length = np.array(lengths)[ep]
    expected = [naive_window(starts[e] + f, starts[e], starts[e] + lengths[e], offsets) for e, f in zip(ep, local)]

    rows, pad = w.frames_batch(local, length)
    assert rows.shape == pad.shape == (len(picks), len(offsets))
    assert [(r + starts[e]).tolist() for r, e in zip(rows, ep)] == [r for r, _ in expected]
    assert pad.tolist() == [p for _, p in expected]

    rows, pad = w.rows_batch(starts[ep] + local, starts[ep], starts[ep] + length - 1)
    assert rows.tolist() == [r for r, _ in expected] and pad.tolist() == [p for _, p in expected]


@pytest.mark.parametrize("offsets, lo, hi, contiguous", [
    ([0], 0, 0, True), ([-2, -1, 0], -2, 0, True), ([0, 1, 2, 3], 0, 3, True), ([0, 2], 0, 2, False),
    ([1, 0], 0, 1, False), ([0, 0], 0, 0, False), ([-5, 5], -5, 5, False),
])
def test_window_summary(offsets, lo, hi, contiguous):
    """``lo``/``hi`` bound the frames a window reaches; ``contiguous`` means one block of consecutive frames in
    the order asked (what lets a reader take one slice instead of a gather)."""
    w = windows({"action": np.array(offsets)})["action"]
    assert (w.name, w.pad_key) == ("action", "action_is_pad")
    assert (w.lo, w.hi, w.contiguous) == (lo, hi, contiguous)
    assert w.no_pad.tolist() == [False] * len(offsets)


def test_windows_of_every_feature():
    ws = windows(window_offsets({"obs": [-0.1, 0], "action": [0, 0.1]}, 10, known=["obs", "action"], missing={}))
    assert sorted(ws) == ["action", "obs"] and ws["obs"].offsets.tolist() == [-1, 0]
