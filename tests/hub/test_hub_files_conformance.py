"""A Hub repo (HubFiles, through the test Hub and the real huggingface_hub client) passes the SourceFiles
conformance suite (lerobot_zarr.testing.source_files_tests)."""

from __future__ import annotations

import pytest
from hub_fixtures import make_env

from lerobot_zarr.hub.files import HubFiles
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.source_files_tests import SourceFilesTests


class TestHubFiles(SourceFilesTests):
    @pytest.fixture(scope="class")
    @classmethod
    def served(cls, folder, tmp_path_factory):
        with HubServer(tmp_path_factory.mktemp("hub")) as server:
            commit = server.add_repo("org/conformance", folder, tags=["v3.0"])
            yield server, commit
        assert server.errors == [], server.errors[0]

    @pytest.fixture
    def files(self, served, monkeypatch, tmp_path):
        server, commit = served
        make_env(monkeypatch, tmp_path, server.endpoint)
        return HubFiles("org/conformance", commit, revision="v3.0")
