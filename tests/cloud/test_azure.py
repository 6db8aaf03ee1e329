"""``az://`` against a real Azure Blob implementation: Azurite (from the npm registry), started here on 127.0.0.1.
The conformance suites of sources (a LeRobot folder and a store in a container) and of SourceFiles run on it, and a
store is published there (conditional writes, unchanged files skipped, retired objects deleted) and read in place,
exactly as the local store. Skipped when Azurite is not installed (``npm install azurite``)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest

import lerobot_zarr
from lerobot_zarr.testing.azurite import AzuriteServer, find_azurite
from lerobot_zarr.testing.source_files_tests import SourceFilesTests
from lerobot_zarr.testing.source_tests import SourceTests, assert_same_batches, published_store

pytest.importorskip("obstore", reason="object storage needs obstore (lerobot_zarr's [cloud] extra)")
if find_azurite() is None:
    pytest.skip("Azurite is not installed (npm install azurite; or LEROBOT_ZARR_AZURITE=<azurite-blob>)",
                allow_module_level=True)

from lerobot_zarr.cloud.client import TIMEOUT_ENV, Bucket  # noqa: E402
from lerobot_zarr.cloud.files import BucketFiles  # noqa: E402
from lerobot_zarr.errors import CommitConflictError  # noqa: E402
from lerobot_zarr.writing.sync import pull_store, push_store  # noqa: E402

CAM = "observation.images.cam"
_containers = itertools.count()
_CLOUD_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE",
               "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_USE_EMULATOR",
               "AZURITE_BLOB_STORAGE_URL")


@pytest.fixture(scope="module")
def azurite():
    with AzuriteServer() as server:
        yield server


@pytest.fixture
def container(azurite, monkeypatch, tmp_path) -> str:
    """A new container, the client environment pointed at Azurite; its ``az://`` URL."""
    for var in _CLOUD_VARS:
        monkeypatch.delenv(var, raising=False)
    for key, value in azurite.client_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(TIMEOUT_ENV, "5")
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "zarr_home"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    name = f"test-{os.getpid()}-{next(_containers)}"
    azurite.create_container(name)
    return f"az://{name}"


def upload(folder: Path, url: str) -> str:
    bucket = Bucket(url)
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and not rel.startswith("."):
            bucket.write(rel, path.read_bytes())
    return url


class TestAzureBucketFiles(SourceFilesTests):
    @pytest.fixture
    def files(self, folder, container):
        return BucketFiles(Bucket(upload(folder, f"{container}/datasets/sample")))


class TestAzureFolderSource(SourceTests):
    @pytest.fixture
    def spec(self, folder, container):
        return upload(folder, f"{container}/lerobot/ds")


class TestAzureStoreSource(SourceTests):
    holds = "store"

    @pytest.fixture
    def spec(self, folder, container, tmp_path):
        return published_store(folder, f"{container}/stores/ds", tmp_path)


@pytest.mark.parametrize("storage", ["raw", "lossless"])
def test_a_store_published_to_azure_reads_as_the_local_one(container, tmp_path, storage):
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    folder = write_sample_dataset(tmp_path / "src", n_episodes=6, lengths=(15, 30), image_keys=(CAM,), seed=3)
    store = lerobot_zarr.open_dataset(folder, root=tmp_path / "store", progress=False, pack_bytes=1 << 14,
                                      storage={CAM: storage}).root
    url = f"{container}/stores/{storage}"
    first = push_store(store, url, progress=False)
    assert first.committed and first.uploaded
    again = push_store(store, url, progress=False)  # the ETags recorded match the listing's: nothing uploaded
    assert not again.uploaded and not again.committed
    deltas = {"observation.state": [-1 / 30, 0.0], CAM: [-1 / 30, 0.0]}
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=deltas, cache_bytes=1 << 20)
    local = lerobot_zarr.open_dataset(store, delta_timestamps=deltas)
    assert_same_batches(remote, local, f"{storage} in azure")
    rng = np.random.default_rng(0)
    for _ in range(3):
        idx = rng.integers(0, len(local), 32)
        a, b = remote.get_batch(idx), local.get_batch(idx)
        assert all(np.array_equal(a[k], b[k]) for k in b if k != "task")
    if storage != "raw":
        return  # (a compact store is not written in place)
    # another writer's commit is never replaced; a commit that retires packs deletes them two commits later
    other = tmp_path / "other"
    pull_store(url, other, progress=False)
    with lerobot_zarr.open_dataset(other, mode="r+") as w:
        w.delete_episodes([0])
    push_store(other, url, progress=False)
    with lerobot_zarr.open_dataset(store, mode="r+") as w:
        w.delete_episodes([1])
    with pytest.raises(CommitConflictError):
        push_store(store, url, progress=False)
    with lerobot_zarr.open_dataset(other, mode="r+") as w:
        w.delete_episodes([1])
    report = push_store(other, url, progress=False)
    assert report.committed and report.deleted and not set(report.deleted) & set(Bucket(url).list())
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(other), "after two commits")
