"""``gs://`` against the GCS-compatible server of the tests (:mod:`lerobot_zarr.testing.gcs_server`: GCS's XML API,
what obstore's GCS client speaks, in front of moto, with the network model and hostile answers of the S3 server),
reached by obstore's real GCS client through its ``base_url`` and ``bearer_token`` settings (``GOOGLE_BASE_URL`` /
``GOOGLE_BEARER_TOKEN``). The client tests of S3 (ranges, pinned reads, conditional writes, faults retried or
ending in a typed error within the deadline, refused credentials), the SourceFiles and source conformance suites
(a LeRobot folder and a store in the bucket), lazily listed folders, and publishing and reading a store in place run
on it as on S3."""

from __future__ import annotations

import pytest
import s3_fixtures
from test_bucket_client import (  # noqa: F401  (the S3 client tests and their fixture, again on gs://)
    one_attempt,
    test_conditional_writes,
    test_exact_ranges_whole_reads_and_listing,
    test_lasting_faults_end_in_a_typed_error_within_the_deadline,
    test_passing_faults_are_retried_to_the_exact_bytes,
    test_reads_are_pinned_to_one_version,
    test_refused_credentials_are_an_auth_error,
)
from test_bucket_files import (  # noqa: F401
    test_a_file_rewritten_while_read_is_an_error_not_a_mix,
    test_folders_are_listed_when_first_needed_and_once,
)

import lerobot_zarr
import lerobot_zarr.cloud.client as client
from lerobot_zarr.cloud.client import Bucket
from lerobot_zarr.cloud.files import BucketFiles
from lerobot_zarr.errors import BucketAuthError, CommitConflictError
from lerobot_zarr.testing.gcs_server import GCSServer
from lerobot_zarr.testing.source_files_tests import SourceFilesTests
from lerobot_zarr.testing.source_tests import SourceTests, assert_same_batches, published_store
from lerobot_zarr.writing.sync import pull_store, push_store

CAM = "observation.images.cam"


@pytest.fixture(scope="module")
def gcs():
    with GCSServer() as server:
        yield server
    assert server.errors == [], server.errors[0]


@pytest.fixture
def env(monkeypatch, tmp_path, gcs):
    """A bucket of the test's own on the GCS server, obstore's GOOGLE_* settings pointed at it."""
    yield from s3_fixtures.s3_env(monkeypatch, tmp_path, gcs, scheme="gs")


def test_requests_are_gcs_xml_api_with_the_bearer_token(env, monkeypatch):
    bucket = env.client("f")
    etag = bucket.write("a/b.bin", b"0123456789")
    assert bucket.read("a/b.bin", 2, 5, etag=etag) == b"234" and list(bucket.list("a")) == ["a/b.bin"]
    assert {(r.method, r.status) for r in env.server.requests()} == {("PUT", 200), ("GET", 206), ("GET", 200)}
    monkeypatch.setenv("GOOGLE_BEARER_TOKEN", "another")
    with pytest.raises(BucketAuthError):
        Bucket(env.url("f")).head("a/b.bin")


class TestGCSBucketFiles(SourceFilesTests):
    @pytest.fixture
    def files(self, folder, env):
        env.upload(folder, "datasets/sample")
        return BucketFiles(env.client("datasets/sample"))


class TestGCSFolderSource(SourceTests):
    @pytest.fixture
    def spec(self, folder, env):
        env.upload(folder, "lerobot/ds")
        return env.url("lerobot/ds")


class TestGCSStoreSource(SourceTests):
    holds = "store"

    @pytest.fixture
    def spec(self, folder, env, tmp_path):
        return published_store(folder, env.url("stores/ds"), tmp_path)


def test_a_store_published_to_gcs_reads_as_the_local_one_and_no_commit_is_lost(env, tmp_path):
    """Publishing twice (the second a conditional write on the root's generation), reading in place, and a writer
    whose base is no longer the bucket's commit refused."""
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    folder = write_sample_dataset(tmp_path / "src", n_episodes=6, lengths=(15, 30), image_keys=(CAM,), seed=3)
    store = lerobot_zarr.open_dataset(folder, root=tmp_path / "store", progress=False, pack_bytes=1 << 14).root
    url = env.url("stores/pub")
    assert push_store(store, url, progress=False).committed
    assert not push_store(store, url, progress=False).uploaded
    deltas = {"observation.state": [-1 / 30, 0.0], CAM: [-1 / 30, 0.0]}
    assert_same_batches(lerobot_zarr.open_dataset(url, delta_timestamps=deltas, cache_bytes=1 << 20),
                        lerobot_zarr.open_dataset(store, delta_timestamps=deltas), "in gcs")
    other = pull_store(url, tmp_path / "other", progress=False)
    with lerobot_zarr.open_dataset(other, mode="r+") as w:
        w.delete_episodes([0])
    assert push_store(other, url, progress=False).committed  # (the root replaced on its generation)
    with lerobot_zarr.open_dataset(store, mode="r+") as w:
        w.delete_episodes([1])
    with pytest.raises(CommitConflictError):
        push_store(store, url, progress=False)
    assert_same_batches(lerobot_zarr.open_dataset(url), lerobot_zarr.open_dataset(other), "the other's commit")


def test_a_file_bigger_than_one_request_is_uploaded_in_parts(env, tmp_path):
    import os

    data = os.urandom((16 << 20) + 12345)
    (tmp_path / "big").write_bytes(data)
    bucket = env.client()
    etag = bucket.write("big", tmp_path / "big")
    assert any("uploads" in r.query for r in env.server.requests("POST"))  # (in parts, as S3's XML API)
    assert bucket.head("big") == client.ObjectInfo(len(data), etag)
    assert bucket.read("big", 0, len(data)) == data
