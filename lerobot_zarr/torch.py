"""Torch adapter (``pip install lerobot_zarr[torch]``): the same samples as tensors, per item or per batch.

- ``TorchDataset(ds)``: a map-style ``Dataset`` whose items are ``ds[i]`` as tensors (``task`` stays a string):
  ``DataLoader(TorchDataset(ds), batch_size=B, shuffle=True)`` works as with any dataset. It also answers a
  list of indices with the whole batch at once (one ``ds.get_batch``).
- :func:`batch_loader` (the fast path): a ``DataLoader`` whose sampler hands out whole index batches
  (``BatchSampler``) and ``batch_size=None``, so each batch is one vectorised ``get_batch`` turned into tensors,
  never split into items and collated again. Its workers hand batches over through shared memory (:class:`_Ring`).
- ``TorchStream(stream(...))``: an ``IterableDataset`` over :func:`lerobot_zarr.stream`.
- :class:`LeRobotDataset`: a drop-in for ``lerobot.datasets.lerobot_dataset.LeRobotDataset`` users (same
  constructor arguments where they apply, LeRobot's item layout: tensors, float32 CHW images in [0, 1],
  ``meta.camera_keys``, ``push_to_hub``).

Everything pickles as cheaply as the dataset does, so ``num_workers > 0`` works.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, Sampler

from .dataset import LeRobotZarrDataset
from .lerobot_v3 import CAMERA_DTYPES, DEFAULT_FEATURES
from .streaming import SampleStream

__all__ = ["BatchLoader", "IndexBatches", "LeRobotDataset", "TorchDataset", "TorchStream", "batch_loader", "to_tensors"]


def to_tensors(sample: Mapping[str, Any]) -> dict[str, Any]:
    """Turn every numpy value of a sample (or batch) into a tensor, sharing memory where numpy allows; leave
    strings and lists of strings as they are."""
    out = {}
    for k, v in sample.items():
        if isinstance(v, np.ndarray):
            out[k] = torch.from_numpy(v if v.flags.writeable else v.copy())
        elif isinstance(v, np.generic):
            out[k] = torch.from_numpy(np.asarray(v))
        else:
            out[k] = v
    return out


class TorchDataset(Dataset):
    """A map-style torch dataset over a :class:`~lerobot_zarr.LeRobotZarrDataset`.

    ``tds[i]`` is ``ds[i]`` as tensors; ``tds[[i, j, ...]]`` (what :func:`batch_loader`'s batch sampler asks for)
    is ``ds.get_batch([i, j, ...])`` as tensors, stacked along a leading axis.
    """

    def __init__(self, dataset: LeRobotZarrDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int | Sequence[int]) -> dict[str, Any]:
        if (isinstance(i, Sequence) and not isinstance(i, str)) or getattr(i, "ndim", 0) > 0:
            return to_tensors(self.dataset.get_batch(np.asarray(i, dtype=np.int64)))
        return to_tensors(self.dataset[int(i)])

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """Used by ``DataLoader(batch_size=B)``: one ``get_batch``, split into items for the collate function
        (:func:`batch_loader` avoids the split and re-collation)."""
        batch = to_tensors(self.dataset.get_batch(np.asarray(indices, dtype=np.int64)))
        columns = {k: (v.unbind(0) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        return [{k: v[j] for k, v in columns.items()} for j in range(len(indices))]


class IndexBatches(Sampler):
    """Whole index batches as numpy arrays (no per-index Python work): a fresh permutation each epoch when
    ``shuffle`` (from ``generator``, else from torch's global RNG, as ``RandomSampler`` does)."""

    def __init__(self, n: int, batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                 generator: torch.Generator | None = None):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.n, self.batch_size, self.shuffle, self.drop_last = int(n), int(batch_size), shuffle, drop_last
        self.generator = generator

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.shuffle:
            generator = self.generator
            if generator is None:
                generator = torch.Generator().manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            order = torch.randperm(self.n, generator=generator).numpy()
        else:
            order = np.arange(self.n, dtype=np.int64)
        stop = len(self) * self.batch_size if self.drop_last else self.n
        for k in range(0, stop, self.batch_size):
            yield order[k:k + self.batch_size]


class _NumpyBatches(Dataset):
    """``get_batch`` of an index batch, in numpy: arrays cross from DataLoader workers as plain pickled bytes,
    cheaper than a shared-memory segment per tensor; the loader turns them into tensors in the main process."""

    def __init__(self, dataset: LeRobotZarrDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        return self.dataset.get_batch(np.asarray(indices, dtype=np.int64))


def _as_is(batch: Any) -> Any:
    return batch


class BatchLoader(DataLoader):
    """A ``DataLoader`` over whole index batches (see :func:`batch_loader`), yielding dicts of tensors."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        batches = super().__iter__()
        _widen_pipe(batches)
        for batch in batches:
            yield to_tensors(batch)


_F_SETPIPE_SZ = 1031  # Linux fcntl: resize a pipe's buffer


def _widen_pipe(batches: Any) -> None:
    """Let a whole batch fit in the pipe its workers send results through (64 KiB by default: a 300 KB batch then
    crosses in five reader/writer handoffs). Best effort: Linux only, and only where torch's iterator exposes
    its result queue."""
    queue = getattr(batches, "_worker_result_queue", None)
    reader = getattr(queue, "_reader", None)
    if reader is None:
        return
    try:
        import fcntl

        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(reader.fileno(), _F_SETPIPE_SZ, min(limit, 4 << 20))
    except (OSError, ValueError, ImportError):
        pass


def batch_loader(dataset: LeRobotZarrDataset | TorchDataset, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False, generator: torch.Generator | None = None,
                 sampler: Sampler | None = None, **kwargs: Any) -> BatchLoader:
    """A ``DataLoader`` yielding dicts of batched tensors (the ``get_batch`` dict), each batch one ``get_batch``.

    Its sampler hands the dataset whole index batches (:class:`IndexBatches`, or ``BatchSampler(sampler)`` for a
    ``sampler`` of your own such as a ``DistributedSampler``) and it runs with ``batch_size=None``: no per-item
    work, no collation. Other keyword arguments (``num_workers``, ``persistent_workers``, ...) go to
    ``DataLoader``; batches become tensors in the main process (``pin_memory`` does not apply: call
    ``.pin_memory()`` on the tensors if you need it)."""
    ds = dataset.dataset if isinstance(dataset, TorchDataset) else dataset
    if sampler is None:
        batches: Sampler = IndexBatches(len(ds), batch_size, shuffle=shuffle, drop_last=drop_last,
                                        generator=generator)
    else:
        batches = BatchSampler(sampler, batch_size=int(batch_size), drop_last=drop_last)
    kwargs.pop("pin_memory", None)
    return BatchLoader(_NumpyBatches(ds), batch_size=None, sampler=batches, collate_fn=_as_is, **kwargs)


class TorchStream(IterableDataset):
    """An iterable torch dataset over :func:`lerobot_zarr.stream`: each DataLoader worker reads its own share of
    the episodes (no duplicates, no gaps); call :meth:`set_epoch` before each epoch for a new shuffle. A stream
    made with ``batch_size=B`` yields batches: use ``DataLoader(TorchStream(s), batch_size=None)``."""

    def __init__(self, samples: SampleStream):
        self.samples = samples

    def set_epoch(self, epoch: int) -> None:
        self.samples.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (to_tensors(item) for item in self.samples)


class _Meta:
    """The parts of ``LeRobotDatasetMetadata`` that training code reads."""

    def __init__(self, meta: Any, stored: Sequence[str]):
        self._meta = meta
        self.repo_id = None
        self.root = meta.root
        self.info = meta.info
        self.stats = {k: {s: np.asarray(v) for s, v in st.items()} for k, st in meta.stats.items()}
        self.features = meta.features
        self._stored = tuple(stored)

    fps = property(lambda self: self._meta.fps)
    robot_type = property(lambda self: self._meta.robot_type)
    total_episodes = property(lambda self: self._meta.total_episodes)
    total_frames = property(lambda self: self._meta.total_frames)
    total_tasks = property(lambda self: len(self._meta.tasks))

    @property
    def camera_keys(self) -> list[str]:
        """Image and video features (LeRobot's ``camera_keys``)."""
        return [k for k, ft in self.features.items() if ft.get("dtype") in CAMERA_DTYPES]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft.get("dtype") == "image"]

    @property
    def tasks(self) -> list[str]:
        return list(self._meta.tasks)

    @property
    def episodes(self) -> dict[str, np.ndarray]:
        m = self._meta
        return {"episode_index": np.arange(m.total_episodes), "length": m.episode_length,
                "dataset_from_index": m.episode_start, "dataset_to_index": m.episode_end}


class LeRobotDataset(Dataset):
    """``LeRobotDataset`` for code written against LeRobot: the same constructor arguments where they apply and
    the same items (tensors; cameras float32 CHW in [0, 1]; ``<key>_is_pad`` masks; ``task`` string), served
    from a lerobot_zarr store (made on first use, see :func:`lerobot_zarr.open_dataset`).

    ``repo_id`` is a Hub repo id; ``root`` a LeRobot dataset folder or a store to read instead of the Hub (as
    LeRobot's ``root``); ``episodes``, ``delta_timestamps``, ``revision``, ``token`` as in LeRobot;
    ``image_transforms`` is applied to each camera frame (a CHW tensor) like LeRobot does. Arguments about
    LeRobot's own video decoding and recording (``video_backend``, ``download_videos``, encoders) do not apply
    and are accepted and ignored; ``tolerance_s`` must be LeRobot's default (1e-4 s), the one lerobot_zarr uses.
    """

    def __init__(self, repo_id: str, root: str | os.PathLike | None = None, episodes: list[int] | None = None,
                 image_transforms: Callable | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 revision: str | None = None, force_cache_sync: bool = False, download_videos: bool = True,
                 video_backend: str | None = None, *, token: str | bool | None = None, store: str | None = None,
                 **ignored: Any):
        from .api import open_dataset

        if abs(float(tolerance_s) - 1e-4) > 1e-12:
            raise ValueError(f"tolerance_s={tolerance_s}: lerobot_zarr matches timestamps within 1e-4 s only")
        self.repo_id = repo_id
        self.root = Path(root) if root is not None else None
        self.revision = revision
        self.image_transforms = image_transforms
        self.delta_timestamps = None if delta_timestamps is None else {k: list(v)
                                                                       for k, v in delta_timestamps.items()}
        source = self.root if self.root is not None else repo_id
        self.dataset = open_dataset(source, root=store, episodes=episodes, delta_timestamps=delta_timestamps,
                                    revision=None if self.root is not None else revision, token=token,
                                    image_format="float32_chw")
        self.episodes = None if episodes is None else sorted(int(e) for e in episodes)
        self.meta = _Meta(self.dataset.meta, self.dataset.array_specs)
        self.meta.repo_id = repo_id

    # LeRobotDataset's properties
    fps = property(lambda self: self.meta.fps)
    features = property(lambda self: self.meta.features)
    num_frames = property(lambda self: len(self.dataset))
    num_episodes = property(lambda self: self.dataset.num_episodes)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        item = to_tensors(self.dataset[int(idx)])
        for key in self.meta.camera_keys:
            if key not in item:
                continue
            if self.image_transforms is not None:
                item[key] = self.image_transforms(item[key])
        for key in DEFAULT_FEATURES:
            if key in item and item[key].ndim == 1 and item[key].numel() == 1:
                item[key] = item[key][0]  # LeRobot gives these as 0-d tensors
        return item

    def push_to_hub(self, branch: str | None = None, tags: list | None = None, license: str | None = "apache-2.0",
                    tag_version: bool = True, push_videos: bool = True, private: bool | None = None,
                    **ignored: Any) -> str | None:
        """Publish the store as LeRobot v3.0 to ``repo_id`` (one commit; see ``LeRobotZarrDataset.push``)."""
        return self.dataset.push(self.repo_id, revision=branch, private=bool(private), videos=None)

    def __repr__(self) -> str:
        return (f"LeRobotDataset(repo_id={self.repo_id!r}, episodes={self.num_episodes}, frames={self.num_frames}, "
                f"features={list(self.features)}, served by lerobot_zarr from {self.dataset.root})")
