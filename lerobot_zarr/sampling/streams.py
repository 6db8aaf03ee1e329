"""Streaming samples for training on data larger than the disk: episodes arrive by range reads, a few at a time.

``stream(source)`` yields the same dicts as ``ds[i]`` (windows and padding included), or with ``batch_size=B`` the
dicts of ``ds.get_batch`` (each batch one vectorised gather per feature across the buffered episodes).

Sharding: episodes are shuffled with a seed shared by every rank and worker, then dealt out to the
``world_size * num_workers`` shards (rank ``r``, DataLoader worker ``w`` -> shard ``r * num_workers + w``),
longest first to the shard with the fewest frames so far, so the shards hold about the same number of frames;
no episode is in two shards. With ``world_size > 1`` every rank must see the same number of samples per epoch (a
rank with fewer batches leaves the others waiting in a collective: DDP hangs), so each worker position ``w``
yields the same count on every rank: by default (``drop_last=False``, torch's DistributedSampler default) the
largest shard's frame count, shorter shards repeating frames of their own episodes (every frame at least once);
with ``drop_last=True`` the smallest's, longer shards dropping the excess (random frames when shuffled). With one
rank nothing is padded or dropped: every frame exactly once.

Each process keeps ``buffer_episodes`` episodes in memory and fetches as many ahead in a background thread (from
the Hub, up to that many range requests in flight), so at most about three times ``buffer_episodes`` episodes are
held at once; frames are drawn at random across the buffer.

Resuming: the order of an epoch's draws depends on episode lengths and the seed alone (:class:`_EpochPlan`), so
``load_state_dict`` of a state saved after ``n`` items replays the first draws without reading anything, then
fetches only the episodes the rest of the epoch draws from: no sample repeated or skipped. With DataLoader
workers, the ``n`` delivered items are dealt back to the workers as the DataLoader handed them over (one per
worker in turn), and the workers take over each other's shards in rotation so that the resumed epoch delivers its
items in the interrupted order.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import warnings
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cameras.depth import DEPTH_UNITS, DepthOutput, DepthUnit, is_depth_feature
from ..cameras.images import to_float32_chw
from ..cameras.video import VideoUnavailable, have_pyav, pyav_missing
from ..errors import ArgumentError, FrameIndexError, LeRobotZarrWarning, NotMaterializedError, warn_user
from ..lerobot.format import CAMERA_DTYPES
from ..sources.resolve import resolve_source
from ..store.text import TEXT_KINDS, text_value
from ..utils.background import in_threads, prefetched
from .dataset import IMAGE_FORMATS, ImageFormat, LeRobotZarrDataset
from .selection import check_selection
from .sharding import deal
from .windows import window_offsets, windows

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource

__all__ = ["SampleStream", "stream"]

log = logging.getLogger("lerobot_zarr")
_STATE_FORMAT = "lerobot_zarr.stream"


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _worker() -> tuple[int, int]:
    """(worker id, number of workers) of the torch DataLoader worker running this, else (0, 1)."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return 0, 1
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class SampleStream:
    """An iterable of samples (or batches); iterating again starts the next epoch (or call :meth:`set_epoch`)."""

    def __init__(self, source: str | os.PathLike, *, revision: str | None = None, token: str | bool | None = None,
                 episodes: Sequence[int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, shuffle: bool = True,
                 seed: int = 0, buffer_episodes: int = 4, rank: int = 0, world_size: int = 1,
                 image_format: ImageFormat = "uint8_hwc", worker: tuple[int, int] | None = None,
                 batch_size: int | None = None, drop_last: bool = False, depth_unit: DepthUnit = "mm"):
        if not (_is_int(rank) and _is_int(world_size) and 0 <= rank < world_size):
            raise ArgumentError(f"rank must be an integer in [0, world_size={world_size!r}), got {rank!r}")
        if not (_is_int(buffer_episodes) and buffer_episodes >= 1):
            raise ArgumentError(f"buffer_episodes must be a positive integer, got {buffer_episodes!r}")
        if image_format not in IMAGE_FORMATS:
            raise ArgumentError(f"image_format must be one of {IMAGE_FORMATS}, got {image_format!r}")
        if depth_unit not in DEPTH_UNITS:
            raise ArgumentError(f"depth_unit must be one of {DEPTH_UNITS}, got {depth_unit!r:.40}")
        if batch_size is not None and not (_is_int(batch_size) and batch_size >= 1):
            raise ArgumentError(f"batch_size must be a positive integer or None, got {batch_size!r}")
        if isinstance(episodes, Mapping):
            raise ArgumentError("stream(episodes=...) takes a list of episode indices (streams serve whole episodes)")
        episodes = check_selection(episodes)
        self.source, self.revision, self.token = source, revision, token
        self.shuffle, self.seed, self.buffer_episodes = shuffle, int(seed), int(buffer_episodes)
        self.rank, self.world_size, self.worker = rank, world_size, worker
        self.image_format, self.depth_unit = image_format, depth_unit
        self.batch_size = None if batch_size is None else int(batch_size)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._position: tuple[int, int] | None = None  # (epoch, items delivered) of the iteration in this process
        self._resume: tuple[int, int, int] | None = None  # (epoch, items, num_workers) of a loaded state
        self._selection = None if episodes is None else sorted(set(episodes))
        reader = self._reader()
        self._reader_cache: _EpisodeReader | None = reader  # reused by the first epoch in this process
        self.episodes = reader.episodes
        self.fps, self.tasks, self.kinds = reader.fps, reader.tasks, reader.kinds
        self.left_out = dict(reader.left_out)
        self._depth = {name: DepthOutput(reader.features[name], kind, depth_unit) for name, kind in self.kinds.items()
                       if kind in CAMERA_DTYPES and is_depth_feature(reader.features[name])}
        self._language = [name for name, kind in self.kinds.items() if kind == "language"]
        self._text = {name for name, kind in self.kinds.items() if kind in TEXT_KINDS}
        self.delta_timestamps = delta_timestamps
        self._windows = windows(window_offsets(delta_timestamps, self.fps, list(self.kinds),
                                               {**reader.not_materialized, **reader.left_out}))
        self.lengths = reader.lengths
        if self.drop_last and 1 < world_size and len(self.episodes) < world_size:
            raise ArgumentError(f"{source}: drop_last=True with world_size={world_size} over {len(self.episodes)} "
                                f"episodes: a rank without an episode would make every rank's count 0; use "
                                f"drop_last=False (ranks even out by repeating samples) or fewer ranks")
        if self.left_out:
            (first, why), *others = self.left_out.items()
            text = f"{first!r} is left out of samples: {why}" + (
                f"; so are {', '.join(map(repr, dict(others)))} (the stream's left_out says why)" if others else "")
            warn_user(f"{source}: {text}")

    def _reader(self) -> _EpisodeReader:
        src = resolve_source(self.source, revision=self.revision, token=self.token)
        store = src.store()
        if store is not None:
            return _StoreReader(store, self._selection)
        if src.remote() is not None:
            raise ArgumentError(f"{src}: a store in a bucket is sampled with open_dataset (random access with a "
                                f"local cache); stream reads a local store or a LeRobot dataset")
        reader = _SourceReader(src.dataset(), self._selection, str(src))
        commit = src.known_record()
        if commit is not None:
            self.revision = commit.get("commit", self.revision)  # every rank and worker reads the same commit
        return reader

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _reader_cache=None)  # workers open their own reader

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs (its shuffle); a loaded state for another epoch no longer applies."""
        self.epoch = int(epoch)
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None

    def _plan(self, epoch: int, num_workers: int) -> tuple[list[int], list[list[int]]]:
        """The epoch's episode order and its shards (``world_size * num_workers`` of them)."""
        order = list(self.episodes)
        if self.shuffle:
            np.random.default_rng([self.seed, epoch]).shuffle(order)
        return order, deal(order, self.lengths, self.world_size * num_workers)

    def shard(self, epoch: int, worker: tuple[int, int] | None = None) -> list[int]:
        """The episodes this rank and worker read in ``epoch``, in order."""
        w, num_workers = worker or self.worker or _worker()
        return self._plan(epoch, num_workers)[1][self.rank * num_workers + w]

    def samples_per_shard(self, epoch: int, worker: tuple[int, int] | None = None) -> int:
        """How many samples this rank and worker yield in ``epoch``: its frames with one rank; with several, the
        same count for this worker position on every rank (see the module docs)."""
        w, num_workers = worker or self.worker or _worker()
        _, shards = self._plan(epoch, num_workers)
        frames = [int(self.lengths[s].sum()) if s else 0 for s in shards]
        if self.world_size == 1:
            return frames[w]
        same_position = frames[w::num_workers]
        return min(same_position) if self.drop_last else max(same_position)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (over its workers, as set by ``worker`` or, in the main process,
        one): all selected frames with one rank."""
        _, num_workers = self.worker or _worker()
        return sum(self.samples_per_shard(self.epoch, (w, num_workers)) for w in range(num_workers))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch = self.epoch
        self.epoch += 1
        worker, skip = self._resumed(epoch, self.worker or _worker())
        order, shards = self._plan(epoch, worker[1])
        shard = shards[self.rank * worker[1] + worker[0]]
        quota = self.samples_per_shard(epoch, worker)
        rng = np.random.default_rng([self.seed, epoch, self.rank, worker[0]])
        reader, self._reader_cache = self._reader_cache or self._reader(), None
        own = int(self.lengths[shard].sum()) if shard else 0
        log.info("stream epoch %d, rank %d of %d, worker %d of %d: %d episodes, %d frames, %d samples (%s)%s", epoch,
                 self.rank, self.world_size, *worker, len(shard), own, quota,
                 "exact" if quota == own else "padded" if quota > own else "dropping the excess",
                 f", resuming after {skip}" if skip else "")
        plan = _EpochPlan(shard, order, min(own, quota), quota - own, self.lengths, self.buffer_episodes,
                          self.shuffle, rng)
        samples = self._samples(reader, plan, skip)
        items = skip if self.batch_size is None else -(-skip // self.batch_size)
        self._position = (epoch, items)
        if self.batch_size is None:
            for frames, e, local in samples:
                items += 1
                self._position = (epoch, items)
                yield self._item(frames, local, int(self.lengths[e]))
        else:
            while True:
                picks = list(itertools.islice(samples, self.batch_size))
                if not picks:
                    break
                items += 1
                self._position = (epoch, items)
                yield self._batch(picks)
        self._position = (epoch + 1, 0)

    def _samples(self, reader: _EpisodeReader, plan: _EpochPlan, skip: int
                 ) -> Iterator[tuple[dict[str, np.ndarray], int, int]]:
        """``(frames of an episode, episode, frame)`` in the plan's order after its first ``skip`` draws (made on
        episode lengths alone: nothing is read for them). Episodes are fetched in the order they enter the plan's
        buffer, a few ahead; an episode's frames are dropped once the plan can draw from it no more."""
        for _ in range(skip):
            if plan.next() is None:
                return
        fetched = prefetched(_fetch_in_order(reader, plan.live() + plan.upcoming(), self.buffer_episodes),
                             depth=self.buffer_episodes)
        held: dict[int, dict[str, np.ndarray]] = {}
        try:
            while (pick := plan.next()) is not None:
                e, local = pick
                while e not in held:
                    got, frames = next(fetched)
                    held[got] = frames
                yield held[e], e, local
                if len(held) > 2 * self.buffer_episodes:
                    live = set(plan.live())
                    for gone in [g for g in held if g not in live]:
                        del held[gone]
        finally:
            fetched.close()

    # resuming ----------------------------------------------------------------------------------------------
    def _items_per_worker(self, epoch: int, num_workers: int) -> list[int]:
        """Items (samples, or batches with ``batch_size``) each DataLoader worker of this rank yields in ``epoch``."""
        counts = [self.samples_per_shard(epoch, (w, num_workers)) for w in range(num_workers)]
        return counts if self.batch_size is None else [-(-n // self.batch_size) for n in counts]

    def _resumed(self, epoch: int, worker: tuple[int, int]) -> tuple[tuple[int, int], int]:
        """``(worker, samples to skip)`` for this iteration: as given and 0, unless a loaded state resumes
        ``epoch``. Then the worker skips its share of the items delivered (dealt out as a DataLoader hands them
        over: one per worker in turn, exhausted ones skipped), and workers take over each other's shards in
        rotation so that the new DataLoader's worker 0 is the one whose turn was next: the items arrive in the
        order the interrupted epoch would have given them."""
        resume = self._resume
        if resume is None or resume[0] != epoch:
            return worker, 0
        _, items, num_workers = resume
        if num_workers != worker[1]:
            raise ArgumentError(f"{self.source}: the stream state was saved with {num_workers} DataLoader workers "
                                f"per rank and is resumed with {worker[1]}; the shards (and so the order) depend on "
                                f"it: use {num_workers}")
        counts, first = _round_robin(self._items_per_worker(epoch, num_workers), items)
        role = ((worker[0] + first) % num_workers, num_workers)
        mine = counts[role[0]]
        return role, mine if self.batch_size is None else min(mine * self.batch_size,
                                                              self.samples_per_shard(epoch, role))

    def state_dict(self) -> dict[str, Any]:
        """Where this stream is in its epochs, as iterated in this process: small and JSON-serializable.
        :meth:`load_state_dict` continues from there exactly (no sample repeated or skipped). The state is the
        same on every rank (they yield equal counts), so one saved on rank 0 restores every rank. Through a torch
        DataLoader with workers, use ``lerobot_zarr.integrations.torch.stream_loader`` (it counts what it delivers)."""
        epoch, items = self._position if self._position is not None else (self.epoch, 0)
        return self.state_at(epoch, items)

    def state_at(self, epoch: int, items: int, *, num_workers: int = 1) -> dict[str, Any]:
        """The state after ``items`` items (samples, or batches with ``batch_size``) of ``epoch`` were delivered
        by ``num_workers`` DataLoader workers per rank (1: iterated in this process)."""
        done = items >= sum(self._items_per_worker(epoch, num_workers))
        return {"format": _STATE_FORMAT, "version": 1, "epoch": int(epoch) + done, "items": 0 if done else int(items),
                "num_workers": int(num_workers), "world_size": self.world_size, "seed": self.seed,
                "shuffle": self.shuffle, "batch_size": self.batch_size, "drop_last": self.drop_last,
                "episodes": _fingerprint(self.episodes, self.lengths)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (or :meth:`state_at`): the next iteration runs the saved epoch from
        where it was interrupted; the stream must be made with the same episodes, seed, shuffle, batch_size,
        drop_last and world_size (any rank)."""
        if not isinstance(state, Mapping) or state.get("format") != _STATE_FORMAT:
            raise ArgumentError(f"not a stream state (no format {_STATE_FORMAT!r}): {str(state)[:120]}")
        if state.get("version") != 1:
            raise ArgumentError(f"stream state version {state.get('version')!r} is not supported (1)")
        mine = self.state_at(0, 0)
        for key in ("world_size", "seed", "shuffle", "batch_size", "drop_last", "episodes"):
            if state.get(key) != mine[key]:
                what = "the episodes (or their lengths)" if key == "episodes" else f"{key}={state.get(key)!r}"
                raise ArgumentError(f"{self.source}: the stream state was saved with {what}; this stream has "
                                    f"{'other ones' if key == 'episodes' else repr(mine[key])}")
        epoch, items, workers = (state.get(k) for k in ("epoch", "items", "num_workers"))
        if not all(_is_int(v) and v >= 0 for v in (epoch, items)) or not (_is_int(workers) and workers >= 1):
            raise ArgumentError(f"a stream state's epoch, items and num_workers must be counts, got {epoch!r}, "
                                f"{items!r}, {workers!r}")
        self.epoch = int(epoch)
        self._resume = (int(epoch), int(items), int(workers)) if items else None
        self._position = (int(epoch), int(items))

    def _item(self, frames: dict[str, np.ndarray], local: int, length: int) -> dict[str, Any]:
        """Frame ``local`` of an episode held in memory, exactly as ``LeRobotZarrDataset.__getitem__`` gives it."""
        out: dict[str, Any] = {}
        for name, values in frames.items():
            window = self._windows.get(name)
            if window is None:
                value = values[local]
                out[name] = np.array(value) if isinstance(value, np.ndarray) else value
            else:
                rows, out[window.pad_key] = window.frames(local, length)
                out[name] = values[rows].tolist() if name in self._text else values[rows]
        task_index = np.asarray(frames["task_index"][local]).reshape(-1)[0]
        out["task"] = self.tasks[int(task_index)]
        self._image_out(out)
        return out

    def _batch(self, picks: list[tuple[dict[str, np.ndarray], int, int]]) -> dict[str, Any]:
        """The ``get_batch`` dict of the picked frames: per feature one clamped gather per buffered episode (the
        windows' clamp-and-pad), written into one preallocated array."""
        n = len(picks)
        local = np.fromiter((p[2] for p in picks), dtype=np.int64, count=n)
        groups: dict[int, tuple[dict[str, np.ndarray], list[int]]] = {}
        for k, (frames, e, _) in enumerate(picks):
            groups.setdefault(e, (frames, []))[1].append(k)
        parts = [(frames, np.asarray(ks)) for frames, ks in groups.values()]
        length = np.fromiter((self.lengths[p[1]] for p in picks), dtype=np.int64, count=n)
        out: dict[str, Any] = {}
        for name in parts[0][0]:
            window = self._windows.get(name)
            first = parts[0][0][name]
            if window is None:
                data = np.empty((n, *first.shape[1:]), dtype=first.dtype)
                for frames, ks in parts:
                    data[ks] = frames[name][local[ks]]
            else:
                rows, out[window.pad_key] = window.frames_batch(local, length)
                data = np.empty((n, len(window.offsets), *first.shape[1:]), dtype=first.dtype)
                for frames, ks in parts:
                    data[ks] = frames[name][rows[ks]]
            out[name] = data.tolist() if name in self._text else data
        task_index = np.empty(n, dtype=np.int64)
        for frames, ks in parts:
            task_index[ks] = np.asarray(frames["task_index"][local[ks]]).reshape(len(ks), -1)[:, 0]
        out["task"] = [self.tasks[int(t)] for t in task_index]
        self._image_out(out)
        return out

    def _image_out(self, out: dict[str, Any]) -> None:
        """Cameras and text as the dataset's items give them: depth maps in ``depth_unit``, images in
        ``image_format``, language columns parsed (new objects each time)."""
        chw = self.image_format == "float32_chw"
        for name in self._language:
            out[name] = _parse_language(out[name])
        for name, depth in self._depth.items():
            out[name] = np.moveaxis(depth(out[name]), -1, -3) if chw else depth(out[name])
        if chw:
            for name, kind in self.kinds.items():
                if kind in CAMERA_DTYPES and name not in self._depth:
                    out[name] = to_float32_chw(out[name])


def _parse_language(stored: Any) -> Any:
    """A language column's stored JSON text, or a list (window, batch) of them, as Python values."""
    if isinstance(stored, str):
        return text_value("language", stored, "a language frame")
    return [_parse_language(v) for v in stored]


def _fetch_in_order(reader: _EpisodeReader, shard: list[int], ahead: int) -> Iterator[tuple[int, dict]]:
    """``(episode, frames)`` in shard order, several fetched at once when the reader is remote."""
    workers = min(reader.concurrency, ahead)
    return in_threads(reader.episode, shard, workers, ahead=workers, name="lerobot_zarr-stream")


class _EpochPlan:
    """The order in which one shard draws its samples in an epoch, from episode lengths and the generator alone
    (no data), so that a resumed epoch can replay its first draws without reading anything.

    Draws: ``limit`` frames of ``shard``, its episodes entering a buffer of ``size`` in order and frames drawn at
    random across the buffer (each buffered episode with probability in proportion to its frames left); then
    ``extra`` repeated frames (``extra > 0``: padding to the ranks' common count) drawn from the last ``size``
    episodes that entered (a shard without episodes first draws the epoch's first episodes, ``order``)."""

    def __init__(self, shard: list[int], order: list[int], limit: int, extra: int, lengths: np.ndarray, size: int,
                 shuffle: bool, rng: np.random.Generator):
        self.lengths, self.size, self.shuffle, self.rng = lengths, size, shuffle, rng
        self.kept: deque = deque(maxlen=size)  # the last episodes that entered: padding repeats their frames
        self.entered: dict[int, int] = {}  # episode -> when it entered (for the order of fetches)
        self.phases = [(list(shard), limit)]
        self.extra = extra
        self._order = order
        self._slots: list[tuple[int, list[int]]] = []
        self._queue: list[int] = []
        self._left = 0
        self._picks: np.ndarray | None = None
        self._start_phase()

    def _start_phase(self) -> None:
        episodes, self._left = self.phases.pop(0)
        self._queue, self._slots, self._buffered = episodes, [], 0
        self._next_episode = 0

    def _frames(self, episodes: Sequence[int]) -> int:
        return int(self.lengths[list(episodes)].sum()) if len(episodes) else 0

    def next(self) -> tuple[int, int] | None:
        """The next draw ``(episode, frame)``, or None when the shard has drawn all it yields this epoch."""
        while self._left <= 0:
            if self._picks is not None or self.extra <= 0:
                return self._padding()
            if not self.kept and not self.phases and self._order:  # an empty shard reads the epoch's first episodes
                total = self._frames(self._order)
                self.phases.append((self._order, min(self.extra, total)))
                self._start_phase()
                self.extra -= total
                self._order = []
                continue
            held = list(self.kept)
            total = self._frames(held)
            n = max(self.extra, 0)
            self._picks = self.rng.integers(total, size=n) if self.shuffle else np.arange(n) % max(total, 1)
            self._held, self._starts, self._pick = held, np.cumsum([0] + [int(self.lengths[e]) for e in held]), 0
            return self._padding()
        slots = self._slots
        while len(slots) < self.size and self._next_episode < len(self._queue):
            e = self._queue[self._next_episode]
            self._next_episode += 1
            n = int(self.lengths[e])
            slots.append((e, self.rng.permutation(n).tolist() if self.shuffle else list(range(n - 1, -1, -1))))
            self._buffered += n
            self.kept.append(e)
            self.entered[e] = len(self.entered)
        if not slots:
            self._left = 0
            return self.next()
        k = 0
        if self.shuffle:  # a buffered episode, with probability proportional to its frames left
            pick = int(self.rng.integers(self._buffered))
            while pick >= len(slots[k][1]):
                pick -= len(slots[k][1])
                k += 1
        e, frames = slots[k]
        local = frames.pop()
        self._buffered -= 1
        if not frames:
            slots.pop(k)
        self._left -= 1
        return e, local

    def _padding(self) -> tuple[int, int] | None:
        if self._picks is None or self._pick >= len(self._picks):
            return None
        p = int(self._picks[self._pick])
        self._pick += 1
        k = int(np.searchsorted(self._starts, p, side="right") - 1)
        return self._held[k], p - int(self._starts[k])

    def live(self) -> list[int]:
        """Episodes the plan may still draw from (in the buffer, or kept for padding), in the order they entered."""
        live = {e for e, _ in self._slots} | (set(self.kept) if self.extra > 0 or self._picks is not None else set())
        return sorted(live, key=self.entered.__getitem__)

    def upcoming(self) -> list[int]:
        """Episodes that will still enter the buffer, in order (the rest of this phase, and of a later one)."""
        later = self._order if (self.extra > 0 and not self.kept and self._picks is None) else []
        return self._queue[self._next_episode:] + [e for e in later if e not in self._queue]


def _round_robin(totals: list[int], items: int) -> tuple[list[int], int]:
    """How many of the first ``items`` items came from each worker when workers hand over one item each in turn
    (worker 0 first) and a worker that has given its ``totals[w]`` items is skipped (a DataLoader's order), and
    which worker gives the next one."""
    items = min(items, sum(totals))
    lo, hi = 0, max(totals, default=0)
    while lo < hi:  # the most full rounds r with sum(min(total, r)) <= items
        mid = (lo + hi + 1) // 2
        if sum(min(t, mid) for t in totals) <= items:
            lo = mid
        else:
            hi = mid - 1
    counts = [min(t, lo) for t in totals]
    extra, last = items - sum(counts), -1
    for w, t in enumerate(totals):
        if extra and t > lo:
            counts[w] += 1
            extra -= 1
            last = w
    n = len(totals)
    after = [(last + 1 + k) % n for k in range(n)]
    return counts, next((w for w in after if counts[w] < totals[w]), 0)


def _fingerprint(episodes: Sequence[int], lengths: np.ndarray) -> str:
    """A short digest of the stream's episodes and their lengths (a state restores only onto the same ones)."""
    data = np.asarray(list(episodes), dtype=np.int64)
    digest = hashlib.sha256(data.tobytes() + np.asarray(lengths, dtype=np.int64)[data].tobytes()).hexdigest()
    return digest[:16]


class _EpisodeReader:
    """Episodes of a selection, read one at a time: ``episodes`` (the selection, validated), what samples hold
    (``kinds``) and what they leave out for this selection (``left_out``: feature -> why)."""

    concurrency: int = 1  # episodes worth fetching at once
    episodes: list[int]
    fps: float
    tasks: list[str]
    kinds: dict[str, str]
    features: dict[str, dict]  # LeRobot's features entries
    lengths: np.ndarray
    not_materialized: dict[str, str]
    left_out: dict[str, str]

    def episode(self, e: int) -> dict[str, np.ndarray]:
        raise NotImplementedError


def _short(episodes: list[int]) -> str:
    return f"{episodes[:10]}{'...' if len(episodes) > 10 else ''}"


class _SourceReader(_EpisodeReader):
    """Episodes read from a LeRobot dataset (folder or Hub repo): only their row groups, and the video bytes of the
    cameras that every selected episode has."""

    def __init__(self, source: LeRobotSource, selection: list[int] | None, where: str):
        self.src = source
        n = len(source.episodes)
        self.episodes = list(range(n)) if selection is None else selection
        bad = [e for e in self.episodes if not 0 <= e < n]
        if bad:
            raise FrameIndexError(f"{where}: episode {bad[0]} does not exist ({n} episodes)")
        self.fps, self.tasks, self.lengths = source.fps, source.tasks, source.episodes.length
        # a camera whose video is missing for some selected episodes is left out, as a store leaves it out
        self.left_out = {}
        pyav = have_pyav()
        for name, refs in source.episodes.videos.items():
            if name not in source.stored_features:
                continue
            if not pyav:
                self.left_out[name] = str(pyav_missing())
                continue
            lacking = [e for e in self.episodes if refs[e] is None or not source.files.exists(refs[e][0])]
            if lacking:
                having = [e for e in range(len(refs)) if refs[e] is not None and source.files.exists(refs[e][0])]
                self.left_out[name] = (f"its video file is missing for {len(lacking)} of the {len(self.episodes)} "
                                       f"selected episodes {_short(lacking)}; " + (
                                           f"to stream it, select episodes that have it: episodes={_short(having)}"
                                           if having else "no episode has it: samples go without it"))
        self.kinds = {k: v.kind for k, v in source.stored_features.items() if k not in self.left_out}
        self.features = source.info["features"]
        self.not_materialized = dict(source.not_materialized)
        self.concurrency = source.files.concurrency

    def episode(self, e: int) -> dict[str, np.ndarray]:
        ((_, frames),) = list(self.src.iter_episodes([e]))
        for name, kind in self.kinds.items():
            if kind == "video":
                frames[name] = self._decode(e, name, frames["timestamp"])
        return frames

    def _decode(self, e: int, name: str, timestamps: np.ndarray) -> np.ndarray:
        """Camera ``name`` of episode ``e``, decoded straight into one array (an episode's frames held once)."""
        spec = self.src.features[name]
        out = np.empty((len(timestamps), *spec.frame_shape), dtype=spec.numpy_dtype)
        done = 0

        def put(frame: bytes) -> None:
            nonlocal done
            out[done] = np.frombuffer(frame, dtype=spec.numpy_dtype).reshape(spec.frame_shape)
            done += 1

        def rewind() -> None:
            nonlocal done
            done = 0

        try:
            self.src.decode_video(e, name, timestamps, put, rewind=rewind)
        except VideoUnavailable as exc:
            raise NotMaterializedError(str(exc)) from None
        return out[:done]


class _StoreReader(_EpisodeReader):
    """Episodes read from a local store (read-only maps of its chunk files): by default those it holds."""

    def __init__(self, root: os.PathLike, selection: list[int] | None):
        with warnings.catch_warnings():  # the stream says what it leaves out, once
            warnings.simplefilter("ignore", LeRobotZarrWarning)
            self.ds = LeRobotZarrDataset(root, episodes=selection)
        meta = self.ds.meta
        self.episodes = sorted(set(self.ds.episodes.tolist()))
        self.fps, self.tasks = meta.fps, meta.tasks
        self.lengths = self.ds.gather_layout()["state"].table.length  # (its episodes' lengths: meta's resolve all)
        self.kinds = {k: s.kind for k, s in self.ds.array_specs.items()}
        self.features = meta.features
        self.not_materialized = meta.not_materialized
        self.left_out = {k: why for k, why in self.ds.left_out.items() if k not in meta.not_materialized}

    def episode(self, e: int) -> dict[str, np.ndarray]:
        return self.ds.episode(e)


def stream(source: str | os.PathLike, *, revision: str | None = None, token: str | bool | None = None,
           episodes: Sequence[int] | None = None, delta_timestamps: Mapping[str, Sequence[float]] | None = None,
           shuffle: bool = True, seed: int = 0, buffer_episodes: int = 4, rank: int = 0, world_size: int = 1,
           image_format: ImageFormat = "uint8_hwc", batch_size: int | None = None, drop_last: bool = False,
           depth_unit: DepthUnit = "mm") -> SampleStream:
    """Stream samples of a Hub repo, LeRobot folder or store; see :class:`SampleStream` and the module docs.

    ``batch_size``: yield ``get_batch``-style dicts of that many samples (the last one of an epoch may be
    smaller) instead of single samples. ``drop_last``: with several ranks, even out the ranks' sample counts by
    dropping (True) rather than repeating (False, default) frames."""
    return SampleStream(source, revision=revision, token=token, episodes=episodes,
                        delta_timestamps=delta_timestamps, shuffle=shuffle, seed=seed,
                        buffer_episodes=buffer_episodes, rank=rank, world_size=world_size,
                        image_format=image_format, batch_size=batch_size, drop_last=drop_last, depth_unit=depth_unit)
