"""``lerobot_zarr.sampling.selection`` on its own: which frames an episode selection serves, against a naive
reference written here with Python's own slicing (``range(n)[slice]``) and plain loops, no data access.

- ``frame_range``: the frames of a slice / range / ``(first, stop)`` of one episode are the frames Python's slicing
  picks from ``range(n)``; bounds outside ``[-n, n]`` are a ``FrameIndexError``, steps and non-integers an
  ``ArgumentError``.
- ``episode_ranges``: a list of episodes or ``{episode: frames}`` becomes sorted ``(episode, first, stop)``
  triples whatever the order given (as LeRobot's filtering); unknown episodes and empty ranges are refused.
- ``check_selection``: a user's selection checked and given plain ``int`` indices before anything uses it.
- ``Selection``: dataset index ``i`` -> (episode, frame inside it) equals the flattened list of selected frames.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lerobot_zarr.errors import ArgumentError, FrameIndexError
from lerobot_zarr.sampling.selection import Selection, check_selection, episode_ranges, frame_range

FAST = settings(max_examples=100, deadline=None)


def naive_frames(frames: slice | range | tuple[int, int] | None, n: int) -> list[int]:
    """The frames of an episode of ``n`` a selection picks: Python's slicing of ``range(n)``."""
    if frames is None:
        return list(range(n))
    if isinstance(frames, tuple):
        frames = slice(*frames)
    return list(range(n)[slice(frames.start, frames.stop)])


def naive_ranges(episodes: list[int] | dict, lengths: list[int]) -> list[tuple[int, int, int]]:
    """Sorted ``(episode, first, stop)``; the last entry given for an episode wins."""
    picked = {e: None for e in episodes} if isinstance(episodes, list) else dict(episodes)
    out = []
    for e in sorted(picked):
        frames = naive_frames(picked[e], lengths[e])
        out.append((e, frames[0], frames[-1] + 1))
    return out


bound = st.none() | st.integers(-40, 40)


@FAST
@given(n=st.integers(0, 30), start=bound, stop=bound, kind=st.sampled_from(["slice", "range", "tuple"]))
def test_frame_range_picks_what_python_slicing_picks(n, start, stop, kind):
    if kind == "range":
        frames = range(0 if start is None else start, n if stop is None else stop)
        start, stop = frames.start, frames.stop
    else:
        frames = slice(start, stop) if kind == "slice" else (start, stop)
    if any(b is not None and not -n <= b <= n for b in (start, stop)):
        with pytest.raises(FrameIndexError, match="reach outside the episode") as caught:
            frame_range(frames, n, "episode 7", episode=7)
        assert caught.value.episode == 7
        return
    first, stop_ = frame_range(frames, n, "episode 7", episode=7)
    assert list(range(first, stop_)) == naive_frames(frames, n)
    assert 0 <= first <= n and stop_ <= n


@pytest.mark.parametrize("n", [0, 1, 5])
def test_frame_range_of_none_is_the_whole_episode(n):
    assert frame_range(None, n, "here") == (0, n)


@pytest.mark.parametrize("frames, needle", [
    (slice(0, 4, 2), "step 1"), (range(0, 4, 2), "step 1"), (slice(0, 4, -1), "step 1"),
    ((1, 2, 3), r"\(first, stop\)"), ((1,), r"\(first, stop\)"),
    (slice(0.5, 3), "integer bounds"), ((0, "3"), "integer bounds"),
    ([0, 3], "slice, range or"), (3, "slice, range or"),
])
def test_frame_range_refuses_other_kinds(frames, needle):
    with pytest.raises(ArgumentError, match=needle) as caught:
        frame_range(frames, 10, "episode 2")
    assert str(caught.value).startswith("episode 2: ")


def test_frame_range_takes_numpy_integer_bounds():
    assert frame_range(slice(np.int64(2), np.int32(-1)), 10, "e") == (2, 9)


lengths_st = st.lists(st.integers(1, 12), min_size=1, max_size=8)


@st.composite
def selections(draw):
    """(lengths, a valid selection of them as a list or a dict of frame ranges)."""
    lengths = draw(lengths_st)
    episodes = draw(st.lists(st.integers(0, len(lengths) - 1), min_size=1, max_size=10))
    if draw(st.booleans()):
        return lengths, episodes
    picked = {}
    for e in episodes:
        n = lengths[e]
        first = draw(st.integers(-n, n - 1))
        stop = draw(st.integers((first % n) + 1, n) | st.just(None))
        frames = draw(st.sampled_from([None, slice(first, stop), (first, stop)]))
        if isinstance(frames, tuple) and stop is None:
            frames = (first, n)
        picked[e] = frames
    return lengths, picked


@FAST
@given(case=selections(), numpy_lengths=st.booleans())
def test_episode_ranges_against_a_naive_reference(case, numpy_lengths):
    lengths, episodes = case
    got = episode_ranges(episodes, np.asarray(lengths) if numpy_lengths else lengths)
    assert got == naive_ranges(episodes, lengths)
    assert all(type(x) is int for row in got for x in row)


def test_episode_ranges_ignores_the_order_given():
    lengths = np.array([5, 6, 7, 8])
    assert episode_ranges([3, 0, 2], lengths) == episode_ranges([0, 2, 3], lengths) == [(0, 0, 5), (2, 0, 7),
                                                                                       (3, 0, 8)]
    assert episode_ranges({3: (1, 3), 1: slice(-2, None)}, lengths) == [(1, 4, 6), (3, 1, 3)]


@pytest.mark.parametrize("episodes, needle", [
    ([4], "episode 4 does not exist"), ([-1], "episode -1 does not exist"), ({9: None}, "episode 9 does not exist"),
    ({1: slice(3, 3)}, "is empty"), ({1: (4, 2)}, "is empty"), ({0: slice(-1, 0)}, "is empty"),
    ({2: slice(0, 8)}, "reach outside"),
])
def test_episode_ranges_refuses_unknown_episodes_and_empty_ranges(episodes, needle):
    with pytest.raises(FrameIndexError, match=needle):
        episode_ranges(episodes, np.array([5, 6, 7, 8]))


@pytest.mark.parametrize("episodes, expected", [
    (None, None), ([np.int64(3), 1], [3, 1]), (np.array([2, 0], dtype=np.uint8), [2, 0]), (range(2, 5), [2, 3, 4]),
    ((1, 1), [1, 1]), ({np.int32(4): (1, 2), 0: None}, {4: (1, 2), 0: None}),
])
def test_check_selection_gives_plain_integers(episodes, expected):
    checked = check_selection(episodes)
    assert checked == expected
    if checked is not None:
        assert all(type(e) is int for e in checked)


@pytest.mark.parametrize("episodes", [
    "0,1", b"01", 3, 2.0, {1, 2}, [1.0], [True], [np.bool_(False)], ["1"], np.zeros((2, 2), dtype=int), {1.5: None},
])
def test_check_selection_refuses_what_is_not_a_list_of_indices(episodes):
    with pytest.raises(ArgumentError, match="episode"):
        check_selection(episodes)


@FAST
@given(case=selections(), data=st.data())
def test_selection_maps_dataset_indices_like_the_flattened_frames(case, data):
    lengths, episodes = case
    lengths = np.asarray(lengths)
    sel = Selection.of(episodes, lengths, default=np.ones(len(lengths), dtype=bool))
    flat = [(e, f) for e, first, stop in naive_ranges(episodes, lengths.tolist()) for f in range(first, stop)]
    assert len(sel) == len(flat)
    k_episodes, k_frames = sel.locate_many(np.arange(len(flat)))
    assert list(zip(k_episodes.tolist(), k_frames.tolist())) == flat
    negative = data.draw(st.lists(st.integers(-len(flat), -1), max_size=5))
    e, f = sel.locate_many(np.array(negative, dtype=np.int64))
    assert list(zip(e.tolist(), f.tolist())) == [flat[i] for i in negative]
    for e in sorted({e for e, _ in flat}):
        assert [flat[i] for i in sel.frames_of(e)] == [p for p in flat if p[0] == e]
    again = Selection.of(Selection.from_args(sel.to_args(lengths)), lengths, default=np.zeros(len(lengths), bool))
    assert np.array_equal(again.episodes, sel.episodes) and np.array_equal(again.cum, sel.cum)
    with pytest.raises(FrameIndexError, match="out of range"):
        sel.locate_many([len(flat)])
    with pytest.raises(FrameIndexError, match="out of range"):
        sel.locate_many([-len(flat) - 1])


def test_no_selection_serves_the_default_mask_whole():
    lengths = np.array([3, 4, 5])
    sel = Selection.of(None, lengths, default=np.array([True, False, True]))
    assert len(sel) == 8 and sel.episodes.tolist() == [0, 2] and sel.whole(lengths)
    assert sel.locate_many([2, 3, -1])[0].tolist() == [0, 2, 2]
    with pytest.raises(FrameIndexError, match="not selected"):
        sel.frames_of(1)


@pytest.mark.parametrize("indices", [np.array([0.0]), np.zeros((1, 1), dtype=int)])
def test_selection_refuses_indices_that_are_not_1d_integers(indices):
    with pytest.raises(ArgumentError, match="indices must be"):
        Selection.of([0], np.array([3]), default=np.ones(1, bool)).locate_many(indices)
