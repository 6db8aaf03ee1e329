"""Thin torch adapter (``pip install lerobot_zarr[torch]``): the same samples as tensors.

``TorchDataset(ds)`` is a ``torch.utils.data.Dataset`` whose items are ``ds[i]`` with arrays turned into tensors
(``task`` stays a string), so torch's default collate batches them. It pickles as cheaply as ``ds`` does, so it
works with ``DataLoader(num_workers > 0)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

from .dataset import LeRobotZarrDataset
from .streaming import SampleStream

__all__ = ["TorchDataset", "TorchStream", "to_tensors"]


def to_tensors(sample: dict[str, Any]) -> dict[str, Any]:
    """Turn every numpy value of a sample into a tensor; leave strings and lists of strings as they are."""
    return {k: torch.from_numpy(np.asarray(v)) if isinstance(v, (np.ndarray, np.generic)) else v
            for k, v in sample.items()}


class TorchDataset(Dataset):
    """A map-style torch dataset over a :class:`~lerobot_zarr.LeRobotZarrDataset`."""

    def __init__(self, dataset: LeRobotZarrDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return to_tensors(self.dataset[i])

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        """Batched fetch used by DataLoader: one vectorised ``get_batch`` instead of a loop, split back into items."""
        batch = self.dataset.get_batch(indices)
        return [to_tensors({k: v[j] for k, v in batch.items()}) for j in range(len(indices))]


class TorchStream(IterableDataset):
    """An iterable torch dataset over :func:`lerobot_zarr.stream`: each DataLoader worker reads its own share of
    the episodes (no duplicates, no gaps); call :meth:`set_epoch` before each epoch for a new shuffle."""

    def __init__(self, samples: SampleStream):
        self.samples = samples

    def set_epoch(self, epoch: int) -> None:
        self.samples.set_epoch(epoch)

    def __iter__(self):
        return (to_tensors(item) for item in self.samples)
