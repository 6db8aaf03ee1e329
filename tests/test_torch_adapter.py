"""The optional torch adapter ``lerobot_zarr.torch.TorchDataset``. Skipped when torch is not installed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (optional extra lerobot_zarr[torch])")

import lerobot_zarr  # noqa: E402
from lerobot_zarr.sample_data import write_sample_dataset  # noqa: E402
from lerobot_zarr.torch import TorchDataset  # noqa: E402

FPS = 30
IMAGE = "observation.images.top"
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(3)], IMAGE: [0.0]}


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    base = tmp_path_factory.mktemp("torch")
    src = write_sample_dataset(base / "src", n_episodes=5, lengths=(3, 12), seed=4, image_keys=(IMAGE,),
                               image_shape=(6, 8, 3))
    return lerobot_zarr.open_dataset(src, root=base / "store", delta_timestamps=DELTAS, progress=False)


def assert_tensor_item(tensor_item: dict, numpy_item: dict) -> None:
    assert set(tensor_item) == set(numpy_item)
    for key, value in numpy_item.items():
        if key == "task":
            assert isinstance(tensor_item[key], str) and tensor_item[key] == value
            continue
        t = tensor_item[key]
        assert isinstance(t, torch.Tensor), key
        assert t.numpy().dtype == np.asarray(value).dtype, key
        np.testing.assert_array_equal(t.numpy(), np.asarray(value), err_msg=key)


def test_wraps_dataset(ds):
    tds = TorchDataset(ds)
    assert isinstance(tds, torch.utils.data.Dataset)
    assert len(tds) == len(ds)
    for i in (0, 1, len(ds) // 2, len(ds) - 1):
        assert_tensor_item(tds[i], ds[i])


def test_float32_chw_images(ds):
    f32 = lerobot_zarr.open_dataset(ds.root, delta_timestamps=DELTAS, image_format="float32_chw", progress=False)
    item = TorchDataset(f32)[3]
    assert item[IMAGE].dtype == torch.float32 and tuple(item[IMAGE].shape) == (1, 3, 6, 8)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_iterates(ds, num_workers):
    loader = torch.utils.data.DataLoader(TorchDataset(ds), batch_size=4, num_workers=num_workers, shuffle=False)
    seen = 0
    for batch in loader:
        n = len(batch["task"])
        expected = ds.get_batch(np.arange(seen, seen + n))
        for key, value in expected.items():
            if key == "task":
                assert list(batch[key]) == value
            else:
                assert isinstance(batch[key], torch.Tensor), key
                np.testing.assert_array_equal(batch[key].numpy(), value, err_msg=key)
        seen += n
    assert seen == len(ds)
