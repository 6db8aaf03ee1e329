"""The drop-in ``LeRobotDataset(repo_id, root="s3://...")`` (LeRobot's newer docs write ``root`` as a bucket URL):
a LeRobot folder there is transcoded into ``store`` (else the cache) and a store there is read where it is, with the
items of the same dataset opened from a local folder, exactly; anything else there is refused naming the URL, never
read from the Hub or written into a local folder named ``s3:``. Needs torch (the LeRobot venv)."""

from __future__ import annotations

import pytest
import s3_fixtures

torch = pytest.importorskip("torch", reason="the drop-in LeRobotDataset needs torch")

import lerobot_zarr  # noqa: E402
from lerobot_zarr.errors import SourceNotFoundError  # noqa: E402
from lerobot_zarr.testing.sample_data import write_sample_dataset  # noqa: E402
from lerobot_zarr.torch import LeRobotDataset  # noqa: E402
from lerobot_zarr.writing.sync import push_store  # noqa: E402

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

CAM = "observation.images.cam"
DELTAS = {"action": [0.0, 0.1], CAM: [-0.1, 0.0]}


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # (a read of the Hub instead of the bucket fails)
    monkeypatch.chdir(tmp_path)


def assert_same_items(got: LeRobotDataset, want: LeRobotDataset) -> None:
    assert len(got) == len(want) and got.meta.total_episodes == want.meta.total_episodes
    for i in sorted({0, 1, len(want) // 2, len(want) - 1}):
        a, b = got[i], want[i]
        assert a.keys() == b.keys(), i
        for key in b:
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), (i, key)
            else:
                assert a[key] == b[key], (i, key)


def test_root_a_lerobot_folder_in_a_bucket(env, tmp_path):
    folder = write_sample_dataset(tmp_path / "src", n_episodes=4, lengths=(8, 12), image_keys=(CAM,), seed=5)
    env.upload(folder, "lerobot/pusht")
    url = env.url("lerobot/pusht")
    ds = LeRobotDataset("lerobot/pusht", root=url, episodes=[1, 3], delta_timestamps=DELTAS,
                        store=tmp_path / "store")
    want = LeRobotDataset("lerobot/pusht", root=folder, episodes=[1, 3], delta_timestamps=DELTAS,
                          store=tmp_path / "local")
    assert ds.root == url and ds.meta.root == url
    assert (tmp_path / "store" / "zarr.json").is_file()  # the store went where store= says
    assert_same_items(ds, want)
    assert not (tmp_path / "s3:").exists()


def test_root_a_store_in_a_bucket(env, tmp_path):
    folder = write_sample_dataset(tmp_path / "src", n_episodes=4, lengths=(8, 12), image_keys=(CAM,), seed=6)
    store = lerobot_zarr.open_dataset(folder, root=tmp_path / "store", progress=False).root
    url = env.url("stores/pusht")
    push_store(store, url, progress=False)
    ds = LeRobotDataset("lerobot/pusht", root=url, delta_timestamps=DELTAS)
    want = LeRobotDataset("lerobot/pusht", root=store, delta_timestamps=DELTAS)
    assert ds.root == url and ds.dataset.meta.total_episodes == 4
    assert_same_items(ds, want)


def test_root_in_a_bucket_holding_no_dataset_is_refused_by_name(env, tmp_path):
    env.client("lance").write("pusht.lance/_versions/1.manifest", b"not ours")
    url = env.url("lance/pusht.lance")
    with pytest.raises(SourceNotFoundError, match=f"{url}.*neither a lerobot_zarr store"):
        LeRobotDataset("lerobot/pusht", root=url)
    assert not (tmp_path / "s3:").exists() and not list(tmp_path.iterdir())
