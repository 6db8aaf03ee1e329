"""Every kind of source passes the conformance suite (lerobot_zarr.testing.source_tests): a store and a LeRobot
folder on this machine, a Hub repo (the test Hub, real huggingface_hub client), a LeRobot folder and a store in a
bucket (moto's S3, obstore)."""

from __future__ import annotations

import pytest
from hub_fixtures import make_env

from lerobot_zarr import open_dataset
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.source_tests import SourceTests, published_store


class TestStoreSource(SourceTests):
    holds = "store"

    @pytest.fixture
    def spec(self, folder, tmp_path):
        return str(open_dataset(folder, root=tmp_path / "store", progress=False).root)


class TestFolderSource(SourceTests):
    @pytest.fixture
    def spec(self, folder, monkeypatch, tmp_path):
        monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "zarr_home"))
        return str(folder)


class TestHubSource(SourceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def hub(cls, folder, tmp_path_factory):
        with HubServer(tmp_path_factory.mktemp("hub")) as server:
            server.add_repo("org/kinds", folder, tags=["v3.0"])
            yield server
        assert server.errors == [], server.errors[0]

    @pytest.fixture
    def spec(self, hub, monkeypatch, tmp_path):
        make_env(monkeypatch, tmp_path, hub.endpoint)
        return "org/kinds"


try:
    import s3_fixtures
    s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test
except pytest.skip.Exception:  # no obstore or moto: the bucket kinds are skipped, the others run
    s3 = None


if s3 is not None:
    class TestBucketFolderSource(SourceTests):
        @pytest.fixture
        def spec(self, folder, env):
            env.upload(folder, "lerobot/ds")
            return env.url("lerobot/ds")

    class TestBucketStoreSource(SourceTests):
        holds = "store"

        @pytest.fixture
        def spec(self, folder, env, tmp_path):
            return published_store(folder, env.url("stores/ds"), tmp_path)
