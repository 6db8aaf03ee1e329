"""Streams for training jobs: equal sample counts on every rank (DDP), batches from one gather, and cameras judged
on the selected episodes only (the G1 dataset keeps its video for episodes 1, 2, 4 and 5 only)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hub_fixtures import make_env, real_dataset

import lerobot_zarr
from lerobot_zarr.sampling.sharding import deal
from lerobot_zarr.sampling.streams import stream
from lerobot_zarr.testing.hub_server import HubServer
from lerobot_zarr.testing.sample_data import write_sample_dataset

FPS = 30
IMAGE = "observation.images.cam"
LENGTHS = [1, 2, 3, 5, 8, 13, 4, 6, 9, 2, 15, 7, 3, 11, 40, 1, 22]
DELTAS = {"observation.state": [-2 / FPS, 0.0], "action": [k / FPS for k in range(5)], IMAGE: [-1 / FPS, 0.0]}
G1_CAM = "observation.images.cam_high"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    src = write_sample_dataset(tmp / "src", n_episodes=len(LENGTHS), lengths=LENGTHS, fps=FPS, seed=3,
                               episodes_per_file=5, image_keys=(IMAGE,), image_shape=(4, 6, 3))
    return lerobot_zarr.open_dataset(src, root=tmp / "store", progress=False).root


def key(item) -> tuple:
    return tuple((k, np.asarray(v).tobytes()) if not isinstance(v, str) else (k, v) for k, v in sorted(item.items()))


def epoch(store, world_size: int, num_workers: int, **kwargs) -> dict[tuple[int, int], list]:
    out = {}
    for rank in range(world_size):
        for w in range(num_workers):
            s = stream(store, rank=rank, world_size=world_size, delta_timestamps=DELTAS, seed=2, **kwargs)
            s.worker = (w, num_workers)
            out[(rank, w)] = list(s)
            assert len(out[(rank, w)]) == s.samples_per_shard(0, (w, num_workers))
    return out


@pytest.mark.parametrize("world_size,num_workers", [(2, 1), (3, 2), (4, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_rank_gets_the_same_count(store, world_size, num_workers, drop_last):
    ds = lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=DELTAS)
    want = Counter(key(ds[i]) for i in range(len(ds)))
    shards = epoch(store, world_size, num_workers, drop_last=drop_last)
    per_rank = [sum(len(shards[(r, w)]) for w in range(num_workers)) for r in range(world_size)]
    assert len(set(per_rank)) == 1, f"ranks get {per_rank} samples: DDP would hang"
    for w in range(num_workers):  # the same per worker position too: equal batch counts with DataLoader workers
        assert len({len(shards[(r, w)]) for r in range(world_size)}) == 1
    got = Counter(key(it) for items in shards.values() for it in items)
    assert set(got) <= set(want), "a streamed sample equals no ds[i]"
    if drop_last:
        assert all(n == 1 for n in got.values()), "drop_last repeated a sample"
        assert sum(per_rank) >= len(ds) - max(LENGTHS) * world_size * num_workers
    else:
        assert set(got) == set(want), "padding mode lost frames"
        assert sum(per_rank) - len(ds) < max(LENGTHS) * world_size * num_workers
    s = stream(store, rank=0, world_size=world_size, drop_last=drop_last, seed=2)
    s.worker = (0, num_workers)
    assert len(s) == per_rank[0]


def test_one_rank_is_exact_and_deal_balances():
    lengths = np.array(LENGTHS)
    shards = deal(list(range(len(LENGTHS))), lengths, 3)
    assert sorted(e for s in shards for e in s) == list(range(len(LENGTHS)))
    loads = [int(lengths[s].sum()) for s in shards]
    assert max(loads) - min(loads) <= max(LENGTHS)


def test_single_rank_with_workers_yields_every_frame_once(store):
    ds = lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=DELTAS)
    shards = epoch(store, 1, 3)
    got = Counter(key(it) for items in shards.values() for it in items)
    assert got == Counter(key(ds[i]) for i in range(len(ds)))


@pytest.mark.parametrize("image_format", ["uint8_hwc", "float32_chw"])
def test_batches_equal_get_batch(store, image_format):
    ds = lerobot_zarr.LeRobotZarrDataset(store, delta_timestamps=DELTAS, image_format=image_format)
    seen = []
    for batch in stream(store, delta_timestamps=DELTAS, batch_size=7, buffer_episodes=3, seed=1,
                        image_format=image_format):
        idx = np.asarray(batch["index"])
        assert 1 <= len(idx) <= 7
        want = ds.get_batch(idx)  # frame i of this store has index i
        assert set(batch) == set(want)
        for k, v in want.items():
            if k == "task":
                assert batch[k] == v
            else:
                assert batch[k].dtype == v.dtype and batch[k].shape == v.shape, k
                assert np.array_equal(batch[k], v), k
        seen.extend(idx.tolist())
    assert sorted(seen) == list(range(len(ds)))
    sizes = [len(b["index"]) for b in stream(store, batch_size=4, rank=1, world_size=2)]
    assert all(n == 4 for n in sizes[:-1])
    with pytest.raises(ValueError, match="batch_size"):
        stream(store, batch_size=0)


# ------------------------------------------------------------------------------------------------ cameras


def g1_have() -> list[int]:
    folder = real_dataset("G1-policy-train") / "videos" / "chunk-000" / G1_CAM
    return sorted(int(p.stem.split("_")[1]) for p in folder.glob("episode_*.mp4"))


@pytest.fixture(scope="module")
def g1_hub(module_tmp):
    folder = real_dataset("G1-policy-train")
    tmp = module_tmp
    mp = pytest.MonkeyPatch()
    try:
        with HubServer(tmp / "server") as server:
            server.add_repo("real/g1", folder, tags=["v2.1"])
            make_env(mp, tmp, server.endpoint)
            yield server
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def g1_first_frames(module_tmp) -> np.ndarray:
    """The first 3 frames of G1's camera in its first episode with an mp4, at full size, decoded by an open of the
    folder (once for both kinds of source: a full-size AV1 episode is the costly part)."""
    pytest.importorskip("av", reason="the video extra (PyAV) decodes the G1 camera")
    e = g1_have()[0]
    ref = lerobot_zarr.open_dataset(real_dataset("G1-policy-train"), episodes=[e], root=module_tmp / "ref",
                                    progress=False)
    return np.asarray(ref.episode(e)[G1_CAM][:3]).copy()


@pytest.mark.parametrize("kind", ["folder", "hub"])
def test_selected_episodes_with_video_stream_the_camera(kind, g1_hub, g1_first_frames):
    pytest.importorskip("av", reason="the video extra (PyAV) decodes the G1 camera")
    source = real_dataset("G1-policy-train") if kind == "folder" else "real/g1"
    have = g1_have()
    assert have == [1, 2, 4, 5], "the README of ../shared/datasets says so"
    s = stream(source, episodes=have[:2], shuffle=False, buffer_episodes=1)
    assert G1_CAM in s.kinds and s.left_out == {}
    items = s.__iter__()
    first = [next(items) for _ in range(3)]
    items.close()
    frames = g1_first_frames
    for j, item in enumerate(first):
        assert int(item["episode_index"]) == have[0] and int(item["frame_index"]) == j
        assert np.array_equal(item[G1_CAM], frames[j])


@pytest.mark.parametrize("kind", ["folder", "hub"])
def test_a_missing_camera_is_judged_on_the_selection(kind, g1_hub):
    pytest.importorskip("av", reason="without PyAV the camera is not stored at all (not_materialized)")
    source = real_dataset("G1-policy-train") if kind == "folder" else "real/g1"
    with pytest.warns(lerobot_zarr.LeRobotZarrWarning, match=r"missing for 1 of the 2 selected episodes \[0\]"):
        s = stream(source, episodes=[0, 1])
    assert G1_CAM in s.left_out and G1_CAM not in s.kinds
    assert s.left_out[G1_CAM].endswith("select episodes that have it: episodes=[1, 2, 4, 5]"), s.left_out
    if kind == "folder":  # a dataset where no episode has the camera: no selection to advise
        with pytest.warns(lerobot_zarr.LeRobotZarrWarning):
            none = stream(real_dataset("record-test"))
        assert none.left_out and all(why.endswith("no episode has it: samples go without it")
                                     for why in none.left_out.values()), none.left_out
    with pytest.raises(lerobot_zarr.NotMaterializedError) as exc:
        stream(source, episodes=[0, 1], delta_timestamps={G1_CAM: [0.0]})
    message = str(exc.value)
    assert "[0]" in message and "[0, 3" not in message, message


def test_drop_last_with_more_ranks_than_episodes_is_refused(store):
    n = len(lerobot_zarr.LeRobotZarrDataset(store).episodes)
    with pytest.raises(lerobot_zarr.ArgumentError, match=f"world_size={n + 1} over {n} episodes"):
        stream(store, rank=0, world_size=n + 1, drop_last=True)
    counts = {len(list(stream(store, rank=r, world_size=n + 1))) for r in range(n + 1)}  # padding still works
    assert len(counts) == 1 and counts.pop() > 0
