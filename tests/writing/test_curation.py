"""Curating real datasets into clean ones that publish: a store whose camera some episodes lack opens for writing,
``select`` / ``drop_features`` / ``delete_episodes`` clean it, ``push`` publishes it (a partial store only as an
explicit selection, renumbered), and the published dataset reopens from the (test) Hub with the same frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hub_fixtures import make_env, real_dataset

import lerobot_zarr as lz
from lerobot_zarr import NotMaterializedError
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

CAM = "observation.images.cam"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with HubServer(tmp_path / "server", tokens={"hf_curator": "me"}) as server:
        make_env(monkeypatch, tmp_path, server.endpoint)
        monkeypatch.setenv("HF_TOKEN", "hf_curator")  # push asks for a token before it sends anything
        yield server


def v21_column(src: Path, episode: int, key: str) -> np.ndarray:
    path = src / "data" / f"chunk-{episode // 1000:03d}" / f"episode_{episode:06d}.parquet"
    return np.array(pq.read_table(path).column(key).to_pylist(), dtype=np.float32)


def test_g1_drop_the_video_less_episodes_push_and_reopen(hub, tmp_path):
    """G1-policy-train keeps its camera's mp4 for episodes 1, 2, 4 and 5 only: a writable copy opens anyway,
    deleting the other episodes makes the camera complete, and the pushed dataset reopens equal (the camera is
    stored resized: its pixels are tested at full size in test_video.py)."""
    src = real_dataset("G1-policy-train")
    cam = "observation.images.cam_high"
    pytest.importorskip("av")
    with pytest.warns(UserWarning, match="left out"):  # the camera kept at 96x128: 54 MB, not 1.35 GB
        w = lz.open_dataset(src, root=tmp_path / "mine", mode="r+", progress=False, resize={cam: (96, 128)})
    assert sorted(set(range(100)) - set(w.meta.unavailable[cam])) == [1, 2, 4, 5]
    assert cam in w.left_out and cam not in w[0]
    with pytest.raises(NotMaterializedError, match="episode 0"), w.edit(0, features=[cam]):
        pass
    frames = {e: np.asarray(lz.open_dataset(w.root, episodes=[e], progress=False).episode(e)[cam]).copy()
              for e in (1, 2, 4, 5)}
    w.delete_episodes([e for e in range(100) if e not in (1, 2, 4, 5)])
    assert w.meta.unavailable == {} and w.left_out == {} and w.meta.total_episodes == 4
    assert w.push("me/g1-clean", progress=False) is not None
    w.close()
    clean = lz.open_dataset("me/g1-clean", progress=False)
    assert clean.meta.total_episodes == 4 and clean.meta.unavailable == {}
    batch = clean.get_batch(np.arange(len(clean)))
    for key in ("observation.state", "action"):
        want = np.concatenate([v21_column(src, e, key) for e in (1, 2, 4, 5)])
        np.testing.assert_array_equal(batch[key], want, err_msg=key)
    assert batch["episode_index"].tolist() == np.repeat(np.arange(4), clean.meta.episode_length).tolist()
    assert batch["index"].tolist() == list(range(len(clean)))
    for k, e in enumerate((1, 2, 4, 5)):  # the camera went out as AV1 (lossy): close to the source's frames
        got = np.asarray(clean.episode(k)[cam]).astype(np.int16)
        assert got.shape == frames[e].shape
        assert np.abs(got - frames[e]).mean() < 6, f"episode {e}: mean abs error {np.abs(got - frames[e]).mean()}"


@pytest.fixture
def gapped(tmp_path) -> Path:
    """6 episodes with an image camera kept as mp4 (small), whose video of episode 2 is missing."""
    pytest.importorskip("av")
    src = write_sample_dataset(tmp_path / "src", n_episodes=6, lengths=(8, 12), image_shape=(16, 16, 3),
                               video_keys=(CAM,), write_videos=True, episodes_per_file=1, seed=3)
    (src / "videos" / CAM / "chunk-000" / "file-002.mp4").unlink()
    return src


def test_select_publishes_episodes_renumbered(gapped, hub, tmp_path):
    with pytest.warns(UserWarning):
        ds = lz.open_dataset(gapped, root=tmp_path / "store", progress=False)
    with pytest.raises(lz.ArgumentError):
        ds.select({0: slice(0, 3)}).push("me/frames", progress=False)  # exports hold whole episodes
    chosen = ds.select([0, 3, 5])
    assert chosen.left_out == {} and CAM in chosen.array_specs
    with pytest.warns(UserWarning, match="3 of the store's 6 episodes"):
        chosen.push("me/three", videos=False, progress=False)
    three = lz.open_dataset("me/three", progress=False)
    want = chosen.get_batch(np.arange(len(chosen)))
    got = three.get_batch(np.arange(len(three)))
    for key in ("observation.state", "action", CAM, "frame_index", "timestamp", "task_index"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert got["episode_index"].tolist() == np.repeat([0, 1, 2], three.meta.episode_length).tolist()
    assert got["task"] == want["task"]


def test_drop_features_then_push_everything(gapped, hub, tmp_path):
    with pytest.warns(UserWarning):
        w = lz.open_dataset(gapped, root=tmp_path / "mine", mode="r+", progress=False)
    before = w.get_batch(np.arange(len(w)))
    with pytest.raises(lz.ArgumentError, match="own columns"):
        w.drop_features(["timestamp"])
    w.drop_features(CAM)
    assert CAM not in w.meta.features and CAM not in w.array_specs and not (w.root / CAM).exists()
    assert w.meta.unavailable == {}
    w.push("me/no-cam", progress=False)
    w.close()
    again = lz.open_dataset("me/no-cam", progress=False)
    assert CAM not in again.meta.features and again.meta.total_episodes == 6
    got = again.get_batch(np.arange(len(again)))
    for key in ("observation.state", "action", "episode_index", "index"):
        np.testing.assert_array_equal(got[key], before[key], err_msg=key)


def test_a_partial_store_is_not_pushed_by_accident(gapped, hub, tmp_path):
    partial = lz.open_dataset(gapped, root=tmp_path / "store", episodes=[0, 1], progress=False)
    with pytest.raises(NotMaterializedError, match=r"select\(\[0, 1\]\)"):
        lz.LeRobotZarrDataset(partial.root).push("me/partial", progress=False)
    with pytest.raises(ValueError):  # no repo was created
        hub.refs("me/partial")
