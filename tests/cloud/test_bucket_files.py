"""A LeRobot folder in a bucket (BucketFiles, through moto's S3 and obstore) passes the SourceFiles conformance
suite (lerobot_zarr.testing.source_files_tests), and reads each file at one version."""

from __future__ import annotations

import pytest
import s3_fixtures

from lerobot_zarr.cloud.files import BucketFiles
from lerobot_zarr.errors import ObjectChangedError
from lerobot_zarr.testing.source_files_tests import SourceFilesTests

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test


class TestBucketFiles(SourceFilesTests):
    @pytest.fixture
    def files(self, folder, env):
        env.upload(folder, "datasets/sample")
        return BucketFiles(env.client("datasets/sample"))


def test_a_file_rewritten_while_read_is_an_error_not_a_mix(env, tmp_path):
    """Every read after the listing carries the ETag it gave: a file replaced meanwhile is refused."""
    from lerobot_zarr.testing.source_files_tests import sample_folder

    folder = sample_folder(tmp_path / "ds")
    env.upload(folder, "ds")
    files = BucketFiles(env.client("ds"))
    rel = files.list("data")[0]
    env.client("ds").write(rel, b"PAR1" + b"\0" * (files.size(rel) - 8) + b"PAR1")  # same size, other bytes
    with pytest.raises(ObjectChangedError, match="changed while it was being read"):
        files.read_bytes(rel)
