"""Shared helpers for the object-storage tests (tests/cloud/...): the S3 server of the tests (moto's S3 behind the
test network model, :mod:`lerobot_zarr.testing.s3_server`) and a client environment pointed at it.

The real engine (obstore) is used throughout; only its settings change (endpoint, keys, region, plain HTTP), through
the environment variables the AWS tools read, with a bucket of its own per test.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import lerobot_zarr  # noqa: F401  (sets zarr's rectilinear-chunks switch before anything else touches zarr)

pytest.importorskip("obstore", reason="object storage needs obstore (lerobot_zarr's [cloud] extra)")
pytest.importorskip("moto", reason="the S3 server of the tests needs moto[s3] (the [test] extra)")

from lerobot_zarr.cloud.client import TIMEOUT_ENV, Bucket  # noqa: E402
from lerobot_zarr.testing.s3_server import S3Server  # noqa: E402

_buckets = itertools.count()
AWS_VARS = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ALLOW_HTTP")


@dataclass
class S3Env:
    """A test's view of the server: its own bucket, the client environment set, the cache under tmp_path."""

    server: S3Server
    bucket: str
    zarr_home: Path
    scheme: str = "s3"  # "gs": the GCS server of the tests (tests/cloud/test_gcs.py)

    def url(self, folder: str = "") -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{folder}" if folder else "")

    def client(self, folder: str = "") -> Bucket:
        return Bucket(self.url(folder))

    def upload(self, folder: Path, prefix: str) -> None:
        """Every file of ``folder`` (hidden ones at its top but ``.episode_stats`` left out) under ``prefix``, 8
        at a time."""
        bucket = self.client(prefix)
        rels = [path.relative_to(folder).as_posix() for path in sorted(folder.rglob("*")) if path.is_file()]
        rels = [rel for rel in rels if not (rel.startswith(".") and not rel.startswith(".episode_stats"))]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda rel: bucket.write(rel, (folder / rel).read_bytes()), rels))


def running_s3() -> Iterator[S3Server]:
    """Body of a module-scoped server fixture: the server runs while the tests use it, and none of its requests
    ended in a server-side error."""
    with S3Server() as server:
        yield server
    assert server.errors == [], server.errors[0]


def s3_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: S3Server, scheme: str = "s3") -> Iterator[S3Env]:
    """Body of a per-test fixture: a new bucket, the client environment pointed at the server (no AWS or Google
    setting of the machine leaks in), the default timeout, faults and the network model cleared. (The server runs
    in the test's process: at a load of 30 it answered writes after 2 s, the timeout these tests had, several times
    running. A test of a deadline sets its own short one: ``one_attempt`` in test_bucket_client.py.)"""
    for var in [*AWS_VARS, *(v for v in os.environ if v.startswith("GOOGLE_"))]:
        monkeypatch.delenv(var, raising=False)
    for key, value in server.client_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(TIMEOUT_ENV, "10")
    zarr_home = tmp_path / "zarr_home"
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(zarr_home))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    name = f"test-{os.getpid()}-{next(_buckets)}"
    server.create_bucket(name)
    server.clear_faults()
    server.network = None
    server.reset_stats()
    yield S3Env(server, name, zarr_home, scheme)
    server.clear_faults()
    server.network = None
    assert server.errors == [], server.errors[0]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """The server, one per test module that imports this fixture (``from s3_fixtures import env, s3``)."""
    yield from running_s3()


@pytest.fixture
def env(monkeypatch, tmp_path, s3) -> Iterator[S3Env]:
    """A bucket of the test's own on ``s3``, the client environment pointed at it."""
    yield from s3_env(monkeypatch, tmp_path, s3)
