"""The optional torch adapter ``lerobot_zarr.integrations.torch.TorchDataset``. Skipped when torch is not installed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (optional extra lerobot_zarr[torch])")

import lerobot_zarr
from lerobot_zarr.integrations.torch import TorchDataset
from lerobot_zarr.testing.sample_data import write_sample_dataset

FPS = 30
IMAGE = "observation.images.top"
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(3)], IMAGE: [0.0]}


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    base = tmp_path_factory.mktemp("torch")
    src = write_sample_dataset(base / "src", n_episodes=5, lengths=(3, 12), seed=4, image_keys=(IMAGE,),
                               image_shape=(6, 8, 3))
    return lerobot_zarr.open_dataset(src, root=base / "store", delta_timestamps=DELTAS, progress=False)


def assert_tensor_item(tensor_item: dict, numpy_item: dict) -> None:
    assert set(tensor_item) == set(numpy_item)
    for key, value in numpy_item.items():
        if key == "task":
            assert isinstance(tensor_item[key], str) and tensor_item[key] == value
            continue
        t = tensor_item[key]
        assert isinstance(t, torch.Tensor), key
        assert t.numpy().dtype == np.asarray(value).dtype, key
        np.testing.assert_array_equal(t.numpy(), np.asarray(value), err_msg=key)


def test_wraps_dataset(ds):
    tds = TorchDataset(ds)
    assert isinstance(tds, torch.utils.data.Dataset)
    assert len(tds) == len(ds)
    for i in (0, 1, len(ds) // 2, len(ds) - 1):
        assert_tensor_item(tds[i], ds[i])


def test_float32_chw_images(ds):
    f32 = lerobot_zarr.open_dataset(ds.root, delta_timestamps=DELTAS, image_format="float32_chw", progress=False)
    item = TorchDataset(f32)[3]
    assert item[IMAGE].dtype == torch.float32 and tuple(item[IMAGE].shape) == (1, 3, 6, 8)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_iterates(ds, num_workers):
    loader = torch.utils.data.DataLoader(TorchDataset(ds), batch_size=4, num_workers=num_workers, shuffle=False)
    seen = 0
    for batch in loader:
        n = len(batch["task"])
        expected = ds.get_batch(np.arange(seen, seen + n))
        for key, value in expected.items():
            if key == "task":
                assert list(batch[key]) == value
            else:
                assert isinstance(batch[key], torch.Tensor), key
                np.testing.assert_array_equal(batch[key].numpy(), value, err_msg=key)
        seen += n
    assert seen == len(ds)


# ------------------------------------------------------------------------------------------------ batched path


def assert_batch(batch: dict, expected: dict) -> None:
    assert set(batch) == set(expected)
    for key, value in expected.items():
        if key == "task":
            assert list(batch[key]) == list(value)
        else:
            assert isinstance(batch[key], torch.Tensor), key
            assert batch[key].numpy().dtype == np.asarray(value).dtype, key
            np.testing.assert_array_equal(batch[key].numpy(), value, err_msg=key)


def test_list_index_is_one_batch(ds):
    idx = [5, 0, len(ds) - 1, 7]
    tds = TorchDataset(ds)
    assert_batch(tds[idx], ds.get_batch(idx))
    assert_batch(tds[torch.tensor(idx)], ds.get_batch(idx))
    assert_batch(tds[np.asarray(idx)], ds.get_batch(idx))
    assert_tensor_item(tds[torch.tensor(5)], ds[5])  # 0-d: one item
    assert_tensor_item(tds[np.int64(5)], ds[5])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_loader_yields_get_batch(ds, num_workers):
    """batch_loader: each batch is get_batch of the sampler's indices, as tensors; one epoch covers every frame
    once; the generator fixes the order."""
    from lerobot_zarr.integrations.torch import batch_loader

    loader = batch_loader(ds, 7, shuffle=True, generator=torch.Generator().manual_seed(3), num_workers=num_workers)
    seen = []
    for batch in loader:
        idx = batch["index"].numpy() - int(ds.meta.episode_start[0])  # frame i has index i here (one store)
        assert_batch(batch, ds.get_batch(idx))
        assert len(idx) <= 7
        seen.extend(idx.tolist())
    assert sorted(seen) == list(range(len(ds)))
    again = [b["index"].tolist() for b in batch_loader(ds, 7, generator=torch.Generator().manual_seed(3))]
    assert [i for b in again for i in b] == seen
    ordered = [b["index"].tolist() for b in batch_loader(ds, 4, shuffle=False, drop_last=True)]
    assert [i for b in ordered for i in b] == list(range(len(ds) // 4 * 4)) and all(len(b) == 4 for b in ordered)


def test_batch_loader_without_workers_skips_the_dataloaders_machinery(ds, monkeypatch):
    """At 0 workers a batch is one get_batch made straight from the sampler: the DataLoader's single-process
    iterator (its per-batch profiler record and fetcher) is never made."""
    import torch.utils.data.dataloader as dataloader

    from lerobot_zarr.integrations.torch import batch_loader

    monkeypatch.setattr(dataloader, "_SingleProcessDataLoaderIter", None)  # any use of it fails
    loader = batch_loader(ds, 5, shuffle=False)
    batches = list(loader)
    assert len(batches) == len(loader) and [len(b["index"]) for b in batches[:-1]] == [5] * (len(batches) - 1)
    assert torch.cat([b["index"] for b in batches]).tolist() == ds.get_batch(np.arange(len(ds)))["index"].tolist()


def _ring_backed(loader, tensor) -> bool:
    """Whether ``tensor`` views a worker's shared-memory ring (the batch crossed as a slot number)."""
    from lerobot_zarr.integrations.torch_loaders import _RINGS

    ptr = tensor.data_ptr()
    rings = _RINGS.get(loader.dataset.token, {}).values()
    return any(r.memory.data_ptr() <= ptr < r.memory.data_ptr() + r.memory.numel() for r in rings)


def _frames(batch, ds) -> np.ndarray:
    return batch["index"].numpy() - int(ds.meta.episode_start[0])  # frame i has index i here (one store)


def test_batch_loader_workers_ring_keeps_held_batches(ds):
    """With workers, batches cross as slots of shared memory that are reused only once released: a batch held to
    the end of the epoch (and every batch of an epoch kept in a list: more than the rings may ever hold, so the
    rings grow to their limit and the rest crosses by copy) still equals get_batch of its indices; batches
    dropped as they come free their slots, so a whole epoch crosses by ring."""
    from lerobot_zarr.integrations.torch import batch_loader
    from lerobot_zarr.integrations.torch_loaders import _GROWTH

    loader = batch_loader(ds, 1, shuffle=True, num_workers=1, batches_per_request=1, persistent_workers=True)
    slots = _GROWTH * ((2 + 1) * 1 + 1)  # (prefetch 2 + 1) * 1 + 1 slots in the first ring
    assert len(loader) == len(ds) > slots
    kept = list(loader)
    assert sorted(i for b in kept for i in _frames(b, ds).tolist()) == list(range(len(ds)))
    assert sum(_ring_backed(loader, b["action"]) for b in kept) == slots
    for batch in kept:
        assert_batch(batch, ds.get_batch(_frames(batch, ds)))
    del kept, batch
    first, ring_backed = None, 0
    for batch in loader:  # slots free as batches are dropped: all but the held first one cross by ring
        first = batch if first is None else first
        ring_backed += _ring_backed(loader, batch["action"])
        batch["action"].zero_()  # the user's batch is the user's to change
    assert ring_backed == len(loader)
    assert_batch(first, {**ds.get_batch(_frames(first, ds)), "action": np.zeros_like(first["action"].numpy())})


def test_batch_loader_abandoned_epochs_and_many_batches_per_request(ds):
    """Epochs broken off early (persistent workers drop what was in flight) give their slots back; requests of
    several batches split into batches, len() counts batches, a held batch outlives the loader's workers."""
    from lerobot_zarr.integrations.torch import batch_loader
    from lerobot_zarr.integrations.torch_loaders import _RINGS

    loader = batch_loader(ds, 3, num_workers=2, batches_per_request=3, persistent_workers=True,
                          generator=torch.Generator().manual_seed(0))
    assert len(loader) == -(-len(ds) // 3)
    for _ in range(4):
        for k, batch in enumerate(loader):
            if k == 1:
                break
    del batch
    seen = []
    for batch in loader:
        assert _ring_backed(loader, batch["observation.state"])
        assert_batch(batch, ds.get_batch(_frames(batch, ds)))
        seen.extend(_frames(batch, ds).tolist())
    assert sorted(seen) == list(range(len(ds)))
    token = loader.dataset.token
    del loader
    assert token not in _RINGS
    assert_batch(batch, ds.get_batch(_frames(batch, ds)))

    once = batch_loader(ds, 4, num_workers=2, shuffle=False)  # not persistent: rings dropped with the workers
    for batch in once:
        assert _ring_backed(once, batch["action"])
    assert once.dataset.token not in _RINGS
    assert_batch(batch, ds.get_batch(_frames(batch, ds)))
    with pytest.raises(ValueError, match="batches_per_request"):
        batch_loader(ds, 4, num_workers=1, batches_per_request=0)


def test_batch_loader_two_iterators_at_once(ds):
    """Two live iterations of one loader (each with its own workers and rings) both yield exact batches."""
    from lerobot_zarr.integrations.torch import batch_loader

    loader = batch_loader(ds, 5, shuffle=False, num_workers=1)
    for a, b in zip(loader, loader, strict=True):
        assert_batch(a, ds.get_batch(_frames(a, ds)))
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["action"], b["action"])


def test_batch_loader_without_shared_memory(ds, monkeypatch):
    """Where a worker cannot make shared memory, its batches cross pickled: the same values."""
    import lerobot_zarr.integrations.torch as adapter
    import lerobot_zarr.integrations.torch_loaders as loaders

    class NoSharedMemory(loaders.Ring):
        def __init__(self, *args, **kwargs):
            raise RuntimeError("unable to open shared memory object")

    monkeypatch.setattr(loaders, "Ring", NoSharedMemory)  # forked workers see it too
    loader = adapter.batch_loader(ds, 6, shuffle=False, num_workers=1, multiprocessing_context="fork")
    seen = []
    for batch in loader:
        assert not _ring_backed(loader, batch["action"])
        assert_batch(batch, ds.get_batch(_frames(batch, ds)))
        seen.extend(_frames(batch, ds).tolist())
    assert seen == list(range(len(ds)))


def test_batch_loader_spawn_and_distributed_sampler(ds):
    """A worker started with spawn (its ring reaches the main process all the same), and a DistributedSampler per
    rank: each rank's batches equal get_batch, the ranks together cover every frame, set_epoch reshuffles."""
    from torch.utils.data.distributed import DistributedSampler

    from lerobot_zarr.integrations.torch import batch_loader

    ranks = [DistributedSampler(TorchDataset(ds), num_replicas=2, rank=r, shuffle=True, seed=1) for r in (0, 1)]
    loaders = [batch_loader(ds, 4, sampler=ranks[0], num_workers=1, persistent_workers=True,
                            multiprocessing_context="spawn"),
               batch_loader(ds, 4, sampler=ranks[1])]
    epochs = []
    for epoch in (0, 1):
        seen = []
        for s, loader in zip(ranks, loaders, strict=True):
            s.set_epoch(epoch)
            for batch in loader:
                assert_batch(batch, ds.get_batch(_frames(batch, ds)))
                assert _ring_backed(loader, batch["action"]) == (loader.num_workers > 0)
                seen.extend(_frames(batch, ds).tolist())
        assert set(seen) == set(range(len(ds))) and len(seen) == -(-len(ds) // 2) * 2
        epochs.append(seen)
    assert epochs[0] != epochs[1]


def _assert_same_batch(got: dict, want: dict, what: str) -> None:
    """Two collated batches: the same keys in the same order, types, dtypes, shapes and values."""
    assert list(got) == list(want), (what, list(got), list(want))
    for key, value in want.items():
        if isinstance(value, list):
            assert got[key] == value, (what, key)
            continue
        assert type(got[key]) is torch.Tensor and got[key].dtype == value.dtype, (what, key, type(got[key]))
        assert got[key].shape == value.shape and torch.equal(got[key], value), (what, key)


def test_getitems_is_one_gather_that_default_collate_stacks_back(ds, monkeypatch):
    from torch.utils.data import default_collate

    tds = TorchDataset(ds)
    calls = []
    monkeypatch.setattr(ds, "get_batch", lambda idx, f=ds.get_batch: calls.append(list(idx)) or f(idx))
    items = tds.__getitems__([3, 1, 3, 0])
    assert calls == [[3, 1, 3, 0]] and len(items) == 4 and isinstance(items, tuple)
    _assert_same_batch(default_collate(items), default_collate([tds[i] for i in (3, 1, 3, 0)]), "getitems")


def test_items_of_a_batched_fetch_are_real_items_when_read(ds):
    """The items __getitems__ gives the collate function share their batch's columns until read: read through the
    dict (item[key], items(), dict(item), {**item}...) each gives its own values, equal to the dataset's item; lists
    of them reordered, in part or changed collate item by item into the right batch; the stored column itself
    (read past the dict's methods) raises naming what to do, never another item's values."""
    from torch.utils.data import default_collate

    tds = TorchDataset(ds)
    order = (3, 1, 4)
    items = tds.__getitems__(list(order))
    want = [tds[i] for i in order]
    for item, one, i in zip(items, want, order, strict=True):
        _assert_same_batch(default_collate([dict(item)]), default_collate([one]), f"item {i}")
    reads = {"item[k]": lambda it: it["action"], "{**item}": lambda it: {**it}["action"],
             "get": lambda it: it.get("action"), "items()": lambda it: dict(it.items())["action"],
             "values()": lambda it: list(it.values())[list(it.keys()).index("action")]}
    for how, read in reads.items():  # each on items not read before
        for item, one, i in zip(tds.__getitems__(list(order)), want, order, strict=True):
            assert torch.equal(read(item), one["action"]), (how, i)
    column = dict.__getitem__(tds.__getitems__([3, 1, 4])[1], "action")  # the shared column, read past the dict
    for use in (lambda: column.numpy(), lambda: column[0], lambda: torch.cat([column]), lambda: column.clone()):
        with pytest.raises(TypeError, match=r"ds\[i\]"):
            use()
    assert "column of 3 items" in repr(column)
    fresh = tds.__getitems__(list(order))
    for other, idx in ((list(fresh), order), (fresh[::-1], order[::-1]), (fresh[:2], order[:2])):
        _assert_same_batch(default_collate(other), default_collate([tds[i] for i in idx]), f"{idx}")
    changed = tds.__getitems__(list(order))
    changed[0]["action"] = changed[0]["action"] * 0
    got = default_collate(changed)
    assert not got["action"][0].any() and torch.equal(got["action"][1:], torch.stack([w["action"] for w in want[1:]]))
    _assert_same_batch(default_collate(tds.__getitems__(list(order))), default_collate(want), "tuple")


# ------------------------------------------------------------------------------------------------ LeRobot drop-in


def test_lerobot_dataset_dropin_without_lerobot(ds, tmp_path):
    """The drop-in gives LeRobot's layout (checked against LeRobot itself below when it is installed)."""
    from lerobot_zarr.integrations.torch import LeRobotDataset

    src = ds.meta.source["path"]
    lds = LeRobotDataset("local/x", root=src, delta_timestamps=DELTAS, store=str(tmp_path / "s"))
    assert len(lds) == len(ds) and lds.num_episodes == 5 and lds.fps == FPS
    assert lds.meta.camera_keys == [IMAGE]
    item = lds[4]
    assert item[IMAGE].dtype == torch.float32 and tuple(item[IMAGE].shape) == (1, 3, 6, 8)
    assert float(item[IMAGE].max()) <= 1.0
    assert item["index"].ndim == 0 and int(item["index"]) == 4
    with pytest.raises(ValueError, match="tolerance"):  # 0.01 s is no multiple of 1/30 s within 1e-4 s
        LeRobotDataset("local/x", root=src, delta_timestamps={"action": [0.01]}, store=str(tmp_path / "s"))
    with pytest.raises(TypeError, match="unknown_argument"):  # never swallowed
        LeRobotDataset("local/x", root=src, unknown_argument=True)


def _dropin(ds, tmp_path, **kwargs):
    from lerobot_zarr.integrations.torch import LeRobotDataset

    return LeRobotDataset("local/x", root=ds.meta.source["path"], delta_timestamps=DELTAS,
                          store=str(tmp_path / "s"), **kwargs)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dropin_in_a_plain_dataloader_gives_the_collated_items(ds, tmp_path, num_workers):
    """DataLoader(drop-in, batch_size=B): each batch is exactly default_collate of its items (keys in order,
    tensor types, dtypes, shapes, values), through one get_batch per batch, with and without workers."""
    from torch.utils.data import DataLoader, default_collate

    lds = _dropin(ds, tmp_path)
    batches = list(DataLoader(lds, batch_size=7, num_workers=num_workers))
    assert sum(len(b["task"]) for b in batches) == len(lds)
    for j, batch in enumerate(batches):
        idx = range(7 * j, min(7 * j + 7, len(lds)))
        _assert_same_batch(batch, default_collate([lds[i] for i in idx]), f"batch {j}")


def test_dropin_with_workers_keeps_held_batches(ds, tmp_path):
    """Batches from workers cross through slots of shared memory reused only once freed: every batch of three
    epochs held to the end (more than a worker's slots) still holds its values."""
    from torch.utils.data import DataLoader, default_collate

    lds = _dropin(ds, tmp_path)
    loader = DataLoader(lds, batch_size=3, num_workers=2, shuffle=False, persistent_workers=True)
    held = [batch for _ in range(3) for batch in loader]
    assert len(held) > 3 * 8
    per_epoch = len(held) // 3
    for j, batch in enumerate(held):
        k = j % per_epoch
        _assert_same_batch(batch, default_collate([lds[i] for i in range(3 * k, min(3 * k + 3, len(lds)))]),
                           f"held batch {j}")


def test_dropin_other_collations(ds, tmp_path):
    """A Subset of the drop-in batches the same; a collate_fn of your own gets real items (LeRobot's) with the
    batched fetch too, as with batched_fetch=False; image_transforms (per item) too."""
    from torch.utils.data import DataLoader, Subset, default_collate

    lds = _dropin(ds, tmp_path)
    sub = Subset(lds, [9, 2, 4])
    _assert_same_batch(next(iter(DataLoader(sub, batch_size=3))), default_collate([lds[i] for i in (9, 2, 4)]),
                       "subset")

    def by_item(items):
        return torch.stack([item["action"] * 2 for item in items])

    plain = _dropin(ds, tmp_path, batched_fetch=False)
    want = torch.stack([plain[i]["action"] * 2 for i in range(3)])
    for dataset in (lds, plain):
        assert torch.equal(next(iter(DataLoader(dataset, batch_size=3, collate_fn=by_item))), want)
        listed = next(iter(DataLoader(dataset, batch_size=3, collate_fn=lambda items: [dict(i) for i in items])))
        for got, i in zip(listed, range(3), strict=True):
            _assert_same_batch(default_collate([got]), default_collate([plain[i]]), f"item {i}")
    for num_workers in (0, 2):
        loader = DataLoader(lds, batch_size=4, num_workers=num_workers, collate_fn=lambda items: default_collate(
            [{k: v for k, v in item.items() if k != "task"} for item in items]))
        for j, batch in enumerate(loader):
            idx = range(4 * j, min(4 * j + 4, len(lds)))
            _assert_same_batch({**batch, "task": [plain[i]["task"] for i in idx]},
                               default_collate([plain[i] for i in idx]), f"workers {num_workers} batch {j}")
    flipped = _dropin(ds, tmp_path, image_transforms=lambda img: img.flip(-1))
    got = next(iter(DataLoader(flipped, batch_size=3)))
    assert torch.equal(got[IMAGE], torch.stack([flipped[i][IMAGE] for i in range(3)]))
    assert torch.equal(got[IMAGE], torch.stack([lds[i][IMAGE].flip(-1) for i in range(3)]))


def _lerobot():
    pytest.importorskip("lerobot", reason="lerobot is not installed (compatibility with LeRobot 0.6.1's items)")
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset as Reference
    except ImportError as exc:
        pytest.skip(f"lerobot is installed but its LeRobotDataset does not import: {exc}")
    return Reference


def test_dataloader_batches_equal_lerobots(ds, tmp_path, monkeypatch):
    """A plain DataLoader over the drop-in gives LeRobot's own DataLoader's batches (same order, no shuffle):
    keys, dtypes, shapes, values (images within 1e-6)."""
    Reference = _lerobot()
    from torch.utils.data import DataLoader

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ref = Reference("local/x", root=ds.meta.source["path"], delta_timestamps=DELTAS)
    ours = _dropin(ds, tmp_path)
    for j, (a, b) in enumerate(zip(DataLoader(ref, batch_size=5), DataLoader(ours, batch_size=5), strict=True)):
        assert set(a) == set(b), (j, sorted(set(a) ^ set(b)))
        for key, want in a.items():
            if isinstance(want, list):
                assert b[key] == want, (j, key)
                continue
            assert b[key].dtype == want.dtype and b[key].shape == want.shape, (j, key, b[key].shape, want.shape)
            torch.testing.assert_close(b[key], want, rtol=0, atol=1e-6, msg=f"batch {j} {key}")


@pytest.mark.parametrize("episodes", [None, [1, 3]])
def test_items_equal_lerobots(ds, tmp_path, monkeypatch, episodes):
    """Every item of the drop-in equals LeRobot's own LeRobotDataset on the same folder: keys, dtypes, shapes,
    values (images float32 CHW within 1e-6: both divide uint8 by 255)."""
    Reference = _lerobot()
    from lerobot_zarr.integrations.torch import LeRobotDataset

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = ds.meta.source["path"]
    ref = Reference("local/x", root=src, episodes=episodes, delta_timestamps=DELTAS)
    ours = LeRobotDataset("local/x", root=src, episodes=episodes, delta_timestamps=DELTAS,
                          store=str(tmp_path / "s"))
    assert len(ours) == len(ref) and ours.num_episodes == ref.num_episodes and ours.num_frames == ref.num_frames
    assert ours.meta.camera_keys == ref.meta.camera_keys
    assert ours.fps == ref.fps
    for i in range(len(ref)):
        a, b = ref[i], ours[i]
        assert set(a) == set(b), (i, sorted(set(a) ^ set(b)))
        for key, want in a.items():
            got = b[key]
            if isinstance(want, str):
                assert got == want, (i, key)
                continue
            assert isinstance(got, torch.Tensor), (i, key)
            assert got.dtype == want.dtype and got.shape == want.shape, (i, key, got.dtype, got.shape, want.shape)
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6, msg=f"item {i} {key}")


def test_stream_batches_through_a_dataloader(ds):
    """TorchStream over stream(batch_size=B): DataLoader(batch_size=None, 2 workers) yields tensor batches that
    together hold every frame once, each equal to get_batch of its indices."""
    from lerobot_zarr.integrations.torch import TorchStream
    from lerobot_zarr.sampling.streams import stream

    loader = torch.utils.data.DataLoader(TorchStream(stream(ds.root, delta_timestamps=DELTAS, batch_size=5)),
                                         batch_size=None, num_workers=2)
    seen = []
    for batch in loader:
        idx = batch["index"].numpy()
        assert_batch(batch, ds.get_batch(idx))
        seen.extend(idx.tolist())
    assert sorted(seen) == list(range(len(ds)))


def test_push_to_hub_of_the_dropin(ds, tmp_path, monkeypatch):
    """LeRobotDataset(...).push_to_hub() publishes the store to its repo_id (the test Hub); reopening it from there
    gives the same items."""
    from hub_fixtures import make_env

    from lerobot_zarr.integrations.torch import LeRobotDataset
    from lerobot_zarr.testing.hub_server import HubServer

    with HubServer(tmp_path / "server", tokens={"tok": "me"}) as server:
        make_env(monkeypatch, tmp_path, server.endpoint)
        monkeypatch.setenv("HF_TOKEN", "tok")
        lds = LeRobotDataset("me/pushed", root=ds.meta.source["path"], store=str(tmp_path / "s"))
        assert lds.push_to_hub(private=True) is not None
        back = LeRobotDataset("me/pushed", store=str(tmp_path / "back"))
        assert len(back) == len(lds)
        for i in (0, len(lds) - 1):
            a, b = lds[i], back[i]
            assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a if k != "task")


def test_push_to_hub_of_a_dropin_opened_on_some_episodes(ds, tmp_path, monkeypatch):
    """push_to_hub publishes the whole dataset, as LeRobot's uploads the whole folder at root whatever episodes it
    was opened on: from a local folder, every episode; a dataset downloaded from the Hub for some episodes only is
    refused (LeRobot's folder would hold only their files), naming why, and nothing is published."""
    from hub_fixtures import make_env

    from lerobot_zarr.errors import NotMaterializedError, RevisionNotFoundError
    from lerobot_zarr.integrations.torch import LeRobotDataset
    from lerobot_zarr.testing.hub_server import HubServer

    with HubServer(tmp_path / "server", tokens={"tok": "me"}) as server:
        make_env(monkeypatch, tmp_path, server.endpoint)
        monkeypatch.setenv("HF_TOKEN", "tok")
        whole = LeRobotDataset("me/whole", root=ds.meta.source["path"], store=str(tmp_path / "s"))
        some = LeRobotDataset("me/whole", root=ds.meta.source["path"], episodes=[1, 3], store=str(tmp_path / "s"))
        assert some.num_episodes == 2 and some.push_to_hub() is not None
        back = LeRobotDataset("me/whole", store=str(tmp_path / "back"))
        assert back.meta.total_episodes == 5 and len(back) == len(whole)
        for i in (0, len(whole) // 2, len(whole) - 1):
            a, b = whole[i], back[i]
            assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a if k != "task")
        partial = LeRobotDataset("me/whole", root=tmp_path / "partial", episodes=[2])
        with pytest.raises(NotMaterializedError, match="only 1 of its 5 episodes"):
            partial.push_to_hub(branch="other")
        with pytest.raises(RevisionNotFoundError, match="branches: \\['main'\\]"):  # nothing was published
            LeRobotDataset("me/whole", root=tmp_path / "nothing", revision="other", episodes=[0])
