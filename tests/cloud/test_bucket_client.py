"""The object-storage client (lerobot_zarr.cloud) against moto's S3 behind the test network model: URLs, exact
ranges, bounded bodies, conditional writes, hostile answers (5xx, stalls, trickles, short and long bodies, wrong
ranges) ending in a typed error within a deadline, HF Buckets through a namespace-scoped endpoint, and no
credential in any message."""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import pytest
import s3_fixtures

import lerobot_zarr.cloud.client as client
from lerobot_zarr.cloud.client import HF_S3_ENDPOINT_ENV, Bucket
from lerobot_zarr.cloud.urls import BucketURL, is_bucket_url, parse_bucket_url
from lerobot_zarr.errors import (
    ArgumentError,
    BucketAuthError,
    BucketError,
    CommitConflictError,
    NotMaterializedError,
    ObjectChangedError,
    SourceNotFoundError,
)
from lerobot_zarr.testing.hub_network import NetworkModel
from lerobot_zarr.testing.s3_server import S3Server


@pytest.fixture
def one_attempt(monkeypatch):
    """One attempt of one try each, and bodies held to 1 MiB/s: a failure ends in a second or two."""
    monkeypatch.setattr(client, "_ATTEMPTS", 1)
    monkeypatch.setattr(client, "_RETRIES", 1)
    monkeypatch.setattr(client, "_MIN_RATE", 1 << 20)
    monkeypatch.setenv(client.TIMEOUT_ENV, "1")


def test_urls():
    assert parse_bucket_url("s3://data/a/b/") == BucketURL("s3", "data", "a/b")
    assert str(parse_bucket_url("gs://data")) == "gs://data" and parse_bucket_url("az://box/x").key("y") == "x/y"
    hf = parse_bucket_url("hf://buckets/my-org/robots/pusht")
    assert (hf.scheme, hf.namespace, hf.bucket, hf.prefix, str(hf)) == (
        "hf", "my-org", "robots", "pusht", "hf://buckets/my-org/robots/pusht")
    for bad in ("s3://Data/x", "s3://data/../x", "s3://data/a//b", "s3://data/a\\b", "hf://buckets/org",
                "hf://buckets/../b/x", "s3://d"):
        with pytest.raises(ArgumentError):
            parse_bucket_url(bad)
    assert not is_bucket_url("http://host/x") and not is_bucket_url("org/name") and is_bucket_url("s3://b/x")

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test


def test_exact_ranges_whole_reads_and_listing(env):
    bucket = env.client("f")
    data = os.urandom(3 << 20)
    etag = bucket.write("a/blob", data)
    bucket.write("a/small", b"hello")
    assert bucket.read("a/blob", 1000, 1000 + (2 << 20)) == data[1000:1000 + (2 << 20)]
    assert bucket.read_many("a/blob", [(0, 10), (5, 7), (len(data) - 3, len(data))]) == [
        data[:10], data[5:7], data[-3:]]
    assert bucket.read_whole("a/small", limit=5) == (b"hello", bucket.head("a/small"))
    assert bucket.read_whole("a/blob", limit=len(data))[0] == data
    assert {k: v.size for k, v in bucket.list().items()} == {"a/blob": len(data), "a/small": 5}
    assert bucket.head("a/blob").etag == etag and bucket.head("a/nope") is None
    env.server.reset_stats()
    with pytest.raises(BucketError, match="more than the 1000 allowed"):
        bucket.read_whole("a/blob", limit=1000)  # refused on its first answer: not read to the end
    assert env.server.bytes_sent() <= 1000
    with pytest.raises(SourceNotFoundError) as e:
        bucket.read("a/nope", 0, 10)
    assert isinstance(e.value, FileNotFoundError) and env.url() in str(e.value)


def test_reads_are_pinned_to_one_version(env):
    bucket = env.client()
    etag = bucket.write("x", b"0123456789")
    bucket.write("x", b"abcdefghij")
    with pytest.raises(ObjectChangedError):
        bucket.read("x", 0, 4, etag=etag)


def test_conditional_writes(env):
    bucket = env.client()
    first = bucket.write("root", b"1", if_absent=True)
    with pytest.raises(CommitConflictError, match="exists already"):
        bucket.write("root", b"2", if_absent=True)
    second = bucket.write("root", b"2", if_match=first)
    with pytest.raises(CommitConflictError, match="changed since it was read"):
        bucket.write("root", b"3", if_match=first)  # a writer that read "1" never replaces "2"
    assert bucket.read_whole("root", limit=10) == (b"2", client.ObjectInfo(1, second))


def test_a_multipart_upload_that_vanished_is_written_again(env, tmp_path):
    """A multipart overwrite whose completion was done but answered late (a 500 here): the engine asks again, the
    upload is gone by then (404 NoSuchUpload, as AWS S3 answers), and the client writes the object again, whole,
    instead of failing with 'no such object'."""
    bucket = env.client()
    data = os.urandom((16 << 20) + 12345)  # over one request: uploaded in parts
    (tmp_path / "big").write_bytes(data)
    env.server.inject_fault(path_contains="/big", kind="late", method="POST",
                            query_contains="uploadId")
    etag = bucket.write("big", tmp_path / "big")
    assert bucket.read_whole("big", limit=len(data)) == (data, client.ObjectInfo(len(data), etag))
    completions = [r.status for r in env.server.requests("POST", "/big") if "uploadId" in r.query]
    assert completions == [500, 404, 200], completions  # done late, gone, then a new upload completed


@pytest.mark.parametrize("kind, count", [("500", 2), ("503", 1), ("short", 1), ("bad_range", 1), ("drop", 1),
                                         ("long", 1), ("reset", 1)])
def test_passing_faults_are_retried_to_the_exact_bytes(env, kind, count):
    bucket = env.client()
    data = os.urandom(200_000)
    bucket.write("obj", data)
    env.server.inject_fault(path_contains="/obj", kind=kind, count=count, after_bytes=1000, method="GET")
    assert bucket.read("obj", 10, 150_000) == data[10:150_000]


@pytest.mark.parametrize("kind", ["stall", "trickle", "short", "500", "bad_range"])
def test_lasting_faults_end_in_a_typed_error_within_the_deadline(env, one_attempt, kind):
    bucket = env.client()
    bucket.write("obj", os.urandom(200_000))
    env.server.inject_fault(path_contains="/obj", kind=kind, count=100, after_bytes=10, method="GET", seconds=60,
                            rate=16)
    start = time.monotonic()
    with pytest.raises(BucketError) as e:
        bucket.read("obj", 0, 100_000)
    elapsed = time.monotonic() - start
    assert env.url() in str(e.value) and e.value.path.endswith("/obj")
    assert elapsed < 15, f"{kind}: {elapsed:.1f} s"


def test_refused_credentials_are_an_auth_error(env):
    bucket = env.client()
    bucket.write("obj", b"x")
    env.server.inject_fault(path_contains="/obj", kind="403", count=1)
    with pytest.raises(BucketAuthError) as e:
        bucket.read("obj", 0, 1)
    assert isinstance(e.value, PermissionError)


def test_no_credential_in_messages_or_logs(env, one_attempt, monkeypatch, caplog):
    secret = "SUPERSECRET-0123456789abcdef"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    caplog.set_level(logging.DEBUG)
    bucket = Bucket(env.url(), {"endpoint": "http://user:" + secret + "@127.0.0.1:1", "secret_access_key": secret})
    with pytest.raises(BucketError) as e:
        bucket.read("x", 0, 10)
    assert secret not in str(e.value) and secret not in repr(e.value)
    assert bucket.endpoint is None or secret not in bucket.endpoint
    assert all(secret not in r.getMessage() for r in caplog.records)


def test_hf_buckets_through_the_namespaced_gateway(tmp_path, monkeypatch, s3):
    """HF Buckets are S3 behind ``https://s3.hf.co/<namespace>`` (path style): the client addresses them there."""
    with S3Server(namespaces=["my-org"], network=NetworkModel(latency_s=0.001)) as hf:
        for key, value in hf.client_env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL")
        monkeypatch.setenv(HF_S3_ENDPOINT_ENV, hf.endpoint)
        hf.create_bucket("robots")
        bucket = Bucket("hf://buckets/my-org/robots/pusht")
        assert bucket.endpoint == f"{hf.endpoint}/my-org"
        bucket.write("meta/info.json", b"{}")
        assert bucket.read_whole("meta/info.json", limit=10)[0] == b"{}"
        assert {r.path for r in hf.requests()} == {"/robots/pusht/meta/info.json"}  # under the namespace prefix
        assert hf.errors == []
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        from lerobot_zarr.sources.resolve import resolve_source

        with pytest.raises(NotMaterializedError, match="HF_HUB_OFFLINE"):
            resolve_source("hf://buckets/my-org/robots/pusht").what()


def test_an_hf_bucket_folder_is_served_offline_from_the_store_held(tmp_path, monkeypatch, s3):
    """``HF_HUB_OFFLINE=1``: a LeRobot folder in an HF Bucket opened before is served from the newest store the
    cache holds of it, with no request; one never opened here, or episodes not held, are refused with the reason."""
    import lerobot_zarr
    from lerobot_zarr.testing.sample_data import write_sample_dataset

    folder = write_sample_dataset(tmp_path / "src", n_episodes=4, lengths=(10, 20), seed=2)
    monkeypatch.setenv("LEROBOT_ZARR_HOME", str(tmp_path / "home"))
    with S3Server(namespaces=["my-org"]) as hf:
        for key, value in hf.client_env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL")
        monkeypatch.setenv(HF_S3_ENDPOINT_ENV, hf.endpoint)
        hf.create_bucket("held-robots")
        url = "hf://buckets/my-org/held-robots/pusht"
        bucket = Bucket(url)
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.relative_to(folder).as_posix().startswith("."):
                bucket.write(path.relative_to(folder).as_posix(), path.read_bytes())
        online = lerobot_zarr.open_dataset(url, episodes=[0, 2], progress=False)
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        hf.reset_stats()
        offline = lerobot_zarr.open_dataset(url, episodes=[0, 2], progress=False)
        assert offline.root == online.root and len(offline) == len(online)
        idx = np.arange(len(online))
        a, b = offline.get_batch(idx), online.get_batch(idx)
        assert all(np.array_equal(a[k], b[k]) if k != "task" else a[k] == b[k] for k in b)
        assert lerobot_zarr.inspect(url).total_episodes == 4
        with pytest.raises(NotMaterializedError, match="HF_HUB_OFFLINE"):
            lerobot_zarr.open_dataset(url, episodes=[3], progress=False)
        with pytest.raises(NotMaterializedError, match="never opened"):
            lerobot_zarr.open_dataset("hf://buckets/my-org/held-robots/other", progress=False)
        assert hf.requests() == []
        assert hf.errors == []
