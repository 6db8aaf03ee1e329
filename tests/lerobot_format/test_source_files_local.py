"""A local LeRobot folder passes the SourceFiles conformance suite (lerobot_zarr.testing.source_files_tests)."""

from __future__ import annotations

import pytest

from lerobot_zarr.lerobot.source_files import LocalFiles
from lerobot_zarr.testing.source_files_tests import SourceFilesTests


class TestLocalFiles(SourceFilesTests):
    @pytest.fixture
    def files(self, folder):
        return LocalFiles(folder)
