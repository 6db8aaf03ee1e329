"""Torch adapter (``pip install lerobot_zarr[torch]``): the same samples as tensors, per item or per batch.

- ``TorchDataset(ds)``: a map-style ``Dataset`` whose items are ``ds[i]`` as tensors (``task`` stays a string):
  ``DataLoader(TorchDataset(ds), batch_size=B, shuffle=True)`` works as with any dataset. It also answers a
  list of indices with the whole batch at once (one ``ds.get_batch``).
- :func:`batch_loader` (the fast path): a ``DataLoader`` whose sampler hands out whole index batches
  (``BatchSampler``) and ``batch_size=None``, so each batch is one vectorised ``get_batch`` turned into tensors,
  never split into items and collated again. Its workers hand batches over through shared memory
  (:class:`~.torch_memory.Ring`).
- ``TorchStream(stream(...))``: an ``IterableDataset`` over :func:`lerobot_zarr.stream`.
- :class:`LeRobotDataset`: a drop-in for ``lerobot.datasets.lerobot_dataset.LeRobotDataset`` users (same
  constructor arguments where they apply, LeRobot's item layout: tensors, float32 CHW images in [0, 1],
  ``meta.camera_keys``, ``push_to_hub``).

Everything pickles as cheaply as the dataset does, so ``num_workers > 0`` works.

This module is the adapter's face; the code lives in :mod:`.torch_memory` (tensors, the workers' shared-memory
rings), :mod:`.torch_collate` (the batched fetch ``default_collate`` takes back in one step), :mod:`.torch_loaders`
(``TorchDataset``, the batch and stream loaders) and :mod:`.lerobot_dataset` (the drop-in).
"""

from .lerobot_dataset import LeRobotDataset
from .lerobot_meta import LeRobotDatasetMetadata
from .torch_loaders import (
    BatchLoader,
    IndexBatches,
    StreamLoader,
    TorchDataset,
    TorchStream,
    batch_loader,
    stream_loader,
)
from .torch_memory import to_tensors

__all__ = ["BatchLoader", "IndexBatches", "LeRobotDataset", "LeRobotDatasetMetadata", "StreamLoader", "TorchDataset",
           "TorchStream", "batch_loader", "stream_loader", "to_tensors"]
