"""The replay buffer's storage without torch (issue 24): :class:`lerobot_zarr.writing.transitions.TransitionBuffer`.

Checked against reference transitions rebuilt from their identity (``rl_reference``), never against the code
itself: every transition comes back exactly as added (``next_state`` too, at episode ends: the final
observation), episodes end at done/truncated and are normal store episodes, ``checkpoint`` commits the episode in
progress without splitting it, the ring buffer drops whole oldest episodes and ``len <= capacity`` at every step,
reopening gives back every committed transition, a reader in another process sees what a writer commits, and a
SIGKILL at any moment (adds, checkpoints) loses at most the unfinished episode.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import rl_reference as ref
import s3_fixtures
from rl_reference import CAMERA, STATE, check_batch, transitions

import lerobot_zarr
from lerobot_zarr import (
    ArgumentError,
    ReadOnlyStoreError,
    SchemaMismatchError,
    SourceMismatchError,
    StoreError,
    StoreExistsError,
    StoreLockedError,
    StoreNotFoundError,
    ValueRangeError,
)
from lerobot_zarr.lerobot.format import DEFAULT_FEATURES
from lerobot_zarr.store.log import FOLD_RECORDS
from lerobot_zarr.store.state import live_path, read_state
from lerobot_zarr.writing.transition_layout import LAYOUT_FILE
from lerobot_zarr.writing.transitions import TransitionBuffer

SEED = 7
s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test
TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def add_episodes(buf: TransitionBuffer, episodes, *, seed: int = SEED, **kwargs) -> list[tuple[int, int]]:
    """Add the reference episodes; return the (episode, step) identities added, in order."""
    ids = []
    for e in episodes:
        for t, tr in enumerate(transitions(seed, e, **kwargs)):
            buf.add(**tr)
            ids.append((e, t))
    return ids


def everything(buf: TransitionBuffer, **kwargs) -> list[tuple[int, int]]:
    """Every transition the buffer holds, oldest first, checked against the reference."""
    return check_batch(buf.gather(np.arange(len(buf))), SEED, **kwargs) if len(buf) else []


def test_every_transition_comes_back_as_added_episode_ends_included(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf")
    ids = add_episodes(buf, range(12))
    assert len(buf) == len(ids)
    assert everything(buf) == ids
    ends = [i for i, (e, t) in enumerate(ids) if t == ref.episode(SEED, e)["length"] - 1]
    got = buf.gather(np.array(ends))
    finals = np.stack([ref.episode(SEED, e)["states"][-1] for e, _ in (ids[i] for i in ends)])
    assert np.array_equal(got["next_state"][STATE], finals), "final observations differ"
    assert got["done"].sum() + got["truncated"].sum() == len(ends)
    buf.close()


def test_the_store_is_a_normal_lerobot_store_one_frame_per_transition(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf", fps=10)
    ids = add_episodes(buf, range(6))
    buf.close()
    ds = lerobot_zarr.open_dataset(tmp_path / "buf")
    lengths = [ref.episode(SEED, e)["length"] for e in range(6)]
    assert ds.meta.episode_length.tolist() == lengths and len(ds) == len(ids)
    assert ds.meta.fps == 10
    assert set(ds.meta.features) == {STATE, CAMERA, "action", "next.reward", "next.done", "next.truncated",
                                     "complementary_info.penalty", *DEFAULT_FEATURES}
    assert ds.meta.features[CAMERA]["dtype"] == "image" and ds.meta.features[CAMERA]["shape"] == [6, 8, 3]
    batch = ds.get_batch(np.arange(len(ds)))
    for i, (e, t) in enumerate(ids):
        ep = ref.episode(SEED, e)
        assert np.array_equal(batch[STATE][i], ep["states"][t]) and batch["frame_index"][i] == t
        assert np.array_equal(batch[CAMERA][i], ep["pixels"][t].transpose(1, 2, 0))
        assert batch["next.reward"][i] == ep["rewards"][t] and batch["episode_index"][i] == e
        assert bool(batch["next.done"][i]) == (t == ep["length"] - 1 and ep["end"] == "done")
    assert batch["task"][0] == "from_replay_buffer"
    # stats are those of the frames (the final observation rows are not frames)
    actions = np.concatenate([ref.episode(SEED, e)["actions"] for e in range(6)])
    assert np.allclose(ds.meta.stats["action"]["mean"], actions.mean(0), rtol=1e-6, atol=1e-7)
    assert np.array_equal(np.asarray(ds.meta.stats["action"]["max"], np.float32), actions.max(0))
    assert ds.meta.stats["action"]["count"] == [len(ids)]
    # frame_live lists the frames, not the final observation rows after each episode
    state = read_state(tmp_path / "buf")
    live = np.fromfile(live_path(tmp_path / "buf", 0), dtype=np.uint8).astype(bool)
    expect = np.zeros_like(live)
    for o, n in zip(state.table.offset.tolist(), state.table.length.tolist(), strict=True):
        expect[o:o + n] = True
        assert not live[o + n], "the final observation row is not a frame"
    assert np.array_equal(live, expect)
    assert json.loads((tmp_path / "buf" / LAYOUT_FILE).read_text())["version"] == 1


def test_to_xarray_sees_the_transitions(tmp_path):
    pytest.importorskip("xarray")
    buf = TransitionBuffer(tmp_path / "buf")
    ids = add_episodes(buf, range(4))
    x = buf.dataset().to_xarray()
    assert x.sizes["episode"] == 4 and x.sizes["frame"] == len(ids), "frames are the transitions"
    rewards = np.concatenate([ref.episode(SEED, e)["rewards"] for e in range(4)])
    assert np.array_equal(x["next.reward"].values, rewards)
    buf.close()


@pytest.mark.parametrize("capacity", [None, 80], ids=["in place", "relocated"])
def test_checkpoint_commits_the_episode_in_progress_without_splitting_it(tmp_path, capacity):
    """A checkpoint mid-episode commits it; the next adds extend the same episode (written after its rows, or
    the episode copied to fresh rows when its pack is full: packs of 10 rows with capacity=80)."""
    kw = {"max_len": 30}
    e = next(e for e in range(1, 100) if ref.episode(SEED, e, **kw)["length"] >= 15)
    buf = TransitionBuffer(tmp_path / "buf", capacity=capacity)
    ids = add_episodes(buf, [0], **kw)
    seen, places = [], set()
    for t, tr in enumerate(transitions(SEED, e, **kw)):
        buf.add(**tr)
        seen.append((e, t))
        if t % 3 == 1:
            buf.checkpoint()
            table = read_state(tmp_path / "buf").table
            places.add((int(table.chunk[-1]), int(table.offset[-1])))
            reader = TransitionBuffer(tmp_path / "buf", mode="r")
            got = reader.gather(np.arange(len(reader)))
            assert check_batch(got, SEED, **kw) == ids + seen, "a checkpoint commits every transition added"
            assert np.array_equal(got["next_state"][STATE][-1], tr["next_state"][STATE][0]), \
                "the episode in progress keeps its last next_state"
            reader.close()
    assert (len(places) > 1) == (capacity is not None), f"extended in place / moved to fresh rows: {places}"
    assert len(places) <= 4, f"a moved episode gets room to grow (doubling): {len(places)} places for {len(seen)}"
    buf.close()
    lengths = [ref.episode(SEED, 0, **kw)["length"], len(seen)]
    ds = lerobot_zarr.open_dataset(tmp_path / "buf")
    assert ds.meta.episode_length.tolist() == lengths, "one episode, not split"
    reopened = TransitionBuffer(tmp_path / "buf", capacity=capacity)
    assert check_batch(reopened.gather(np.arange(len(reopened))), SEED, **kw) == ids + seen
    e1 = ds.episode(1)
    assert e1["frame_index"].tolist() == list(range(len(seen)))
    assert np.array_equal(e1["timestamp"], (np.arange(len(seen)) / ds.meta.fps).astype(np.float32))
    assert e1["index"].tolist() == list(range(len(ids), len(ids) + len(seen)))
    assert e1["episode_index"].tolist() == [1] * len(seen)
    stats = ds.meta.stats["action"]
    actions = np.concatenate([ref.episode(SEED, k, **kw)["actions"] for k in (0, e)])
    assert stats["count"] == [len(actions)] and np.allclose(stats["mean"], actions.mean(0), rtol=1e-6, atol=1e-7)
    reopened.close()


def test_transitions_added_after_a_checkpoint_and_not_committed_are_sampled_too(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf")
    ids = add_episodes(buf, range(3))
    part = transitions(SEED, 3)[:-1]
    for tr in part[:2]:
        buf.add(**tr)
    buf.checkpoint()
    for tr in part[2:]:
        buf.add(**tr)
    assert everything(buf) == ids + [(3, t) for t in range(len(part))], "writer: committed + pending, in order"
    batch = buf.sample(400)
    assert len(batch["reward"]) == len(buf), "as LeRobot: min(batch_size, len)"
    drawn = set()
    for _ in range(200):
        drawn |= set(check_batch(buf.sample(400), SEED))
    assert drawn == set(ids) | {(3, t) for t in range(len(part))}
    buf.close()


def test_close_commits_the_episode_in_progress_and_reopening_gives_everything_back(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf", capacity=1000)
    ids = add_episodes(buf, range(5))
    part = transitions(SEED, 5)
    for tr in part[:-1]:
        buf.add(**tr)
    buf.close()
    reopened = TransitionBuffer(tmp_path / "buf", capacity=1000)
    ids += [(5, t) for t in range(len(part) - 1)]
    assert len(reopened) == len(ids) and everything(reopened) == ids
    more = add_episodes(reopened, range(6, 9))
    assert everything(reopened) == ids + more
    reopened.close()


def test_transitions_not_committed_are_lost_by_a_crash_but_nothing_else(tmp_path):
    """Dropping the object without close() is what a killed process does: the unfinished episode is lost."""
    buf = TransitionBuffer(tmp_path / "buf")
    ids = add_episodes(buf, range(4))
    for tr in transitions(SEED, 4)[:-1]:
        buf.add(**tr)
    buf._writer._release()  # the lock goes as when the process dies; nothing is committed
    reopened = TransitionBuffer(tmp_path / "buf")
    assert everything(reopened) == ids
    reopened.close()


def test_ring_buffer_drops_whole_oldest_episodes_and_never_holds_more_than_capacity(tmp_path):
    capacity = 25
    buf = TransitionBuffer(tmp_path / "buf", capacity=capacity)
    added: list[tuple[int, int]] = []
    for e in range(30):
        for t, tr in enumerate(transitions(SEED, e)):
            buf.add(**tr)
            added.append((e, t))
            n = len(buf)
            assert n <= capacity, f"len {n} > capacity after episode {e} step {t}"
            held = everything(buf)
            assert held == added[len(added) - n:], "the newest transitions, oldest first"
            first = held[0]
            assert first[1] == 0, "whole episodes only: the oldest held starts at its step 0"
    committed = lerobot_zarr.open_dataset(tmp_path / "buf")
    assert committed.meta.total_frames <= capacity
    assert committed.meta.episode_length.tolist() == [ref.episode(SEED, e)["length"] for e in
                                                      sorted({e for e, _ in everything(buf)})]
    buf.close()
    reopened = TransitionBuffer(tmp_path / "buf", capacity=capacity)
    assert everything(reopened) == added[len(added) - len(reopened):]
    reopened.close()


def test_reopening_with_another_capacity_changes_it(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf", capacity=100)
    ids = add_episodes(buf, range(10))
    buf.close()
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="oldest .* episode.*dropped"):
        smaller = TransitionBuffer(tmp_path / "buf", capacity=20)
    assert len(smaller) <= 20 and everything(smaller) == ids[len(ids) - len(smaller):]
    assert smaller.capacity == 20 and read_state(tmp_path / "buf").capacity_frames == 20
    smaller.close()


def test_reopening_with_a_capacity_below_the_longest_episode_held_is_refused_and_drops_nothing(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf", capacity=100)
    ids = add_episodes(buf, range(4))
    buf.close()
    longest = int(read_state(tmp_path / "buf").table.length.max())
    for capacity in (1, longest - 1):
        with pytest.raises(ArgumentError, match=f"capacity={capacity} is below the longest episode .*{longest}"):
            TransitionBuffer(tmp_path / "buf", capacity=capacity)
    again = TransitionBuffer(tmp_path / "buf", capacity=100)
    assert everything(again) == ids and again.capacity == 100, "nothing was dropped"
    again.close()


def test_an_episode_longer_than_the_capacity_is_refused_before_anything_changes(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf", capacity=5)
    long = transitions(SEED, 0, max_len=30)
    assert len(long) > 5
    for tr in long[:5]:
        buf.add(**tr)
    with pytest.raises(ArgumentError, match="capacity 5"):
        buf.add(**long[5])
    assert len(buf) == 5


def test_a_state_that_does_not_continue_the_episode_starts_a_new_one(tmp_path):
    kw = {"max_len": 30}
    e = next(e for e in range(100) if ref.episode(SEED, e, **kw)["length"] >= 4)
    buf = TransitionBuffer(tmp_path / "buf")
    first = transitions(SEED, e, **kw)[:3]
    other = transitions(SEED, e + 1, **kw)
    for tr in first:
        buf.add(**tr)
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="differs from the previous transition's next_state"):
        for tr in other:
            buf.add(**tr)
    assert everything(buf, **kw) == [(e, 0), (e, 1), (e, 2)] + [(e + 1, t) for t in range(len(other))]
    lengths = lerobot_zarr.open_dataset(tmp_path / "buf").meta.episode_length.tolist()
    assert lengths == [3, len(other)]
    buf.close()


def test_values_keep_lerobot_shapes_and_dtypes(tmp_path):
    """LeRobot drops a leading 1 (``squeeze(0)``): (1, 1) -> (1,), (1,) -> (), and gives float32 back."""
    buf = TransitionBuffer(tmp_path / "buf")
    rng = np.random.default_rng(0)
    nxt = {"observation.state": rng.standard_normal((1, 3)), "observation.gripper": np.array([[0.5]]),
           "observation.scalar": np.array([0.0])}
    for t in range(6):
        state, nxt = nxt, {k: v + 1 for k, v in nxt.items()}
        buf.add(state, np.array([[1.0, 2.0]]), np.array([[0.5]]), nxt, t == 5, False,
                {"flag": np.array([t % 2 == 0]), "python": 3, "vec": np.ones((1, 1, 2), np.uint8)})
    got = buf.gather(np.arange(6))
    shapes = {k: v.shape for k, v in got["state"].items()}
    assert shapes == {"observation.state": (6, 3), "observation.gripper": (6, 1), "observation.scalar": (6,)}
    assert {k: v.shape for k, v in got["complementary_info"].items()} == {"flag": (6,), "python": (6,),
                                                                         "vec": (6, 1, 2)}
    assert all(v.dtype == np.float32 for v in [*got["state"].values(), *got["complementary_info"].values(),
                                              got["action"], got["reward"]])
    assert got["complementary_info"]["flag"].tolist() == [1, 0, 1, 0, 1, 0]
    features = lerobot_zarr.open_dataset(tmp_path / "buf").meta.features
    assert features["complementary_info.flag"]["dtype"] == "bool"
    assert features["complementary_info.vec"]["dtype"] == "uint8"
    assert features["observation.state"]["dtype"] == "float32"
    buf.close()


def test_cameras_not_made_of_uint8_pixels_are_rounded_with_a_warning_or_kept_exactly_in_float32(tmp_path):
    rng = np.random.default_rng(0)
    frames = rng.random((4, 1, 3, 5, 5)).astype(np.float32)  # resized frames: not multiples of 1/255

    def add_all(buf):
        for t in range(3):
            buf.add({CAMERA: frames[t]}, np.zeros((1, 1)), 0.0, {CAMERA: frames[t + 1]}, t == 2, False)

    rounded = TransitionBuffer(tmp_path / "rounded")
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="not multiples of 1/255"):
        add_all(rounded)
    got = rounded.gather(np.arange(3))["state"][CAMERA]
    assert np.abs(got - frames[:3, 0]).max() <= 0.5 / 255 + 1e-7
    exact = TransitionBuffer(tmp_path / "exact", image_storage="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        add_all(exact)
    got = exact.gather(np.arange(3))
    assert np.array_equal(got["state"][CAMERA], frames[:3, 0]) and np.array_equal(got["next_state"][CAMERA],
                                                                                   frames[1:4, 0])
    with pytest.raises(ValueRangeError, match=r"\[0, 1\]"):
        TransitionBuffer(tmp_path / "bad").add({CAMERA: frames[0] * 2}, np.zeros(1), 0.0, {CAMERA: frames[1]},
                                               False, False)
    rounded.close(), exact.close()


def test_bad_transitions_are_refused_with_the_value_named(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf")
    good = transitions(SEED, 0, max_len=30)
    buf.add(**good[0])
    bad_shape = dict(good[1], action=np.zeros((1, 5), np.float32))
    with pytest.raises(SchemaMismatchError, match="action: shape"):
        buf.add(**bad_shape)
    with pytest.raises(SchemaMismatchError, match="state has keys"):
        buf.add(**dict(good[1], state={STATE: good[1]["state"][STATE]}))
    with pytest.raises(SchemaMismatchError, match="complementary_info lacks"):
        buf.add(**dict(good[1], complementary_info={}))
    with pytest.raises(ValueRangeError, match="done"):
        buf.add(**dict(good[1], done=2))
    with pytest.raises(ArgumentError, match="reward"):
        buf.add(**dict(good[1], reward=np.zeros(3)))
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match=r"\['extra'\] are not in this buffer"):
        buf.add(**dict(good[1], complementary_info={"penalty": 0.5, "extra": 1.0}))
    assert len(buf) == 2, "refused transitions are not added"
    buf.close()


def test_one_writer_at_a_time_and_readers_cannot_add(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf")
    add_episodes(buf, [0])
    with pytest.raises(StoreLockedError, match="mode='r'"):
        TransitionBuffer(tmp_path / "buf")
    reader = TransitionBuffer(tmp_path / "buf", mode="r")
    with pytest.raises(ReadOnlyStoreError, match="mode='r'"):
        reader.add(**transitions(SEED, 1)[0])
    buf.close()
    with pytest.raises(StoreNotFoundError, match="no such folder") as info:
        TransitionBuffer(tmp_path / "nowhere", mode="r")
    assert isinstance(info.value, FileNotFoundError)


def test_a_store_that_is_not_a_buffer_is_refused(tmp_path):
    with lerobot_zarr.create(tmp_path / "ds", fps=10, features={"action": {"dtype": "float32", "shape": [2]}}) as w:
        w.add_episode({"action": np.zeros((3, 2), np.float32)}, task="t")
    with pytest.raises(SourceMismatchError, match="not a replay buffer"):
        TransitionBuffer(tmp_path / "ds")
    with pytest.raises(SourceMismatchError, match="not a replay buffer"):
        TransitionBuffer(tmp_path / "ds", mode="r")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("x")
    with pytest.raises(StoreExistsError, match="holds files but no store"):
        TransitionBuffer(tmp_path / "junk")


def _layout_replaced(root: Path, how: str) -> None:
    path = root / LAYOUT_FILE
    doc = json.loads(path.read_bytes())
    path.unlink()
    if how == "a folder":
        path.mkdir()
    elif how == "a link out of the store":
        (root.parent / "elsewhere.json").write_text(json.dumps(doc))
        path.symlink_to(root.parent / "elsewhere.json")
    elif how == "deep JSON":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif how == "a wrong shape":
        doc["action"]["shape"] = [doc["action"]["shape"][0] + 3]
        path.write_text(json.dumps(doc))
    elif how == "another feature":
        doc["action"]["feature"] = "observation.nothing"
        path.write_text(json.dumps(doc))
    else:  # huge
        path.write_text(json.dumps({**doc, "padding": "x" * (2 << 20)}))


@pytest.mark.parametrize("how", ["a folder", "a link out of the store", "deep JSON", "a wrong shape",
                                 "another feature", "huge"])
def test_a_hostile_layout_file_is_a_typed_error_for_writers_and_readers(tmp_path, how):
    buf = TransitionBuffer(tmp_path / "buf")
    add_episodes(buf, range(2))
    buf.close()
    _layout_replaced(tmp_path / "buf", how)
    for mode in ("a", "r"):
        with pytest.raises(StoreError, match=LAYOUT_FILE.replace(".", r"\.")) as info:
            reader = TransitionBuffer(tmp_path / "buf", mode=mode)
            reader.sample(4)  # a reader that opened would read values of the wrong shape
        assert info.value.path is not None and str(tmp_path / "buf") in info.value.path


def test_a_reader_sees_commits_after_refresh_and_by_itself_every_interval(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf")
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="holds no replay buffer yet"):
        early = TransitionBuffer(tmp_path / "buf", mode="r", refresh_interval=None)
    ids = add_episodes(buf, range(3))
    manual = TransitionBuffer(tmp_path / "buf", mode="r", refresh_interval=None)
    auto = TransitionBuffer(tmp_path / "buf", mode="r", refresh_interval=0.0)
    assert len(early) == 0 and len(manual) == len(ids)
    assert early.refresh() and len(early) == len(ids)
    more = add_episodes(buf, range(3, 5))
    assert len(manual) == len(ids), "a reader keeps its commit until it refreshes"
    assert len(auto) == len(ids) + len(more)
    assert manual.refresh() and not manual.refresh() and len(manual) == len(ids) + len(more)
    assert everything(manual) == ids + more
    for r in (early, manual, auto, buf):
        r.close()


def test_episodes_moved_by_another_writer_lose_their_final_observation_with_a_warning(tmp_path):
    """Deleting episodes compacts mostly dead packs (their live episodes are copied without the row after them):
    those episodes' last transitions then get next_state = state, and the reader says so."""
    buf = TransitionBuffer(tmp_path / "buf", capacity=80)  # packs of 10 rows
    add_episodes(buf, range(12))
    buf.close()
    before = read_state(tmp_path / "buf").table
    kept = [3, 7, 11]
    with lerobot_zarr.open_dataset(tmp_path / "buf", mode="r+") as w:
        w.delete_episodes([e for e in range(12) if e not in kept])
    after = read_state(tmp_path / "buf").table
    moved = [k for k, e in enumerate(kept) if (after.chunk[k], after.offset[k]) != (before.chunk[e],
                                                                                    before.offset[e])]
    assert moved and len(moved) < len(kept), "the layout moves some episodes, not all"
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match=f"{len(moved)} episodes .* lack their final"):
        reader = TransitionBuffer(tmp_path / "buf", mode="r")
    got = reader.gather(np.arange(len(reader)))
    i = 0
    for k, e in enumerate(kept):
        ep = ref.episode(SEED, e)
        n = ep["length"]
        assert np.array_equal(got["state"][STATE][i:i + n], ep["states"][:n])
        assert np.array_equal(got["next_state"][STATE][i:i + n - 1], ep["states"][1:n])
        end = got["next_state"][STATE][i + n - 1]
        assert np.array_equal(end, ep["states"][n - 1] if k in moved else ep["states"][n]), f"episode {e}"
        i += n
    reader.close()


def test_interrupted_creation_leaves_a_folder_the_next_buffer_takes(tmp_path):
    """A crash after the store was made and before its layout file: the empty store is taken by the next buffer
    with the same values (refused with other ones)."""
    buf = TransitionBuffer(tmp_path / "buf")
    add_episodes(buf, [0])
    buf.close()
    other = tmp_path / "other"
    b2 = TransitionBuffer(other)
    b2.add(**transitions(SEED, 0, max_len=30)[0])
    b2._writer._release()
    (other / LAYOUT_FILE).unlink()
    # the store exists with its features; no episode was committed
    again = TransitionBuffer(other)
    ids = add_episodes(again, range(2))
    assert everything(again) == ids
    again.close()
    (other / LAYOUT_FILE).unlink()
    with pytest.raises(StoreError, match="not a replay buffer"):
        TransitionBuffer(other)


# ------------------------------------------------------------------------------------- dataset views


def _rl_dataset(root: Path, *, done: bool = True) -> list[dict]:
    """A LeRobot-style RL dataset (one frame per transition, no final observations), as gym_manipulator records
    it: episodes of the reference without their last state; returns the episodes."""
    eps = [ref.episode(SEED, e) for e in range(5)]
    features = {STATE: {"dtype": "float32", "shape": [ref.STATE_DIM]},
                CAMERA: {"dtype": "image", "shape": [6, 8, 3]},
                "action": {"dtype": "float32", "shape": [ref.ACTION_DIM]},
                "next.reward": {"dtype": "float32", "shape": [1]},
                "complementary_info.penalty": {"dtype": "float32", "shape": [1]}}
    if done:
        features["next.done"] = {"dtype": "bool", "shape": [1]}
    with lerobot_zarr.create(root, fps=10, features=features) as w:
        for ep in eps:
            n = ep["length"]
            frames = {STATE: ep["states"][:n], CAMERA: ep["pixels"][:n].transpose(0, 2, 3, 1),
                      "action": ep["actions"], "next.reward": ep["rewards"], "complementary_info.penalty":
                      ep["penalty"]}
            if done:
                frames["next.done"] = np.arange(n) == n - 1
            w.add_episode(frames, task="pick")
    return eps


@pytest.mark.parametrize("done", [True, False], ids=["next.done", "done inferred"])
def test_a_dataset_read_as_transitions_follows_lerobots_rules(tmp_path, done):
    eps = _rl_dataset(tmp_path / "ds", done=done)
    view = TransitionBuffer.of_dataset(lerobot_zarr.open_dataset(tmp_path / "ds"), [STATE, CAMERA])
    got = view.gather(np.arange(len(view)))
    i = 0
    for ep in eps:
        n = ep["length"]
        for t in range(n):
            nxt = t + 1 if t < n - 1 else t  # LeRobot: next frame's state inside the episode, else its own
            assert np.array_equal(got["state"][STATE][i], ep["states"][t])
            assert np.array_equal(got["next_state"][STATE][i], ep["states"][nxt])
            assert np.array_equal(got["next_state"][CAMERA][i], ep["pixels"][nxt] / np.float32(255))
            assert got["done"][i] == (t == n - 1) and not got["truncated"][i]
            assert got["complementary_info"]["penalty"][i].shape == (), "LeRobot's items of shape [1] are numbers"
            assert got["reward"][i] == ep["rewards"][t]
            i += 1
    with pytest.raises(ReadOnlyStoreError, match="cannot add"):
        view.add(**transitions(SEED, 0)[0])
    with pytest.raises(SchemaMismatchError, match=r"\['observation.missing'\]"):
        TransitionBuffer.of_dataset(lerobot_zarr.open_dataset(tmp_path / "ds"), ["observation.missing"])
    view.close()


def test_a_dataset_copied_into_a_buffer_gives_the_same_transitions_and_takes_adds(tmp_path):
    _rl_dataset(tmp_path / "ds")
    view = TransitionBuffer.of_dataset(lerobot_zarr.open_dataset(tmp_path / "ds"), [STATE, CAMERA])
    copy = TransitionBuffer(tmp_path / "copy")
    copy.copy_from(view, progress=False)
    a, b = view.gather(np.arange(len(view))), copy.gather(np.arange(len(copy)))
    assert len(copy) == len(view)
    for key in ("action", "reward", "done", "truncated"):
        assert np.array_equal(a[key], b[key]), key
    for part in ("state", "next_state"):
        for key in a[part]:
            assert np.array_equal(a[part][key], b[part][key]), (part, key)
    assert np.array_equal(a["complementary_info"]["penalty"], b["complementary_info"]["penalty"])
    assert lerobot_zarr.open_dataset(tmp_path / "copy").meta.total_episodes == 5
    copy.close()


def test_export_writes_a_lerobot_folder_and_other_fps_or_task_through_a_copy(tmp_path):
    buf = TransitionBuffer(tmp_path / "buf", fps=10)
    ids = add_episodes(buf, range(3))
    for tr in transitions(SEED, 3)[:-1]:
        buf.add(**tr)
        ids.append((3, len(ids)))
    same = buf.export(tmp_path / "same")
    other = buf.export(tmp_path / "other", fps=5, task="stack")
    info = json.loads((same / "meta" / "info.json").read_text())
    assert info["fps"] == 10 and info["total_frames"] == len(ids) and info["total_episodes"] == 4
    assert json.loads((other / "meta" / "info.json").read_text())["fps"] == 5
    a, b = lerobot_zarr.open_dataset(same), lerobot_zarr.open_dataset(other)
    assert b.get_batch([0])["task"] == ["stack"] and a.get_batch([0])["task"] == ["from_replay_buffer"]
    assert np.allclose(b.episode(0)["timestamp"], np.arange(b.meta.episode_length[0]) / 5)
    for name in (STATE, "action", "next.reward", "next.truncated"):
        assert np.array_equal(a.get_batch(np.arange(len(a)))[name], b.get_batch(np.arange(len(b)))[name])
    buf.close()


def test_episode_commits_keep_the_pack_files_open_and_close_them_with_the_buffer(tmp_path, monkeypatch):
    """Each feature's pack file is opened for writing once, not at every episode commit (an RL buffer commits
    every episode), and closed by ``close()``; every transition comes back as added."""
    from lerobot_zarr.store import packs

    def pack_fds() -> list[str]:
        links = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
        return [p for p in links if p.startswith(str(tmp_path / "buf")) and "/c/" in p]

    opened = []
    real = packs.open_nofollow

    def counted(path, flags=os.O_RDONLY, **kw):
        fd = real(path, flags, **kw)
        if flags & os.O_WRONLY:
            opened.append(path)
        return fd

    monkeypatch.setattr(packs, "open_nofollow", counted)
    buf = TransitionBuffer(tmp_path / "buf")
    ids = add_episodes(buf, range(12))
    features = len(read_state(tmp_path / "buf").arrays)
    assert len(read_state(tmp_path / "buf").packs) == 1 and len(set(opened)) == len(opened) == features
    assert everything(buf) == ids
    assert len(pack_fds()) >= features
    buf.close()
    assert pack_fds() == [], "close() closes the pack files"


def _stats_by_hand(episodes: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Stats of an N-D float feature by hand, as LeRobot 0.6.1 reduces one: over every axis but the last, per
    episode (quantiles interpolated as ``numpy.quantile``), merged weighted by frame counts (LeRobot's
    ``aggregate_stats``)."""
    frames = sum(len(v) for v in episodes)
    rows = [v.reshape(-1, v.shape[-1] if v.ndim > 1 else 1).astype(np.float64) for v in episodes]
    every = np.concatenate(rows)
    weights = np.array([len(v) for v in episodes], dtype=np.float64) / frames
    out = {"min": every.min(0), "max": every.max(0), "mean": every.mean(0), "std": every.std(0),
           "count": np.array([frames])}
    for name, q in {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}.items():
        out[name] = sum(w * np.quantile(v, q, axis=0) for w, v in zip(weights, rows))
    return out


def _pixel_stats_by_hand(episodes: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Stats of float CHW camera frames by hand as LeRobot 0.6.1 publishes them (its replay buffer's export: PNG
    pixels ``(v * 255)`` truncated to uint8; per channel, every frame of these short episodes sampled, scaled to
    [0, 1], shape (C, 1, 1)), merged weighted by frame counts (LeRobot's ``aggregate_stats``)."""
    pixels = [(v * np.float32(255)).astype(np.uint8).transpose(1, 0, 2, 3).reshape(v.shape[1], -1).astype(np.float64)
              for v in episodes]
    counts = np.array([len(v) for v in episodes], dtype=np.float64)
    weights = counts / counts.sum()
    means = [p.mean(1) for p in pixels]
    mean = sum(w * m for w, m in zip(weights, means))
    variance = sum(w * (p.var(1) + (m - mean) ** 2) for w, p, m in zip(weights, pixels, means))
    out = {"min": np.min([p.min(1) for p in pixels], 0), "max": np.max([p.max(1) for p in pixels], 0), "mean": mean,
           "std": np.sqrt(variance)}
    for name, q in {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}.items():
        out[name] = sum(w * np.quantile(p, q, axis=1) for w, p in zip(weights, pixels))
    out = {k: (v / 255).reshape(-1, 1, 1) for k, v in out.items()}
    out["count"] = np.array([int(counts.sum())])
    return out


@pytest.mark.parametrize("capacity", [None, 25], ids=["unbounded", "ring"])
def test_float_cameras_get_lerobots_stats_when_asked_not_at_each_commit(tmp_path, monkeypatch, capacity):
    """A float32 camera's stats (as LeRobot 0.6.1 publishes the camera: an image of its ``(v * 255)``-truncated
    pixels, per channel) are left out of the commits (the root's stats and each episode's stats file) and computed
    when ``meta.stats`` is first read: equal to numpy by hand over the frames the buffer holds, and bit for bit to
    what a store whose commits compute them records; an export publishes them."""
    import pickle

    import lerobot_zarr.sampling.meta as meta_module
    from lerobot_zarr.sampling.dataset import LeRobotZarrDataset
    from lerobot_zarr.writing.writer import create

    buf = TransitionBuffer(tmp_path / "buf", image_storage="float32", capacity=capacity)
    add_episodes(buf, range(9))
    for tr in transitions(SEED, 9)[:-1]:  # an episode in progress, committed by checkpoint() and extended
        buf.add(**tr)
        if len(buf) % 3 == 0:
            buf.checkpoint()
    buf.close()
    state = read_state(tmp_path / "buf")
    assert state.stats_on_demand == (CAMERA,) and CAMERA not in state.stats and STATE in state.stats
    for path in (tmp_path / "buf" / ".episode_stats").iterdir():  # an episode's file, or a fold's batch of them
        doc = json.loads(path.read_text())
        stats = doc["stats"] if path.name.startswith("batch-") else doc
        assert CAMERA not in stats and STATE in stats

    calls = []
    counted = meta_module.on_demand_stats
    monkeypatch.setattr(meta_module, "on_demand_stats", lambda st: calls.append(1) or counted(st))
    ds = LeRobotZarrDataset(tmp_path / "buf")
    assert not calls, "opening a buffer computes no stats"
    batch = ds.get_batch(np.arange(len(ds)))
    ids = batch[STATE][:, :2].astype(int)  # the (episode, step) of each frame held, in store order
    episodes = [np.stack([ref.episode(SEED, e)["pixels"][t] for e, t in ids[ids[:, 0] == e]]).astype(np.float32)
                / np.float32(255) for e in dict.fromkeys(ids[:, 0].tolist())]
    got = ds.meta.stats[CAMERA]
    assert len(calls) == 1 and ds.meta.stats[CAMERA] is got and len(calls) == 1
    assert pickle.loads(pickle.dumps(ds.meta.stats)) == ds.meta.stats and len(calls) == 1
    want = _pixel_stats_by_hand(episodes)
    assert np.array(got["count"]).tolist() == want["count"].tolist() == [len(ds)]
    for name in ("min", "max", "mean", "std", "q01", "q10", "q50", "q90", "q99"):
        assert np.shape(got[name]) == (3, 1, 1), name
        assert np.allclose(got[name], want[name], rtol=1e-9, atol=1e-12), name

    plain = create(tmp_path / "plain", fps=30, features={CAMERA: state.info["features"][CAMERA]}, durable=False)
    for frames in episodes:
        plain.add_episode({CAMERA: frames}, task="t")
    plain.close()
    assert read_state(tmp_path / "plain").stats[CAMERA] == got, "what a commit that computes them records"

    ds.close()
    exported = json.loads((TransitionBuffer(tmp_path / "buf", mode="r").export(tmp_path / "out") / "meta" /
                           "stats.json").read_text())
    assert exported[CAMERA] == got


def test_float_camera_values_outside_the_unit_range_are_counted_clipped_with_a_warning(tmp_path):
    """LeRobot's writer refuses a float camera's values outside [0, 1]; a store's stats of them count them clipped
    (NaN as 0), and say so, naming the feature."""
    from lerobot_zarr.writing.writer import create

    rng = np.random.default_rng(SEED)
    frames = rng.uniform(-0.5, 1.5, (6, 3, 8, 10)).astype(np.float32)
    frames[0, 0, 0, 0] = np.nan
    feature = {"dtype": "float32", "shape": [3, 8, 10], "names": ["channels", "height", "width"]}
    store = create(tmp_path / "s", fps=30, features={CAMERA: feature}, durable=False)
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match=f"{CAMERA!r}.*outside \\[0, 1\\]"):
        store.add_episode({CAMERA: frames}, task="t")
    store.close()
    clipped = np.nan_to_num(np.clip(frames, 0, 1), nan=0.0)
    want = _pixel_stats_by_hand([clipped])
    got = read_state(tmp_path / "s").stats[CAMERA]
    for name in ("min", "max", "mean", "std", "q50"):
        assert np.allclose(got[name], want[name], rtol=1e-9, atol=1e-12), name


def test_a_buffer_read_from_a_bucket_leaves_its_on_demand_stats_out_with_a_warning(tmp_path, env):
    """A bucket's store is read through a mirror holding only the rows read: the float32 camera's stats, computed
    from the rows when asked, are left out of ``meta.stats`` with a warning (never computed over absent rows)."""
    from lerobot_zarr.writing.sync import push_store

    buf = TransitionBuffer(tmp_path / "buf", image_storage="float32")
    add_episodes(buf, range(3))
    buf.close()
    push_store(tmp_path / "buf", env.url("buf"), progress=False)
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match="left out of meta.stats"):
        remote = lerobot_zarr.open_dataset(env.url("buf"))
    assert CAMERA not in remote.meta.stats and STATE in remote.meta.stats
    assert CAMERA in lerobot_zarr.open_dataset(tmp_path / "buf").meta.stats


# ------------------------------------------------------------------------------------- other processes

_CHILD = """
import sys, time, os
sys.path.insert(0, {tests!r})
import numpy as np
from rl_reference import transitions
from lerobot_zarr.writing.transitions import TransitionBuffer
import lerobot_zarr.writing.transaction
lerobot_zarr.writing.transaction.FOLD_RECORDS = {fold!r}
buf = TransitionBuffer({root!r}, capacity={capacity!r})
checkpoint_every = {checkpoint_every!r}
added = 0
for e in range(10**6):
    for tr in transitions({seed!r}, e):
        buf.add(**tr)
        added += 1
        if tr["done"] or tr["truncated"]:
            print("C", added, flush=True)
        elif checkpoint_every and added % checkpoint_every == 0:
            buf.checkpoint()
            print("C", added, flush=True)
    if {pause!r}:
        time.sleep({pause!r})
"""


def _spawn(root: Path, *, checkpoint_every: int = 0, capacity=None, pause: float = 0.0, fold: int = FOLD_RECORDS):
    code = _CHILD.format(tests=str(TESTS), root=str(root), capacity=capacity, checkpoint_every=checkpoint_every,
                         seed=SEED, pause=pause, fold=fold)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _committed_after_kill(proc, delay: float) -> int:
    """Let the writer run ``delay`` seconds past its first commit, SIGKILL it; the last count it reported."""
    first = proc.stdout.readline()
    assert first.startswith("C"), proc.stderr.read()
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    return ref.reported_commits(first, out)[-1]


def _stream(n: int) -> list[tuple[int, int]]:
    out = []
    e = 0
    while len(out) < n:
        out += [(e, t) for t in range(ref.episode(SEED, e)["length"])]
        e += 1
    return out[:n]


@pytest.mark.parametrize("checkpoint_every, fold", [(0, FOLD_RECORDS), (0, 2), (1, FOLD_RECORDS)],
                         ids=["adds", "adds-folding", "checkpoints"])
def test_sigkill_at_any_moment_loses_at_most_the_unfinished_episode(tmp_path, checkpoint_every, fold):
    """Kill the writer while it adds (episode commits appended to the log; a fold every ``fold`` of them) or while
    it checkpoints after every transition (a fold each): the buffer reopens readable with a prefix of what was
    added, at least everything it had reported committed, and takes adds again."""
    rng = np.random.default_rng(0)
    for run in range(3):
        root = tmp_path / f"buf{run}"
        proc = _spawn(root, checkpoint_every=checkpoint_every, fold=fold)
        reported = _committed_after_kill(proc, float(rng.uniform(0.05, 0.6)))
        buf = TransitionBuffer(root)
        n = len(buf)
        assert n >= reported, f"run {run}: {n} transitions after the kill, {reported} were reported committed"
        assert everything(buf) == _stream(n), f"run {run}: not the prefix of what was added"
        stats = buf.writer.meta.stats["action"]  # a kill inside an extension's commit leaves them to be recomputed
        actions = np.stack([ref.expected(SEED, e, t)["action"] for e, t in _stream(n)])
        assert stats["count"] == [n] and np.allclose(stats["mean"], actions.mean(0), rtol=1e-6, atol=1e-7)
        e = max(e for e, _ in _stream(n)) + 1
        more = add_episodes(buf, [e + 1000])
        assert everything(buf) == _stream(n) + more
        buf.close()
        lerobot_zarr.open_dataset(root).get_batch(np.arange(n))


def test_sigkill_of_a_ring_buffer_keeps_the_newest_committed_episodes(tmp_path):
    root = tmp_path / "ring"
    proc = _spawn(root, capacity=60, checkpoint_every=5)
    reported = _committed_after_kill(proc, 0.8)
    buf = TransitionBuffer(root, capacity=60)
    held = everything(buf)
    assert len(held) <= 60 and held[0][1] == 0
    stream = _stream(max(reported, 1) + 200)
    start = stream.index(held[0])
    assert held == stream[start:start + len(held)], "a run of consecutive transitions"
    assert start + len(held) >= reported
    buf.close()


_STOPPING_CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
from rl_reference import transitions
from lerobot_zarr.writing.transitions import TransitionBuffer
buf = TransitionBuffer({root!r})
for e in range({episodes!r}):
    for tr in transitions({seed!r}, e, camera=False):
        buf.add(**tr)
print("R", flush=True)
time.sleep(120)
"""

# the numeric features of a state-only buffer: (store feature, the reference's values of an episode's frames)
_NUMERIC = {STATE: lambda ep: ep["states"][:ep["length"]], "action": lambda ep: ep["actions"],
            "next.reward": lambda ep: ep["rewards"], "complementary_info.penalty": lambda ep: ep["penalty"]}


def _numeric_stats_match_the_reference(stats: dict, episodes: range) -> None:
    """The dataset stats of the numeric features equal numpy by hand over the reference's frames: counts, minima
    and maxima exactly, means, stds and count-weighted quantiles to float64 rounding (a merge of per-episode
    stats)."""
    for name, values in _NUMERIC.items():
        eps = [np.asarray(values(ref.episode(SEED, e, camera=False)), dtype=np.float32) for e in episodes]
        want, got = _stats_by_hand(eps), stats[name]
        assert np.array(got["count"]).tolist() == want["count"].tolist(), name
        for k in ("min", "max"):
            assert np.array_equal(np.asarray(got[k], np.float32).reshape(-1), want[k].astype(np.float32).reshape(-1)), \
                (name, k)
        for k in ("mean", "std", "q01", "q10", "q50", "q90", "q99"):
            assert np.allclose(np.reshape(got[k], -1), np.reshape(want[k], -1), rtol=1e-9, atol=1e-12), (name, k)


def test_stats_after_a_kill_between_folds_are_recomputed_exactly(tmp_path):
    """An RL episode's commit puts its stats off to the next fold of the commit log (one numpy pass, one batch
    stats file for the episodes logged since): a writer killed between two folds leaves episodes whose stats no
    file holds. The next writer recomputes them from the rows: the dataset stats equal numpy by hand over the
    frames, and bit for bit those of a buffer given the same episodes and closed without a kill."""
    root, episodes = tmp_path / "killed", FOLD_RECORDS + 13  # a fold after FOLD_RECORDS records, a dozen more logged
    code = _STOPPING_CHILD.format(tests=str(TESTS), root=str(root), episodes=episodes, seed=SEED)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline().strip() == "R", proc.stderr.read()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    state = read_state(root)
    files = sorted(p.name for p in (root / ".episode_stats").iterdir())
    folded = episodes - len(state.log_records)  # (the commit after FOLD_RECORDS records in the log was the fold)
    assert len(state.table) == episodes and 0 < len(state.log_records) < 15, "killed between two folds"
    assert files == [f"batch-{read_state(root, log=False).generation}.json"], "one stats file: the fold's"
    assert len(json.loads((root / ".episode_stats" / files[0]).read_text())["episodes"]) == folded

    buf = TransitionBuffer(root)
    stats = read_state(root).stats  # the next writer folded the log, with the stats of every episode
    _numeric_stats_match_the_reference(stats, range(episodes))
    clean = TransitionBuffer(tmp_path / "clean")
    add_episodes(clean, range(episodes), camera=False)
    clean.close()
    assert stats == read_state(tmp_path / "clean").stats
    more = FOLD_RECORDS + 8  # a fold more, stats from the batch files
    add_episodes(buf, range(episodes, episodes + more), camera=False)
    buf.close()
    _numeric_stats_match_the_reference(read_state(root).stats, range(episodes + more))
    for path in (root / ".episode_stats").glob("batch-*.json"):  # malformed (a hostile shape): recomputed
        doc = json.loads(path.read_text())
        doc["stats"][STATE]["mean"] = {"shape": [10**12], "data": doc["stats"][STATE]["mean"]["data"]}
        path.write_text(json.dumps(doc))
    (root / ".episode_stats" / "batch-999999.json").write_text('{"episodes": [[0, 0, 1e9]], "stats": 5}')
    TransitionBuffer(root).close()
    _numeric_stats_match_the_reference(read_state(root).stats, range(episodes + more))


def test_an_episode_commit_creates_no_stats_file_and_a_fold_one(tmp_path, monkeypatch):
    """Creating a file costs more CPU than the rest of a short episode's commit on some filesystems (ext4 on the
    test VM: ~0.1-0.2 ms): the episodes' stats are written once per fold, all in one file; their batched stats
    equal per-episode ones bit for bit (the root's stats after the fold)."""
    monkeypatch.setattr("lerobot_zarr.writing.transaction.FOLD_RECORDS", 8)
    buf = TransitionBuffer(tmp_path / "buf")
    add_episodes(buf, range(3), camera=False)
    created = []
    real = os.open

    def counting(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and ".episode_stats" in os.fspath(path) and not os.path.lexists(path):
            created.append(os.path.basename(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting)
    add_episodes(buf, range(3, 20), camera=False)
    assert len(set(created)) == 2 and all(name.startswith("batch-") for name in created), created
    buf.close()
    _numeric_stats_match_the_reference(read_state(buf.root).stats, range(20))



def test_a_reopened_buffer_takes_its_episodes_stats_from_the_batch_files_directly(tmp_path, monkeypatch):
    """A writer reopening a buffer reads its episodes' stats back from the folds' batch files: no episode's own
    file is tried (none exists), no stats are computed but one probe per feature and kind of episode (before, one
    per feature and episode: seconds at 3,000 episodes), and the stacked stats equal those of the first writer."""
    from lerobot_zarr.writing.stats_cache import EpisodeStatsCache

    monkeypatch.setattr("lerobot_zarr.writing.transaction.FOLD_RECORDS", 8)
    buf = TransitionBuffer(tmp_path / "buf")
    add_episodes(buf, range(30), camera=False)
    buf.close()
    assert all(p.name.startswith("batch-") for p in (tmp_path / "buf" / ".episode_stats").iterdir())
    computed, tried = [], []
    real_stats, real_open = EpisodeStatsCache.episode_stats, os.open
    monkeypatch.setattr(EpisodeStatsCache, "episode_stats", lambda self, name, values: computed.append(name) or
                        real_stats(self, name, values))

    def opening(path, flags, *args, **kwargs):
        if ".episode_stats" in os.fspath(path) and not os.path.basename(path).startswith("batch-"):
            tried.append(os.path.basename(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    reopened = TransitionBuffer(tmp_path / "buf")
    rows = reopened.writer._tx.episode_stats_rows()
    monkeypatch.setattr(os, "open", real_open)
    features = len(rows)
    assert not tried, tried
    assert len(computed) <= 2 * features, f"{len(computed)} stats computed for {features} features"
    assert all(len(v) == 30 for per in rows.values() for v in per.values())
    reopened.close()
    _numeric_stats_match_the_reference(read_state(tmp_path / "buf").stats, range(30))


def test_a_checkpoint_reads_the_final_observation_rows_of_the_extended_episode_only(tmp_path, monkeypatch):
    """A checkpoint that extends the episode in progress (a commit that is not one appended episode) checks the
    final observation row of that episode alone, not of every episode held: its cost does not grow with the
    buffer (rows read counted, 10 and 60 episodes held)."""
    from lerobot_zarr.writing.transition_store import StoreTransitions

    read = []
    real = StoreTransitions._read
    monkeypatch.setattr(StoreTransitions, "_read", lambda self, name, chunk, rows: read.append(len(rows)) or
                        real(self, name, chunk, rows))
    counts = {}
    for held in (10, 60):
        buf = TransitionBuffer(tmp_path / f"buf{held}")
        ids = add_episodes(buf, range(held), camera=False)
        e = next(e for e in range(10**6, 10**6 + 100) if ref.episode(SEED, e, camera=False)["length"] >= 5)
        tail = transitions(SEED, e, camera=False)
        pieces = []
        for tr in tail[:-1]:  # an episode in progress: checkpointed, then extended by checkpoints
            buf.add(**tr)
            read.clear()
            buf.checkpoint()
            pieces.append(sum(read))
        counts[held] = pieces[1:]
        assert everything(buf, camera=False) == ids + [(e, t) for t in range(len(tail) - 1)]
        buf.close()
    assert counts[10] and counts[10] == counts[60][:len(counts[10])], counts
    assert max(counts[60]) <= 2, "the extended episode's row (frame_index and episode_index)"


def test_batched_episode_stats_equal_each_episodes_own_bit_for_bit(tmp_path):
    """The fold's one pass over several episodes gives each the stats its own computation gives (floats with NaN
    and infinities, integers, bools; episodes of one frame)."""
    from lerobot_zarr.writing.writer import create

    features = {"f": {"dtype": "float32", "shape": [3], "names": None},
                "i": {"dtype": "int64", "shape": [1], "names": None},
                "b": {"dtype": "bool", "shape": [1], "names": None},
                "m": {"dtype": "float32", "shape": [2, 3], "names": None}}
    with create(tmp_path / "s", fps=10, features=features) as w:
        tx = w._tx
        rng = np.random.default_rng(3)
        episodes = []
        for n in (1, 7, 2, 30, 1, 11):
            f = rng.standard_normal((n, 3)).astype(np.float32)
            f[rng.random((n, 3)) < 0.1] = np.nan
            f[rng.random((n, 3)) < 0.05] = np.inf
            episodes.append({"f": f, "i": rng.integers(-5, 10**12, n), "b": rng.random(n) < 0.5,
                             "m": rng.standard_normal((n, 2, 3)).astype(np.float32)})
        batched = tx.batched_stats(episodes)
        for i, ep in enumerate(episodes):
            want = tx.features_stats(ep)
            for name in ep:
                for k, v in want[name].items():
                    got = batched[name][k][i]  # rows of one-frame episodes (LeRobot keeps their dtype) promoted
                    assert got.shape == v.shape and np.can_cast(v.dtype, got.dtype, "safe"), (name, k)
                    assert got.astype(v.dtype).tobytes() == v.tobytes(), (name, k)
        # no one-frame episode and no N-D feature (stats over all axes but the last): one pass, the same dtypes too
        long = [{k: v for k, v in ep.items() if k != "m"} for ep in episodes if len(ep["f"]) > 1]
        batched = tx.batched_stats(long)
        for i, ep in enumerate(long):
            for name, stats in tx.features_stats(ep).items():
                for k, v in stats.items():
                    got = batched[name][k][i]
                    assert got.dtype == v.dtype and got.shape == v.shape and got.tobytes() == v.tobytes(), (name, k)


def test_a_reader_in_another_process_samples_what_the_writer_commits(tmp_path):
    """The actor/learner split: a writer process adds (with checkpoints), this process samples with mode='r' and
    checks every sampled transition against the reference; it sees the buffer grow."""
    root = tmp_path / "buf"
    proc = _spawn(root, checkpoint_every=7, capacity=400, pause=0.002)
    try:
        assert proc.stdout.readline().startswith("C")
        reader = TransitionBuffer(root, mode="r", refresh_interval=0.0)
        sizes, newest, checked = [], [], 0
        hang = time.monotonic() + 600  # only stops a hang: the loop ends when the reader saw the buffer move on
        while not (checked > 500 and newest[-1] > newest[0]):
            assert time.monotonic() < hang and proc.poll() is None, (checked, newest[:1], newest[-1:], proc.poll())
            ids = check_batch(reader.sample(64), SEED)
            checked += len(ids)
            sizes.append(len(reader))
            newest.append(max(ids))  # the newest transition sampled: later ones appear as the writer commits
        assert max(sizes) <= 400
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    reader.close()


# ------------------------------------------------------------------------------------- a reference model

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st


class Model:
    """What a buffer holds, in plain lists: committed episodes (lists of (episode, step) identities), the
    transitions added since the last commit, whether the last committed episode is still in progress."""

    def __init__(self, capacity):
        self.capacity, self.committed, self.pending, self.open = capacity, [], [], False

    def _evict(self, extra: int) -> int:
        held, drop = sum(map(len, self.committed)), 0
        while self.capacity is not None and held + extra > self.capacity:
            held -= len(self.committed[drop])
            drop += 1
        return drop

    def commit(self, *, end: bool) -> None:
        if self.pending:
            drop = self._evict(len(self.pending))
            if self.open:
                self.committed[-1] = self.committed[-1] + self.pending
            else:
                self.committed.append(self.pending)
            self.committed = self.committed[drop:]
            self.pending = []
        self.open = not end

    def view(self) -> list[tuple[int, int]]:
        kept = self.committed[self._evict(len(self.pending)):]
        return [i for ep in kept for i in ep] + self.pending


@settings(max_examples=12, deadline=None)
@given(capacity=st.sampled_from([None, 12, 30]),
       ops=st.lists(st.sampled_from(["add", "add", "add", "add", "checkpoint", "crash", "close", "reader"]),
                    min_size=5, max_size=40))
def test_random_operations_match_a_reference_model(tmp_path_factory, capacity, ops):
    """Adds, checkpoints, crashes (the writer dropped without close) and reopens in any order: the buffer holds
    what the plain-list model says, in order, after every operation."""
    root = tmp_path_factory.mktemp("ops") / "buf"
    model = Model(capacity)
    buf = TransitionBuffer(root, capacity=capacity)
    stream = ((e, t, tr) for e in range(10**6) for t, tr in enumerate(transitions(SEED, e)))
    for op in ops:
        if op == "add":
            e, t, tr = next(stream)
            in_progress = (model.committed[-1] if model.open else []) + model.pending
            if capacity is not None and len(in_progress) + 1 > capacity:
                with pytest.raises(ArgumentError):
                    buf.add(**tr)
                continue
            if in_progress and in_progress[-1] != (e, t - 1):  # a crash cut the episode: the buffer starts anew
                model.commit(end=True)
            buf.add(**tr)
            model.pending.append((e, t))
            if tr["done"] or tr["truncated"]:
                model.commit(end=True)
        elif op == "checkpoint":
            buf.checkpoint()
            if model.pending:
                model.commit(end=False)
        elif op in ("crash", "close"):
            if op == "close":
                buf.close()
                model.commit(end=True)
            else:
                buf._writer is not None and buf._writer._release()
                buf._claim is not None and buf._claim.__exit__(None, None, None)
                model.pending, model.open = [], False
            buf = TransitionBuffer(root, capacity=capacity)
        else:
            reader = TransitionBuffer(root, mode="r") if (root / "zarr.json").exists() else None
            if reader is not None:
                committed = model.committed[model._evict(0):]
                assert everything(reader) == [i for ep in committed for i in ep], "a reader sees the commits"
                reader.close()
        assert everything(buf) == model.view(), f"after {op}"
        assert capacity is None or len(buf) <= capacity
    buf.close()


def test_arrays_the_caller_reuses_after_add_keep_the_values_added(tmp_path):
    """An actor loop filling the same arrays in place each step: add() keeps copies (values already in their
    stored dtype are taken without conversion, so what it keeps must not be the caller's array), pending or
    committed, also across a checkpoint (the episode goes on from the last next_state the buffer kept)."""
    buf = TransitionBuffer(tmp_path / "buf")
    ids, reused = [], {}
    for e in range(3):
        for t, tr in enumerate(transitions(SEED, e)):
            for part in ("state", "next_state"):
                for key, value in tr[part].items():
                    tr[part][key] = reused.setdefault((part, key), np.empty_like(value))
                    tr[part][key][...] = value
            buf.add(**tr)
            ids.append((e, t))
            for array in reused.values():
                array[...] = 0.5  # the caller reuses its arrays for the next step
            if (e, t) == (2, 0):
                buf.checkpoint()
            assert everything(buf) == ids
    buf.close()


# ------------------------------------------------------------------------------------- the cost of a commit

def _zarr_episode_table(root: Path) -> dict[str, np.ndarray]:
    """The episode table as a zarr reader without consolidated metadata sees it (each array's own zarr.json)."""
    import zarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = zarr.open_group(root, mode="r", use_consolidated=False)
        return {name: np.asarray(g[name][:]) for name in ("episode_length", "episode_chunk", "episode_offset")}


def test_an_episodes_rows_are_written_in_pieces_that_stay_inside_256_kib_blocks(tmp_path, monkeypatch):
    """One write of a large camera's episode (11 MB for 100 float32 frames of 3x96x96) makes the page cache take
    2 MiB folios, on a VM with free page reporting the memory handed back to the host (several times the CPU of
    LeRobot's in-memory add, see ``benchmarks/README.md``): an episode's rows reach each pack file in writes that
    never cross a 256 KiB-aligned boundary of the file. Float32 frames (not made of uint8 pixels) come back bit for
    bit, from the writer and from the store reopened."""
    piece = 256 << 10  # lerobot_zarr.store.packs.APPEND_PIECE
    writes: list[tuple[str, int, int]] = []
    real = os.pwrite

    def spy(fd, data, offset):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "/c/" in path and path.startswith(str(tmp_path / "buf")):
            writes.append((path, offset, len(memoryview(data).cast("B"))))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", spy)
    rng = np.random.default_rng(SEED)
    lengths = (12, 3, 20, 7)  # 49,152-byte frames: episodes of 4 to 21 rows, across the pieces' boundaries
    frames = [rng.random((n + 1, 3, 64, 64), dtype=np.float32) for n in lengths]
    frames[0][0, 0, :4, 0] = (-0.0, 1e-40, np.float32(np.nextafter(np.float32(1), np.float32(0))), 0.5)
    buf = TransitionBuffer(tmp_path / "buf", image_storage="float32")
    for e, (n, f) in enumerate(zip(lengths, frames)):
        for t in range(n):
            state = {STATE: np.array([[e, t]], np.float32), CAMERA: f[t][None]}
            after = {STATE: np.array([[e, t + 1]], np.float32), CAMERA: f[t + 1][None]}
            buf.add(state, np.zeros((1, 2), np.float32), 0.0, after, t == n - 1, False)
    camera = [(o, size) for path, o, size in writes if f"/{CAMERA}/c/" in path]
    assert sum(size for _, size in camera) == sum(f.nbytes for f in frames), "each episode's rows, tail included"
    assert len(camera) > len(lengths), "episodes crossing a boundary are written in several pieces"
    for path, offset, size in writes:
        assert offset // piece == (offset + size - 1) // piece, f"{path}: {size} bytes at {offset}"

    def check(b: TransitionBuffer) -> None:
        got = b.gather(np.arange(len(b)))
        assert len(b) == sum(lengths)
        for i, (e, t) in enumerate(got["state"][STATE].astype(int).tolist()):
            for part, row in (("state", t), ("next_state", t + 1)):
                value = got[part][CAMERA][i]
                assert value.dtype == np.float32 and value.tobytes() == frames[e][row].tobytes(), (part, e, t)

    check(buf)
    buf.close()
    reopened = TransitionBuffer(tmp_path / "buf", mode="r")
    check(reopened)
    reopened.close()


def test_an_episode_commit_appends_to_the_log_and_a_fold_replaces_the_root_only(tmp_path, monkeypatch):
    """Replacing an existing file by rename makes ext4 start writing it out at once (1-30 ms each on a busy disk),
    and rewriting the root costs what the store holds: an episode's commit appends a record to the commit log and
    replaces nothing; every FOLD_RECORDS commits (and at checkpoint/close) the log is folded into the root, the only
    file a fold replaces by rename (zarr's copies and the episodes' stats are written in place). A zarr reader
    without consolidated metadata sees the root's episode table (the last fold), through ring-buffer evictions
    (shapes shrinking and growing: the documents are padded, never torn)."""
    monkeypatch.setattr("lerobot_zarr.writing.transaction.FOLD_RECORDS", 3)
    buf = TransitionBuffer(tmp_path / "buf", capacity=40)
    add_episodes(buf, [0, 1])
    replaced = []
    real = os.replace

    def counting(src, dst, *args, **kwargs):
        if os.path.lexists(dst):
            replaced.append(os.path.relpath(dst, buf.root))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", counting)
    folds = 0
    for e in range(2, 14):
        before = len(replaced)
        add_episodes(buf, [e])
        logged = read_state(buf.root).log_records
        assert replaced[before:] == ([] if logged else ["zarr.json"]), f"episode {e}: replaced {replaced[before:]}"
        folds += not logged
        root_table = read_state(buf.root, log=False).table
        got = _zarr_episode_table(buf.root)
        assert np.array_equal(got["episode_length"], root_table.length) and np.array_equal(
            got["episode_chunk"], root_table.chunk), f"episode {e}"
    assert folds == 3, "a fold every 3 log records (then a plain commit, which is the fold)"
    assert len(buf) <= 40 and everything(buf)[0][0] > 0, "the test means to evict"
    buf.close()
    assert not (buf.root / ".commit-log").exists()
    assert np.array_equal(_zarr_episode_table(buf.root)["episode_length"], read_state(buf.root).table.length)
    assert lerobot_zarr.verify(buf.root, progress=False).ok


def test_sigkill_during_commits_leaves_whole_zarr_documents_and_copies_repair_can_mend(tmp_path):
    """Zarr's copies are written in place before each commit: a kill at any moment leaves every zarr.json a whole
    JSON document, our readers at the last commit, and ``verify`` naming nothing but copies (and ``frame_live``)
    ahead of it, which ``--repair`` (or the next commit) rewrites, folding the commit log into the root."""
    rng = np.random.default_rng(1)
    for run in range(4):
        root = tmp_path / f"buf{run}"
        proc = _spawn(root, capacity=30, checkpoint_every=1)  # a commit per transition, evictions from the third
        reported = _committed_after_kill(proc, float(rng.uniform(0.2, 0.8)))
        for path in root.rglob("zarr.json"):
            json.loads(path.read_bytes())  # whole, padded or not
        report = lerobot_zarr.verify(root, progress=False)
        assert not report.damaged and not report.unverifiable, f"run {run}: {report}"
        assert all("zarr's copy of the episode table" in p or "frame_live" in p for p in report.store_problems), \
            f"run {run}: {report.store_problems}"
        lerobot_zarr.verify(root, repair=True, progress=False)
        assert lerobot_zarr.verify(root, progress=False).ok, f"run {run}: after --repair"
        table = read_state(root).table
        assert np.array_equal(_zarr_episode_table(root)["episode_length"], table.length)
        buf = TransitionBuffer(root, capacity=30)
        assert len(buf) > 0 and reported > 0
        add_episodes(buf, [1000 + run])
        buf.close()
        assert np.array_equal(_zarr_episode_table(root)["episode_offset"], read_state(root).table.offset)

