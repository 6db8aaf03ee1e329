"""A store in a bucket behind torch's DataLoader with workers started as Linux starts them by default (fork), as
LeRobot's training script makes it: the same batches as over the local store. (obstore's engine does not survive a
fork; the workers' requests go through a fetcher process each: :mod:`lerobot_zarr.cloud.relay`.)"""

from __future__ import annotations

import multiprocessing
import warnings

import numpy as np
import pytest
import s3_fixtures

import lerobot_zarr
from lerobot_zarr.testing.sample_data import write_sample_dataset
from lerobot_zarr.writing.sync import push_store

torch = pytest.importorskip("torch", reason="the DataLoader tests need torch")

from lerobot_zarr.integrations.torch_loaders import TorchDataset, batch_loader  # noqa: E402

s3, env = s3_fixtures.s3, s3_fixtures.env  # the fixtures: a server per test module, a bucket per test

FPS = 30
CAM = "observation.images.cam"
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [0.0, 1 / FPS], CAM: [-1 / FPS, 0.0]}

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork here")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_sample_dataset(tmp_path_factory.mktemp("torch") / "src", n_episodes=6, lengths=(20, 30),
                                image_keys=(CAM,), image_shape=(32, 48, 3), seed=3)


def _stores(env, folder, tmp_path):
    local = lerobot_zarr.open_dataset(folder, root=tmp_path / "local", progress=False, pack_bytes=1 << 16)
    push_store(local.root, env.url("stores/s"), progress=False)
    local = lerobot_zarr.open_dataset(local.root, delta_timestamps=DELTAS)
    remote = lerobot_zarr.open_dataset(env.url("stores/s"), delta_timestamps=DELTAS)
    remote.get_batch(np.arange(3))  # the parent reads first (its engine runs when the workers are forked)
    return local, remote


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_a_default_dataloader_with_forked_workers_reads_the_local_stores_batches(env, folder, tmp_path):
    local, remote = _stores(env, folder, tmp_path)
    assert multiprocessing.get_start_method() == "fork"  # torch's default context on Linux: what LeRobot gets
    with warnings.catch_warnings():  # (Python warns of a fork in a process with threads: that is the case here)
        warnings.simplefilter("ignore", DeprecationWarning)
        got = list(torch.utils.data.DataLoader(TorchDataset(remote), batch_size=8, num_workers=2, timeout=120))
    want = list(torch.utils.data.DataLoader(TorchDataset(local), batch_size=8))
    assert len(got) == len(want) == -(-len(local) // 8)
    for a, b in zip(got, want, strict=True):
        _equal(a, b)


def test_batch_loader_with_forked_workers_reads_the_local_stores_batches(env, folder, tmp_path):
    local, remote = _stores(env, folder, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        got = [dict(b) for b in batch_loader(remote, 8, shuffle=False, num_workers=2, timeout=120)]
    want = [dict(b) for b in batch_loader(local, 8, shuffle=False)]
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        _equal(a, b)


def _spied(remote):
    """``remote`` with its ``prefetch`` and ``get_batch`` calls recorded in one list, in order: ("ahead", indices) and
    ("read", indices)."""
    calls = []
    prefetch, get_batch = remote.prefetch, remote.get_batch
    remote.prefetch = lambda ix: (calls.append(("ahead", np.asarray(ix).tolist())), prefetch(ix))[1]
    remote.get_batch = lambda ix: (calls.append(("read", np.asarray(ix).tolist())), get_batch(ix))[1]
    return calls


def test_batch_loader_without_workers_prefetches_its_next_batches(env, folder, tmp_path):
    """The sampler's lookahead: before a batch is made, the frames of the batches after it are asked for in the
    background, each batch once, so a store in a bucket fetches them while the current one is worked on."""
    local, remote = _stores(env, folder, tmp_path)
    calls = _spied(remote)
    got = [dict(b) for b in batch_loader(remote, 8, shuffle=True, generator=torch.Generator().manual_seed(1))]
    want = [dict(b) for b in batch_loader(local, 8, shuffle=True, generator=torch.Generator().manual_seed(1))]
    for a, b in zip(got, want, strict=True):
        _equal(a, b)
    reads = [ix for kind, ix in calls if kind == "read"]
    ahead = [ix for kind, ix in calls if kind == "ahead"]
    assert len(reads) == len(want) > 3
    assert ahead == reads[1:]  # every batch but the first asked ahead once, in order
    for j, ix in enumerate(reads[1:], 1):  # and before the batch before it was made
        assert calls.index(("ahead", ix)) < calls.index(("read", reads[j - 1]))


def test_a_workers_request_prefetches_its_later_batches(env, folder, tmp_path):
    """With workers, a request of several batches asks for the later ones ahead while its first is made."""
    from lerobot_zarr.integrations.torch_loaders import _BatchRequests

    _, remote = _stores(env, folder, tmp_path)
    calls = _spied(remote)
    request = [np.arange(0, 8), np.arange(8, 16), np.arange(16, 24)]
    _BatchRequests(remote, 8, slots=4)[request]
    assert calls[0] == ("ahead", list(range(8, 24)))
    assert [c for c in calls[1:]] == [("read", list(ix)) for ix in (range(0, 8), range(8, 16), range(16, 24))]


def test_a_mixture_prefetches_in_its_datasets_in_buckets(env, folder, tmp_path):
    local, remote = _stores(env, folder, tmp_path)
    mix = lerobot_zarr.open_mixture([local.root, env.url("stores/s")], delta_timestamps=DELTAS)
    bucket = next(ds for ds in mix.datasets if ds.in_bucket)
    calls = _spied(bucket)
    idx = np.array([0, len(local) + 2, 5, len(local) + 7])
    mix.prefetch(idx)
    assert calls == [("ahead", [2, 7])]
