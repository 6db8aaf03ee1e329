"""LeRobot source -> local store, in one pass over the data files, resumable at episode granularity.

Each data file is read once; every episode's frames are written straight from Arrow buffers (zero copy for
numeric columns) into its chunk files; cameras kept as mp4 are decoded (PyAV) in a thread pool, several
episodes and cameras at once, straight into their chunk files. Episodes become visible only at a commit (about
every second and at the end), so an interrupted transcode (exception, Ctrl-C, kill -9) leaves the store at its
last commit, and the next call writes only what is missing.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ._background import prefetched
from ._progress import progress_bar
from .errors import FrameIndexError, NotMaterializedError, StoreError
from .files import SourceFiles
from .source import FeatureSpec, LeRobotSource
from .store import (
    STORAGES,
    ArraySpec,
    EpisodeTable,
    StoreState,
    WriterLock,
    check_new_store_location,
    chunk_path,
    chunk_writer,
    commit,
    create_store,
    has_commit_point,
    read_state,
    write_frames,
)
from .video import VideoUnavailable, have_pyav

__all__ = ["transcode", "array_specs", "array_spec_of"]

_COMMIT_EVERY_S = 1.0


def array_spec_of(spec: FeatureSpec) -> ArraySpec:
    """The store array of one numeric or image feature."""
    if spec.kind in ("image", "video"):
        dims = tuple(n if isinstance(n, str) else f"dim_{k}" for k, n in enumerate(spec.names or ()))
        if len(dims) != 3 or len(set(dims)) != 3:
            dims = ("height", "width", "channels")
    else:
        dims = tuple(f"dim_{k}" for k in range(len(spec.frame_shape)))
    return ArraySpec(spec.numpy_dtype.newbyteorder("<"), spec.frame_shape, dims, spec.kind)


def _check_storage(storage: Mapping[str, str] | None, specs: Mapping[str, ArraySpec], where: str) -> dict[str, str]:
    """``{camera: "raw" | "compact"}``: only image/video features have a choice."""
    storage = dict(storage or {})
    for name, choice in storage.items():
        if choice not in STORAGES:
            raise ValueError(f"storage[{name!r}] must be one of {STORAGES}, got {choice!r}")
        if name not in specs or specs[name].kind not in ("image", "video"):
            cameras = [k for k, v in specs.items() if v.kind in ("image", "video")]
            raise ValueError(f"{where}: storage applies to cameras (image/video features: {cameras}), not {name!r}")
    return storage


def array_specs(source: LeRobotSource) -> dict[str, ArraySpec]:
    """The store arrays a source maps to: one per numeric or image feature."""
    return {name: array_spec_of(spec) for name, spec in source.stored_features.items()}


def _create(source: LeRobotSource, root: Path, source_record: dict, storage: Mapping[str, str]) -> StoreState:
    t = source.episodes
    task_index = {task: i for i, task in enumerate(source.tasks)}
    first_task = np.array([task_index.get(ts[0], -1) if ts else -1 for ts in t.tasks], dtype=np.int64)
    attrs = {
        "info": source.info,
        "tasks": source.tasks,
        "stats": source.stats,
        "source": source_record,
        "not_materialized": source.not_materialized,
    }
    zeros = np.zeros(len(t), dtype=np.int64)
    table = EpisodeTable(t.start, t.length, first_task, np.arange(len(t), dtype=np.int64), zeros, zeros)
    specs = {name: replace(spec, storage=storage.get(name, "raw")) for name, spec in array_specs(source).items()}
    return create_store(root, specs, table, attrs)


def _same_source(a: dict | None, b: dict) -> bool:
    """Same data: a Hub commit is the same wherever it is served from (mirror, other endpoint)."""
    def key(r: dict | None) -> dict | None:
        if r and r.get("kind") == "edited":  # a store changed in place by a writer still comes from its source
            r = r.get("from")
        return {k: v for k, v in r.items() if k != "endpoint"} if r and r.get("kind") == "hub" else r

    return key(a) == key(b)


def _checked_state(root: Path, record: dict) -> StoreState:
    state = read_state(root)
    if not _same_source(state.attrs.get("source"), record):
        raise StoreError(f"{root}: store was made from {state.attrs.get('source')}, not from {record}")
    return state


def transcode(source: LeRobotSource, root: str | os.PathLike, *, episodes: Sequence[int] | None = None,
              progress: bool = True, storage: Mapping[str, str] | None = None, client: Any = None) -> StoreState:
    """Write the given episodes (default: all) of ``source`` into the store at ``root``; return its state.

    Creates the store if needed, skips episodes already committed, and holds the store's writer lock
    meanwhile (a second process transcoding into the same store waits for the first). ``storage`` chooses how a
    new store keeps cameras: ``"raw"`` (default: memory-mapped, fastest) or ``"compact"`` (zstd per frame).
    With a ``dask.distributed.Client`` the episodes are split by data file across its workers, which write their
    chunks straight into the store (a folder every worker sees at the same path); this process commits.
    """
    root = Path(root)
    record = source.record()
    n_episodes = len(source.episodes)
    wanted = range(n_episodes) if episodes is None else sorted(set(int(e) for e in episodes))
    bad = [e for e in wanted if not 0 <= e < n_episodes]
    if bad:
        raise FrameIndexError(f"{source.files.location()}: episode {bad[0]} does not exist ({n_episodes} episodes)")
    if has_commit_point(root):
        state = _checked_state(root, record)
        for name, choice in (storage or {}).items():
            held = state.arrays[name].storage if name in state.arrays else None
            if held != choice:
                raise StoreError(f"{root}: the store keeps {name!r} as {held!r}, not {choice!r}; choose another "
                                 f"root for another storage")
        if state.attrs["source"].get("kind") == "edited":
            return state  # complete (writers need that) and since changed in place: nothing to fetch into it
        if state.complete_episodes()[list(wanted)].all():
            return state  # nothing to write: no need to wait for a writer
    else:
        check_new_store_location(root)
    with WriterLock(root):
        if wanted:
            source.schema_from_episode(wanted[0])
        if has_commit_point(root):
            state = _checked_state(root, record)
        else:
            choices = _check_storage(storage, array_specs(source), source.files.location())
            state = _create(source, root, record, choices)
        done = state.complete_episodes()
        todo = [e for e in wanted if not done[e]]
        if not todo:
            return state
        if client is not None:
            return _write_distributed(source, root, state, todo, progress, client)
        return _write_episodes(source, root, state, todo, progress)


_UNIT_EPISODES = 64  # at most this many episodes per distributed task: retries redo little, workers stay busy


def _units(source: LeRobotSource, todo: list[int]) -> list[list[int]]:
    """Episodes grouped by data file (each file read once), in groups of at most ``_UNIT_EPISODES``."""
    by_file: dict[str, list[int]] = {}
    for e in todo:
        by_file.setdefault(source.episodes.data_file[e], []).append(e)
    return [eps[i:i + _UNIT_EPISODES] for eps in by_file.values() for i in range(0, len(eps), _UNIT_EPISODES)]


def transcode_unit(files: SourceFiles, root: str, episodes: list[int]) -> tuple[list[int], dict[str, dict[int, str]]]:
    """A distributed task: write the chunks of ``episodes`` into the store at ``root`` (not committed).

    Writing the same chunk files again is harmless, so a task retried after a worker died (or run twice) leaves
    the same bytes; only the caller's commit makes them part of the store."""
    source = LeRobotSource(files)
    state = read_state(Path(root))
    unavailable: dict[str, dict[int, str]] = {}
    for e, frames in source.iter_episodes(episodes):
        for name in _write_data_chunks(root, state, e, frames):
            try:
                _decode(source, e, name, state.arrays[name], frames["timestamp"], _chunk_of(root, state, name, e))
            except VideoUnavailable as exc:
                unavailable.setdefault(name, {})[e] = str(exc)
    return list(episodes), unavailable


def _write_distributed(source: LeRobotSource, root: Path, state: StoreState, todo: list[int], progress: bool,
                       client: Any) -> StoreState:
    """Fan the episodes out to a dask cluster's workers, committing here about every second as tasks finish."""
    from distributed import as_completed

    _check_cameras(root, state)
    units = _units(source, todo)
    futures = client.map(transcode_unit, [source.files] * len(units), [str(root)] * len(units), units,
                         pure=False, retries=3)
    commits = _Commits(root, state)
    with progress_bar(int(source.episodes.length[todo].sum()),
                      f"transcoding {source.files.name} on {len(client.scheduler_info()['workers'])} workers",
                      progress) as bar:
        try:
            for future in as_completed(futures, loop=client.loop):
                episodes, gaps = future.result()
                commits.add(episodes, gaps)
                bar.update(int(source.episodes.length[episodes].sum()))
        finally:
            client.cancel(futures)
            commits.flush()
    return read_state(root)


class _Commits:
    """Episodes written (or known unavailable for some features), committed about every second and at the end."""

    def __init__(self, root: Path, state: StoreState):
        self.root, self.names = root, list(state.arrays)
        self.done: list[int] = []
        self.unavailable: dict[str, dict[int, str]] = {}
        self.last = time.monotonic()

    def add(self, episodes: list[int], unavailable: dict[str, dict[int, str]]) -> None:
        self.done.extend(episodes)
        for name, reasons in unavailable.items():
            self.unavailable.setdefault(name, {}).update(reasons)
        if time.monotonic() - self.last >= _COMMIT_EVERY_S:
            self.flush()

    def flush(self) -> None:
        if self.done:
            written = {name: [e for e in self.done if e not in self.unavailable.get(name, {})] for name in self.names}
            commit(self.root, features_episodes=written, unavailable=self.unavailable)
        self.done, self.unavailable, self.last = [], {}, time.monotonic()


def _check_cameras(root: Path, state: StoreState) -> None:
    cameras = [name for name, spec in state.arrays.items() if spec.kind == "video"]
    if cameras and not have_pyav():
        raise NotMaterializedError(f"{root}: decoding the cameras {cameras} needs PyAV: "
                                   f"pip install 'lerobot_zarr[video]'")


def _chunk_of(root: str | Path, state: StoreState, name: str, e: int) -> str:
    return chunk_path(root, name, int(state.table.chunk[e]), state.arrays[name].ndim)


def _write_data_chunks(root: str | Path, state: StoreState, e: int, frames: dict[str, np.ndarray]) -> list[str]:
    """Write episode ``e``'s chunks of every feature read from the data files; return the cameras left to decode."""
    for name, spec in state.arrays.items():
        if spec.kind != "video":
            write_frames(spec, _chunk_of(root, state, name, e), frames[name])
    return [name for name, spec in state.arrays.items() if spec.kind == "video"]


def _decode(source: LeRobotSource, e: int, name: str, spec: ArraySpec, timestamps: np.ndarray, path: str) -> None:
    with chunk_writer(spec, path, len(timestamps)) as writer:
        source.decode_video(e, name, timestamps, writer.write)


def _write_episodes(source: LeRobotSource, root: Path, state: StoreState, todo: list[int], progress: bool
                    ) -> StoreState:
    """Write ``todo``'s chunks (cameras decoded in a thread pool, parallel across episodes and cameras), commit
    about every second. An episode is committed when all its features are written or known unavailable."""
    _check_cameras(root, state)
    cameras = [name for name, spec in state.arrays.items() if spec.kind == "video"]
    workers = min(8, len(os.sched_getaffinity(0))) if cameras else 0
    commits = _Commits(root, state)

    def finish(e: int, decoding: dict[str, Future]) -> None:
        unavailable: dict[str, dict[int, str]] = {}
        for name, future in decoding.items():
            try:
                future.result()
            except VideoUnavailable as exc:
                unavailable[name] = {e: str(exc)}
        commits.add([e], unavailable)
        bar.update(int(source.episodes.length[e]))

    what = f"transcoding {source.files.name}" + (f" (decoding {len(cameras)} cameras)" if cameras else "")
    with (progress_bar(int(source.episodes.length[todo].sum()), what, progress) as bar,
          ThreadPoolExecutor(max(1, workers), thread_name_prefix="lerobot_zarr-video") as pool):
        in_flight: deque[tuple[int, dict[str, Future]]] = deque()
        try:
            for e, frames in prefetched(source.iter_episodes(todo), depth=4):
                decoding = {name: pool.submit(_decode, source, e, name, state.arrays[name], frames["timestamp"],
                                              _chunk_of(root, state, name, e))
                            for name in _write_data_chunks(root, state, e, frames)}
                in_flight.append((e, decoding))
                while in_flight and (len(in_flight) > 2 * workers
                                     or all(f.done() for f in in_flight[0][1].values())):
                    finish(*in_flight.popleft())
            while in_flight:
                finish(*in_flight.popleft())
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        commits.flush()
    return read_state(root)
