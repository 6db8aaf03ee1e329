"""``batch_loader`` as LeRobot code uses it (issue 29): it takes the ``LeRobotDataset`` drop-in (what LeRobot code
holds) and gives LeRobot's batches, and a DataLoader worker that stops (SIGSTOP) is an error naming it after the
loader's default timeout, not a hang. Compared with a plain ``DataLoader`` over the drop-in and, when lerobot is
installed, with LeRobot's own class in the same situation. Skipped without torch."""

from __future__ import annotations

import os
import signal
import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (optional extra lerobot_zarr[torch])")
from torch.utils.data import DataLoader  # noqa: E402

import lerobot_zarr  # noqa: E402
import lerobot_zarr.integrations.torch_loaders as loaders  # noqa: E402
from lerobot_zarr.integrations.torch import LeRobotDataset, batch_loader  # noqa: E402
from lerobot_zarr.testing.sample_data import write_sample_dataset  # noqa: E402

FPS = 30
IMAGE = "observation.images.top"
DELTAS = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(3)], IMAGE: [0.0]}
TIMEOUT_S = 5  # the default timeout in these tests: a stopped worker's wait, far longer than a batch takes here


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return write_sample_dataset(tmp_path_factory.mktemp("loader_workers") / "src", n_episodes=5, lengths=(3, 12),
                                seed=4, image_keys=(IMAGE,), image_shape=(6, 8, 3))


def dropin(src, tmp_path, **kwargs) -> LeRobotDataset:
    return LeRobotDataset("local/x", root=src, delta_timestamps=DELTAS, store=str(tmp_path / "s"), **kwargs)


def same_batch(got: dict, want: dict, what: str) -> None:
    assert list(got) == list(want), (what, list(got), list(want))
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert isinstance(got[key], torch.Tensor) and got[key].dtype == value.dtype, (what, key)
            assert got[key].shape == value.shape and torch.equal(got[key], value), (what, key)
        else:
            assert got[key] == value, (what, key)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_loader_takes_the_dropin_and_gives_lerobots_batches(src, tmp_path, num_workers):
    """batch_loader(drop-in) yields what DataLoader(drop-in, batch_size=B) yields (LeRobot's batches: cameras
    float32 CHW, index columns 1-D), batch for batch, with and without workers, image_transforms applied."""
    for kwargs in ({}, {"image_transforms": lambda img: img.flip(-1)}):
        lds = dropin(src, tmp_path, **kwargs)
        want = list(DataLoader(lds, batch_size=6, shuffle=False))
        got = list(batch_loader(lds, 6, shuffle=False, num_workers=num_workers))
        assert len(got) == len(want) == -(-len(lds) // 6)
        for j, (a, b) in enumerate(zip(got, want)):
            same_batch(a, b, f"batch {j} {kwargs}")
        assert got[0][IMAGE].dtype == torch.float32 and tuple(got[0][IMAGE].shape[-3:]) == (3, 6, 8)


def _stop_after_first_batch(loader) -> tuple[BaseException | None, list[int]]:
    """Iterate ``loader`` (one worker); once the first batch arrived, SIGSTOP that worker; return what the next
    batches raised and the pids stopped (continued afterwards: the loader shuts its workers down)."""
    before = set(_children())
    stopped: list[int] = []
    try:
        for k, _ in enumerate(loader):
            if k == 0:
                workers = sorted(set(_children()) - before)
                assert workers, "no worker process"
                for pid in workers:
                    os.kill(pid, signal.SIGSTOP)
                stopped += workers
    except Exception as exc:  # noqa: BLE001  (the test looks at it)
        return exc, stopped
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    return None, stopped


def _children() -> list[int]:
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                out.append(int(entry))
    return out


def test_a_stopped_worker_is_an_error_naming_it_after_the_default_timeout(src, tmp_path, monkeypatch):
    monkeypatch.setattr(loaders, "WORKER_TIMEOUT_S", TIMEOUT_S)
    ds = lerobot_zarr.open_dataset(src, delta_timestamps=DELTAS, progress=False)
    # one batch per request and no batch ahead: after the first, the worker must answer again
    loader = batch_loader(ds, 2, shuffle=False, num_workers=1, prefetch_factor=1, batches_per_request=1)
    assert loader.timeout == TIMEOUT_S
    done = threading.Event()
    result: list = []
    threading.Thread(target=lambda: (result.append(_stop_after_first_batch(loader)), done.set()), daemon=True).start()
    assert done.wait(300), "batch_loader still waits on a stopped worker (no timeout)"
    exc, stopped = result[0]
    assert isinstance(exc, lerobot_zarr.LoaderTimeoutError) and isinstance(exc, RuntimeError), repr(exc)
    assert f"pid {stopped[0]}, stopped" in str(exc) and f"{TIMEOUT_S} s" in str(exc), str(exc)


def test_lerobots_class_in_a_dataloader_with_a_stopped_worker_raises_too(src, tmp_path, monkeypatch, request):
    """LeRobot's own class in torch's DataLoader given a timeout: torch's RuntimeError, which ours refines (with the
    drop-in in the same DataLoader: the same error, torch's)."""
    pytest.importorskip("lerobot", reason="lerobot is not installed (LeRobot's class with a stopped worker)")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as Reference

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # torch's default sharing passes a batch's tensors as descriptors the worker hands over when the batch is
    # unpickled: a batch queued just before the worker stopped then hangs the unpickling, past any timeout
    strategy = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    request.addfinalizer(lambda: torch.multiprocessing.set_sharing_strategy(strategy))
    for lds in (Reference("local/x", root=src, delta_timestamps=DELTAS), dropin(src, tmp_path)):
        loader = DataLoader(lds, batch_size=2, num_workers=1, prefetch_factor=1, timeout=TIMEOUT_S)
        exc, _ = _stop_after_first_batch(loader)
        assert type(exc) is RuntimeError and "DataLoader timed out" in str(exc), repr(exc)
