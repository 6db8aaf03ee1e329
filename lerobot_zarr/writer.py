"""Writing a store in place: record episodes, edit frames, delete episodes or frames, keep a ring buffer.

One writer per store (the ``.lock`` flock, released by the kernel when the writer dies), any number of readers
in other processes. Every change is one commit of the root ``zarr.json`` (see :mod:`lerobot_zarr.store`): new
chunk files are written under fresh chunk ids and flushed before the commit that lists them, deleted episodes'
chunks are retired after it, so a writer killed at any instant leaves the store at its last commit. Frame edits
(:meth:`WritableDataset.edit`) are the exception by nature: they write through shared memory maps, so readers see
them at once, and a crash in the middle of one leaves it partly applied.
"""

from __future__ import annotations

import contextlib
import errno
import json
import operator
import os
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ._progress import progress_bar
from .dataset import LeRobotZarrDataset, frame_range
from .errors import (
    DiskSpaceError,
    FrameIndexError,
    NotMaterializedError,
    SchemaMismatchError,
    StoreError,
    UnsupportedDtypeError,
)
from .lerobot_v3 import DEFAULT_FEATURES, aggregate_stats, episode_stats, stats_json
from .source import FeatureSpec
from .store import (
    CREATING_MARKER,
    ArraySpec,
    EpisodeTable,
    StoreState,
    WriterLock,
    atomic_write,
    check_array_name,
    check_new_store_location,
    chunk_path,
    commit_state,
    create_store,
    open_chunk,
    read_state,
    retired_path,
    stats_path,
    write_chunk,
    write_zarr_copies,
)
from .transcode import array_spec_of

__all__ = ["create", "WritableDataset", "MIN_FREE_ENV", "RETIRE_AFTER_S"]

MIN_FREE_ENV = "LEROBOT_ZARR_MIN_FREE_BYTES"
_DEFAULT_MIN_FREE = 256 * 2**20
RETIRE_AFTER_S = 60.0  # how long a deleted episode's files stay readable for readers of older commits
_LOCATION_STATS = ("min", "max", "mean", "q01", "q10", "q50", "q90", "q99")
_INDEX_COLUMNS = ("episode_index", "index")  # stored values may exceed LeRobot's by the table's shifts


def _min_free_bytes(value: int | None) -> int:
    if value is not None:
        return int(value)
    raw = os.environ.get(MIN_FREE_ENV)
    if raw is None:
        return _DEFAULT_MIN_FREE
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{MIN_FREE_ENV}={raw!r} is not an integer") from None


def _feature_specs(features: Mapping[str, Mapping[str, Any]]) -> tuple[dict, dict[str, ArraySpec]]:
    """LeRobot feature specs (``{"dtype", "shape", "names"}``) -> info features with LeRobot's defaults added,
    and the store arrays they map to."""
    info: dict[str, dict] = {}
    for name, ft in features.items():
        if not isinstance(ft, Mapping) or "dtype" not in ft or "shape" not in ft:
            raise SchemaMismatchError(f"feature {name!r}: a feature is a dict with 'dtype' and 'shape', got {ft!r}")
        check_array_name(name)
        dtype = str(ft["dtype"])
        if dtype in ("video", "string"):
            raise UnsupportedDtypeError(f"feature {name!r}: dtype {dtype!r} cannot be recorded into a store (store "
                                        f"cameras as dtype 'image')")
        if dtype != "image":
            try:
                np.dtype(dtype)
            except TypeError:
                raise UnsupportedDtypeError(f"feature {name!r}: unknown dtype {dtype!r}") from None
        shape = tuple(int(s) for s in ft["shape"])
        if any(s < 1 for s in shape) or (dtype == "image" and len(shape) != 3):
            raise SchemaMismatchError(f"feature {name!r}: shape {list(shape)} is not valid for dtype {dtype!r}")
        names = ft.get("names")
        if dtype == "image" and names is None:
            names = ["height", "width", "channels"]
        info[name] = {"dtype": dtype, "shape": list(shape), "names": names}
    for name, dtype in DEFAULT_FEATURES.items():
        if name in info and (info[name]["dtype"] != dtype or info[name]["shape"] != [1]):
            raise SchemaMismatchError(f"feature {name!r} is LeRobot's own: dtype {dtype!r}, shape [1]")
        info.setdefault(name, {"dtype": dtype, "shape": [1], "names": None})
    arrays = {}
    for name, ft in info.items():
        shape = tuple(ft["shape"])
        frame_shape = () if shape == (1,) and ft["dtype"] != "image" else shape  # LeRobot stores [1] as scalars
        arrays[name] = array_spec_of(FeatureSpec(name, ft["dtype"], shape, ft["names"], frame_shape))
    return info, arrays


def create(root: str | os.PathLike, *, fps: float, features: Mapping[str, Mapping[str, Any]],
           robot_type: str | None = None, capacity_frames: int | None = None, durable: bool = True,
           min_free_bytes: int | None = None) -> WritableDataset:
    """Make a new, empty store at ``root`` and open it for writing.

    Args:
        fps: frames per second (timestamps are ``frame_index / fps``).
        features: LeRobot feature specs, ``{name: {"dtype": "float32", "shape": [14], "names": [...]}}``;
            cameras are ``{"dtype": "image", "shape": [H, W, C]}``. LeRobot's ``timestamp``, ``frame_index``,
            ``episode_index``, ``index`` and ``task_index`` are added and filled by the writer.
        capacity_frames: make the store a ring buffer of at most this many frames: appending past it drops the
            oldest episodes first.
        durable: flush to disk at every commit (survives power loss); ``False`` is still safe when the writer
            process is killed, and much faster for small episodes.
        min_free_bytes: refuse writes that would leave less free space on the volume (default 256 MiB, or
            ``$LEROBOT_ZARR_MIN_FREE_BYTES``).
    """
    root = Path(root)
    fps = float(fps)
    if not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    if capacity_frames is not None and int(capacity_frames) < 1:
        raise ValueError(f"capacity_frames must be positive, got {capacity_frames}")
    info_features, arrays = _feature_specs(features)
    if root.exists() and (root.is_symlink() or not root.is_dir()):
        check_new_store_location(root)  # raises: not a folder
    info = {"codebase_version": "v3.0", "robot_type": robot_type, "fps": fps if fps % 1 else int(fps),
            "features": info_features, "total_episodes": 0, "total_frames": 0, "total_tasks": 0,
            "splits": {}}
    empty = EpisodeTable.contiguous([], [], [])
    with WriterLock(root, blocking=False):  # first: a store another writer holds is "locked", not "exists"
        check_new_store_location(root)
        create_store(root, arrays, empty, {"info": info, "tasks": [], "stats": {}, "source": {"kind": "recorded"},
                                           "not_materialized": {}, "capacity_frames": capacity_frames})
    return WritableDataset(root, durable=durable, min_free_bytes=min_free_bytes)


class WritableDataset(LeRobotZarrDataset):
    """A store open for writing, and for sampling like any :class:`LeRobotZarrDataset` (always every episode;
    after each write the sampler sees the new commit, so indices stay consistent).

    Structural changes (:meth:`add_episode`, :meth:`save_episode`, :meth:`delete_episodes`,
    :meth:`delete_frames`) are atomic commits: readers of older commits keep their view until they refresh.
    :meth:`edit` and :meth:`set_task` change frames in place: every reader sees them at once. Use as a context
    manager, or call :meth:`close`, to release the writer lock (a dead process releases it too).
    """

    _headroom = 1.0  # appended episodes get maps next to the others: sampling keeps its maps across commits

    def __init__(self, root: str | os.PathLike, *, delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                 image_format: str = "uint8_hwc", max_open_maps: int | None = None, durable: bool = True,
                 min_free_bytes: int | None = None):
        root = Path(root)
        lock = WriterLock(root, blocking=False).__enter__()
        try:
            state = read_state(root)
            missing = np.flatnonzero(~state.complete_episodes())
            if missing.size:
                raise NotMaterializedError(f"{root}: episodes {missing[:20].tolist()} are not in the local store; "
                                           f"open it with every episode before writing to it")
            state = _drop_empty_features(state)
            gaps = [name for name in state.arrays if state.unavailable(name)]
            if gaps:
                raise NotMaterializedError(f"{root}: features {gaps} lack some episodes (missing source videos: "
                                           f"{state.unavailable(gaps[0])[min(state.unavailable(gaps[0]))]}); a "
                                           f"store is writable only with every feature of every episode")
            compact = [name for name, spec in state.arrays.items() if spec.storage != "raw"]
            if compact:
                raise StoreError(f"{root}: features {compact} are stored compact (compressed frames), which "
                                 f"cannot be written in place; use a store with raw storage to write")
            self.root, self._state = root, state
            self._cleanup()
            super().__init__(root, delta_timestamps=delta_timestamps, image_format=image_format,
                             max_open_maps=max_open_maps)
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        self._writer_lock = lock
        self._release = weakref.finalize(self, lock.__exit__, None, None, None)
        self.durable = bool(durable)
        self.min_free_bytes = _min_free_bytes(min_free_bytes)
        self._episode_buffer: list[tuple[dict[str, np.ndarray], str]] = []
        self._stats_rows: dict[str, dict[str, np.ndarray]] | None = None  # per-episode stats of stored values
        self._dirty: dict[int, set[str]] = {}  # chunk -> features edited in place since the last commit
        if self._state.attrs.get("pending_tasks"):  # a set_task killed midway: finish it (idempotent)
            self._rewrite_task_index(self._state.attrs["pending_tasks"])
        stats_dir = self.root / ".episode_stats"
        if stats_dir.is_dir() and any(not stats_path(self.root, c).exists() for c in self._state.table.chunk.tolist()):
            # an edit was cut short by a crash (it had dropped its episode's stats): recompute and commit them
            self._commit(self._state.table, self._episode_stats_rows(), copies_written=True)

    def __reduce__(self) -> tuple:
        # a copy in another process (a DataLoader worker) is a reader of the same episodes: it cannot hold the lock
        return (LeRobotZarrDataset.__new__, (LeRobotZarrDataset,), self.__getstate__())

    def close(self) -> None:
        """Commit pending edits (:meth:`flush`) and release the writer lock. The dataset stays readable."""
        if not self.closed:
            try:
                self.flush()
            finally:
                self._release()

    @property
    def closed(self) -> bool:
        """Whether this object can no longer write: closed, or a copy in a forked child (which may only read)."""
        return not self._release.alive or not self._writer_lock.held

    def __enter__(self) -> WritableDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Writable" + super().__repr__()

    @property
    def capacity_frames(self) -> int | None:
        """Ring-buffer capacity in frames (None: unbounded)."""
        return self._state.attrs.get("capacity_frames")

    @property
    def features(self) -> dict[str, dict]:
        return self.meta.features

    # housekeeping ---------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._release.alive:
            raise StoreError(f"{self.root}: this writable dataset was closed; open it again with mode='r+'")
        if not self._writer_lock.held:
            raise StoreError(f"{self.root}: this writable dataset was opened by another process (this one is a "
                             f"fork of it); a forked process may read it but not write to it")

    def _cleanup(self) -> None:
        """After a crash: drop chunk files no commit lists, finish retiring, delete what expired."""
        state = self._state
        live = set(state.table.chunk.tolist())
        retired = {int(c) for c, _ in state.attrs.get("retired", [])}
        for name, spec in state.arrays.items():
            folder = self.root / name / "c"
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if not entry.name.isdigit() or int(entry.name) in live:
                    continue
                chunk = int(entry.name)
                if chunk in retired:
                    self._retire_file(name, spec, chunk)
                else:
                    _remove(entry)
        stats_dir = self.root / ".episode_stats"
        if stats_dir.is_dir():
            for entry in stats_dir.iterdir():
                stem = entry.name.removesuffix(".json")
                if not (stem.isdigit() and int(stem) in live):
                    _remove(entry)
        for pattern in (".*.tmp-*", "*/.*.tmp-*", "*/c/.*.tmp-*", CREATING_MARKER):
            for tmp in self.root.glob(pattern):  # debris of writes killed before their rename
                _remove(tmp)
        # zarr's copies of the table and array metadata may be those of a commit killed before its root write
        write_zarr_copies(self.root, state.arrays, state.table, state.next_chunk)


    def _retire_file(self, name: str, spec: ArraySpec, chunk: int) -> None:
        target = Path(retired_path(self.root, name, chunk))
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(chunk_path(self.root, name, chunk, spec.ndim), target)
        if spec.ndim > 1:
            _remove(self.root / name / "c" / str(chunk))

    def _check_space(self, nbytes: int) -> None:
        st = os.statvfs(self.root)
        free = st.f_bavail * st.f_frsize
        if free - nbytes < self.min_free_bytes:
            raise DiskSpaceError(errno.ENOSPC, f"{self.root}: writing {nbytes} bytes would leave {free - nbytes} "
                                               f"bytes free on its volume, below the margin of {self.min_free_bytes}"
                                               f" bytes (min_free_bytes= or ${MIN_FREE_ENV}); nothing was written")

    # stats ----------------------------------------------------------------------------------------------
    def _write_stats_file(self, chunk: int, stats: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        path = stats_path(self.root, chunk)
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, json.dumps({k: stats_json(v) for k, v in stats.items()}).encode(), durable=False)

    def _stats_of(self, chunk: int, arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Per-episode stats of one chunk's stored values, computed and kept next to it."""
        stats = {name: episode_stats(np.asarray(arrays[name]), spec.kind) for name, spec in self._specs.items()}
        self._write_stats_file(chunk, stats)
        return stats

    def _map_chunk(self, name: str, chunk: int, length: int, *, writable: bool = False) -> np.memmap:
        """A memory map of one committed chunk file (symlinks refused, size checked)."""
        spec = self._specs[name]
        path = chunk_path(self.root, name, chunk, spec.ndim)
        fd = open_chunk(path, length * spec.frame_bytes, chunk, name, flags=os.O_RDWR if writable else os.O_RDONLY)
        with os.fdopen(fd, "r+b" if writable else "rb") as f:
            return np.memmap(f, dtype=spec.dtype, mode="r+" if writable else "r", shape=(length, *spec.frame_shape))

    def _read_chunk(self, chunk: int, length: int) -> dict[str, np.ndarray]:
        return {name: self._map_chunk(name, chunk, length) for name in self._specs}

    def _episode_stats_rows(self) -> dict[str, dict[str, np.ndarray]]:
        """Per-episode stats of every episode, stacked (rows in episode order); computed once where missing."""
        if self._stats_rows is not None:
            return self._stats_rows
        table = self._state.table
        rows: list[dict] = []
        todo = []
        for e, chunk in enumerate(table.chunk.tolist()):
            try:
                doc = json.loads(stats_path(self.root, chunk).read_bytes())
                rows.append({name: {k: np.asarray(v) for k, v in doc[name].items()} for name in self._specs})
            except (FileNotFoundError, KeyError, ValueError):
                rows.append({})
                todo.append(e)
        with progress_bar(len(todo), f"episode stats of {self.root.name}", bool(todo) and len(todo) > 20) as bar:
            for e in todo:
                chunk, length = int(table.chunk[e]), int(table.length[e])
                rows[e] = self._stats_of(chunk, self._read_chunk(chunk, length))
                bar.update(1)
        self._stats_rows = {name: _stack([row[name] for row in rows], spec) for name, spec in self._specs.items()}
        return self._stats_rows

    def _dataset_stats(self, table: EpisodeTable, rows: dict[str, dict[str, np.ndarray]]) -> dict:
        """LeRobot's stats.json from per-episode stats: count-weighted merge, index columns shifted back."""
        if not len(table):
            return {}
        out = {}
        for name, stats in rows.items():
            if name in _INDEX_COLUMNS:
                shift = (table.episode_index_shift if name == "episode_index" else table.index_shift)
                stats = dict(stats)
                for key in _LOCATION_STATS:
                    stats[key] = stats[key] - shift.reshape(-1, *[1] * (stats[key].ndim - 1))
            out[name] = stats_json(aggregate_stats(stats))
        return out

    # committing -----------------------------------------------------------------------------------------
    def _commit(self, table: EpisodeTable, rows: dict[str, dict[str, np.ndarray]] | None, *,
                tasks: list[str] | None = None, retire: Sequence[int] = (), copies_written: bool = False,
                **attrs: Any) -> None:
        """One commit: table, tasks, stats, info counters; then retire the given chunks and reload the sampler.
        Stats of in-place edits not committed yet are folded in."""
        state = self._state
        if self._dirty:
            rows = self._fold_dirty(table, self._episode_stats_rows() if rows is None else rows)
        tasks = list(state.attrs["tasks"]) if tasks is None else tasks
        info = dict(state.attrs["info"], total_episodes=len(table), total_frames=int(table.length.sum()),
                    total_tasks=len(tasks), splits={"train": f"0:{len(table)}"} if len(table) else {})
        now = time.time()
        retired = [[c, t] for c, t in state.attrs.get("retired", []) if now - t < RETIRE_AFTER_S]
        expired = [c for c, t in state.attrs.get("retired", []) if now - t >= RETIRE_AFTER_S]
        retired += [[int(c), now] for c in retire]
        source = state.attrs["source"]
        if source.get("kind") not in ("recorded", "edited"):
            source = {"kind": "edited", "from": source}
        if rows is not None:
            attrs["stats"] = self._dataset_stats(table, rows)
        next_chunk = max(state.next_chunk, int(table.chunk.max()) + 1 if len(table) else 0)
        try:
            new_state = commit_state(state, table=table, durable=self.durable, copies_written=copies_written,
                                     info=info, tasks=tasks, source=source, retired=retired, next_chunk=next_chunk,
                                     **attrs)
        except BaseException:
            with contextlib.suppress(Exception):  # zarr's copies go back to the commit that still stands
                write_zarr_copies(self.root, state.arrays, state.table, state.next_chunk)
            raise
        self._state = new_state
        self._dirty = {}
        if rows is not None:
            self._stats_rows = rows
        for chunk in retire:
            for name, spec in self._specs.items():
                self._retire_file(name, spec, int(chunk))
            _remove(stats_path(self.root, int(chunk)))
        for chunk in expired:
            for name in self._specs:
                _remove(Path(retired_path(self.root, name, int(chunk))))
        with self._lock:
            self._load(new_state)

    # recording ------------------------------------------------------------------------------------------
    def _task_indices(self, task: str | Sequence[str], n: int) -> tuple[np.ndarray, list[str]]:
        tasks = list(self._state.attrs["tasks"])
        per_frame = [task] * n if isinstance(task, str) else list(task)
        if len(per_frame) != n or not all(isinstance(t, str) and t for t in per_frame):
            raise ValueError(f"task must be a non-empty string or one per frame ({n}), got {task!r:.200}")
        lookup = {t: i for i, t in enumerate(tasks)}
        out = np.empty(n, dtype=np.int64)
        for i, t in enumerate(per_frame):
            if t not in lookup:
                lookup[t] = len(tasks)
                tasks.append(t)
            out[i] = lookup[t]
        return out, tasks

    def _frames_of(self, frames: Mapping[str, Any]) -> tuple[int, dict[str, np.ndarray]]:
        """Validate one episode's user features: every one present, same length, right shape and dtype."""
        user = [name for name in self._specs if name not in DEFAULT_FEATURES]
        unknown = sorted(set(frames) - {*user, "timestamp"})
        if unknown:
            raise SchemaMismatchError(f"{self.root}: the episode has features {unknown} that are not this dataset's "
                                      f"or are filled by the writer (this dataset's: {user})")
        missing = [name for name in user if name not in frames]
        if missing:
            raise SchemaMismatchError(f"{self.root}: the episode lacks features {missing}")
        out: dict[str, np.ndarray] = {}
        n = None
        for name in [*user, *(["timestamp"] if "timestamp" in frames else [])]:
            spec = self._specs[name]
            values = _as_frames(name, frames[name], spec)
            if n is None:
                n = len(values)
            elif len(values) != n:
                raise SchemaMismatchError(f"feature {name!r} has {len(values)} frames, {user[0]!r} has {n}")
            out[name] = values
        if not n:
            raise SchemaMismatchError(f"{self.root}: an episode needs at least one frame")
        return n, out

    def add_episode(self, frames: Mapping[str, Any], *, task: str | Sequence[str]) -> int:
        """Append one episode atomically and return its ``episode_index``.

        ``frames`` maps every feature (LeRobot's own ones excepted) to an array of (T, *shape) values; ``task``
        is the episode's task string (or one per frame). ``timestamp`` (frame_index / fps unless given),
        ``frame_index``, ``episode_index``, ``index`` and ``task_index`` are filled in. In ring-buffer mode the
        oldest episodes are dropped first to make room.
        """
        self._check_open()
        n, data = self._frames_of(frames)
        task_index, tasks = self._task_indices(task, n)
        capacity = self.capacity_frames
        if capacity is not None and n > capacity:
            raise ValueError(f"{self.root}: an episode of {n} frames does not fit a ring buffer of {capacity} frames")
        table = self._state.table
        drop = 0
        if capacity is not None:
            total = int(table.length.sum())
            while total + n > capacity:
                total -= int(table.length[drop])
                drop += 1
        self._check_space(n * sum(spec.frame_bytes for spec in self._specs.values()))
        kept = slice(drop, None)
        start = int(table.length[kept].sum())
        e = len(table) - drop
        fps = float(self.meta.fps)
        data.setdefault("timestamp", (np.arange(n) / fps).astype(np.float32))
        data.update(frame_index=np.arange(n, dtype=np.int64), episode_index=np.full(n, e, dtype=np.int64),
                    index=np.arange(start, start + n, dtype=np.int64), task_index=task_index)
        chunk = self._state.next_chunk
        rows = self._episode_stats_rows()
        data = {name: _stored(data[name], spec) for name, spec in self._specs.items()}
        dropped_frames = int(table.length[:drop].sum())
        new_table = EpisodeTable.contiguous(
            [*table.length[kept].tolist(), n], [*table.task_index[kept].tolist(), int(task_index[0])],
            [*table.chunk[kept].tolist(), chunk],
            [*(table.episode_index_shift[kept] + drop).tolist(), 0],
            [*(table.index_shift[kept] + dropped_frames).tolist(), 0])
        # numpy stats and the zarr copies of the metadata overlap the chunk writes (system calls release the GIL)
        with ThreadPoolExecutor(2) as pool:
            stats = pool.submit(self._stats_of, chunk, data)
            copies = pool.submit(write_zarr_copies, self.root, self._specs, new_table, chunk + 1)
            for name, spec in self._specs.items():
                write_chunk(chunk_path(self.root, name, chunk, spec.ndim), data[name])
            new_stats = stats.result()
            copies.result()
        new_rows = {name: {k: np.concatenate([v[drop:], new_stats[name][k][None]]) for k, v in rows[name].items()}
                    for name in rows}
        self._commit(new_table, new_rows, tasks=tasks, retire=table.chunk[:drop].tolist(), copies_written=True)
        return e

    def add_frame(self, frame: Mapping[str, Any], *, task: str | None = None) -> None:
        """Buffer one frame of the episode being recorded (``task`` here or as ``frame["task"]``); nothing is
        written until :meth:`save_episode`."""
        self._check_open()
        task = frame.get("task", task) if task is None else task
        if not isinstance(task, str) or not task:
            raise ValueError("add_frame needs the frame's task: add_frame(frame, task='...') or frame['task']")
        values = {}
        for name, value in frame.items():
            if name == "task":
                continue
            if name not in self._specs or name in DEFAULT_FEATURES and name != "timestamp":
                raise SchemaMismatchError(f"{self.root}: unknown or writer-filled feature {name!r} in add_frame")
            values[name] = _as_frames(name, np.asarray(value)[None], self._specs[name])[0]
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
            raise ValueError(f"{self.root}: no frame was added since the last save_episode()")
        names = self._episode_buffer[0][0].keys()
        for i, (values, _) in enumerate(self._episode_buffer):
            if values.keys() != names:
                raise SchemaMismatchError(f"frame {i} of the episode has features {sorted(values)}, frame 0 has "
                                          f"{sorted(names)}")
        frames = {name: np.stack([values[name] for values, _ in self._episode_buffer]) for name in names}
        e = self.add_episode(frames, task=[t for _, t in self._episode_buffer])
        self._episode_buffer = []
        return e

    # editing --------------------------------------------------------------------------------------------
    def _episode_index(self, episode: int) -> int:
        e = operator.index(episode)
        n = len(self._state.table)
        if not -n <= e < n:
            raise FrameIndexError(f"{self.root}: episode {episode} does not exist ({n} episodes)")
        return e % n

    def _episode_list(self, episodes: int | Sequence[int]) -> list[int]:
        try:
            return [self._episode_index(operator.index(episodes))]
        except TypeError:
            return sorted({self._episode_index(e) for e in episodes})

    @contextlib.contextmanager
    def edit(self, episode: int, frames: slice | range | tuple[int, int] | None = None, *,
             features: Sequence[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Edit one episode (or a frame range of it) IN PLACE: ``with ds.edit(3) as ep: ep["action"][10:20] = 0``.

        Yields a mapping of writable memory maps of the episode's frames for ``features`` (default: every feature
        but LeRobot's own columns), each mapped when first looked up. Writes reach every reader's maps at once and
        are flushed to the file when the block ends;
        the episode's stats are recomputed for those features at the next commit (:meth:`flush`, :meth:`close`
        or any other change), so many small edits cost little more than the writes. Not atomic: a crash during
        the block can leave an edit half applied (the next writer then recomputes that episode's stats).
        """
        self._check_open()
        e = self._episode_index(episode)
        editable = [name for name in self._specs if name not in DEFAULT_FEATURES]
        names = editable if features is None else list(features)
        wrong = [name for name in names if name not in editable]
        if wrong:
            raise ValueError(f"{self.root}: cannot edit {wrong} in place (editable features: {editable}; tasks "
                             f"change with set_task, indices with delete_episodes/delete_frames)")
        table = self._state.table
        chunk, length = int(table.chunk[e]), int(table.length[e])
        first, stop = frame_range(frames, length, f"{self.root}: episode {e}")
        maps = _EditMaps(self, chunk, length, slice(first, stop), names)
        try:
            yield maps
        finally:
            maps.close()

    def flush(self) -> None:
        """Commit what in-place edits changed (their episodes' stats); a no-op when nothing is pending."""
        self._check_open()
        if self._dirty:
            self._commit(self._state.table, self._episode_stats_rows(), copies_written=True)

    def _fold_dirty(self, table: EpisodeTable, rows: dict[str, dict[str, np.ndarray]]
                    ) -> dict[str, dict[str, np.ndarray]]:
        """``rows`` (aligned with ``table``) with the stats of edited features recomputed from the data."""
        position = {int(c): i for i, c in enumerate(table.chunk.tolist())}
        rows = {name: {k: v.copy() for k, v in rows[name].items()} for name in rows}
        for chunk, names in self._dirty.items():
            e = position.get(chunk)
            if e is None:  # deleted or rewritten since: its new chunk got fresh stats
                continue
            length = int(table.length[e])
            for name in names:
                stats = episode_stats(np.asarray(self._map_chunk(name, chunk, length)), self._specs[name].kind)
                for k in rows[name]:
                    rows[name][k][e] = stats[k]
            self._write_stats_file(chunk, {name: {k: v[e] for k, v in rows[name].items()} for name in rows})
        return rows

    def set_task(self, episodes: int | Sequence[int], task: str) -> None:
        """Give episodes a new task, adding the task string if it is new.

        In place, like :meth:`edit`: readers see the new task at once (the task list only ever grows, so a reader
        of an older commit learns a new task's text when it meets it). One commit records the new task of each
        episode together with the rewrite of their frames' ``task_index`` still to do; the frames are then
        rewritten and a second commit ends it. A writer killed in between leaves the rewrite to the next writer,
        which finishes it when it opens."""
        self._check_open()
        if not isinstance(task, str) or not task:
            raise ValueError(f"task must be a non-empty string, got {task!r}")
        eps = self._episode_list(episodes)
        tasks = list(self._state.attrs["tasks"])
        if task not in tasks:
            tasks.append(task)
        k = tasks.index(task)
        table = self._state.table
        task_index = table.task_index.copy()
        task_index[eps] = k
        pending = [[int(table.chunk[e]), k] for e in eps]
        self._commit(EpisodeTable(table.start, table.length, task_index, table.chunk, table.episode_index_shift,
                                  table.index_shift), None, tasks=tasks, pending_tasks=pending)
        self._rewrite_task_index(pending)

    def _rewrite_task_index(self, pending: list[list[int]]) -> None:
        """Write each listed chunk's ``task_index`` frames in place, then commit (with their stats)."""
        table = self._state.table
        position = {int(c): i for i, c in enumerate(table.chunk.tolist())}
        for chunk, k in pending:
            e = position.get(int(chunk))
            if e is None:
                continue
            m = self._map_chunk("task_index", int(chunk), int(table.length[e]), writable=True)
            m[:] = k
            m.flush()
            del m
            _remove(stats_path(self.root, int(chunk)))
            self._dirty.setdefault(int(chunk), set()).add("task_index")
        self._commit(table, self._episode_stats_rows(), copies_written=True, pending_tasks=None)

    def delete_episodes(self, episodes: int | Sequence[int]) -> None:
        """Delete whole episodes in one commit. Later episodes are renumbered (``episode_index``, ``index``
        stay contiguous, as LeRobot needs) without rewriting their data."""
        self._check_open()
        eps = self._episode_list(episodes)
        if not eps:
            return
        table = self._state.table
        rows = self._episode_stats_rows()
        gone = np.zeros(len(table), dtype=bool)
        gone[eps] = True
        keep = ~gone
        episodes_before = np.cumsum(gone) - gone
        frames_before = np.cumsum(np.where(gone, table.length, 0)) - np.where(gone, table.length, 0)
        new_table = EpisodeTable.contiguous(table.length[keep], table.task_index[keep], table.chunk[keep],
                                            (table.episode_index_shift + episodes_before)[keep],
                                            (table.index_shift + frames_before)[keep])
        new_rows = {name: {k: v[keep] for k, v in rows[name].items()} for name in rows}
        self._commit(new_table, new_rows, retire=table.chunk[gone].tolist())

    def delete_frames(self, episode: int, frames: slice | range | tuple[int, int] | Sequence[int]) -> None:
        """Delete frames of one episode (a range or a list of frame indices) in one commit.

        The episode keeps LeRobot's invariants (``frame_index`` 0..n-1, ``timestamp`` = frame_index / fps) and
        the later episodes' ``index`` stays contiguous: the episode and the ones after it are rewritten under new
        chunk ids (work proportional to the frames from that episode on). Deleting every frame deletes the
        episode."""
        self._check_open()
        e = self._episode_index(episode)
        table = self._state.table
        length = int(table.length[e])
        gone = np.zeros(length, dtype=bool)
        if isinstance(frames, tuple):
            frames = slice(*frames)
        if isinstance(frames, (slice, range)):
            if frames.step not in (None, 1):
                raise ValueError(f"frames must have step 1, got {frames!r}")
            gone[slice(frames.start, frames.stop)] = True
        else:
            idx = np.asarray(frames)
            if idx.size == 0:
                return
            if idx.dtype.kind not in "iu" or idx.ndim != 1:
                raise TypeError(f"frames must be a slice, range, (first, stop) or a list of frame indices, "
                                f"got {frames!r:.200}")
            if ((idx < -length) | (idx >= length)).any():
                raise FrameIndexError(f"episode {e} has {length} frames; cannot delete frames {idx.tolist()[:20]}")
            gone[idx] = True
        if not gone.any():
            return
        if gone.all():
            self.delete_episodes([e])
            return
        rows = self._episode_stats_rows()
        later = range(e, len(table))
        nbytes = sum(spec.frame_bytes for spec in self._specs.values()) * int(table.length[e:].sum())
        self._check_space(nbytes)
        next_chunk = self._state.next_chunk
        lengths = table.length.copy()
        lengths[e] = length - int(gone.sum())
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        chunks = table.chunk.copy()
        task_index = table.task_index.copy()
        fps = float(self.meta.fps)
        new_rows = {name: {k: v.copy() for k, v in rows[name].items()} for name in rows}
        with progress_bar(len(later), f"rewriting episodes {e}..{len(table) - 1}", len(later) > 50) as bar:
            for i, old in enumerate(later):
                chunk = next_chunk + i
                src = self._read_chunk(int(table.chunk[old]), int(table.length[old]))
                data = {name: (v[~gone] if old == e else v) for name, v in src.items()}
                n = int(lengths[old])
                if old == e:
                    data["frame_index"] = np.arange(n, dtype=np.int64)
                    data["timestamp"] = (np.arange(n) / fps).astype(np.float32)
                    task_index[e] = int(np.asarray(data["task_index"]).reshape(n, -1)[0, 0])  # its first task now
                data["episode_index"] = np.full(n, old, dtype=np.int64)
                data["index"] = np.arange(starts[old], starts[old] + n, dtype=np.int64)
                for name, spec in self._specs.items():
                    write_chunk(chunk_path(self.root, name, chunk, spec.ndim), _stored(data[name], spec))
                stats = self._stats_of(chunk, data)
                for name in new_rows:
                    for k in new_rows[name]:
                        new_rows[name][k][old] = stats[name][k]
                chunks[old] = chunk
                bar.update(1)
        zeros = np.zeros(len(table), dtype=np.int64)
        new_table = EpisodeTable.contiguous(
            lengths, task_index, chunks, np.where(np.arange(len(table)) >= e, zeros, table.episode_index_shift),
            np.where(np.arange(len(table)) >= e, zeros, table.index_shift))
        self._commit(new_table, new_rows, retire=table.chunk[e:].tolist())


class _EditMaps(Mapping):
    """What ``edit`` yields: each feature's frames mapped writable on first lookup, flushed at the end, and the
    episode's stats marked for recomputation for the features looked up."""

    def __init__(self, ds: WritableDataset, chunk: int, length: int, frames: slice, names: list[str]):
        self.ds, self.chunk, self.length, self.frames, self.names = ds, chunk, length, frames, names
        self.maps: dict[str, np.memmap] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.maps:
            if name not in self.names:
                raise KeyError(name)
            self.maps[name] = self.ds._map_chunk(name, self.chunk, self.length, writable=True)
            dirty = self.ds._dirty.setdefault(self.chunk, set())
            if not dirty:  # until recomputed its stats are gone from disk: a writer after a crash redoes them
                _remove(stats_path(self.ds.root, self.chunk))
            dirty.add(name)
        return self.maps[name][self.frames]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def close(self) -> None:
        for m in self.maps.values():
            m.flush()
        self.maps.clear()


def _drop_empty_features(state: StoreState) -> StoreState:
    """Drop arrays the source could give for no episode (cameras whose videos are all missing): the store then
    lists them as not materialized, as one made without them would, and stays writable."""
    n = len(state.table)
    empty = [name for name in state.arrays if n and len(state.unavailable(name)) == n]
    if not empty:
        return state
    attrs = state.attrs
    not_materialized = dict(attrs.get("not_materialized", {}))
    for name in empty:
        not_materialized[name] = f"unavailable in every episode; episode 0: {state.unavailable(name)[0]}"
    kept = {name: spec for name, spec in state.arrays.items() if name not in empty}
    new_state = commit_state(
        replace(state, arrays=kept), features={k: v for k, v in attrs["features"].items() if k not in empty},
        not_materialized=not_materialized,
        unavailable={k: v for k, v in attrs.get("unavailable", {}).items() if k not in empty})
    for name in empty:
        _remove(state.root / name)
    return new_state


def _remove(path: Path | str) -> None:
    path = Path(path)
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                _remove(child)
            path.rmdir()
        else:
            path.unlink()


def _stack(rows: list[dict[str, np.ndarray]], spec: ArraySpec) -> dict[str, np.ndarray]:
    if rows:
        return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}
    probe = episode_stats(np.zeros((1, *spec.frame_shape), dtype=spec.dtype), spec.kind)
    return {k: np.empty((0, *np.shape(v)), dtype=np.asarray(v).dtype) for k, v in probe.items()}


def _stored(values: np.ndarray, spec: ArraySpec) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=spec.dtype)


def _as_frames(name: str, value: Any, spec: ArraySpec) -> np.ndarray:
    """Frames of one feature as (T, *frame_shape) of the stored dtype; images may also come CHW or in [0, 1]."""
    arr = np.asarray(value)
    shape = spec.frame_shape
    if spec.kind == "image":
        if arr.ndim == 4 and arr.shape[1:] != shape and arr.shape[1:] == (shape[2], shape[0], shape[1]):
            arr = np.moveaxis(arr, 1, -1)  # CHW, as LeRobot's cameras give them
        if arr.dtype.kind == "f":
            if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0 and arr.max() <= 1):
                raise SchemaMismatchError(f"feature {name!r}: float images must be finite and in [0, 1]")
            arr = np.round(arr * 255)
        elif arr.dtype != np.uint8:
            raise SchemaMismatchError(f"feature {name!r}: images must be uint8 or float in [0, 1], got {arr.dtype}")
    if arr.ndim == 1 + len(shape) + 1 and shape == () and arr.shape[1:] == (1,):
        arr = arr[:, 0]  # scalars given as (T, 1)
    if arr.ndim != 1 + len(shape) or arr.shape[1:] != shape:
        raise SchemaMismatchError(f"feature {name!r}: expected frames of shape (T, {', '.join(map(str, shape))}), "
                                  f"got {arr.shape}".replace("(T, )", "(T,)"))
    if not np.can_cast(arr.dtype, spec.dtype, casting="same_kind") and not (
            spec.kind == "image" and arr.dtype.kind == "f"):
        raise SchemaMismatchError(f"feature {name!r}: {arr.dtype} values cannot be stored as {spec.dtype}")
    return arr.astype(spec.dtype, copy=False)
