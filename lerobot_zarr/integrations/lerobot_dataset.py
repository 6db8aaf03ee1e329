"""The ``LeRobotDataset`` drop-in: LeRobot's dataset class (constructor, items, ``meta``, ``push_to_hub``) served
from a lerobot_zarr store, its DataLoader batches made by one ``get_batch`` (the batched fetch of
:mod:`.torch_collate`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, import_optional

torch = import_optional("torch", "lerobot_zarr.integrations.torch (the torch adapter and LeRobotDataset drop-in)")
from torch.utils.data import Dataset  # noqa: E402

from ..cameras.video import TOLERANCE_S  # noqa: E402
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES  # noqa: E402
from .torch_collate import batch_items  # noqa: E402
from .torch_memory import to_tensors  # noqa: E402

__all__ = ["LeRobotDataset"]


class _Meta:
    """The parts of ``LeRobotDatasetMetadata`` that training code reads. ``features`` (and the camera keys) are
    those the items hold: a camera left out of the samples (its video missing, or PyAV not installed) is not
    listed, so a policy built from them does not expect it."""

    def __init__(self, meta: Any, stored: Sequence[str]):
        self._meta = meta
        self.repo_id = None
        self.root = meta.root
        self.info = meta.info
        self.stats = {k: {s: np.asarray(v) for s, v in st.items()} for k, st in meta.stats.items()}
        self.features = {k: v for k, v in meta.features.items() if k in stored}

    fps = property(lambda self: self._meta.fps)
    robot_type = property(lambda self: self._meta.robot_type)
    total_episodes = property(lambda self: self._meta.total_episodes)
    total_frames = property(lambda self: self._meta.total_frames)
    total_tasks = property(lambda self: len(self._meta.tasks))

    @property
    def camera_keys(self) -> list[str]:
        """Image and video features the items hold (LeRobot's ``camera_keys``)."""
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

    In a plain ``DataLoader(ds, batch_size=B)`` each batch is one ``get_batch`` (torch's batched fetch,
    ``__getitems__``): the items handed to the collate function share the batch's columns and
    ``default_collate`` takes them back into exactly LeRobot's batch (docs/torch.md). A ``collate_fn`` of your own
    that reads items gets a ``TypeError`` saying so: pass ``batched_fetch=False`` for real items (then made one by
    one, as with ``image_transforms``).
    """

    def __init__(self, repo_id: str, root: str | os.PathLike | None = None, episodes: list[int] | None = None,
                 image_transforms: Callable | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, tolerance_s: float = TOLERANCE_S,
                 revision: str | None = None, force_cache_sync: bool = False, download_videos: bool = True,
                 video_backend: str | None = None, *, token: str | bool | None = None, store: str | None = None,
                 batched_fetch: bool = True, **ignored: Any):
        from ..api import open_dataset

        if abs(float(tolerance_s) - TOLERANCE_S) > 1e-12:
            raise ArgumentError(f"tolerance_s={tolerance_s}: lerobot_zarr matches timestamps within {TOLERANCE_S} s "
                                f"only")
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
        self.batched_fetch = batched_fetch
        self.meta = _Meta(self.dataset.meta, self.dataset.array_specs)
        self.meta.repo_id = repo_id

    # LeRobotDataset's properties
    fps = property(lambda self: self.meta.fps)
    features = property(lambda self: self.meta.features)
    num_frames = property(lambda self: len(self.dataset))
    num_episodes = property(lambda self: self.dataset.num_episodes)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: list[int]) -> Sequence[dict[str, Any]]:
        """What a plain ``DataLoader(ds, batch_size=B)`` asks for: the batch in one ``get_batch``, handed to the
        collate function as items that share its columns, which ``default_collate`` takes back into LeRobot's batch
        in one step, without a tensor per item (with ``image_transforms``, which apply per item: item by item)."""
        if self.image_transforms is not None or not self.batched_fetch:
            return [self[i] for i in indices]
        return batch_items(self.dataset.get_batch(np.asarray(indices, dtype=np.int64)), squeeze=DEFAULT_FEATURES)

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
