"""A store in a bucket, read where it is (``open_dataset("s3://...")``): the same items, exactly, as the local store
(numeric, every camera storage, windows, ds[i], get_batch, episode(), mixtures, DataLoader-style copies in other
processes), whatever the cache evicts; only the rows read cross the network; prefetch; a new commit on refresh."""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import time

import numpy as np
import pytest
import s3_fixtures

import lerobot_zarr
from lerobot_zarr.errors import ArgumentError
from lerobot_zarr.sources import remote_store
from lerobot_zarr.sources.mirror import PINS
from lerobot_zarr.testing.hub_network import NetworkModel
from lerobot_zarr.testing.sample_data import NOTE_KEY, write_sample_dataset
from lerobot_zarr.testing.source_tests import assert_same_batches
from lerobot_zarr.writing.sync import push_store

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

FPS = 30
CAM = "observation.images.cam"
VID = "observation.images.vid"
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(4)], CAM: [-1 / FPS, 0.0]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_sample_dataset(tmp_path_factory.mktemp("remote") / "src", n_episodes=12, lengths=(20, 40),
                                image_keys=(CAM,), image_shape=(24, 32, 3), seed=5)


def published(env, folder, tmp_path, name: str, **kwargs):
    """A local store of ``folder`` (small packs: many objects) and its copy in the bucket: (local, url)."""
    local = lerobot_zarr.open_dataset(folder, root=tmp_path / name, progress=False, pack_bytes=1 << 15, **kwargs)
    url = env.url(f"stores/{name}")
    push_store(local.root, url, progress=False)
    return local, url


def same_items(got, want, where: str, rng: np.random.Generator, batches: int = 4) -> None:
    assert_same_batches(got, want, where)
    for _ in range(batches):
        idx = rng.integers(0, len(want), 48)
        got.prefetch(rng.integers(0, len(want), 48))
        a, b = got.get_batch(idx), want.get_batch(idx)
        for key in b:
            assert _same(a[key], b[key]), (where, key)
    for i in (0, len(want) // 2, len(want) - 1):
        a, b = got[i], want[i]
        assert a.keys() == b.keys()
        for key in b:
            assert _same(a[key], b[key]), (where, i, key)


def _same(a, b) -> bool:
    """Values alike: arrays of the same dtype and values, text (str, lists of str or of LeRobot's row dicts) equal."""
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("storage", ["raw", "lossless", "jpeg", "compact"])
def test_the_same_items_as_the_local_store(env, folder, tmp_path, storage):
    if storage == "jpeg":
        pytest.importorskip("simplejpeg", reason="jpeg storage needs simplejpeg")
    local, url = published(env, folder, tmp_path, storage, storage={CAM: storage})
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS, cache_bytes=1 << 20)  # evicts as it goes
    assert remote.root != local.root and remote.meta.total_episodes == 12
    same_items(remote, local, f"{storage} in a bucket", np.random.default_rng(0))
    assert remote._remote.held_bytes <= (1 << 20) + (1 << 19)
    part = lerobot_zarr.open_dataset(url, episodes=[2, 7], delta_timestamps=DELTAS)
    assert_same_batches(part, local.select([2, 7]), "a selection")
    ep = part.episode(7)
    want = local.episode(7)
    assert ep.keys() == want.keys() and all(np.array_equal(ep[k], want[k]) for k in want)
    meta = lerobot_zarr.inspect(url)
    assert meta.total_episodes == 12 and meta.root == url


def test_cameras_kept_as_mp4(env, tmp_path):
    pytest.importorskip("av", reason="mp4 cameras need PyAV")
    src = write_sample_dataset(tmp_path / "vsrc", n_episodes=4, lengths=(10, 15), video_keys=(VID,),
                               write_videos=True, image_shape=(16, 16, 3), seed=9)
    local, url = published(env, src, tmp_path, "mp4", storage={VID: "mp4"})
    deltas = {VID: [-1 / FPS, 0.0]}
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=deltas)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=deltas)
    same_items(remote, local, "mp4 in a bucket", np.random.default_rng(1), batches=2)
    settled_at = time.monotonic() + 60  # once the numeric packs are held whole (timestamps are read for the mp4)
    while "timestamp" not in remote._remote.settled and time.monotonic() < settled_at:
        time.sleep(0.05)
    assert "timestamp" in remote._remote.settled
    same_items(remote, local, "mp4 in a bucket, timestamps held whole", np.random.default_rng(2), batches=2)


def test_an_mp4_camera_is_read_by_ranges_not_whole(env, tmp_path):
    """A frame of one episode costs the mp4's index and that episode's bytes, not the file (which holds all)."""
    pytest.importorskip("av", reason="mp4 cameras need PyAV")
    src = write_sample_dataset(tmp_path / "vsrc", n_episodes=8, lengths=(60, 70), video_keys=(VID,),
                               write_videos=True, image_shape=(96, 128, 3), seed=8)
    local, url = published(env, src, tmp_path, "mp4ranges", storage={VID: "mp4"})
    sizes = {p.name: p.stat().st_size for p in (local.root / VID / "videos").rglob("*.mp4")}
    local = lerobot_zarr.open_dataset(local.root)
    remote = lerobot_zarr.open_dataset(url)
    i = local.episode_frames(7)[30]
    env.server.reset_stats()
    assert np.array_equal(remote[i][VID], local[i][VID])
    got = [r for r in env.server.requests() if "/videos/" in r.path]
    assert got and all(r.range for r in got)  # ranges only
    assert sum(r.bytes_sent for r in got) < max(sizes.values()) / 2, (sum(r.bytes_sent for r in got), sizes)
    assert not list((remote.root / VID).rglob("*.mp4"))  # nothing written to disk
    assert remote._remote.fetched_by[VID] == sum(r.bytes_sent for r in got)


def test_text_and_depth_features(env, tmp_path):
    """Strings, LeRobot's language columns and a depth camera (served in mm, as float32) from a bucket: the local
    store's items, exactly."""
    depth = "observation.images.depth"
    src = write_sample_dataset(tmp_path / "ksrc", n_episodes=4, lengths=(8, 12), text_features=True,
                               depth_keys=(depth,), image_shape=(12, 16, 3), seed=11)
    local, url = published(env, src, tmp_path, "kinds")
    deltas = {depth: [-1 / FPS, 0.0], NOTE_KEY: [-1 / FPS, 0.0]}
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=deltas)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=deltas)
    assert {depth, NOTE_KEY, "language_persistent"} <= set(remote.array_specs), list(remote.array_specs)
    assert remote[0][depth].dtype == np.float32
    same_items(remote, local, "text and depth in a bucket", np.random.default_rng(3), batches=2)
    ep, want = remote.episode(2), local.episode(2)
    assert ep.keys() == want.keys() and all(np.array_equal(ep[k], want[k]) for k in want)


def test_only_the_rows_read_cross_the_network(env, folder, tmp_path):
    """A raw camera's frames are fetched exactly (no neighbour rows): bytes <= 1.5x the frames the samples use."""
    local, url = published(env, folder, tmp_path, "rows")
    remote = lerobot_zarr.open_dataset(url)
    frame = remote.array_specs[CAM].frame_bytes
    rng = np.random.default_rng(2)
    idx = np.unique(rng.integers(0, len(remote), 40))
    env.server.reset_stats()
    remote._remote._numeric_started = True  # (numeric packs whole in the background: measured apart here)
    batch = remote.get_batch(idx)
    cam_bytes = env.server.bytes_sent(f"/{env.bucket}/stores/rows/{CAM}/")
    assert len(idx) * frame <= cam_bytes <= 1.5 * len(idx) * frame, (cam_bytes, len(idx) * frame)
    assert np.array_equal(batch[CAM], local.get_batch(idx)[CAM])
    env.server.reset_stats()
    remote.get_batch(idx)  # held now: no request
    assert env.server.requests() == []


def test_a_batch_sends_its_requests_together(env, folder, tmp_path):
    """A batch's rows missing from many objects (small packs) are asked for at once: one round trip, counted by
    dependency (each answer held until the client has sent all it can without it), for a hundred requests."""
    local, url = published(env, folder, tmp_path, "together")
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    remote._remote._numeric_started = True  # (numeric packs whole in the background: measured apart here)
    idx = np.random.default_rng(4).integers(0, len(remote), 64)
    env.server.reset_stats()
    env.server.network = NetworkModel(latency_s=0.02, rate=1e9, settle=True)
    try:
        batch = remote.get_batch(idx)
    finally:
        env.server.network = None
    assert len(env.server.requests()) > 64 and env.server.stats.round_trips() == 1, len(env.server.requests())
    want = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS).get_batch(idx)
    for key in want:
        assert _same(batch[key], want[key]), key


def test_a_batchs_requests_share_a_budget_of_bytes_under_way(env, folder, tmp_path, monkeypatch):
    """Many requests sent together share one link, each with a deadline from its start: the bytes under way at
    once stay within the budget (here two requests' worth), and the batch is still the local store's."""
    import threading

    import lerobot_zarr.sources.remote_store as remote_module

    local, url = published(env, folder, tmp_path, "budget")
    fetch, lock, under_way, most, sizes = remote_module.RemoteStore._fetch, threading.Lock(), [0], [0], []

    def counted(self, entry, start, stop, rows):
        with lock:
            under_way[0] += stop - start
            most[0] = max(most[0], under_way[0])
            sizes.append(stop - start)
        try:
            time.sleep(0.005)  # (holds its bytes a moment: requests sent together would overlap)
            return fetch(self, entry, start, stop, rows)
        finally:
            with lock:
                under_way[0] -= stop - start

    monkeypatch.setattr(remote_module, "_IN_FLIGHT_BYTES", 2 * 4096)
    monkeypatch.setattr(remote_module.RemoteStore, "_fetch", counted)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    remote._remote._numeric_started = True
    idx = np.random.default_rng(5).integers(0, len(remote), 64)
    batch = remote.get_batch(idx)
    assert len(sizes) > 8
    assert most[0] <= max(2 * 4096, max(sizes)), (most[0], sorted(sizes)[-4:])
    want = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS).get_batch(idx)
    for key in want:
        assert _same(batch[key], want[key]), key


def test_prefetched_batches_make_no_request(env, folder, tmp_path):
    local, url = published(env, folder, tmp_path, "prefetch")
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    remote.get_batch([0])  # the first batch starts the numeric packs' background fetch
    idx = np.arange(100, 160)
    remote.prefetch(idx)
    for futures in list(remote._remote._coming.values()):
        for future in list(futures):
            future.result()
    remote._remote._background.submit(lambda: None).result()
    env.server.reset_stats()
    batch = remote.get_batch(idx)
    assert [r.path for r in env.server.requests() if f"/{CAM}/" in r.path] == []
    want = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS).get_batch(idx)
    assert np.array_equal(batch[CAM], want[CAM])


def _worker_batch(ds, idx, out):
    out.put(pickle.dumps((str(ds.root), ds.get_batch(idx))))


def test_copies_in_other_processes_read_the_same_commit(env, folder, tmp_path):
    local, url = published(env, folder, tmp_path, "workers")
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    idx = np.arange(0, len(local), 7)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_worker_batch, args=(remote, idx, out))
    proc.start()
    root, batch = pickle.loads(out.get(timeout=120))
    proc.join(timeout=60)
    assert proc.exitcode == 0 and root == str(remote.root)  # the parent's mirror, shared
    want = local.get_batch(idx)
    for key in want:
        assert (batch[key] == want[key]) if key == "task" else np.array_equal(batch[key], want[key]), key
    remote._remote.close()
    assert not remote.root.exists(), "the mirror outlived its last user"


def test_mixtures_over_buckets_and_folders(env, folder, tmp_path):
    local, url = published(env, folder, tmp_path, "mix")
    other = lerobot_zarr.open_dataset(folder, root=tmp_path / "other", episodes=[1, 4, 5], progress=False).root
    deltas = {"action": [0.0, 1 / FPS]}
    a = lerobot_zarr.open_mixture({url: 0.5, other: 0.5}, delta_timestamps=deltas, episodes={other: [1, 4, 5]})
    b = lerobot_zarr.open_mixture({local.root: 0.5, other: 0.5}, delta_timestamps=deltas,
                                  episodes={other: [1, 4, 5]})
    idx = np.arange(0, len(b), 5)
    x, y = a.get_batch(idx), b.get_batch(idx)
    assert x.keys() == y.keys()
    for key in y:
        assert (x[key] == y[key]) if key == "task" else np.array_equal(x[key], y[key]), key
    with pytest.raises(ArgumentError, match="are the same store"):  # each process reads it through its own mirror
        lerobot_zarr.open_mixture({url: 0.5, url + "/": 0.5})


def test_refresh_serves_a_new_commit(env, folder, tmp_path):
    local, url = published(env, folder, tmp_path, "grow")
    remote = lerobot_zarr.open_dataset(url)
    with lerobot_zarr.open_dataset(local.root, mode="r+") as w:
        ep = w.episode(3)
        w.add_episode({k: np.asarray(ep[k]) for k in ("observation.state", "action", CAM)}, task="again")
    push_store(local.root, url, progress=False)
    assert remote.meta.total_episodes == 12
    assert remote.refresh() and remote.meta.total_episodes == 13
    assert not remote.refresh()
    assert_same_batches(remote, lerobot_zarr.open_dataset(local.root), "after refresh")


def test_writing_in_a_bucket_is_refused_with_the_way(env, folder, tmp_path):
    _, url = published(env, folder, tmp_path, "ro")
    with pytest.raises(ArgumentError, match="sync"):
        lerobot_zarr.open_dataset(url, mode="r+")
    with pytest.raises(ArgumentError, match="read where it is"):
        lerobot_zarr.open_dataset(url, root=tmp_path / "elsewhere")
    remote = lerobot_zarr.open_dataset(url)
    with pytest.raises(ArgumentError, match="local mirror of a store in a bucket; open s3://"):
        lerobot_zarr.open_dataset(remote.root)  # it holds only the rows read: never a local store


def test_a_damaged_root_in_a_bucket_is_a_typed_error(env, folder, tmp_path):
    _, url = published(env, folder, tmp_path, "bad")
    env.client("stores/bad").write("zarr.json", b'{"attributes": {"lerobot_zarr": {"format_version": 99}}}')
    with pytest.raises(lerobot_zarr.StoreError):
        lerobot_zarr.open_dataset(url)


def test_prefetches_under_way_ask_for_at_most_an_eighth_of_the_cache(env, folder, tmp_path):
    """A lookahead cannot flood the cache: one process's prefetches queued or under way ask for at most
    ``cache_bytes / 8`` (``ahead_limit``); the rest is left to the batches that read it, which fetch it exactly.
    (Every prefetch is held at its start until all were asked for: none ends early and lets another in.)"""
    import concurrent.futures
    import threading

    local, url = published(env, folder, tmp_path, "ahead")
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS, cache_bytes=1 << 20)
    store = remote._remote
    store._numeric_started = True  # (numeric packs whole in the background: not a prefetch)
    gate, real = threading.Event(), store._fetch

    def held_fetch(*job):
        assert gate.wait(120)
        return real(*job)

    store._fetch = held_fetch
    everything = np.arange(len(remote))
    remote.prefetch(everything)  # every frame of the camera: ~4x the limit
    futures = [f for fs in store._coming.values() for f in fs]
    gate.set()
    concurrent.futures.wait(futures, timeout=120)
    frame = remote.array_specs[CAM].frame_bytes
    asked = store.fetched_by.get(CAM, 0)
    assert len(remote) * frame > 3 * (1 << 20) // 8  # (the frames are more than the limit)
    assert 0 < asked <= (1 << 20) // 8, asked
    del store._fetch
    want = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    for idx in np.array_split(everything, 4):
        assert np.array_equal(remote.get_batch(idx)[CAM], want.get_batch(idx)[CAM])


def _read_until(ds, done, rng: np.random.Generator, most: int) -> int:
    """Random batches of ``ds`` until ``done()`` (at most ``most``): how many were read."""
    for n in range(most):
        if done():
            return n
        ds.get_batch(rng.integers(0, len(ds), 32))
    return most


@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_a_camera_held_whole_is_read_from_the_maps_alone(env, folder, tmp_path, storage):
    """Once every row of a camera was read and it fits in half the cache (with the numeric features), it is held
    for good, as numeric features are: batches ask the mirror nothing more for it (no pins, no bookkeeping, the
    steady state of training over many epochs) and read the same values; another reader of that commit finds it
    held at its first look (the mark in the mirror), fetching nothing for it."""
    if storage == "jpeg":
        pytest.importorskip("simplejpeg", reason="jpeg storage needs simplejpeg")
    local, url = published(env, folder, tmp_path, f"whole-{storage}", storage={CAM: storage})
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    store = remote._remote
    rng = np.random.default_rng(3)
    for idx in np.array_split(rng.permutation(len(remote)), 12):  # an epoch: every frame read once
        remote.get_batch(idx)
    assert _pins_camera(store) and store._wants(np.array([0]), {CAM: np.zeros((1, 2), np.int64)})  # (row by row)
    assert _read_until(remote, lambda: CAM in store.settled, rng, 40) <= 16  # looked at every 16 batches
    asked = []
    real = store.ensure
    store.ensure = lambda eps, frames: (asked.append(set(frames)), real(eps, frames))
    fetched = store.fetched_by.get(CAM, 0)
    for _ in range(4):
        idx = rng.integers(0, len(local), 48)
        remote.prefetch(idx)
        a, b = remote.get_batch(idx), local.get_batch(idx)
        assert all(_same(a[key], b[key]) for key in b)
    assert all(CAM not in names for names in asked) and store.fetched_by.get(CAM, 0) == fetched
    assert not store._wants(np.array([0]), {CAM: np.zeros((1, 2), np.int64)})  # (no row to pin, none to fetch)
    other = pickle.loads(pickle.dumps(remote))  # another reader of the commit (a worker): the same mirror
    assert _read_until(other, lambda: CAM in other._remote.settled, rng, 40) <= 16
    assert other._remote.fetched_by.get(CAM, 0) == 0
    assert_same_batches(other, local, "a second reader of a camera held whole")


def _pins_camera(store, name: str = CAM) -> bool:
    """Whether the batches' pins of ``store`` (the last three) hold any row of feature ``name``."""
    lo = PINS + store._feature[name] * store._feature_span
    hi = lo + store._feature_span
    return any(bool(((starts < hi) & (starts + lengths > lo)).any()) for starts, lengths in store._pinned)


def test_a_camera_over_half_the_cache_is_never_held_for_good(env, folder, tmp_path, caplog):
    """A camera whose rows take more than half the cache stays evictable, read row by row: held for good, it
    would leave an eviction too little to drop."""
    local, url = published(env, folder, tmp_path, "over-half")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS, cache_bytes=1 << 20)
    assert len(local) * local.array_specs[CAM].frame_bytes > 1 << 19
    rng = np.random.default_rng(4)
    for idx in np.array_split(rng.permutation(len(remote)), 12):
        remote.get_batch(idx)
    with caplog.at_level(logging.INFO, logger="lerobot_zarr"):
        assert _read_until(remote, lambda: CAM in remote._remote.settled, rng, 40) == 40
    assert remote._remote._settle_cursor[CAM] == -1  # (refused: never looked at again)
    said = [r.getMessage() for r in caplog.records if CAM in r.getMessage() and "not held whole" in r.getMessage()]
    assert len(said) == 1 and "cache_bytes=1,048,576" in said[0], said  # once, with the cache it would need
    same_items(remote, local, "a camera over half the cache", rng)


def test_numeric_features_the_background_fetch_left_unsettled_are_settled_by_the_batches(env, folder, tmp_path):
    """The background fetch of the numeric packs settles a feature only if every row is present when it looks:
    rows a batch was fetching at that moment left it unsettled for good, and every batch after pinned and looked up
    its rows. The batches settle it once every row is present."""
    local, url = published(env, folder, tmp_path, "numeric-late")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    store = remote._remote
    store._whole_feature = lambda name: None  # (the background fetch looks too early: settles nothing)
    rng = np.random.default_rng(6)
    for idx in np.array_split(rng.permutation(len(remote)), 12):  # every row read once
        remote.get_batch(idx)
    numeric = {name for name, spec in local.array_specs.items() if spec.kind == "numeric"}
    assert _read_until(remote, lambda: numeric <= store.settled, rng, 40) <= 16
    assert_same_batches(remote, local, "numeric features settled by the batches")


def test_a_look_does_not_wait_for_packs_another_reader_claims(env, folder, tmp_path, monkeypatch):
    """Whether a numeric feature is whole is looked at under each pack's claim: a pack another reader claims (a
    fetch, an eviction) is left to a later look, never waited for: a batch whose rows are present is not failed
    for it (nor held up to the longest wait)."""
    # (a look that waited on the claim held below would raise a BucketError past it; 10 s: a fetch under load fits)
    monkeypatch.setattr(remote_store, "_wait_limit", lambda: 10.0)
    local, url = published(env, folder, tmp_path, "busy-look")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)
    store = remote._remote
    store._whole_feature = lambda name: None  # (settled by the batches' looks alone)
    rng = np.random.default_rng(8)
    for idx in np.array_split(rng.permutation(len(remote)), 12):  # every row read once
        remote.get_batch(idx)
    other = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS)._remote  # its own descriptors
    name = "observation.state"
    entry = other._pack(name, store._filled[-1])
    assert other._claim(entry, 0, entry.rows)
    try:
        assert _read_until(remote, lambda: name in store.settled, rng, 20) == 20  # looked at, busy: no error
    finally:
        other._unclaim(entry, 0, entry.rows)
    assert _read_until(remote, lambda: name in store.settled, rng, 40) <= 16
    assert_same_batches(remote, local, "a look past a busy pack")


def test_a_marked_numeric_feature_found_incomplete_is_completed_under_a_selection(env, folder, tmp_path):
    """A numeric feature marked held whole whose pack was evicted just before the mark: the batches of a selection
    never read that pack, so a look fetches it whole (in the background), and the feature is settled after."""
    local, url = published(env, folder, tmp_path, "marked-incomplete")
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    part = lerobot_zarr.open_dataset(url, episodes=[2, 7], delta_timestamps=DELTAS)
    store = part._remote
    rng = np.random.default_rng(9)
    part.get_batch(rng.integers(0, len(part), 32))  # (after the first batch: the numeric features fetched whole)
    numeric = {name for name, spec in local.array_specs.items() if spec.kind == "numeric"}
    settled_at = time.monotonic() + 60
    while not numeric <= store.settled and time.monotonic() < settled_at:
        time.sleep(0.05)
    assert numeric <= store.settled
    name = "observation.state"
    read = set(store.state.table.chunk[[2, 7]].tolist())
    pack = next(p for p in store._filled if p not in read)
    entry = store._pack(name, pack)
    entry.present[:] = False  # (evicted just before the mark: marked, incomplete, not settled)
    with store._lock:
        store.settled.discard(name)
    complete_at = time.monotonic() + 60  # (a look queues the pack's fetch; the batches go on meanwhile)
    while not entry.complete and time.monotonic() < complete_at:
        part.get_batch(rng.integers(0, len(part), 32))
    assert entry.complete
    assert _read_until(part, lambda: name in store.settled, rng, 40) <= 32  # (the next look, or the one after)
    with open(entry.path, "rb") as mirrored, open(local.root / entry.rel, "rb") as source:
        assert mirrored.read() == source.read()
    assert_same_batches(part, local.select([2, 7]), "a selection after the pack came back")


def test_a_camera_held_whole_survives_another_readers_eviction(env, tmp_path):
    """Readers of one commit with different caches share its mirror: a camera one of them holds whole is never
    dropped by the eviction of another (whose small cache it passes): every pack stays complete, the same values."""
    pytest.importorskip("simplejpeg", reason="jpeg storage needs simplejpeg")
    src = write_sample_dataset(tmp_path / "src2", n_episodes=12, lengths=(20, 40), image_keys=(CAM, VID),
                               image_shape=(24, 32, 3), seed=5)
    local, url = published(env, src, tmp_path, "two-readers", storage={CAM: "jpeg", VID: "raw"})
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    one = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS, cache_bytes=3 << 19)
    store = one._remote
    rng = np.random.default_rng(10)
    for idx in np.array_split(rng.permutation(len(one)), 12):
        one.get_batch(idx)
    assert _read_until(one, lambda: CAM in store.settled, rng, 40) <= 16
    assert VID not in store.settled  # (over half the cache: evictable)
    two = lerobot_zarr.open_dataset(url, delta_timestamps=DELTAS, cache_bytes=1_200_000)._remote
    assert two._mirror.root == store._mirror.root and two.held_bytes > two.cache_bytes
    two._fetched_since_evict = 1  # (as after a fetch of its own)
    two._evict()
    assert two.held_bytes <= two.cache_bytes  # (it evicted: the other camera's rows)
    assert all(store._pack(CAM, p).complete for p in store._filled)
    assert_same_batches(one, local, "a camera held whole after another reader's eviction")
