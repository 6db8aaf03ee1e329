"""Streaming (``lerobot_zarr.stream``): the samples of one epoch, over every rank and DataLoader worker, are exactly
the ``ds[i]`` samples of ``open_dataset`` on the same source (windows and ``*_is_pad`` included), each episode's
row groups cross the network once per epoch, the order is deterministic for a seed, and memory stays bounded.

The Hub cases use the project's test Hub server on 127.0.0.1 with the real ``huggingface_hub`` client pointed at
it (``tests/hub_fixtures.make_env``).
"""

from __future__ import annotations

import itertools
import threading
import tracemalloc
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hub_fixtures import make_env, parse_range, real_dataset, resolve_prefix, row_groups

import lerobot_zarr
from lerobot_zarr.sampling.streams import SampleStream, stream
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

FPS = 30
REPO = "org/stream"
IMAGE = "observation.images.cam"
# short episodes (1 and 2 frames included) so that windows reach past both ends of most episodes
LENGTHS = [1, 2, 3, 5, 8, 13, 4, 6, 9, 2, 15, 7, 3, 11]
EPISODES_PER_FILE = 4  # several episodes per data file, one row group each (LeRobot's layout)
DELTAS = {
    "observation.state": [-2 / FPS, -1 / FPS, 0.0],
    "action": [k / FPS for k in range(16)],
    IMAGE: [-1 / FPS, 0.0],
    "timestamp": [-1 / FPS, 1 / FPS],
}
SUBSET = [0, 3, 5, 6, 9, 13]
SOURCES = ("hub", "folder", "store")


# ------------------------------------------------------------------------------------------------ fixtures


@dataclass
class World:
    src: Path
    store: Path
    server: HubServer
    tmp: Path
    refs: dict = field(default_factory=dict)
    _hub_epoch: tuple | None = None

    def source(self, kind: str):
        return {"hub": REPO, "folder": self.src, "store": self.store}[kind]

    def reference(self, kind: str, episodes=None, deltas=None, image_format: str = "uint8_hwc"):
        """``open_dataset`` of the same source with the same arguments (cached per arguments)."""
        key = (kind, None if episodes is None else tuple(episodes), repr(deltas), image_format)
        if key not in self.refs:
            root = self.tmp / f"ref-{kind}" if kind == "folder" else None
            self.refs[key] = lerobot_zarr.open_dataset(self.source(kind), root=root, episodes=episodes,
                                                       delta_timestamps=deltas, image_format=image_format,
                                                       progress=False)
        return self.refs[key]

    def hub_epoch(self) -> tuple[dict, list]:
        """One epoch of 2 ranks x 2 workers streamed from the Hub server, and the requests the server saw
        meanwhile (computed once: the multiset test and the request-count test share it)."""
        if self._hub_epoch is None:
            self.reference("hub", deltas=DELTAS)  # transcode the reference first: its requests are not counted
            self.server.reset_stats()
            shards = run_shards(REPO, delta_timestamps=DELTAS, buffer_episodes=2, seed=5)
            self._hub_epoch = shards, list(self.server.requests())
        return self._hub_epoch


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stream")
    src = write_sample_dataset(tmp / "src", n_episodes=len(LENGTHS), lengths=LENGTHS, fps=FPS, seed=7,
                               episodes_per_file=EPISODES_PER_FILE, image_keys=(IMAGE,), image_shape=(6, 5, 3))
    mp = pytest.MonkeyPatch()
    try:
        with HubServer(tmp / "server") as server:
            server.add_repo(REPO, src, tags=["v3.0"])
            make_env(mp, tmp, server.endpoint)
            store = lerobot_zarr.open_dataset(src, root=tmp / "store", progress=False).root
            yield World(src, store, server, tmp)
            assert not server.errors, server.errors
    finally:
        mp.undo()


# ------------------------------------------------------------------------------------------------ helpers


def freeze(item: dict, strict_types: bool = True) -> tuple:
    """A hashable, exact image of a sample: per key its type, dtype, shape and bytes (task strings as text)."""
    out = []
    for key in sorted(item):
        value = item[key]
        if isinstance(value, str):
            out.append((key, "str", value))
            continue
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # a torch tensor
            value = value.numpy()
        arr = np.asarray(value)
        kind = type(value).__name__ if strict_types else ""
        out.append((key, kind, arr.dtype.str, arr.shape, arr.tobytes()))
    return tuple(out)


def reference_multiset(ds, strict_types: bool = True) -> Counter:
    return Counter(freeze(ds[i], strict_types) for i in range(len(ds)))


def run_shards(source, *, world_size: int = 2, num_workers: int = 2, epoch: int = 0, how: str = "attribute",
               **kwargs) -> dict[tuple[int, int], tuple[list[int], list[dict]]]:
    """One epoch of every (rank, worker): ``{(rank, worker): (shard episodes, samples)}``; the worker is given
    explicitly (attribute ``.worker`` or constructor argument), not taken from torch."""
    out = {}
    for rank in range(world_size):
        for w in range(num_workers):
            if how == "attribute":
                s = stream(source, rank=rank, world_size=world_size, **kwargs)
                s.worker = (w, num_workers)
            else:
                s = SampleStream(source, rank=rank, world_size=world_size, worker=(w, num_workers), **kwargs)
            s.set_epoch(epoch)
            out[(rank, w)] = (s.shard(epoch, (w, num_workers)), list(s))
    return out


def check_epoch(shards: dict, ds, episodes: list[int]) -> None:
    """The shards' own samples together are ds's multiset exactly; shards are disjoint and hold what shard()
    says; with several ranks, every worker position yields the same count on every rank (DDP needs equal
    counts), shorter shards padding with repeats of their own frames (of any episode when they have none)."""
    want = reference_multiset(ds)
    assert len(want) == len(ds), "reference samples are not distinct (test data problem)"
    got: Counter = Counter()
    seen: dict[int, tuple[int, int]] = {}
    counts: dict[int, set[int]] = {}
    for who, (shard, items) in shards.items():
        own = int(sum(ds.meta.episode_length[e] for e in shard))
        assert len(items) >= own, f"{who}: {len(items)} samples, fewer than its {own} frames"
        counts.setdefault(who[1], set()).add(len(items))
        eps = {episode_of(it) for it in items[:own]}
        assert eps <= set(shard), f"{who}: samples of episodes {sorted(eps - set(shard))} outside its shard {shard}"
        padding = [freeze(it) for it in items[own:]]
        assert all(p in want for p in padding), f"{who}: a padding sample equals no ds[i]"
        if shard:
            assert {episode_of(it) for it in items[own:]} <= set(shard), f"{who}: padding from other episodes"
        assert len(items) - own < max(ds.meta.episode_length), f"{who}: {len(items) - own} padding samples"
        for e in shard:
            assert e not in seen, f"episode {e} is in the shards of both {seen[e]} and {who}"
            seen[e] = who
        got.update(freeze(it) for it in items[:own])
    ranks = {who[0] for who in shards}
    if len(ranks) > 1:
        assert all(len(c) == 1 for c in counts.values()), f"sample counts differ between ranks: {counts}"
    else:
        assert sum(len(items) for _, items in shards.values()) == len(ds), "one rank: every frame exactly once"
    assert sorted(seen) == sorted(episodes), f"episodes covered {sorted(seen)} != {sorted(episodes)}"
    dupes = [k for k, n in got.items() if n > 1]
    assert not dupes, f"{len(dupes)} samples streamed more than once"
    missing, extra = want - got, got - want
    assert not missing and not extra, (f"{len(missing)} samples of ds[i] never streamed, {len(extra)} streamed "
                                       f"samples not equal to any ds[i] (of {len(want)})")


def episode_of(item) -> int:
    return int(np.asarray(item["episode_index"]).reshape(-1)[0])


def frame_of(item) -> int:
    return int(np.asarray(item["frame_index"]).reshape(-1)[0])


# ------------------------------------------------------------------------------------------------ equality


@pytest.mark.parametrize("kind", SOURCES)
def test_epoch_over_ranks_and_workers_equals_dataset(world, kind):
    ds = world.reference(kind, deltas=DELTAS)
    if kind == "hub":
        shards, _ = world.hub_epoch()
    else:
        shards = run_shards(world.source(kind), delta_timestamps=DELTAS, buffer_episodes=2, seed=5)
    check_epoch(shards, ds, list(range(len(LENGTHS))))


@pytest.mark.parametrize("kind", SOURCES)
def test_episode_subset_over_ranks_and_workers(world, kind):
    ds = world.reference(kind, episodes=SUBSET, deltas=DELTAS)
    assert sorted(set(ds.episodes.tolist())) == SUBSET
    shards = run_shards(world.source(kind), episodes=SUBSET, delta_timestamps=DELTAS, buffer_episodes=3, seed=1,
                        epoch=3, how="constructor")
    check_epoch(shards, ds, SUBSET)


def test_fewer_episodes_than_shards(world):
    """3 episodes over 2 ranks x 2 workers: one shard is empty and yields nothing (no hang, no error)."""
    few = [2, 7, 10]
    ds = world.reference("store", episodes=few, deltas=DELTAS)
    shards = run_shards(world.store, episodes=few, delta_timestamps=DELTAS)
    assert sorted(len(shard) for shard, _ in shards.values()) == [0, 1, 1, 1]
    check_epoch(shards, ds, few)


@pytest.mark.parametrize("kind", ["folder", "store"])
def test_no_windows_and_unordered_episode_list(world, kind):
    """No delta_timestamps, episodes given unsorted: plain frames, the same as ds[i] of that selection, down to
    the type of each value (ds[i] gives plain ndarrays and numpy scalars)."""
    eps = [11, 1, 4]
    ds = world.reference(kind, episodes=eps)
    shards = run_shards(world.source(kind), episodes=eps, world_size=1, num_workers=2)
    types = {k: type(v).__name__ for k, v in ds[0].items()}
    for _, items in shards.values():
        for it in items[:3]:
            assert {k: type(v).__name__ for k, v in it.items()} == types, "value types differ from ds[i]'s"
    check_epoch(shards, ds, sorted(eps))
    assert not any(k.endswith("_is_pad") for _, items in shards.values() for it in items for k in it)


def test_partial_store_streams_what_the_dataset_holds(world):
    """A store holding only some episodes (opened with episodes=...): open_dataset(store) samples the episodes it
    holds; the stream of the same store must give the same samples, not fail on the absent ones."""
    partial = lerobot_zarr.open_dataset(world.src, root=world.tmp / "partial", episodes=[1, 4, 7],
                                        progress=False).root
    ds = lerobot_zarr.open_dataset(partial, delta_timestamps=DELTAS, progress=False)
    assert ds.episodes.tolist() == [1, 4, 7]
    items = list(stream(partial, delta_timestamps=DELTAS))
    assert Counter(freeze(it) for it in items) == reference_multiset(ds)


@pytest.mark.parametrize("kind", ["folder", "store"])
def test_float32_chw_images(world, kind):
    ds = world.reference(kind, deltas=DELTAS, image_format="float32_chw")
    items = list(stream(world.source(kind), delta_timestamps=DELTAS, image_format="float32_chw"))
    sample = next(it for it in items if episode_of(it) == 5)
    assert sample[IMAGE].dtype == np.float32 and sample[IMAGE].shape == (2, 3, 6, 5)  # (window, C, H, W)
    assert Counter(freeze(it) for it in items) == reference_multiset(ds)


def test_hub_stream_survives_a_server_error(world):
    """One 500 on a data file: the read is retried and the epoch is still complete and exact."""
    ds = world.reference("hub", deltas=DELTAS)
    world.server.inject_fault(path_contains="/data/chunk-000/file-002.parquet", kind="500", method="GET")
    try:
        items = list(stream(REPO, delta_timestamps=DELTAS))
    finally:
        world.server.clear_faults()
    assert Counter(freeze(it) for it in items) == reference_multiset(ds)


def test_stopping_early_does_not_hang(world):
    s = stream(REPO, delta_timestamps=DELTAS, buffer_episodes=1)
    it = iter(s)
    first = list(itertools.islice(it, 5))
    assert len(first) == 5
    done = threading.Event()

    def close():
        it.close()
        done.set()

    threading.Thread(target=close, daemon=True).start()
    assert done.wait(20), "closing a stream that was only partly consumed did not return"


@pytest.mark.parametrize("name, state, action", [("record-test", "observation.state", "action"),
                                                  ("open_50", "state", "actions")])
def test_real_dataset_folder(tmp_path, name, state, action):
    """A real LeRobot dataset (video features are not materialized: absent from both), 2 x 2 shards."""
    src = real_dataset(name)
    deltas = {state: [-1 / FPS, 0.0], action: [k / FPS for k in range(16)]}
    ds = lerobot_zarr.open_dataset(src, root=tmp_path / "store", delta_timestamps=deltas, progress=False)
    shards = run_shards(src, delta_timestamps=deltas, buffer_episodes=2, seed=11)
    check_epoch(shards, ds, list(range(ds.meta.total_episodes)))


def test_real_dataset_video_window_is_not_materialized(tmp_path):
    """record-test ships without its videos: a window on a camera cannot be served, and samples leave it out."""
    src = real_dataset("record-test")
    with pytest.raises(lerobot_zarr.NotMaterializedError, match="video file is missing"):
        stream(src, delta_timestamps={"observation.images.front": [0.0]})
    item = next(iter(stream(src, shuffle=False)))
    assert "observation.images.front" not in item and "action" in item


def test_store_video_window_is_not_materialized(tmp_path):
    """The same from the store: the camera is left out of samples (every video missing), a window on it raises."""
    src = real_dataset("record-test")
    store = tmp_path / "store"
    with pytest.warns(UserWarning, match="left out of samples"):
        lerobot_zarr.open_dataset(src, root=store, progress=False)
    with pytest.raises((lerobot_zarr.NotMaterializedError, lerobot_zarr.DeltaTimestampsError),
                       match="observation.images.front"):
        stream(store, delta_timestamps={"observation.images.front": [0.0]})
    item = next(iter(stream(store, shuffle=False)))
    assert "observation.images.front" not in item and "action" in item


# ------------------------------------------------------------------------------------------------ network


def _data_requests(records, commit_prefix: str) -> dict[str, list]:
    """Requests for data files, per file (relative path)."""
    out: dict[str, list] = {}
    for r in records:
        if r.method != "GET" or not r.path.startswith(commit_prefix):
            continue
        rel = r.path[len(commit_prefix):].split("/", 1)[1]
        if rel.startswith("data/"):
            out.setdefault(rel, []).append(r)
    return out


def _body_ranges(requests, path: Path, groups) -> list[tuple[int, int]]:
    """Byte ranges of the requests, without footer reads: a read of the file's tail (HubFiles reads a tail of the
    footer's estimated length, the whole file when smaller) or one lying inside the footer."""
    size = path.stat().st_size
    ranges = [parse_range(r.range, size) for r in requests]
    return [(a, b) for a, b in ranges if b != size and a < groups[-1].stop]


def _tail_start(requests, path: Path) -> int:
    """Where the tail read to find the footer starts: HubFiles serves the bytes of later reads that lie in it
    from there (a small file is read once, whole)."""
    size = path.stat().st_size
    return min(a for a, b in (parse_range(r.range, size) for r in requests) if b == size)


def _before_tail(tail: int, g) -> int:
    """Bytes of the row group before the tail read with the footer."""
    return max(0, min(g.stop, tail) - g.start)


def test_each_episode_fetched_once_per_epoch(world):
    """Over one epoch of all 2 x 2 shards, every row group's bytes are requested exactly once (footers apart)."""
    shards, records = world.hub_epoch()
    assert sum(len(items) for _, items in shards.values()) >= sum(LENGTHS)  # 2 ranks: padded to equal counts
    by_file = _data_requests(records, resolve_prefix(REPO))
    files = sorted(p.relative_to(world.src).as_posix() for p in (world.src / "data").rglob("*.parquet"))
    assert sorted(by_file) == files
    for rel in files:
        groups = row_groups(world.src / rel)
        body = _body_ranges(by_file[rel], world.src / rel, groups)
        tail = _tail_start(by_file[rel], world.src / rel)
        for g in groups:
            covered = sum(max(0, min(b, g.stop) - max(a, g.start)) for a, b in body)
            hits = sum(1 for a, b in body if a < g.stop and g.start < b)
            assert covered == _before_tail(tail, g), (
                f"{rel} row group {g.index}: {covered} of {g.stop - g.start} bytes requested over {hits} requests "
                f"in one epoch")


def test_episode_subset_fetches_only_its_row_groups(world):
    """episodes=SUBSET: the row groups of other episodes are never requested (beyond footer reads)."""
    server = world.server
    s = stream(REPO, episodes=SUBSET, delta_timestamps=DELTAS)
    server.reset_stats()
    assert len(list(s)) == sum(LENGTHS[e] for e in SUBSET)
    by_file = _data_requests(server.requests(), resolve_prefix(REPO))
    for p in sorted((world.src / "data").rglob("*.parquet")):
        rel = p.relative_to(world.src).as_posix()
        number = int(p.stem.split("-")[1])
        groups = row_groups(p)
        body = _body_ranges(by_file.get(rel, []), p, groups)
        tail = _tail_start(by_file[rel], p) if rel in by_file else 0
        for g in groups:
            e = number * EPISODES_PER_FILE + g.index
            covered = sum(max(0, min(b, g.stop) - max(a, g.start)) for a, b in body)
            assert covered == (_before_tail(tail, g) if e in SUBSET else 0), f"episode {e} ({rel} rg {g.index})"


# ------------------------------------------------------------------------------------------------ order


def _sequence(s) -> list[int]:
    return [int(np.asarray(it["index"]).reshape(-1)[0]) for it in s]


def test_deterministic_for_seed_and_epoch(world):
    a = stream(world.store, seed=3, buffer_episodes=3, delta_timestamps=DELTAS)
    b = stream(world.store, seed=3, buffer_episodes=3, delta_timestamps=DELTAS)
    a.set_epoch(1)
    b.set_epoch(1)
    first = _sequence(a)
    assert first == _sequence(b), "same seed and epoch gave different sequences"
    assert sorted(first) == list(range(sum(LENGTHS)))
    # iterating again is the next epoch, the same as set_epoch(2) on a fresh stream
    second = _sequence(a)
    c = stream(world.store, seed=3, buffer_episodes=3, delta_timestamps=DELTAS)
    c.set_epoch(2)
    assert second == _sequence(c)
    assert second != first, "epochs 1 and 2 gave the same order"
    assert sorted(second) == sorted(first)
    d = stream(world.store, seed=4, buffer_episodes=3, delta_timestamps=DELTAS)
    d.set_epoch(1)
    assert _sequence(d) != first, "seeds 3 and 4 gave the same order"
    # the shard plan also changes with the epoch, and is the same for every rank/worker of one epoch
    assert a.shard(1, (0, 1)) != a.shard(2, (0, 1))
    assert a.shard(1, (0, 1)) == b.shard(1, (0, 1))


def test_same_sequence_from_hub_folder_and_store(world):
    """The order depends on seed, epoch, rank and worker only, not on where the bytes come from."""
    seqs = {}
    for kind in SOURCES:
        s = stream(world.source(kind), seed=9, rank=1, world_size=2, buffer_episodes=2)
        s.worker = (1, 2)
        seqs[kind] = _sequence(s)
    assert seqs["hub"] == seqs["folder"] == seqs["store"]


def test_shuffle_mixes_episodes_within_the_buffer(world):
    s = stream(world.store, seed=0, buffer_episodes=4)
    eps = [episode_of(it) for it in s]
    switches = sum(1 for x, y in zip(eps, eps[1:]) if x != y)
    assert switches > 2 * len(LENGTHS), f"only {switches} episode switches: frames not mixed across episodes"
    frames = [frame_of(it) for it in stream(world.store, seed=0, buffer_episodes=1)]
    assert frames != sorted(frames) and any(b < a for a, b in zip(frames, frames[1:]))


@pytest.mark.parametrize("kind", ["store", "hub"])
def test_no_shuffle_gives_episode_and_frame_order(world, kind):
    items = list(stream(world.source(kind), shuffle=False, delta_timestamps=DELTAS, buffer_episodes=3))
    got = [(episode_of(it), frame_of(it)) for it in items]
    want = [(e, f) for e, n in enumerate(LENGTHS) for f in range(n)]
    assert got == want
    if kind == "hub":
        return  # the sharded order is source-independent (test_same_sequence_from_hub_folder_and_store)
    # sharded: each shard gets its episodes in order, frames in order
    for (rank, w), (shard, items) in run_shards(world.source(kind), shuffle=False).items():
        assert shard == sorted(shard)
        own = [(e, f) for e in shard for f in range(LENGTHS[e])]
        assert [(episode_of(it), frame_of(it)) for it in items][:len(own)] == own, (rank, w)
        padding = [(episode_of(it), frame_of(it)) for it in items[len(own):]]
        assert set(padding) <= set(own), (rank, w)  # padding repeats frames of the shard


# ------------------------------------------------------------------------------------------------ memory


def test_memory_stays_bounded(tmp_path):
    """48 episodes of 100-200 frames (state/action f32[64], a 32x32 RGB image): ~26 MB of decoded arrays,
    streamed with buffer_episodes=2 while the items are dropped. Bound: the peak of tracemalloc (Python and numpy
    allocations) plus the largest pyarrow pool usage seen stays under 8 of the largest episode's decoded arrays,
    and under a quarter of the whole dataset's decoded size."""
    lengths = np.random.default_rng(0).integers(100, 200, 48, endpoint=True).tolist()
    src = write_sample_dataset(tmp_path / "big", n_episodes=48, lengths=lengths, state_dim=64, action_dim=64,
                               episodes_per_file=20, image_keys=(IMAGE,), image_shape=(32, 32, 3), seed=1)
    s = stream(src, buffer_episodes=2, delta_timestamps={"observation.state": [-1 / FPS, 0.0],
                                                         "action": [k / FPS for k in range(16)]})
    frame_bytes = 64 * 4 + 64 * 4 + 32 * 32 * 3 + 4 + 4 * 8  # state, action, image, timestamp, 4 int64 columns
    episode_bytes = max(lengths) * frame_bytes
    total_bytes = sum(lengths) * frame_bytes
    bound = 8 * episode_bytes
    arrow_base = pa.total_allocated_bytes()
    arrow_peak = 0
    n = 0
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        for item in s:
            n += 1
            if n % 64 == 0:
                arrow_peak = max(arrow_peak, pa.total_allocated_bytes() - arrow_base)
            del item
        _, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == sum(lengths)
    peak = traced_peak + arrow_peak
    assert peak < bound, (f"peak {peak / 1e6:.1f} MB (traced {traced_peak / 1e6:.1f} MB + arrow "
                          f"{arrow_peak / 1e6:.1f} MB) >= bound {bound / 1e6:.1f} MB (8 episodes of "
                          f"{episode_bytes / 1e6:.2f} MB); whole dataset {total_bytes / 1e6:.1f} MB")
    assert peak < total_bytes / 4


# ------------------------------------------------------------------------------------------------ torch


def test_torch_stream_with_two_workers(world):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from lerobot_zarr.integrations.torch import TorchStream

    ds = world.reference("store", deltas=DELTAS)
    loader = DataLoader(TorchStream(stream(world.store, delta_timestamps=DELTAS, buffer_episodes=2)),
                        num_workers=2, batch_size=None)
    got = Counter(freeze(it, strict_types=False) for it in loader)
    assert sum(got.values()) == len(ds)
    assert got == reference_multiset(ds, strict_types=False)


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("kind", SOURCES)
def test_errors(world, kind):
    source = world.source(kind)
    for rank, world_size in ((2, 2), (5, 2), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match="rank"):
            stream(source, rank=rank, world_size=world_size)
    light = kind == "hub"  # each Hub stream reads the metadata first: one case of each error there
    for bad in ([len(LENGTHS)],) if light else ([len(LENGTHS)], [0, 99], [-1]):
        with pytest.raises(lerobot_zarr.FrameIndexError):
            stream(source, episodes=bad)
    bad_deltas = [{"action": [0.01]}]  # not a multiple of 1/30 s
    if not light:
        bad_deltas += [{"no.such.feature": [0.0]}, {"action": []}]
    for deltas in bad_deltas:
        with pytest.raises(lerobot_zarr.DeltaTimestampsError):
            stream(source, delta_timestamps=deltas)
    with pytest.raises(ValueError):
        stream(source, buffer_episodes=0)
    with pytest.raises(ValueError):
        stream(source, image_format="bgr")


def test_stream_is_public_api():
    """The issue's entry point is ``lerobot_zarr.stream(...)``: the function, not the submodule of that name."""
    assert "stream" in lerobot_zarr.__all__
    assert callable(lerobot_zarr.stream), f"lerobot_zarr.stream is {lerobot_zarr.stream!r}, not the function"
    assert lerobot_zarr.stream is stream


def test_missing_source(tmp_path):
    with pytest.raises(lerobot_zarr.SourceNotFoundError):
        stream(tmp_path)  # an empty folder: neither a LeRobot folder nor a store


def test_stream_of_a_folder_decodes_its_videos(tmp_path):
    """A LeRobot folder with mp4 cameras streams their frames, equal to the store's decode of the same files."""
    pytest.importorskip("av", reason="the video extra (PyAV) is not installed")
    src = write_sample_dataset(tmp_path / "src", n_episodes=3, lengths=(5, 9), video_keys=("cam",), write_videos=True,
                               image_shape=(16, 24, 3), seed=4)
    ds = lerobot_zarr.open_dataset(src, root=tmp_path / "store", progress=False)
    items = list(stream(src, shuffle=False, delta_timestamps={"cam": [-1 / 30, 0.0]}))
    assert len(items) == len(ds)
    windowed = lerobot_zarr.LeRobotZarrDataset(tmp_path / "store", delta_timestamps={"cam": [-1 / 30, 0.0]})
    for i, item in enumerate(items):
        want = windowed[int(item["index"])]
        assert np.array_equal(item["cam"], want["cam"]) and np.array_equal(item["cam_is_pad"], want["cam_is_pad"]), i
