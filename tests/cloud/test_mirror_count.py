"""The count of bytes a shared mirror holds (what its bound is checked against) is exact under the threads of one
process: each fetch thread of a process adds to it through the process's one descriptor, whose ``flock`` does not
keep the process's other threads out."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("obstore", reason="object storage needs obstore (lerobot_zarr's [cloud] extra)")

from lerobot_zarr.cloud.client import Bucket  # noqa: E402
from lerobot_zarr.sources.mirror import Mirror  # noqa: E402


def test_threads_adding_to_the_count_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    mirror = Mirror(tmp_path, Bucket("s3://bucket/store"), b'{"zarr_format": 3}')
    try:
        start = threading.Barrier(8)

        def add() -> None:
            start.wait(timeout=60)
            for _ in range(3000):
                mirror.add_held(3)

        threads = [threading.Thread(target=add) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert mirror.add_held(0) == 8 * 3000 * 3
        mirror.recount(100, since=mirror.add_held(0) - 5)  # an eviction counted 100 bytes; 5 landed since it began
        assert mirror.add_held(0) == 105
    finally:
        mirror.close()
