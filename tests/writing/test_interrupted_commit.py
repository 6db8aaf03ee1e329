"""A commit interrupted after its commit point (Ctrl-C, a full disk while unflagging rows no longer live): the
store holds the commit, and the writer goes on from it. Before, the writer kept the state before the commit, so
that its next commit was built on that one: a logged commit's record was written over the committed one, and a
reader was served another episode's frames. Checked against the reference model of tests/writing/test_writer.py
(its values kept by hand), read back through the library, with zarr and by ``verify``."""

from __future__ import annotations

import numpy as np
import pytest
from rl_reference import check_batch, transitions
from test_writer import Model, check_dataset, check_on_disk, make_frames, new_store

import lerobot_zarr
from lerobot_zarr.store import committing
from lerobot_zarr.store.state import read_state
from lerobot_zarr.writing.transitions import TransitionBuffer


def interrupt_once(monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """The next commit raises KeyboardInterrupt right after its commit point, before or after unflagging the rows
    no longer live."""
    real = committing._finish_live

    def interrupted(*args, **kwargs):
        monkeypatch.setattr(committing, "_finish_live", real)
        if when == "after":
            real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(committing, "_finish_live", interrupted)


@pytest.mark.parametrize("capacity", [None, 40], ids=["store", "ring-buffer"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_writer_interrupted_after_the_commit_point_goes_on_from_that_commit(tmp_path, monkeypatch, when, capacity):
    rng = np.random.default_rng(5)
    model = Model(capacity=capacity)
    ds = new_store(tmp_path / "s", capacity_frames=capacity)
    for n in (7, 9, 11):
        frames = make_frames(rng, n)
        ds.add_episode(frames, task="pick")
        model.add(frames, "pick")
    frames = make_frames(rng, 12)
    interrupt_once(monkeypatch, when)
    generation = read_state(ds.root).generation
    with pytest.raises(KeyboardInterrupt):
        ds.add_episode(frames, task="place")
    model.add(frames, "place")
    assert read_state(ds.root).generation == generation + 1  # the commit went through
    check_dataset(ds, model, f"interrupted {when} unflagging")
    for n in (5, 8):
        frames = make_frames(rng, n)
        ds.add_episode(frames, task="pick")
        model.add(frames, "pick")
    check_dataset(ds, model, "after two more")
    ds.close()
    check_on_disk(ds.root, model, "after two more")
    check_dataset(lerobot_zarr.open_dataset(ds.root), model, "a fresh reader")
    assert lerobot_zarr.verify(ds.root, progress=False).ok


@pytest.mark.filterwarnings("error::lerobot_zarr.LeRobotZarrWarning")  # (episodes stored as they were added)
@pytest.mark.parametrize("when", ["before", "after"])
def test_an_rl_buffer_interrupted_after_a_logged_commit_point_keeps_every_episode_once(tmp_path, monkeypatch, when):
    seed = 3
    buf = TransitionBuffer(tmp_path / "buf")
    for e in range(3):
        for tr in transitions(seed, e):
            buf.add(**tr)
    assert len(read_state(buf.root).log_records) == 3  # commits appended to the log
    interrupt_once(monkeypatch, when)
    last = transitions(seed, 3)
    for tr in last[:-1]:
        buf.add(**tr)
    with pytest.raises(KeyboardInterrupt):
        buf.add(**last[-1])  # the episode's end: its commit
    for e in (4, 5):
        for tr in transitions(seed, e):
            buf.add(**tr)

    def episodes(b: TransitionBuffer) -> list[int]:
        batch = b.gather(np.arange(len(b)))
        seen = check_batch(batch, seed)  # every transition equal to the reference's
        return sorted({e for e, _ in seen})

    assert episodes(buf) == [0, 1, 2, 3, 4, 5]
    assert read_state(buf.root).table.length.tolist() == [len(transitions(seed, e)) for e in range(6)]
    assert len(buf) == sum(len(transitions(seed, e)) for e in range(6))
    reader = TransitionBuffer(buf.root, mode="r", refresh_interval=None)
    assert episodes(reader) == [0, 1, 2, 3, 4, 5] and len(reader) == len(buf)
    reader.close()
    buf.close()
    assert lerobot_zarr.verify(buf.root, progress=False).ok
