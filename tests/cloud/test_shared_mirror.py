"""The mirror of a store in a bucket is shared by the processes of the machine reading the same commit (DataLoader
workers, ranks): real processes, requests counted at the S3 test server. Processes reading the same rows at the
same time fetch each byte once; a mirror bounded by ``cache_bytes`` evicts across processes and never serves a row
another process is reading; a process killed while fetching leaves nothing that is served, and blocks no one; the
folder goes with its last user."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import signal
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import s3_fixtures

import lerobot_zarr
from lerobot_zarr.sources.remote_store import SHARED
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.writing.sync import push_store

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

pytestmark = pytest.mark.skipif(not SHARED, reason="the mirror is shared through Linux open file description locks")

FPS = 30
CAM = "observation.images.cam"
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [0.0, 1 / FPS], CAM: [-1 / FPS, 0.0]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_sample_dataset(tmp_path_factory.mktemp("shared") / "src", n_episodes=8, lengths=(30, 40),
                                image_keys=(CAM,), image_shape=(64, 96, 3), seed=11)


def published(env, folder, tmp_path, name: str, **kwargs):
    local = lerobot_zarr.open_dataset(folder, root=tmp_path / name, progress=False, pack_bytes=1 << 17, **kwargs)
    url = env.url(f"stores/{name}")
    push_store(local.root, url, progress=False)
    return local, url


def _same_batch(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all((a[k] == b[k]) if k == "task" else np.array_equal(a[k], b[k]) for k in b)


def _read_together(ds, batches, barrier, out):
    """A worker: every batch read once all workers are ready (they fetch the same rows at the same time)."""
    got = []
    for idx in batches:
        barrier.wait(timeout=120)
        got.append(ds.get_batch(idx))
    out.put(pickle.dumps((str(ds.root), ds._remote.requests, got)))


def _overlaps(requests) -> list:
    """Byte ranges of one object asked for more than once (any overlap), over the GETs with a range."""
    by_path = defaultdict(list)
    for r in requests:
        if r.method == "GET" and r.range:
            a, _, b = r.range.removeprefix("bytes=").partition("-")
            by_path[r.path].append((int(a), int(b)))
    twice = []
    for path, ranges in by_path.items():
        ranges.sort()
        for (a0, b0), (a1, b1) in itertools.pairwise(ranges):
            if a1 <= b0:
                twice.append((path, (a0, b0), (a1, b1)))
    return twice


@pytest.mark.parametrize("storage", ["raw", "lossless"])
def test_workers_reading_the_same_rows_fetch_each_byte_once(env, folder, tmp_path, storage):
    local, url = published(env, folder, tmp_path, f"together-{storage}", storage={CAM: storage})
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    rng = np.random.default_rng(4)
    batches = [rng.choice(len(local), 24, replace=False) for _ in range(3)]
    env.server.reset_stats()
    ctx = multiprocessing.get_context("spawn")
    n = 3
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_read_together, args=(remote, batches, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [pickle.loads(out.get(timeout=180)) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for root, _, got in results:
        assert root == str(remote.root)  # one mirror: the parent's
        for idx, batch in zip(batches, got, strict=True):
            assert _same_batch(batch, local.get_batch(idx))
    requests = env.server.requests()
    assert requests and all(r.method in ("GET", "HEAD") for r in requests)
    assert _overlaps(requests) == []  # each byte crossed the network once, for three processes
    # the rows the workers fetched are the parent's too: nothing more to ask
    env.server.reset_stats()
    assert _same_batch(remote.get_batch(batches[0]), local.get_batch(batches[0]))
    assert [r.path for r in env.server.requests() if f"/{CAM}/" in r.path] == []


def _read_bounded(url, seed, batches, out):
    ds = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS, cache_bytes=1 << 20)
    local = lerobot_zarr.open_dataset(os.environ["SHARED_TEST_LOCAL"], delta_timestamps=DELTAS)
    rng = np.random.default_rng(seed)
    held, wrong = [], 0
    for _ in range(batches):
        idx = rng.choice(len(local), 6, replace=False)
        ds.prefetch(rng.choice(len(local), 6, replace=False))  # fetches that race the other processes' evictions
        wrong += not _same_batch(ds.get_batch(idx), local.get_batch(idx))
        held.append(ds._remote._scan()[0])  # (the rows present in the mirror now, every process's)
    out.put((wrong, max(held), ds._remote.fetched_by.get(CAM, 0)))
    ds._remote.close()


def test_a_bounded_mirror_evicts_across_processes_never_rows_being_read(env, folder, tmp_path, monkeypatch):
    local, url = published(env, folder, tmp_path, "bounded")
    monkeypatch.setenv("SHARED_TEST_LOCAL", str(local.root))
    frame = local.array_specs[CAM].frame_bytes
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_read_bounded, args=(url, seed, 14, out)) for seed in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [wrong for wrong, _, _ in results] == [0, 0, 0]  # no row served while another process evicted it
    fetched = sum(f for _, _, f in results)
    assert fetched > 3 << 20  # more than the cache holds crossed: rows were evicted and fetched again
    numeric = sum(len(local) * local.array_specs[k].frame_bytes for k in local.array_specs
                  if local.array_specs[k].kind == "numeric")
    # past the cache, at most, per process: the rows an eviction could not drop as it looked (the last three batches
    # read, 6 samples of 2 frames, and the prefetches under way: at most ahead_limit, an eighth of the cache) and
    # those that landed after (its next batch, and the prefetches asked for since: at most ahead_limit again)
    batches = 3 * 4 * 6 * 2 * frame
    ahead = 3 * 2 * (1 << 20) // 8
    assert max(h for _, h, _ in results) <= (1 << 20) + batches + ahead + numeric


def _fetch_then_hang(url, idx, out):
    os.environ["LEROBOT_ZARR_BUCKET_TIMEOUT"] = "60"  # (stalled until killed)
    ds = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    out.put(os.getpid())
    ds.get_batch(idx)


def test_a_process_killed_while_fetching_leaves_nothing_served_and_blocks_no_one(env, folder, tmp_path):
    local, url = published(env, folder, tmp_path, "killed")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    keep = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)  # holds the mirror (as a DataLoader's parent)
    idx = np.arange(40, 70)
    env.server.inject_fault(path_contains=f"/{CAM}/", kind="stall", after_bytes=1000, seconds=30, method="GET")
    env.server.reset_stats()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_fetch_then_hang, args=(url, idx, out))
    proc.start()
    out.get(timeout=120)
    deadline = time.monotonic() + 120
    while not any(f"/{CAM}/" in r.path and r.bytes_sent for r in env.server.requests()):  # its claim is held
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=60)
    env.server.clear_faults()
    env.server.reset_stats()
    assert _same_batch(keep.get_batch(idx), local.get_batch(idx))  # fetched again, exactly
    assert any(f"/{CAM}/" in r.path for r in env.server.requests())


def _open_and_die(url, out):
    ds = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    ds.get_batch(np.arange(10))
    out.put(str(ds.root))
    time.sleep(600)


def test_the_mirror_goes_with_its_last_user(env, folder, tmp_path):
    _, url = published(env, folder, tmp_path, "lifetime")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_open_and_die, args=(url, out))
    proc.start()
    root = Path(out.get(timeout=120))
    a = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    assert a.root == root  # joined
    os.kill(proc.pid, signal.SIGKILL)  # (its user lock goes with it)
    proc.join(timeout=60)
    b = lerobot_zarr.open_dataset(url)
    b._remote.close()
    assert root.is_dir()  # a still reads it
    a.get_batch(np.arange(20, 30))
    a._remote.close()
    assert not root.exists()
    assert list(root.parent.iterdir()) == []


def _read_in_fork(ds, batches, out):
    try:
        out.put(pickle.dumps([ds.get_batch(idx) for idx in batches]))
    except Exception as exc:  # (reported to the test, which fails naming it)
        out.put(pickle.dumps(repr(exc)))


def _fork(target, *args):
    ctx = multiprocessing.get_context("fork")
    with warnings.catch_warnings():  # (Python warns of a fork in a process with threads: that is the case here)
        warnings.simplefilter("ignore", DeprecationWarning)
        proc = ctx.Process(target=target, args=args)
        proc.start()
    return proc


def test_forked_workers_read_the_same_items_as_the_local_store(env, folder, tmp_path):
    """obstore's engine does not survive a fork (a request in the child never returns, a new client's too):
    workers forked from the process that opened the store, as a DataLoader makes them by default, read through a
    fetcher process each, into the same mirror (each byte fetched once), exactly the local store's items."""
    local, url = published(env, folder, tmp_path, "forked")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    remote.get_batch(np.arange(4))  # the parent's engine runs (and a claim and pin of its own are held)
    rng = np.random.default_rng(7)
    batches = [rng.choice(len(local), 16, replace=False) for _ in range(3)]
    env.server.reset_stats()
    out = multiprocessing.get_context("fork").Queue()
    procs = [_fork(_read_in_fork, remote, batches, out) for _ in range(2)]
    results = [pickle.loads(out.get(timeout=180)) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for got in results:
        assert isinstance(got, list), got
        for idx, batch in zip(batches, got, strict=True):
            assert _same_batch(batch, local.get_batch(idx))
    requests = env.server.requests()
    assert any(f"/{CAM}/" in r.path for r in requests)
    assert _overlaps(requests) == []  # one mirror for parent and workers: each byte fetched once
    env.server.reset_stats()  # the parent reads on, from what the workers brought
    assert _same_batch(remote.get_batch(batches[0]), local.get_batch(batches[0]))
    assert [r.path for r in env.server.requests() if f"/{CAM}/" in r.path] == []


def _read_through_a_killed_fetcher(ds, idx, pids, go_on, out):
    from lerobot_zarr.cloud import relay

    ds._remote.bucket.head("zarr.json")  # the fetcher started
    pids.put(relay._current[0].proc.pid)
    try:
        ds.get_batch(idx)
        first = "served"
    except lerobot_zarr.errors.BucketError as exc:
        first = str(exc)
    go_on.wait(timeout=120)
    try:
        out.put(pickle.dumps((first, ds.get_batch(idx))))
    except Exception as exc:  # (reported to the test, which fails naming it)
        out.put(pickle.dumps((first, repr(exc))))


def test_a_fetcher_killed_mid_request_fails_it_and_serves_nothing_half(env, folder, tmp_path):
    """The fetcher of a forked worker killed while it fetches rows: the worker's read is a BucketError (no
    hang), the rows stay absent, and the next read starts another fetcher and serves them exactly."""
    local, url = published(env, folder, tmp_path, "fetcher")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    remote.get_batch(np.arange(4))
    idx = np.arange(40, 70)
    env.server.inject_fault(path_contains=f"/{CAM}/", kind="stall", after_bytes=1000, seconds=30, method="GET")
    env.server.reset_stats()
    ctx = multiprocessing.get_context("fork")
    pids, go_on, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    proc = _fork(_read_through_a_killed_fetcher, remote, idx, pids, go_on, out)
    fetcher = pids.get(timeout=120)
    deadline = time.monotonic() + 120
    while not any(f"/{CAM}/" in r.path and r.bytes_sent for r in env.server.requests()):  # the fetch is under way
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.05)
    os.kill(fetcher, signal.SIGKILL)
    env.server.clear_faults()
    go_on.set()
    first, second = pickle.loads(out.get(timeout=120))
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert "fetcher" in first, first
    assert isinstance(second, dict), second
    assert _same_batch(second, local.get_batch(idx))
    assert _same_batch(remote.get_batch(idx), local.get_batch(idx))


def _close_in_fork(ds, out):
    ds._remote.close()  # (a forked process letting go of a store it never read)
    out.put("closed")


def test_a_fork_letting_go_of_the_store_leaves_the_parents_mirror(env, folder, tmp_path):
    """The users' flock a forked child inherits is the parent's (one open file description): a child closing the
    store must not take it for the last user's and remove the folder the parent reads."""
    local, url = published(env, folder, tmp_path, "letgo")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    remote.get_batch(np.arange(4))
    out = multiprocessing.get_context("fork").Queue()
    proc = _fork(_close_in_fork, remote, out)
    assert out.get(timeout=120) == "closed"
    proc.join(timeout=60)
    assert remote.root.is_dir()
    assert _same_batch(remote.get_batch(np.arange(30, 50)), local.get_batch(np.arange(30, 50)))


def test_a_forked_worker_reads_an_mp4_camera_by_ranges(env, tmp_path):
    """A camera kept as mp4 in the bucket, read in a forked worker: its byte ranges go through the worker's fetcher
    too (the file objects of the parent's listing), the frames exactly the local store's."""
    pytest.importorskip("av", reason="mp4 cameras need PyAV")
    vid = "observation.images.vid"
    src = write_sample_dataset(tmp_path / "vsrc", n_episodes=4, lengths=(10, 15), video_keys=(vid,),
                               write_videos=True, image_shape=(16, 16, 3), seed=9)
    local, url = published(env, src, tmp_path, "mp4fork", storage={vid: "mp4"})
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps={vid: [-1 / FPS, 0.0]})
    remote = lerobot_zarr.open_dataset(url, delta_timestamps={vid: [-1 / FPS, 0.0]})
    remote.get_batch(np.arange(2))
    batches = [np.arange(5, 25), np.arange(len(local) - 20, len(local))]
    out = multiprocessing.get_context("fork").Queue()
    proc = _fork(_read_in_fork, remote, batches, out)
    got = pickle.loads(out.get(timeout=180))
    proc.join(timeout=60)
    assert isinstance(got, list), got
    for idx, batch in zip(batches, got, strict=True):
        assert _same_batch(batch, local.get_batch(idx))
