"""Streaming samples for training on data larger than the disk: episodes arrive by range reads, a few at a time.

``stream(source)`` yields the same dicts as ``ds[i]`` (windows and padding included), each frame once per epoch.
Episodes are shuffled with a seed shared by every rank and worker, then dealt out: rank ``r`` of ``world_size``,
worker ``w`` of ``num_workers`` takes every ``(world_size * num_workers)``-th episode from position
``r * num_workers + w`` (no duplicates, no gaps). Each process keeps ``buffer_episodes`` episodes in memory and
fetches as many ahead in a background thread (from the Hub, up to that many range requests in flight), so at most
about three times ``buffer_episodes`` episodes are held at once; frames are drawn at random across the buffer.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ._background import prefetched
from .dataset import IMAGE_FORMATS, LeRobotZarrDataset, window_offsets
from .errors import FrameIndexError, NotMaterializedError, SourceNotFoundError
from .source import LeRobotSource, is_lerobot_folder
from .store import has_commit_point
from .video import VideoUnavailable

__all__ = ["stream", "SampleStream"]


def _worker() -> tuple[int, int]:
    """(worker id, number of workers) of the torch DataLoader worker running this, else (0, 1)."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class SampleStream:
    """An iterable of samples; iterating again starts the next epoch (or call :meth:`set_epoch`)."""

    def __init__(self, source: str | os.PathLike, *, revision: str | None = None, token: str | bool | None = None,
                 episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, shuffle: bool = True,
                 seed: int = 0, buffer_episodes: int = 4, rank: int = 0, world_size: int = 1,
                 image_format: str = "uint8_hwc", worker: tuple[int, int] | None = None):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if buffer_episodes < 1:
            raise ValueError(f"buffer_episodes must be at least 1, got {buffer_episodes}")
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {IMAGE_FORMATS}, got {image_format!r}")
        self.source, self.revision, self.token = source, revision, token
        self.shuffle, self.seed, self.buffer_episodes = shuffle, int(seed), int(buffer_episodes)
        self.rank, self.world_size, self.worker = rank, world_size, worker
        self.image_format = image_format
        self.epoch = 0
        reader = self._reader()
        self._reader_cache: _EpisodeReader | None = reader  # reused by the first epoch in this process
        n = reader.n_episodes
        self.episodes = (np.flatnonzero(reader.available).tolist() if episodes is None
                         else sorted({int(e) for e in episodes}))
        bad = [e for e in self.episodes if not 0 <= e < n]
        if bad:
            raise FrameIndexError(f"{source}: episode {bad[0]} does not exist ({n} episodes)")
        absent = [e for e in self.episodes if not reader.available[e]]
        if absent:
            raise NotMaterializedError(f"{source}: episodes {absent[:20]} are not in the store")
        self.fps, self.tasks, self.kinds = reader.fps, reader.tasks, reader.kinds
        self.delta_timestamps = delta_timestamps
        self._offsets = window_offsets(delta_timestamps, self.fps, list(self.kinds), reader.not_materialized)
        self.lengths = reader.lengths

    def _reader(self) -> _EpisodeReader:
        path = Path(self.source).expanduser()
        if has_commit_point(path):
            return _StoreReader(path)
        if is_lerobot_folder(path):
            return _SourceReader(LeRobotSource(path))
        if path.exists():
            raise SourceNotFoundError(f"{path}: neither a LeRobot dataset folder nor a lerobot_zarr store")
        from .hub import HubFiles, resolve_revision

        revision, commit = resolve_revision(str(self.source), self.revision, token=self.token)
        self.revision = commit  # every rank and worker reads the same commit
        return _SourceReader(LeRobotSource(HubFiles(str(self.source), commit, revision=revision, token=self.token)))

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _reader_cache=None)  # workers open their own reader

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def shard(self, epoch: int, worker: tuple[int, int] | None = None) -> list[int]:
        """The episodes this rank and worker read in ``epoch``, in order."""
        order = list(self.episodes)
        if self.shuffle:
            np.random.default_rng([self.seed, epoch]).shuffle(order)
        w, num_workers = worker or self.worker or _worker()
        step = self.world_size * num_workers
        return order[self.rank * num_workers + w::step]

    def __len__(self) -> int:
        """Samples per epoch over all ranks and workers."""
        return int(self.lengths[self.episodes].sum())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch = self.epoch
        self.epoch += 1
        worker = self.worker or _worker()
        shard = self.shard(epoch, worker)
        rng = np.random.default_rng([self.seed, epoch, self.rank, worker[0]])
        reader, self._reader_cache = self._reader_cache or self._reader(), None
        fetched = prefetched(_fetch_in_order(reader, shard, self.buffer_episodes), depth=self.buffer_episodes)
        buffer: list[tuple[int, dict[str, np.ndarray], list[int]]] = []
        try:
            while True:
                while len(buffer) < self.buffer_episodes:
                    nxt = next(fetched, None)
                    if nxt is None:
                        break
                    e, frames = nxt
                    n = int(self.lengths[e])
                    order = rng.permutation(n).tolist() if self.shuffle else list(range(n - 1, -1, -1))
                    buffer.append((e, frames, order))
                if not buffer:
                    return
                k = 0
                if self.shuffle:  # a buffered episode, with probability proportional to its frames left
                    pick = int(rng.integers(sum(len(b[2]) for b in buffer)))
                    while pick >= len(buffer[k][2]):
                        pick -= len(buffer[k][2])
                        k += 1
                e, frames, order = buffer[k]
                yield self._item(frames, order.pop(), int(self.lengths[e]))
                if not order:
                    buffer.pop(k)
        finally:
            fetched.close()

    def _item(self, frames: dict[str, np.ndarray], local: int, length: int) -> dict[str, Any]:
        """Frame ``local`` of an episode held in memory, exactly as ``LeRobotZarrDataset.__getitem__`` gives it."""
        out: dict[str, Any] = {}
        for name, values in frames.items():
            offsets = self._offsets.get(name)
            if offsets is None:
                value = values[local]
                out[name] = np.array(value) if isinstance(value, np.ndarray) else value
            else:
                q = offsets + local
                out[f"{name}_is_pad"] = (q < 0) | (q >= length)
                out[name] = values[np.minimum(np.maximum(q, 0), length - 1)]
        task_index = np.asarray(frames["task_index"][local]).reshape(-1)[0]
        out["task"] = self.tasks[int(task_index)]
        if self.image_format == "float32_chw":
            for name, kind in self.kinds.items():
                if kind in ("image", "video"):
                    out[name] = np.moveaxis(out[name], -1, -3).astype(np.float32) / np.float32(255)
        return out


def _fetch_in_order(reader: _EpisodeReader, shard: list[int], ahead: int) -> Iterator[tuple[int, dict]]:
    """``(episode, frames)`` in shard order, several fetched at once when the reader is remote."""
    workers = min(reader.concurrency, ahead)
    if workers <= 1:
        yield from ((e, reader.episode(e)) for e in shard)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="lerobot_zarr-stream") as pool:
        pending: deque = deque()
        for e in shard:
            pending.append((e, pool.submit(reader.episode, e)))
            if len(pending) >= workers:
                e0, future = pending.popleft()
                yield e0, future.result()
        while pending:
            e0, future = pending.popleft()
            yield e0, future.result()


class _EpisodeReader:
    available: np.ndarray  # bool mask over episodes: which can be read
    concurrency: int = 1  # episodes worth fetching at once
    n_episodes: int
    fps: float
    tasks: list[str]
    kinds: dict[str, str]
    lengths: np.ndarray
    not_materialized: dict[str, str]

    def episode(self, e: int) -> dict[str, np.ndarray]:
        raise NotImplementedError


class _SourceReader(_EpisodeReader):
    """Episodes read from a LeRobot dataset (folder or Hub repo): only their row groups."""

    def __init__(self, source: LeRobotSource):
        self.src = source
        self.n_episodes = len(source.episodes)
        self.fps, self.tasks, self.lengths = source.fps, source.tasks, source.episodes.length
        # a camera whose video files are missing for some episodes is left out, as a store leaves it out
        missing = {}
        for name, refs in source.episodes.videos.items():
            if name not in source.stored_features:
                continue
            lacking = [e for e, ref in enumerate(refs) if ref is None or not source.files.exists(ref[0])]
            if lacking:
                missing[name] = (f"its video file is missing for {len(lacking)} of {self.n_episodes} episodes "
                                 f"{lacking[:10]}{'...' if len(lacking) > 10 else ''}; stream a store made with "
                                 f"open_dataset(..., episodes=[...]) of the episodes that have it")
        self.kinds = {k: v.kind for k, v in source.stored_features.items() if k not in missing}
        self.not_materialized = {**source.not_materialized, **missing}
        self.available = np.ones(self.n_episodes, dtype=bool)
        self.concurrency = source.files.concurrency

    def episode(self, e: int) -> dict[str, np.ndarray]:
        ((_, frames),) = list(self.src.iter_episodes([e]))
        for name, kind in self.kinds.items():
            if kind == "video":
                pixels: list[bytes] = []
                try:
                    self.src.decode_video(e, name, frames["timestamp"], pixels.append)
                except VideoUnavailable as exc:
                    raise NotMaterializedError(str(exc)) from None
                shape = self.src.features[name].frame_shape
                frames[name] = np.frombuffer(b"".join(pixels), dtype=np.uint8).reshape(len(pixels), *shape)
        return frames


class _StoreReader(_EpisodeReader):
    """Episodes read from a local store (read-only maps of its chunk files)."""

    def __init__(self, root: Path):
        self.ds = LeRobotZarrDataset(root)
        meta = self.ds.meta
        self.n_episodes, self.fps, self.tasks = meta.total_episodes, meta.fps, meta.tasks
        self.lengths = meta.episode_length
        self.kinds = {k: s.kind for k, s in self.ds.array_specs.items()}
        self.not_materialized = meta.not_materialized
        self.available = meta.materialized_episodes

    def episode(self, e: int) -> dict[str, np.ndarray]:
        return self.ds.episode(e)


def stream(source: str | os.PathLike, *, revision: str | None = None, token: str | bool | None = None,
           episodes: Sequence[int] | None = None, delta_timestamps: Mapping[str, Sequence[float]] | None = None,
           shuffle: bool = True, seed: int = 0, buffer_episodes: int = 4, rank: int = 0, world_size: int = 1,
           image_format: str = "uint8_hwc") -> SampleStream:
    """Stream samples of a Hub repo, LeRobot folder or store; see :class:`SampleStream` and the module docs."""
    return SampleStream(source, revision=revision, token=token, episodes=episodes,
                        delta_timestamps=delta_timestamps, shuffle=shuffle, seed=seed,
                        buffer_episodes=buffer_episodes, rank=rank, world_size=world_size,
                        image_format=image_format)
