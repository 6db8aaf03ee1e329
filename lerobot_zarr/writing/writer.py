"""Writing a store in place: record episodes, edit frames, delete episodes or frames, keep a ring buffer.

One writer per store (the ``.lock`` flock, released by the kernel when the writer dies), any number of readers
in other processes. Every change is one commit of the root ``zarr.json`` (see :mod:`lerobot_zarr.store`; with
:meth:`WritableDataset.fold_log`'s ``log_commits``, appends are records of the commit log, folded later): new rows
are written where no committed episode points (the free rows of the last pack, or a new pack) and flushed before
the commit that lists them; packs left without a live episode are retired after it; so a writer killed at any
instant leaves the store at its last commit. Frame edits (:meth:`WritableDataset.edit`) are the exception by
nature: they write through shared memory maps, so readers see them at once, and a crash in the middle of one
leaves it partly applied (the next writer then recomputes the stats of that episode).

:class:`WritableDataset` composes a sampler (a :class:`~lerobot_zarr.sampling.dataset.LeRobotZarrDataset`, which
reloads each new commit) and the write path (:class:`~lerobot_zarr.writing.transaction.WriteTransaction`); what a
change means (the new episode table, stats, shifts) is decided here.
"""
from __future__ import annotations

import contextlib
import math
import operator
import os
import threading
import weakref
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..doctor.scan import doctor_store
from ..errors import (
    ArgumentError,
    CorruptStoreError,
    DiskSpaceError,
    FrameIndexError,
    NotMaterializedError,
    SchemaMismatchError,
    StoreClosedError,
    warn_user,
)
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES, is_float_image
from ..sampling.dataset import DepthUnit, ImageFormat, LeRobotZarrDataset
from ..sampling.selection import episode_index, frame_range
from ..store.committing import check_new_store_location, create_store
from ..store.state import StoreState, on_demand_capable, read_state, stats_path
from ..store.tables import DEFAULT_PACK_BYTES, EpisodeTable, PackLayout
from ..utils.fileio import WriterLock
from ..utils.hashing import crc32c
from .completeness import check_complete
from .edits import EditMaps
from .transaction import WriteTransaction, remove_path, resolve_min_free_bytes
from .values import (EpisodeFrames, as_frames, checked_camera_stats, content_hash, count_arg, feature_specs,
                     stored_values, task_indices)

__all__ = ["create", "WritableDataset"]

_SETTABLE_INFO = ("chunks_size", "data_files_size_in_mb", "video_files_size_in_mb")
_INLINE_STATS_BYTES = 1 << 20  # smaller appends compute their stats before writing, not in a thread alongside


def create(root: str | os.PathLike, *, fps: float, features: Mapping[str, Mapping[str, Any]],
           robot_type: str | None = None, capacity_frames: int | None = None, durable: bool = True,
           min_free_bytes: int | None = None, pack_bytes: int = DEFAULT_PACK_BYTES,
           stats_on_demand: Sequence[str] = ()) -> WritableDataset:
    """Make a new, empty store at ``root`` and open it for writing.

    Args:
        fps: frames per second (timestamps are ``frame_index / fps``); finite and positive.
        features: LeRobot feature specs, ``{name: {"dtype": "float32", "shape": [14], "names": [...]}}``;
            cameras are ``{"dtype": "image", "shape": [H, W, C]}``; ``{"dtype": "string", "shape": [1]}`` takes a
            ``str`` per frame, ``"language"`` (LeRobot's ``language_persistent`` / ``language_events``) a list of
            row dicts per frame. LeRobot's ``timestamp``, ``frame_index``,
            ``episode_index``, ``index`` and ``task_index`` are added and filled by the writer.
        capacity_frames: make the store a ring buffer of at most this many frames: appending past it drops the
            oldest episodes first.
        durable: flush to disk at every commit (survives power loss); ``False`` is still safe when the writer
            process is killed, and much faster for small episodes.
        min_free_bytes: refuse writes that would leave less free space on the volume (default 256 MiB, or
            ``$LEROBOT_ZARR_MIN_FREE_BYTES``).
        pack_bytes: target size of a pack (consecutive episodes in one chunk file per feature) for the widest
            feature; an episode bigger than that gets a pack of its own.
        stats_on_demand: numeric features or uint8 cameras whose stats commits leave out, computed when asked
            instead (``meta.stats``; exports compute every stat from the data): for an RL buffer's cameras, whose
            stats cost a commit of short episodes more than the frames (float32: over every value of each frame).
    """
    root = Path(root)
    try:
        fps = float(fps)
    except (TypeError, ValueError):
        raise ArgumentError(f"fps must be a number, got {fps!r:.40}") from None
    if not (math.isfinite(fps) and fps > 0):
        raise ArgumentError(f"fps must be finite and positive, got {fps}")
    if capacity_frames is not None:
        capacity_frames = count_arg("capacity_frames", capacity_frames, 1)
    pack_bytes = count_arg("pack_bytes", pack_bytes, 1)
    min_free_bytes = resolve_min_free_bytes(min_free_bytes)
    info_features, arrays = feature_specs(features)
    for name in stats_on_demand:
        spec = arrays.get(name)
        if spec is None or not on_demand_capable(spec):
            raise ArgumentError(f"stats_on_demand: {name!r} is not a numeric feature or uint8 camera of this store")
    if root.exists() and (root.is_symlink() or not root.is_dir()):
        check_new_store_location(root)  # raises: not a folder
    info = {"codebase_version": "v3.0", "robot_type": robot_type, "fps": fps if fps % 1 else int(fps),
            "features": info_features, "total_episodes": 0, "total_frames": 0, "total_tasks": 0,
            "splits": {}}
    empty = EpisodeTable.contiguous([], [], [], [])
    with WriterLock(root, blocking=False):  # first: a store another writer holds is "locked", not "exists"
        check_new_store_location(root)
        create_store(StoreState(root=root, info=info, tasks=(), stats={}, source={"kind": "recorded"}, arrays=arrays,
                                table=empty, packs=PackLayout(np.zeros(0, np.int64)), materialized={},
                                capacity_frames=capacity_frames, pack_bytes=pack_bytes,
                                stats_on_demand=tuple(dict.fromkeys(stats_on_demand))))
    return WritableDataset(root, durable=durable, min_free_bytes=min_free_bytes)


class WritableDataset:
    """A store open for writing, and for sampling like any :class:`LeRobotZarrDataset` (always every episode;
    after each write the sampler sees the new commit, so indices stay consistent).

    Structural changes (:meth:`add_episode`, :meth:`save_episode`, :meth:`delete_episodes`,
    :meth:`delete_frames`) are atomic commits: readers of older commits keep their view until they refresh.
    :meth:`edit` and :meth:`set_task` change frames IN PLACE: every reader sees them at once. Use as a context
    manager, or call :meth:`close`, to release the writer lock (a dead process releases it too).

    Sampling is its :attr:`reader`'s, a :class:`LeRobotZarrDataset` that follows every commit: the reader's public
    attributes and methods (``ds[i]``, ``len(ds)``, ``get_batch``, ``meta``, ``episodes``, ``episode``,
    ``select``, ``to_lerobot``, ``push``, ``to_xarray``, ``verify``...) are this object's too. It is not itself a
    :class:`LeRobotZarrDataset` (``isinstance`` is False): where one is needed, pass :attr:`reader`. A copy in
    another process (pickled for a DataLoader worker) is a reader of the same episodes.
    """

    def __init__(self, root: str | os.PathLike, *, delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                 image_format: ImageFormat = "uint8_hwc", max_open_maps: int | None = None, durable: bool = True,
                 min_free_bytes: int | None = None, depth_unit: DepthUnit = "mm"):
        root = Path(root)
        lock = WriterLock(root, blocking=False).__enter__()
        try:
            # a lazy store's unresolved episodes (format 5) are never in it: refused as lacking them (no network);
            # a store holding every episode has every one resolved (an episode is transcoded once its row group is)
            state = read_state(root, resolve=False)
            check_complete(state)
            self._tx = WriteTransaction(state, durable=durable, min_free_bytes=min_free_bytes)
            # appended packs get maps next to the others: sampling keeps its maps across commits
            self._sampler = LeRobotZarrDataset(root, delta_timestamps=delta_timestamps, image_format=image_format,
                                               max_open_maps=max_open_maps, headroom=1.0, depth_unit=depth_unit)
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        self.root = root
        self._commits: deque[StoreState] = deque(maxlen=1)  # the last commit, until the sampler loads it
        self._reload_lock = threading.Lock()
        self._tx.on_commit = self._commits.append
        self._writer_lock = lock
        self._release = weakref.finalize(self, lock.__exit__, None, None, None)
        self._episode_buffer: list[tuple[dict[str, np.ndarray], str]] = []
        try:
            self._tx.recover()
        except DiskSpaceError as exc:  # a full volume: open anyway, so that episodes can be deleted to make room
            warn_user(f"{self.root}: finishing an interrupted edit was put off ({exc}); the next commit does it")

    @property
    def committed_state(self) -> StoreState:
        """The state of this writer's last commit (what :func:`~lerobot_zarr.store.state.read_state` would read back
        from the store, without reading it)."""
        return self._tx.state

    # the reader's side --------------------------------------------------------------------------------------
    @property
    def _reader(self) -> LeRobotZarrDataset:
        """The sampler, at the last commit (loaded when it is used: a commit does not pay for it)."""
        if self._commits:
            with self._reload_lock:
                if self._commits:
                    self._sampler.reload(self._commits.pop())
        return self._sampler

    @property
    def reader(self) -> LeRobotZarrDataset:
        """The dataset this writer samples through; it reloads each commit of this writer."""
        return self._reader

    def __getattr__(self, name: str) -> Any:
        # reached only for names this class lacks: the reader's public ones (sampling, meta, exports...)
        if not name.startswith("_"):
            try:
                return getattr(self._reader, name)
            except AttributeError:
                pass  # not the reader's either: its hint that it is read-only would mislead here
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self)

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Frame ``i``, as :meth:`LeRobotZarrDataset.__getitem__` gives it."""
        return self._reader[i]

    def __len__(self) -> int:
        return len(self._reader)

    def __reduce__(self) -> tuple:
        # a copy in another process (a DataLoader worker) is a reader of the same episodes: it cannot hold the lock
        return LeRobotZarrDataset.__new__, (LeRobotZarrDataset,), self._reader.__getstate__()

    def __repr__(self) -> str:
        return "Writable" + repr(self._reader)

    # lifetime ---------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Commit pending edits (:meth:`flush`), fold the commit log, release the writer lock; it stays readable."""
        if not self.closed:
            try:
                self.flush()
                self.fold_log(log_commits=False)
            finally:
                self._tx.pack_writers.close()
                self._release()

    @property
    def closed(self) -> bool:
        """Whether this object can no longer write: closed, or a copy in a forked child (which may only read)."""
        return not self._release.alive or not self._writer_lock.held

    def __enter__(self) -> WritableDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def durable(self) -> bool:
        """Whether each commit is flushed to disk (survives power loss), not only safe when the process dies."""
        return self._tx.durable

    @durable.setter
    def durable(self, value: bool) -> None:
        self._tx.durable = bool(value)

    def fold_log(self, *, log_commits: bool | None = None) -> None:
        """Fold the store's commit log into its root (one commit, with the dataset stats; a no-op when there is
        nothing to fold). ``log_commits``: whether appends commit by appending a record to the log from now on
        (off by default; an RL buffer's setting: see :meth:`WriteTransaction.commit_appended`)."""
        self._check_open()
        self._tx.log_commits = self._tx.log_commits if log_commits is None else bool(log_commits)
        self._tx.fold()

    @property
    def min_free_bytes(self) -> int:
        """The free space a write must leave on the volume (else :class:`~lerobot_zarr.errors.DiskSpaceError`)."""
        return self._tx.min_free_bytes

    @property
    def capacity_frames(self) -> int | None:
        """Ring-buffer capacity in frames (None: unbounded)."""
        return self._tx.state.capacity_frames

    @property
    def features(self) -> dict[str, dict]:
        """LeRobot feature specs of the store (``meta.features``)."""
        return self._reader.meta.features

    def _check_open(self) -> None:
        if not self._release.alive:
            raise StoreClosedError(f"{self.root}: this writable dataset was closed; open it again with mode='r+'",
                                   path=self.root)
        if not self._writer_lock.held:
            raise StoreClosedError(f"{self.root}: this writable dataset was opened by another process (this one is "
                                   f"a fork of it); a forked process may read it but not write to it",
                                   path=self.root)

    # recording ------------------------------------------------------------------------------------------
    def _frames_of(self, frames: Mapping[str, Any], episode: int) -> tuple[int, dict[str, np.ndarray]]:
        """Validate one episode's user features: every one present, same length, right shape, values that fit."""
        if not isinstance(frames, Mapping):
            raise SchemaMismatchError(f"{self.root}: an episode is a mapping {{feature: frames}}, got "
                                      f"{type(frames).__name__}")
        user = [name for name in self._tx.state.arrays if name not in DEFAULT_FEATURES]
        unknown = sorted(set(frames) - {*user, "timestamp"}, key=str)
        if unknown:
            raise SchemaMismatchError(f"{self.root}: the episode has features {unknown} that are not this dataset's "
                                      f"or are filled by the writer (this dataset's: {user})", feature=str(unknown[0]))
        missing = [name for name in user if name not in frames]
        if missing:
            raise SchemaMismatchError(f"{self.root}: the episode lacks features {missing}", feature=missing[0])
        out: dict[str, np.ndarray] = {}
        n = None
        for name in [*user, *(["timestamp"] if "timestamp" in frames else [])]:
            values = as_frames(name, frames[name], self._tx.state.arrays[name], episode)
            if n is None:
                n = len(values)
            elif len(values) != n:
                raise SchemaMismatchError(f"feature {name!r} has {len(values)} frames, {user[0]!r} has {n}",
                                          feature=name, episode=episode)
            out[name] = values
        if not n:
            raise SchemaMismatchError(f"{self.root}: an episode needs at least one frame", episode=episode)
        return n, out

    def add_episode(self, frames: Mapping[str, Any], *, task: str | Sequence[str], tail: int = 0,
                    frame_files: Mapping[str, str | os.PathLike] | None = None,
                    camera_stats: Mapping[str, dict[str, np.ndarray]] | None = None,
                    frame_hashes: Mapping[str, int] | None = None) -> int:
        """Append one episode atomically and return its ``episode_index``.

        ``frames`` maps every feature (LeRobot's own ones excepted) to an array of (T, *shape) values; ``task``
        is the episode's task string (or one per frame). ``timestamp`` (frame_index / fps unless given),
        ``frame_index``, ``episode_index``, ``index`` and ``task_index`` are filled in. In ring-buffer mode the
        oldest episodes are dropped first to make room. Values that the feature's dtype cannot hold exactly
        (out of range, NaN or fractions into integers) raise :class:`~lerobot_zarr.errors.ValueRangeError`.

        ``tail``: the last ``tail`` of the T frames are written in the rows right after the episode's but are not
        frames of it (the table lists T - tail; they count for nothing, and move with no edit): what
        :mod:`lerobot_zarr.writing.transitions` keeps an RL episode's final observation in. Their ``frame_index``,
        ``episode_index`` and ``index`` go on from the episode's; ``task`` names the episode's frames only.

        ``frame_files``: raw features' files in the store's folder whose whole memory map their ``frames`` are (a
        recorder's spill): when the episode starts a new pack, such a file becomes the pack's by a rename, not a
        copy (unless the append fails before its commit); otherwise the frames are copied and the file left as is.
        ``camera_stats``: uint8 cameras' LeRobot stats of these frames (``image_stats``), computed by the caller as
        they came (a recorder, from each frame's histogram): not computed again from the frames.
        ``frame_hashes``: the CRC-32C of some ``frame_files``' frames, computed by the caller from the very bytes it
        wrote to them (a recorder, as it wrote them): the episode's content hash of those features, not computed
        again (the cost of reading them all in the commit).
        """
        try:
            return self._append(frames, task, extend=False, tail=tail, frame_files=frame_files,
                                camera_stats=camera_stats, frame_hashes=frame_hashes)
        except BaseException:
            self._tx.unadopt()  # the files taken go back, unless committed
            raise

    def extend_episode(self, frames: Mapping[str, Any], *, task: str | Sequence[str], tail: int = 0) -> int:
        """Append frames to the last episode in one commit (a long recording saved in parts, or an RL episode
        checkpointed while it runs); return its ``episode_index``.

        The frames go on with the episode's ``frame_index``, ``timestamp`` and ``index``, its stats are recomputed
        over all its frames, and a ring buffer drops older episodes (never this one) to make room. They are
        written in place after its rows when it is the last episode of the last pack and the pack has room
        (the cost of the new frames only), else the whole episode is written again into fresh rows. ``tail`` as
        in :meth:`add_episode` (rows after the episode's last frame written before are overwritten: they are not
        frames of any episode)."""
        return self._append(frames, task, extend=True, tail=tail)

    def _append(self, frames: Mapping[str, Any], task: str | Sequence[str], *, extend: bool, tail: int,
                frame_files: Mapping[str, str | os.PathLike] | None = None,
                camera_stats: Mapping[str, dict[str, np.ndarray]] | None = None,
                frame_hashes: Mapping[str, int] | None = None) -> int:
        self._check_open()
        if frame_hashes and (tail or not set(frame_hashes) <= set(frame_files or ())):
            raise ArgumentError(f"{self.root}: frame_hashes are of frame_files' frames, given with tail=0: got them "
                                f"for {sorted(set(frame_hashes) - set(frame_files or ()))} with tail={tail}")
        table = self._tx.state.table
        tail = count_arg("tail", tail, 0)
        if extend and not len(table):
            raise ArgumentError(f"{self.root}: the store has no episode to extend")
        e = len(table) - 1 if extend else len(table)
        total, data = self._frames_of(frames, e)
        n = total - tail
        if n < 1:
            raise SchemaMismatchError(f"{self.root}: {total} frames given with tail={tail}: the episode needs at least "
                                      f"one frame", episode=e)
        if not isinstance(task, str) and isinstance(task, Sequence) and len(task) == n and tail:
            task = [*task, *[task[-1]] * tail]  # tail rows carry the last frame's task
        task_index, tasks = task_indices(self._tx.state.tasks, task, total)
        before = int(table.length[e]) if extend else 0  # frames of the episode already committed
        capacity = self.capacity_frames
        if capacity is not None and before + n > capacity:
            raise ArgumentError(f"{self.root}: an episode of {before + n} frames does not fit a ring buffer of "
                                f"{capacity} frames")
        drop = 0
        if capacity is not None:
            held = int(table.length.sum())
            while held + n > capacity:
                held -= int(table.length[drop])
                drop += 1
        packs = self._tx.state.packs
        pack, offset = (int(table.chunk[e]), int(table.offset[e])) if extend else (-1, 0)
        in_place = extend and self._tx.room_after(e, total)
        relocated = extend and not in_place
        frame_bytes = self._tx.frame_bytes()
        self._tx.check_space((total + (before if relocated else 0)) * frame_bytes)
        fps = self._tx.state.fps
        frame_index = np.arange(before, before + total, dtype=np.int64)
        data.setdefault("timestamp", (frame_index / fps).astype(np.float32))
        if extend:  # the values the episode's frames hold (stored values never change when others are dropped)
            stored_episode = e + int(table.episode_index_shift[e])
            first_index = int(table.start[e] + table.index_shift[e])
        else:
            stored_episode, first_index = e - drop, int(table.length[drop:].sum())
        data.update(frame_index=frame_index, episode_index=np.full(total, stored_episode, dtype=np.int64),
                    index=first_index + frame_index, task_index=task_index)
        data = {name: stored_values(data[name], spec) for name, spec in self._tx.state.arrays.items()}
        old = self._tx.read_episode(e) if extend else {}
        if in_place:  # its stats file goes first: a crash before the commit leaves it to be recomputed
            remove_path(stats_path(self.root, pack, offset))
            packs = PackLayout(packs.rows, max(packs.next_row, offset + before + total))
            write_at, written = offset + before, data
        else:
            if relocated:
                data = {name: np.concatenate([np.asarray(old[name]), data[name]]) for name in data}
            rows = len(next(iter(data.values())))
            # an episode moved to be extended gets room to grow in place: doubling keeps long ones linear
            packs, pack, offset = self._tx.allocate(packs, rows, 2 * rows if relocated else 0)
            write_at, written = offset, data
        adopted = self._tx.adopt_files(frame_files, frames, data, pack, packs) if frame_files and not extend else set()
        episode = {name: EpisodeFrames(np.asarray(old[name]) if in_place else None, written[name][:n] if in_place
                                 else written[name][:before + n]) for name in written}
        stats_arrays = self._tx.stats_arrays()
        stats_bytes = sum(written[name].nbytes for name in stats_arrays)  # (not stats on demand)
        owed = None

        def write_and_hash() -> dict[str, int]:
            self._tx.write_episode(packs, pack, write_at, written, adopted, hashed=False)
            return self._episode_hashes(episode, frame_hashes)

        if camera_stats and tail:
            raise ArgumentError(f"{self.root}: camera_stats are of the episode's frames: not given with tail={tail}")
        known = checked_camera_stats(camera_stats, self._tx.state.arrays, stats_arrays, n)
        computed = {name: spec for name, spec in stats_arrays.items() if name not in known}
        if self._tx.log_commits and not extend and stats_bytes < _INLINE_STATS_BYTES and not any(
                spec.kind in CAMERA_DTYPES or is_float_image(name, spec) for name, spec in stats_arrays.items()):
            # an RL episode's commit: its stats are put off to the fold, computed there with the others' in one
            # pass (numpy's per-call cost is most of a short episode's); the values copied (the caller's buffers)
            new_stats, owed = None, {name: np.array(written[name][:n]) for name in stats_arrays}
            hashes = write_and_hash()
        elif sum(written[name].nbytes for name in computed) < _INLINE_STATS_BYTES:  # a thread costs more than it saves
            new_stats = self._episode_stats_of(episode, known)
            hashes = write_and_hash()
        else:  # numpy stats overlap the row writes and the hashes (system calls and crc32c release the GIL)
            with ThreadPoolExecutor(1) as pool:
                stats = pool.submit(self._episode_stats_of, episode, known)
                hashes = write_and_hash()
                new_stats = stats.result()
        self._tx.fresh[(pack, offset)] = hashes  # (the episode's rows: not its tail, nor rows written before)
        if not in_place and not self._tx.log_commits:  # (logged: in the batch file of the next fold)
            self._tx.write_stats_file(pack, offset, new_stats)
        dropped = int(table.length[:drop].sum())
        first_task = int(table.task_index[e]) if extend else int(task_index[0])
        shifts = (int(table.episode_index_shift[e]) + drop, int(table.index_shift[e]) + dropped) if extend else (0, 0)
        gaps = {name: {p - drop: why for p, why in g.items() if p >= drop} for name, g in self._tx.gaps.items()}
        new = self._tx.commit_appended(new_stats, row=(before + n, first_task, pack, offset, *shifts), packs=packs,
                                       tasks=tuple(tasks), gaps=gaps, drop=drop, extend=extend, values=owed)
        if in_place and not self._tx.log_commits:
            self._tx.write_stats_file(pack, offset, new_stats)
        return len(new.table) - 1

    def _episode_hashes(self, episode: Mapping[str, EpisodeFrames],
                        given: Mapping[str, int] | None = None) -> dict[str, int]:
        """Each feature's content hash: of the rows the episode keeps and its new ones, not of tail rows
        (``given``: some, as the caller computed them)."""
        arrays, given = self._tx.state.arrays, given or {}
        return {name: int(given[name]) if name in given else
                content_hash(arrays[name], frames.numeric()) if arrays[name].is_text else
                crc32c(frames.new, 0 if frames.head is None else crc32c(np.ascontiguousarray(frames.head)))
                for name, frames in episode.items()}

    def _episode_stats_of(self, episode: Mapping[str, EpisodeFrames],
                          known: Mapping[str, dict[str, np.ndarray]] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """The episode's stats of each feature (``known``: some computed by the caller, taken as they are)."""
        # colour cameras' stats read a sample of frames: the rest need all of them
        arrays = self._tx.stats_arrays()
        known = known or {}
        out = self._tx.features_stats({name: episode[name] if spec.kind in CAMERA_DTYPES and spec.dtype == np.uint8
                                       else episode[name].numeric() for name, spec in arrays.items()
                                       if name not in known})
        return {name: known[name] if name in known else out[name] for name in arrays}

    def set_capacity(self, capacity_frames: int | None) -> None:
        """Make the store a ring buffer of at most ``capacity_frames`` frames (None: unbounded), dropping its oldest
        episodes now if it holds more; one commit."""
        self._check_open()
        capacity = None if capacity_frames is None else count_arg("capacity_frames", capacity_frames, 1)
        table = self._tx.state.table
        held, drop = int(table.length.sum()), 0
        while capacity is not None and held > capacity:
            held -= int(table.length[drop])
            drop += 1
        if capacity == self.capacity_frames and not drop:
            return
        rows = self._tx.episode_stats_rows()
        new_table = EpisodeTable.contiguous(table.length[drop:], table.task_index[drop:], table.chunk[drop:],
                                            table.offset[drop:], table.episode_index_shift[drop:] + drop,
                                            table.index_shift[drop:] + int(table.length[:drop].sum()))
        new_rows = {name: {k: v[drop:] for k, v in rows[name].items()} for name in rows}
        gaps = {name: {p - drop: why for p, why in g.items() if p >= drop} for name, g in self._tx.gaps.items()}
        self._tx.commit(self._tx.state, new_rows, table=new_table, gaps=gaps, capacity_frames=capacity)

    def add_frame(self, frame: Mapping[str, Any], *, task: str | None = None) -> None:
        """Buffer one frame of the episode being recorded (``task`` here or as ``frame["task"]``); nothing is
        written until :meth:`save_episode`."""
        self._check_open()
        if not isinstance(frame, Mapping):
            raise SchemaMismatchError(f"{self.root}: a frame is a mapping {{feature: value}}, got "
                                      f"{type(frame).__name__}")
        task = frame.get("task", task) if task is None else task
        if not isinstance(task, str) or not task:
            raise ArgumentError("add_frame needs the frame's task: add_frame(frame, task='...') or frame['task']")
        values = {}
        episode = len(self._tx.state.table)
        for name, value in frame.items():
            if name == "task":
                continue
            if name not in self._tx.state.arrays or name in DEFAULT_FEATURES and name != "timestamp":
                raise SchemaMismatchError(f"{self.root}: unknown or writer-filled feature {name!r} in add_frame",
                                          feature=str(name))
            spec = self._tx.state.arrays[name]
            if spec.is_text:  # checked here, kept as given (save_episode gives the episode's list of them)
                as_frames(name, [value], spec, episode)
                values[name] = value
            else:
                values[name] = as_frames(name, np.asarray(value)[None], spec, episode)[0]
        self._episode_buffer.append((values, task))

    @property
    def episode_buffer_size(self) -> int:
        """Frames buffered by :meth:`add_frame` and not saved yet."""
        return len(self._episode_buffer)

    def clear_episode_buffer(self) -> None:
        """Drop the frames buffered by :meth:`add_frame`."""
        self._episode_buffer = []

    def save_episode(self) -> int:
        """Write the buffered frames as one episode (atomically, like :meth:`add_episode`); return its index."""
        if not self._episode_buffer:
            raise ArgumentError(f"{self.root}: no frame was added since the last save_episode()")
        names = self._episode_buffer[0][0].keys()
        for i, (values, _) in enumerate(self._episode_buffer):
            if values.keys() != names:
                raise SchemaMismatchError(f"frame {i} of the episode has features {sorted(values)}, frame 0 has "
                                          f"{sorted(names)}")
        arrays = self._tx.state.arrays
        frames = {name: [values[name] for values, _ in self._episode_buffer] if arrays[name].is_text else
                  np.stack([values[name] for values, _ in self._episode_buffer]) for name in names}
        e = self.add_episode(frames, task=[t for _, t in self._episode_buffer])
        self._episode_buffer = []
        return e

    # editing --------------------------------------------------------------------------------------------
    def _episode_index(self, episode: Any) -> int:
        return episode_index(episode, len(self._tx.state.table), negative=True, where=f"{self.root}: ")

    def _episode_list(self, episodes: int | Sequence[int]) -> list[int]:
        if isinstance(episodes, (str, bytes)):
            raise ArgumentError(f"episodes must be an episode index or a list of them, got {episodes!r:.40}")
        try:
            return [self._episode_index(operator.index(episodes))]
        except TypeError:
            pass
        if isinstance(episodes, np.ndarray) and episodes.ndim != 1:
            raise ArgumentError(f"episodes must be 1-D, got an array of shape {episodes.shape}")
        if not isinstance(episodes, (Sequence, np.ndarray, range, set, frozenset)):
            raise ArgumentError(f"episodes must be an episode index or a list of them, got {type(episodes).__name__}")
        return sorted({self._episode_index(e) for e in episodes})

    @contextlib.contextmanager
    def edit(self, episode: int, frames: slice | range | tuple[int, int] | None = None, *,
             features: Sequence[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Edit one episode (or a frame range of it) IN PLACE: ``with ds.edit(3) as ep: ep["action"][10:20] = 0``.

        ``frames`` bounds count from the end when negative; bounds outside the episode raise ``FrameIndexError``.
        Yields a mapping of the episode's frames for ``features`` (default: every feature but LeRobot's own
        columns) as :class:`~lerobot_zarr.writing.edits.EditFrames`, each memory-mapped when first looked up:
        assignments are checked (values the dtype cannot hold raise ``ValueRangeError``) and written in place.
        Writes reach every reader's maps at once and are flushed to the file when the block ends; the episode's
        stats are recomputed for those features at the next commit (:meth:`flush`, :meth:`close` or any other
        change), so many small edits cost little more than the writes. Not atomic: a crash during the block can
        leave an edit half applied (the next writer then recomputes that episode's stats).
        """
        self._check_open()
        e = self._episode_index(episode)
        editable = [name for name in self._tx.state.arrays if name not in DEFAULT_FEATURES]
        names = editable if features is None else list(features)
        wrong = [name for name in names if name not in editable]
        if wrong:
            raise ArgumentError(f"{self.root}: cannot edit {wrong} in place (editable features: {editable}; tasks "
                             f"change with set_task, indices with delete_episodes/delete_frames)")
        first, stop = frame_range(frames, int(self._tx.state.table.length[e]), f"{self.root}: episode {e}", e)
        lacking = [name for name in names if e in self._tx.gaps.get(name, {})]
        if lacking:
            raise NotMaterializedError(f"{self.root}: episode {e} has no frames of {lacking} to edit "
                                       f"({self._tx.gaps[lacking[0]][e]})", path=self.root, episode=e,
                                       feature=lacking[0])
        self._tx.own_pack(int(self._tx.state.table.chunk[e]))
        maps = EditMaps(self._tx, e, slice(first, stop), names)
        try:
            yield maps
        finally:
            maps.close()

    def episode_stats(self) -> dict[str, dict[str, np.ndarray]]:
        """The LeRobot stats the store keeps of each committed episode, per feature (text features have none), each
        stat stacked: row ``e`` is episode ``e``'s (read from the store; computed once where missing)."""
        self._check_open()
        return self._tx.episode_stats_rows()

    def flush(self) -> None:
        """Commit what in-place edits changed (their episodes' stats); a no-op when nothing is pending."""
        self._check_open()
        if self._tx.dirty:
            self._tx.commit(self._tx.state, self._tx.episode_stats_rows())

    def drop_features(self, features: str | Sequence[str]) -> None:
        """Remove features from the store IN PLACE, in one commit (their files are deleted after it): e.g. a
        camera whose videos are missing in some episodes, before publishing the rest. LeRobot's own columns
        cannot be dropped; a feature listed in ``info`` but not stored (a video left out) is removed from
        ``info`` too."""
        self._check_open()
        names = [features] if isinstance(features, str) else list(features)
        state = self._tx.state
        unknown = [n for n in names if n not in state.arrays and n not in state.info.get("features", {})]
        if unknown:
            raise ArgumentError(f"{self.root}: no features {unknown} to drop (features: "
                                f"{list(state.info.get('features', {}))})")
        own = [n for n in names if n in DEFAULT_FEATURES]
        if own:
            raise ArgumentError(f"{self.root}: {own} are LeRobot's own columns; they cannot be dropped")
        if not names:
            return
        rows = {k: v for k, v in self._tx.episode_stats_rows().items() if k not in names}
        info = dict(state.info, features={k: v for k, v in state.info["features"].items() if k not in names})
        stats = {k: v for k, v in state.stats.items() if k not in names}
        new = replace(state, info=info, stats=stats,
                      arrays={k: v for k, v in state.arrays.items() if k not in names},
                      materialized={k: v for k, v in state.materialized.items() if k not in names},
                      not_materialized={k: v for k, v in state.not_materialized.items() if k not in names})
        self._tx.commit(new, rows, gaps={k: v for k, v in self._tx.gaps.items() if k not in names})
        self._tx.stats_rows = rows
        for name in names:
            remove_path(self.root / name)
            remove_path(self.root / ".retired" / name)

    def update_info(self, features: Mapping[str, Mapping[str, Any]] | None = None, **fields: Any) -> None:
        """Change LeRobot's ``info`` in one commit: ``features`` merges into each named feature's ``info`` (a depth
        unit, encoder settings); ``fields`` sets the sizes of exported files (``_SETTABLE_INFO``). What changes how
        frames are stored (a depth image's unit) may change only while the store holds no episode."""
        self._check_open()
        state, wrong = self._tx.state, sorted(set(fields) - set(_SETTABLE_INFO))
        if wrong or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in fields.values()):
            raise ArgumentError(f"{self.root}: info {fields} must be settable keys with positive numbers "
                                f"(settable: {_SETTABLE_INFO})")
        features, known = dict(features or {}), state.info.get("features", {})
        unknown = [name for name in features if name not in known or name not in state.arrays]
        if unknown:
            raise ArgumentError(f"{self.root}: no features {unknown} to update (features: {list(known)})")
        entries = {name: {**known[name], "info": {**(known[name].get("info") or {}), **extra}}
                   for name, extra in features.items()}
        infos, arrays = feature_specs(entries) if entries else ({}, {})
        changed = [name for name in entries if arrays[name] != state.arrays[name]]
        if changed and len(state.table):
            raise ArgumentError(f"{self.root}: feature {changed[0]!r}: {dict(features[changed[0]])} would change how "
                                f"its frames are stored, which the store's episodes already hold", feature=changed[0])
        new_info = dict(state.info, **fields, features={k: infos[k] if k in entries else v for k, v in known.items()})
        self._tx.commit(replace(state, info=new_info, arrays={**state.arrays, **{k: arrays[k] for k in entries}}), None)

    def set_task(self, episodes: int | Sequence[int], task: str) -> None:
        """Give episodes a new task, adding the task string if it is new.

        In place, like :meth:`edit`: readers see the new task at once (the task list only ever grows, so a reader
        of an older commit learns a new task's text when it meets it). One commit records the new task of each
        episode together with the rewrite of their frames' ``task_index`` still to do; the frames are then
        rewritten and a second commit ends it. A writer killed in between leaves the rewrite to the next writer,
        which finishes it when it opens."""
        self._check_open()
        if not isinstance(task, str) or not task:
            raise ArgumentError(f"task must be a non-empty string, got {task!r:.80}")
        eps = self._episode_list(episodes)
        for pack in sorted({int(self._tx.state.table.chunk[e]) for e in eps}):
            self._tx.own_pack(pack)
        tasks = list(self._tx.state.tasks)
        if task not in tasks:
            tasks.append(task)
        k = tasks.index(task)
        table = self._tx.state.table
        task_index = table.task_index.copy()
        task_index[eps] = k
        pending = [(int(table.chunk[e]), int(table.offset[e]), k) for e in eps]
        new_table = EpisodeTable(table.start, table.length, task_index, table.chunk, table.offset,
                                 table.episode_index_shift, table.index_shift)
        self._tx.commit(self._tx.state, None, table=new_table, tasks=tuple(tasks), pending_tasks=tuple(pending))
        self._tx.rewrite_task_index(pending)

    def delete_episodes(self, episodes: int | Sequence[int]) -> None:
        """Delete whole episodes in one commit. Later episodes are renumbered (``episode_index``, ``index``
        stay contiguous, as LeRobot needs) without rewriting their data; a pack left mostly dead has its other
        episodes moved (work proportional to the pack, not the dataset)."""
        self._check_open()
        eps = self._episode_list(episodes)
        if not eps:
            return
        table = self._tx.state.table
        gone = np.zeros(len(table), dtype=bool)
        gone[eps] = True
        keep = ~gone
        new_rows = self._tx.episode_stats_rows(np.flatnonzero(keep))  # the deleted episodes' stats are not needed
        episodes_before = np.cumsum(gone) - gone
        frames_before = np.cumsum(np.where(gone, table.length, 0)) - np.where(gone, table.length, 0)
        new_table = EpisodeTable.contiguous(table.length[keep], table.task_index[keep], table.chunk[keep],
                                            table.offset[keep], (table.episode_index_shift + episodes_before)[keep],
                                            (table.index_shift + frames_before)[keep])
        new_table, packs = self._tx.compact_packs(new_table, self._tx.state.packs, new_rows)
        position = np.cumsum(keep) - 1
        gaps = {name: {int(position[p]): why for p, why in g.items() if keep[p]} for name, g in self._tx.gaps.items()}
        self._tx.commit(self._tx.state, new_rows, table=new_table, packs=packs, gaps=gaps)

    def drop_defective(self, kinds: str | Sequence[str] | None = None) -> list[int]:
        """Delete in one commit the episodes with defects of ``kinds`` (a kind, a list, or None: every episode kind of
        :data:`lerobot_zarr.doctor.KINDS`) and return them; refused until the doctor checked every episode."""
        self._check_open()
        report = self._reader.defects
        gone = report.episodes([kinds] if isinstance(kinds, str) else kinds)
        n = len(self._tx.state.table)
        if report.checked_episodes < n:
            raise NotMaterializedError(f"{self.root}: the doctor checked {report.checked_episodes} of the {n} "
                                       f"episodes; run ds.doctor() first", path=self.root)
        if gone and len(gone) == n:
            raise ArgumentError(f"{self.root}: all {n} episodes have such defects; nothing was deleted")
        if gone:
            self.delete_episodes(gone)
        return gone

    def doctor(self, *, progress: bool = True) -> Any:
        """The dataset doctor again over the store, under this writer's lock, after committing pending edits."""
        self.flush()
        return doctor_store(self.root, progress=progress, locked=True)

    def delete_frames(self, episode: int, frames: slice | range | tuple[int, int] | Sequence[int]) -> None:
        """Delete frames of one episode (a range or a list of frame indices; negative ones from the end, any outside
        the episode raise :class:`~lerobot_zarr.errors.FrameIndexError`) in one commit.

        The episode keeps LeRobot's invariants (``frame_index`` 0..n-1, ``timestamp`` = frame_index / fps) and
        the later episodes' ``index`` stays contiguous: the shortened episode is written into fresh rows (work
        proportional to the episode, and to its pack when that is left mostly dead), later episodes are
        renumbered through the table. Deleting every frame deletes the episode."""
        self._check_open()
        e = self._episode_index(episode)
        table = self._tx.state.table
        length = int(table.length[e])
        gone = np.zeros(length, dtype=bool)
        if isinstance(frames, (tuple, slice, range)):
            first, stop = frame_range(frames, length, f"{self.root}: episode {e}", e)
            gone[first:stop] = True
        else:
            idx = np.asarray(frames)
            if idx.size == 0:
                return
            if idx.dtype.kind not in "iu" or idx.ndim != 1:
                raise ArgumentError(f"frames must be a slice, range, (first, stop) or a list of frame indices, "
                                f"got {frames!r:.200}")
            if ((idx < -length) | (idx >= length)).any():
                raise FrameIndexError(f"episode {e} has {length} frames; cannot delete frames {idx.tolist()[:20]}",
                                      episode=e)
            gone[idx] = True
        if not gone.any():
            return
        if gone.all():
            self.delete_episodes([e])
            return
        rows = self._tx.episode_stats_rows()
        n = length - int(gone.sum())
        self._tx.check_space(n * self._tx.frame_bytes())
        old = {name: np.asarray(v) for name, v in self._tx.read_episode(e).items()}
        damaged = self._tx.damaged(e, table, old)
        if damaged:  # the kept frames would be recorded anew, damage included
            raise CorruptStoreError(f"{self.root}: episode {e}'s rows of {damaged} differ from the content hash "
                                    f"recorded when they were committed (damaged on disk?); run `lerobot-zarr verify "
                                    f"{self.root}` (--repair re-fetches a Hub or folder source's episodes), or delete "
                                    f"the episode", path=self.root, episode=e, feature=damaged[0])
        gaps = self._tx.gap_features(int(table.chunk[e]), int(table.offset[e]))
        data = {name: v[~gone] for name, v in old.items()}
        data["frame_index"] = np.arange(n, dtype=np.int64)
        data["timestamp"] = (np.arange(n) / self._tx.state.fps).astype(np.float32)
        data["index"] = np.arange(n, dtype=np.int64) + int(table.start[e] + table.index_shift[e])
        data = {name: stored_values(data[name], spec) for name, spec in self._tx.state.arrays.items()}
        packs, pack, offset = self._tx.relocate(self._tx.state.packs, data, gaps)
        stats = self._tx.stats_of(pack, offset, data)
        lengths, chunk, offsets = table.length.copy(), table.chunk.copy(), table.offset.copy()
        lengths[e], chunk[e], offsets[e] = n, pack, offset
        task_index = table.task_index.copy()
        task_index[e] = int(np.asarray(data["task_index"]).reshape(n, -1)[0, 0])  # its first task now
        index_shift = table.index_shift + np.where(np.arange(len(table)) > e, length - n, 0)
        new_table = EpisodeTable.contiguous(lengths, task_index, chunk, offsets, table.episode_index_shift,
                                            index_shift)
        new_rows = {name: {k: v.copy() for k, v in rows[name].items()} for name in rows}
        for name in new_rows:
            for k in new_rows[name]:
                new_rows[name][k][e] = stats[name][k]
        new_table, packs = self._tx.compact_packs(new_table, packs, new_rows)
        self._tx.commit(self._tx.state, new_rows, table=new_table, packs=packs)
