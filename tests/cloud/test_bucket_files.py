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


def test_a_forked_child_reads_though_a_parent_thread_held_the_lock_at_the_fork(env, tmp_path):
    """A DataLoader worker forked while one of the parent's threads held the reader's lock (its caches of bytes
    fetched ahead): the child has a lock of its own and reads its file (an mp4's way: blocks with read-ahead), as
    the parent does; the parent's thread lets go of its lock afterwards."""
    import multiprocessing
    import threading

    from lerobot_zarr.testing.source_files_tests import sample_folder

    folder = sample_folder(tmp_path / "ds")
    env.upload(folder, "ds")
    files = BucketFiles(env.client("ds"))
    rel = files.list("data")[0]
    assert files.read_bytes(rel) == (folder / rel).read_bytes()  # the engine runs: a child's requests are relayed
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with files._lock:
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    ctx = multiprocessing.get_context("fork")
    got, sent = ctx.Pipe(duplex=False)

    def child() -> None:
        with files.open(rel) as f:
            f.seek(4)
            sent.send(f.read(64) + f.read())

    proc = ctx.Process(target=child)
    try:
        proc.start()
        answered = got.poll(60)
        data = got.recv() if answered else None
    finally:
        release.set()
        holder.join(10)
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert answered, "the forked child waited on the lock a parent thread held at the fork"
    assert data == (folder / rel).read_bytes()[4:]
    assert files.get(rel, 0, 4) == b"PAR1"  # the parent's lock was let go


def test_folders_are_listed_when_first_needed_and_once(env, tmp_path):
    """A LeRobot folder's ``meta/`` is listed when its reader is made; a data or video folder the first time one of
    its files is asked for, once however many threads ask together, and never again; a file asked for in a folder
    the listing did not have is missing without another request."""
    from concurrent.futures import ThreadPoolExecutor

    from lerobot_zarr.testing.source_files_tests import sample_folder

    folder = sample_folder(tmp_path / "ds")
    env.upload(folder, "ds")
    env.server.reset_stats()

    def listings() -> list[str]:
        return [r.query for r in env.server.requests("GET") if "list-type" in r.query]

    files = BucketFiles(env.client("ds"))
    assert len(listings()) == 1 and "meta" in listings()[0] and not [r for r in env.server.requests() if
                                                                      "list-type" not in r.query]
    data = sorted(p.relative_to(folder).as_posix() for p in (folder / "data").rglob("*.parquet"))
    with ThreadPoolExecutor(8) as pool:
        sizes = list(pool.map(files.size, data * 8))
    assert sizes == [(folder / rel).stat().st_size for rel in data * 8]
    assert len(listings()) == 2 and "data%2Fchunk-000" in listings()[1], listings()
    assert not files.exists("data/chunk-000/file-999.parquet") and len(listings()) == 2
    assert files.list("data") == data and len(listings()) == 3  # (the folder above: all of it, once)
    assert files.list("data/chunk-000") == data and len(listings()) == 3


def test_a_folder_whose_metadata_changes_gets_a_new_store_and_its_data_files_are_not_listed_for_it(env, tmp_path):
    """A bucket folder's store in the cache is keyed by its URL and its ``meta/`` files' ETags (LeRobot rewrites
    them with every change): known without listing a data or video folder; a metadata file rewritten: another key.
    (A data file rewritten in place with no metadata change keeps the key: docs/object-storage.md, Limits.)"""
    from lerobot_zarr.sources import resolve_source
    from lerobot_zarr.testing.source_files_tests import sample_folder

    folder = sample_folder(tmp_path / "ds")
    env.upload(folder, "ds")
    env.server.reset_stats()
    first = resolve_source(env.url("ds")).cache_path()
    assert {r.query for r in env.server.requests("GET") if "list-type" in r.query} == {
        "list-type=2&prefix=ds%2Fmeta%2F"}, "only meta/ listed"
    assert resolve_source(env.url("ds")).cache_path() == first
    rel = sorted(p.relative_to(folder).as_posix() for p in (folder / "data").rglob("*.parquet"))[0]
    env.client("ds").write(rel, (folder / rel).read_bytes()[:-1] + b"1")
    assert resolve_source(env.url("ds")).cache_path() == first
    env.client("ds").write("meta/info.json", (folder / "meta/info.json").read_bytes() + b"\n")
    assert resolve_source(env.url("ds")).cache_path() != first
