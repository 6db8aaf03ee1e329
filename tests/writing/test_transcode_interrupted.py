"""An interrupted transcode never leaves a store that opens with wrong or partial data, and it resumes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import lerobot_zarr
import lerobot_zarr.store.state
from lerobot_zarr.errors import SourceNotFoundError
from lerobot_zarr.lerobot.source import LeRobotSource
from lerobot_zarr.store.state import read_state
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.writing import transcode as transcode_mod

REPO = Path(__file__).resolve().parents[2]


def reference_frames(folder: Path) -> dict[str, np.ndarray]:
    """All frames of the source's numeric columns, read independently with pyarrow, in global index order."""
    tables = [pq.read_table(p) for p in sorted((folder / "data").rglob("*.parquet"))]
    out: dict[str, list] = {}
    for t in tables:
        for name in ("observation.state", "action", "index", "episode_index", "timestamp"):
            out.setdefault(name, []).extend(t.column(name).to_pylist())
    arrays = {k: np.array(v) for k, v in out.items()}
    order = np.argsort(arrays["index"])
    return {k: v[order] for k, v in arrays.items()}


def assert_committed_episodes_exact(store: Path, ref: dict[str, np.ndarray]) -> list[int]:
    """Open the store as a user would and check every frame it lists against the source; return its episodes."""
    ds = lerobot_zarr.LeRobotZarrDataset(store)
    if len(ds) == 0:
        return []
    batch = ds.get_batch(np.arange(len(ds)))
    rows = batch["index"]
    for name in ("observation.state", "action", "episode_index", "timestamp"):
        np.testing.assert_array_equal(batch[name], ref[name][rows].astype(batch[name].dtype), err_msg=name)
    return ds.episodes.tolist()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_sample_dataset(tmp_path / "src", n_episodes=12, lengths=(40, 80), episodes_per_file=4)


def test_exception_mid_transcode_keeps_committed_episodes_and_resumes(source, tmp_path, monkeypatch):
    store = tmp_path / "store"
    ref = reference_frames(source)
    monkeypatch.setattr(transcode_mod, "_COMMIT_EVERY_S", 0.0)
    original = LeRobotSource._check_episode

    def failing(self, frames, e, path):
        if e == 7:
            raise RuntimeError("boom while reading episode 7")
        original(self, frames, e, path)

    monkeypatch.setattr(LeRobotSource, "_check_episode", failing)
    with pytest.raises(RuntimeError, match="episode 7"):
        lerobot_zarr.open_dataset(source, root=store, progress=False)
    assert assert_committed_episodes_exact(store, ref) == list(range(7))

    monkeypatch.setattr(LeRobotSource, "_check_episode", original)
    table = lerobot_zarr.store.state.read_state(store).table
    committed = {(int(table.chunk[e]), int(table.offset[e])) for e in range(7)}
    rewritten = []
    write = transcode_mod.write_rows_vectored
    monkeypatch.setattr(transcode_mod, "write_rows_vectored", lambda root, name, spec, pack, offset, parts: (
        rewritten.extend((pack, offset + sum(map(len, parts[:i]))) for i in range(len(parts))),
        write(root, name, spec, pack, offset, parts)))
    ds = lerobot_zarr.open_dataset(source, root=store, progress=False)
    assert ds.episodes.tolist() == list(range(12))
    assert assert_committed_episodes_exact(store, ref) == list(range(12))
    # resumed, not restarted: the rows of the committed episodes were not written again
    assert rewritten and not committed & set(rewritten), sorted(committed & set(rewritten))


def test_keyboard_interrupt_mid_transcode(source, tmp_path, monkeypatch):
    store = tmp_path / "store"
    ref = reference_frames(source)
    monkeypatch.setattr(transcode_mod, "_COMMIT_EVERY_S", 0.0)
    original = transcode_mod.write_rows_vectored  # what the transcode writes each feature's rows with
    calls = {"n": 0}

    def interrupted(*args):
        calls["n"] += 1
        if calls["n"] == 25:  # in the middle of an episode's features
            raise KeyboardInterrupt
        original(*args)

    monkeypatch.setattr(transcode_mod, "write_rows_vectored", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lerobot_zarr.open_dataset(source, root=store, progress=False)
    assert calls["n"] == 25, "the transcode no longer writes rows through transcode.write_rows_vectored"
    committed = assert_committed_episodes_exact(store, ref)
    assert committed == list(range(len(committed))) and 0 < len(committed) < 12
    monkeypatch.setattr(transcode_mod, "write_rows_vectored", original)
    lerobot_zarr.open_dataset(source, root=store, progress=False)
    assert assert_committed_episodes_exact(store, ref) == list(range(12))


@pytest.mark.parametrize("row_group_per_episode", [True, False])
def test_partial_episode_selection_then_more(tmp_path, row_group_per_episode):
    source = write_sample_dataset(tmp_path / "src", n_episodes=12, lengths=(40, 80), episodes_per_file=4,
                                  row_group_per_episode=row_group_per_episode)
    store = tmp_path / "store"
    ref = reference_frames(source)
    ds = lerobot_zarr.open_dataset(source, root=store, episodes=[2, 9], progress=False)
    assert sorted(set(ds.get_batch(np.arange(len(ds)))["episode_index"].tolist())) == [2, 9]
    assert assert_committed_episodes_exact(store, ref) == [2, 9]
    ds = lerobot_zarr.open_dataset(store, episodes=[0, 2, 5], progress=False)  # the store itself, transcodes 0 and 5
    assert ds.episodes.tolist() == [0, 2, 5]
    assert assert_committed_episodes_exact(store, ref) == [0, 2, 5, 9]


def test_creation_debris_without_commit_is_replaced(source, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / ".lerobot_zarr-creating").touch()
    (store / "action").mkdir()
    (store / "action" / "garbage").write_bytes(b"x" * 10)
    with pytest.raises(SourceNotFoundError):
        lerobot_zarr.LeRobotZarrDataset(store)  # no commit point: not a store
    lerobot_zarr.open_dataset(source, root=store, progress=False)
    assert not (store / "action" / "garbage").exists()
    assert assert_committed_episodes_exact(store, reference_frames(source)) == list(range(12))


CHILD = textwrap.dedent("""
    import sys
    import lerobot_zarr
    from lerobot_zarr.writing import transcode
    transcode._COMMIT_EVERY_S = 0.0
    print("ready", flush=True)
    lerobot_zarr.open_dataset(sys.argv[1], root=sys.argv[2], progress=False)
    print("done", flush=True)
""")


def test_kill_9_at_random_points_then_resume(tmp_path):
    """SIGKILL a transcoding process at random moments; each time the store opens exact, and it finishes."""
    source = write_sample_dataset(tmp_path / "src", n_episodes=60, lengths=(200, 400), episodes_per_file=10,
                                  image_keys=("observation.images.cam",), image_shape=(16, 16, 3))
    ref = reference_frames(source)
    store = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rng = random.Random(0)
    kills = 0
    seen: list[int] = []
    for attempt in range(12):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(source), str(store)], stdout=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.6))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        if (store / "zarr.json").exists():
            committed = assert_committed_episodes_exact(store, ref)
            assert committed == list(range(len(committed))), "episodes are committed in order"
            assert len(committed) >= (seen[-1] if seen else 0), "a commit is never lost"
            seen.append(len(committed))
        if seen and seen[-1] == 60:
            break
    assert kills >= 3, f"only {kills} kills landed (committed after each: {seen}): interruption not exercised"
    lerobot_zarr.open_dataset(source, root=store, progress=False)
    assert assert_committed_episodes_exact(store, ref) == list(range(60))
    state = read_state(store)
    assert state.complete_episodes().all()
