"""Mixtures and streams with torch: ``batch_loader(mix)`` (workers, checkpoints whose state counts the delivered
batches, not the prefetched ones), a two-process DDP job on a mixture, and ``stream_loader`` resuming an epoch
with DataLoader workers. Skips without torch (CI does not install it)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

import lerobot_zarr as lz  # noqa: E402
from lerobot_zarr.integrations.torch import TorchDataset, batch_loader, stream_loader  # noqa: E402

MAIN = Path(__file__).resolve().parents[2]
DELTAS = {"x": [-0.1, 0.0], "y": [0.0, 0.1, 0.2]}


def _store(path: Path, x_width: int, lengths: list[int], seed: int) -> str:
    rng = np.random.default_rng(seed)
    features = {"x": {"dtype": "float32", "shape": [x_width]}, "y": {"dtype": "float32", "shape": [2]}}
    with lz.create(path, fps=10, features=features, durable=False, min_free_bytes=0) as w:
        for n in lengths:
            w.add_episode({"x": rng.standard_normal((n, x_width)).astype(np.float32),
                           "y": rng.standard_normal((n, 2)).astype(np.float32)}, task=f"task {seed}")
    return str(path)


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixtorch")
    a = _store(base / "a", 3, [40, 25, 61, 12], 0)
    b = _store(base / "b", 5, [9, 30, 18], 1)
    return lz.open_mixture({a: 0.6, b: 0.4}, delta_timestamps=DELTAS, pad_to={"x": 5})


def _same(batch: dict, want: dict) -> None:
    assert set(batch) == set(want)
    for key, value in want.items():
        if key == "task":
            assert batch[key] == value
        else:
            np.testing.assert_array_equal(batch[key].numpy(), value, err_msg=key)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_loader_on_a_mixture_gives_its_samplers_batches(mix, num_workers):
    loader = batch_loader(mix, 16, num_workers=num_workers)
    reference = mix.sampler(16, seed=0)
    assert len(loader) == len(reference) == len(mix) // 16
    for batch, idx in zip(loader, reference, strict=True):
        _same(batch, mix.get_batch(idx))
    with pytest.raises(ValueError, match="shuffle=False does not apply"):
        batch_loader(mix, 16, shuffle=False)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_checkpoint_counts_the_delivered_batches_not_the_prefetched_ones(mix, num_workers):
    straight = [b["index"].numpy().tolist() + b["dataset_index"].numpy().tolist()
                for b in batch_loader(mix, 8, batch_sampler=mix.sampler(8, seed=4), num_workers=num_workers)]
    more = {"prefetch_factor": 4} if num_workers else {}
    loader = batch_loader(mix, 8, batch_sampler=mix.sampler(8, seed=4), num_workers=num_workers,
                          batches_per_request=5, **more)
    got = []
    for step, b in enumerate(loader):
        got.append(b["index"].numpy().tolist() + b["dataset_index"].numpy().tolist())
        if step == 6:
            state = json.loads(json.dumps(loader.state_dict()))  # the workers are batches ahead by now
            break
    assert state["position"] == 7 * 8
    again = batch_loader(mix, 8, batch_sampler=mix.sampler(8, seed=4), num_workers=num_workers)
    again.load_state_dict(state)
    assert len(again) == len(straight) - 7
    got += [b["index"].numpy().tolist() + b["dataset_index"].numpy().tolist() for b in again]
    assert got == straight
    with pytest.raises(TypeError, match="no state"):
        batch_loader(mix.datasets[0], 8).state_dict()


def test_a_plain_dataloader_takes_the_sampler_as_batch_sampler(mix):
    loader = torch.utils.data.DataLoader(TorchDataset(mix), batch_sampler=mix.sampler(8, seed=1), num_workers=0)
    for batch, idx in zip(loader, mix.sampler(8, seed=1)):
        want = mix.get_batch(idx)
        np.testing.assert_array_equal(batch["x"].numpy(), want["x"])
        np.testing.assert_array_equal(batch["dataset_index"].numpy(), want["dataset_index"])


DDP = r'''
import json, os, sys
import numpy as np
import torch
import torch.distributed as dist
import lerobot_zarr as lz
from lerobot_zarr.integrations.torch import batch_loader

rank, world, a, b, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
mix = lz.open_mixture({a: 0.6, b: 0.4}, delta_timestamps={"x": [-0.1, 0.0], "y": [0.0, 0.1, 0.2]}, pad_to={"x": 5})
loader = batch_loader(mix, 8, num_workers=1)  # the mixture's sampler takes this process's rank of the group
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 6))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
seen = []
for step, batch in enumerate(loader):
    x = batch["x"].reshape(len(batch["x"]), -1)
    loss = ((model(x) - batch["y"].reshape(len(x), -1)) ** 2).mean()
    optimizer.zero_grad(); loss.backward(); optimizer.step()
    seen.append(batch["index"].tolist() + batch["dataset_index"].tolist())
    if step == 9:
        break
state = loader.state_dict()
with open(out, "w") as f:
    json.dump({"seen": seen, "state": state, "weight": model.module.weight.detach().numpy().tolist()}, f)
dist.destroy_process_group()
'''


def test_ddp_on_a_mixture_splits_the_global_batches_and_ranks_agree(mix, tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    a, b = (str(ds.root) for ds in mix.datasets)
    import subprocess
    env = dict(os.environ, PYTHONPATH=str(MAIN))
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2", a, b, str(tmp_path / "init"),
                               str(tmp_path / f"rank{r}.json")], env=env, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["state"] == ranks[1]["state"] and ranks[0]["state"]["position"] == 10 * 16
    assert ranks[0]["weight"] == ranks[1]["weight"]  # DDP kept the replicas equal
    one = mix.sampler(16, seed=0, rank=0, world_size=1)
    for step in range(10):
        idx = one.batch(step)
        want = mix.get_batch(idx)
        got = sorted(zip(ranks[0]["seen"][step][8:] + ranks[1]["seen"][step][8:],
                         ranks[0]["seen"][step][:8] + ranks[1]["seen"][step][:8]))
        assert got == sorted(zip(want["dataset_index"].tolist(), want["index"].tolist()))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return _store(tmp_path_factory.mktemp("streamtorch") / "s", 3, [7, 30, 12, 3, 25, 9, 14, 1, 18], 5)


@pytest.mark.parametrize("num_workers,batch_size", [(0, None), (2, None), (3, 4)])
def test_stream_loader_resumes_an_epoch_exactly_with_workers(store, num_workers, batch_size):
    def items(loader, stop=None):
        out = []
        for k, item in enumerate(loader):
            out.append((item["episode_index"].reshape(-1).tolist(), item["frame_index"].reshape(-1).tolist()))
            if stop is not None and k + 1 == stop:
                break
        return out

    make = lambda: stream_loader(lz.stream(store, seed=7, world_size=2, rank=1, batch_size=batch_size),
                                 num_workers=num_workers)
    straight = make()
    epochs = [items(straight), items(straight)]
    for cut in (1, len(epochs[0]) // 2, len(epochs[0]) - 1):
        first = make()
        got = items(first, stop=cut)
        state = json.loads(json.dumps(first.state_dict()))
        assert state["items"] == cut
        again = make()
        again.load_state_dict(state)
        got += items(again)
        assert got == epochs[0], cut
        assert items(again) == epochs[1]  # then the next epoch
    # iterating again after a break continues the epoch too
    loader = make()
    got = items(loader, stop=3)
    got += items(loader)
    assert got == epochs[0]
    with pytest.raises(ValueError, match="DataLoader workers"):
        stream_loader(lz.stream(store, seed=7, world_size=2, rank=1, batch_size=batch_size),
                      num_workers=num_workers + 2).load_state_dict(state)
