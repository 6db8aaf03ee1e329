"""LeRobot source -> local store, in one pass over the data files, resumable at episode granularity.

The store's packs are planned for every episode of the source when it is created; each data file is read once
and every episode's frames are written straight from Arrow buffers (zero copy for numeric columns) to their rows;
cameras kept as mp4 are decoded (PyAV) in a thread pool, several episodes and cameras at once, straight into their
rows. Episodes become visible only at a commit (about every second and at the end), so an interrupted transcode
(exception, Ctrl-C, kill -9) leaves the store at its last commit, and the next call writes only what is missing.

The store's writer lock is taken only to create the store and for each commit, never while reading the source:
a process stalled on the network does not block another one fetching other episodes of the same store. Two
processes writing the same episode write the same bytes; a commit merges what the store already lists.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cameras.resize import resize_frame, resize_frames
from ..cameras.video import VideoUnavailable, have_pyav
from ..errors import (
    ArgumentError,
    FrameIndexError,
    NotMaterializedError,
    SchemaMismatchError,
    SourceMismatchError,
)
from ..lerobot.format import CAMERA_DTYPES
from ..lerobot.source_files import SourceFiles
from ..sources.base import origin
from ..sources.registry import describe_record, kind_of_record, made_from_source, same_source
from ..store.cameras import MP4_INDEX, kept_description, served_episodes
from ..store.committing import check_new_store_location, commit, create_store, remove_creation_debris
from ..store.packs import HUGE_PAGE, ensure_pack, read_raw_rows, row_writer, write_pack_bytes, write_rows
from ..store.state import StoreState, has_commit_point, read_state, set_resolver, unresolved_table
from ..store.tables import (
    DEFAULT_PACK_BYTES,
    MAX_EPISODES,
    MAX_FRAMES,
    MAX_PACK_BYTES,
    MAX_ROWS,
    ArraySpec,
    EpisodeTable,
    PackLayout,
    array_spec,
    pack_rows_target,
    plan_packs,
)
from ..utils.background import prefetched
from ..utils.fileio import WriterLock
from ..utils.hashing import crc32c
from ..utils.progress import progress_bar
from .camera_choices import CameraStorage, Resize, camera_array, every_camera
from .mp4_files import keep_mp4, write_mp4_index
from .resolve import commit_resolved, first_task_index, known_lengths, resolve_store

if TYPE_CHECKING:  # the caller gives the source: reading one is what needs pyarrow
    from ..doctor.checkup import Checkup
    from ..lerobot.source import LeRobotSource
    from ..sources.base import Source

__all__ = ["transcode", "array_specs", "missing_episodes", "fetch_missing", "recorded_source", "located_source"]

_COMMIT_EVERY_S = 1.0


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        return os.cpu_count() or 1


def array_specs(source: LeRobotSource) -> dict[str, ArraySpec]:
    """The store arrays a source maps to: one per numeric, image, (decoded) video, string or language feature."""
    return {name: array_spec(spec.dtype if spec.kind != "numeric" else spec.numpy_dtype.name, spec.frame_shape,
                             spec.names, spec.numpy_dtype if spec.kind in CAMERA_DTYPES else None)
            for name, spec in source.stored_features.items()}


def _camera_arrays(source: LeRobotSource, storage: Mapping[str, CameraStorage | str] | None,
                   resize: Mapping[str, Resize] | None) -> dict[str, ArraySpec]:
    """The arrays of a new store with the cameras kept as asked (only image/video features have a choice)."""
    specs = array_specs(source)
    cameras = [k for k, v in specs.items() if v.kind in CAMERA_DTYPES]
    storage, resize = every_camera(storage, resize, cameras, [k for k in cameras if specs[k].dtype != np.uint8])
    for what, choices in (("storage", storage), ("resize", resize)):
        wrong = [k for k in (choices or {}) if k not in cameras]
        if wrong:
            raise ArgumentError(f"{source.files.location()}: {what} applies to cameras (image/video features: "
                                f"{cameras}), not {wrong}")
    return {name: camera_array(name, spec, (storage or {}).get(name), (resize or {}).get(name))
            if name in cameras else spec for name, spec in specs.items()}


def _create(source: LeRobotSource, root: Path, record: dict, arrays: Mapping[str, ArraySpec], pack_bytes: int
            ) -> StoreState:
    t = source.episodes
    if not t.complete and not t.unresolved:  # located by a store's table: the others' tasks were not read
        t.check_located(range(len(t)), f"{root}: a new store")
    task_index = {task: i for i, task in enumerate(source.tasks)}
    first_task = first_task_index(t.tasks, task_index)
    length = unresolved_table(t.length, t.unresolved)  # (an unresolved row group: its frames, one run of rows)
    chunk, offset, rows = _plan(length, t.unresolved, pack_rows_target(arrays, pack_bytes))
    zeros = np.zeros(len(t), dtype=np.int64)
    info = source.info
    resized = {k: s.frame_shape for k, s in arrays.items() if s.resize}
    if resized:  # the store's info says what it holds: the stored frame shape, and where it came from
        features = {k: dict(v) for k, v in info["features"].items()}
        for k, shape in resized.items():
            features[k]["shape"] = list(shape)
        info = dict(info, features=features)
    files = {f"{name}/{MP4_INDEX}": write_mp4_index(source, root, name)
             for name, spec in arrays.items() if spec.storage == "mp4"}
    return create_store(StoreState(
        root=root, info=info, tasks=tuple(source.tasks), stats=source.stats, source=record, arrays=dict(arrays),
        table=EpisodeTable(np.cumsum(length) - length, length, first_task, chunk, offset, zeros, zeros),
        packs=PackLayout(rows, int(rows[-1]) if len(rows) else 0), materialized={}, unresolved=t.unresolved,
        not_materialized=source.not_materialized, pack_bytes=int(pack_bytes)).with_hashes({}, files),
        keep_files=True)


def _plan(length: np.ndarray, unresolved: Sequence[tuple[int, int, int, int]], target_rows: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`plan_packs` of episodes of ``length``, each unresolved row group planned as one episode of its frames
    (its episodes' rows one run of a pack, wherever their lengths turn out to split it)."""
    unit = np.arange(len(length))  # each episode's unit: itself, or its row group's first episode
    for a, b, _, _ in unresolved:
        unit[a:b] = a
    firsts = np.flatnonzero(np.r_[True, unit[1:] != unit[:-1]]) if len(length) else np.zeros(0, dtype=np.int64)
    sizes = np.add.reduceat(length, firsts) if len(length) else length
    chunk, offset, rows = plan_packs(sizes, target_rows)
    which = np.searchsorted(firsts, np.arange(len(length)), side="right") - 1
    within = np.cumsum(length) - length - (np.cumsum(length) - length)[firsts][which]
    return chunk[which], offset[which] + within, rows


def _check_storable(source: LeRobotSource, arrays: Mapping[str, ArraySpec]) -> None:
    """Refuse, before anything is made, a source whose declared episodes a store cannot hold (an episode of
    10**12 frames in a corrupt episode table): the store's limits are :data:`~lerobot_zarr.store.state.MAX_EPISODES`,
    rows per pack, bytes per pack file and frames in all."""
    length = unresolved_table(source.episodes.length, source.episodes.unresolved).astype(np.float64)
    widest = max((s.frame_bytes for s in arrays.values() if s.storage == "raw"), default=1)
    where = source.files.location("meta")
    if len(length) > MAX_EPISODES or length.sum() > MAX_FRAMES:
        raise SchemaMismatchError(f"{where}: {len(length)} episodes of {int(length.sum())} frames in all, more than "
                                  f"a store holds ({MAX_EPISODES} episodes, {MAX_FRAMES} frames)")
    bad = np.flatnonzero((length > MAX_ROWS) | (length * widest > MAX_PACK_BYTES))
    if bad.size:
        e = int(bad[0])
        raise SchemaMismatchError(f"{where}: episode {e} declares {int(length[e])} frames, more than a store holds "
                                  f"({MAX_ROWS} frames, {MAX_PACK_BYTES} bytes of its widest feature); the "
                                  f"episode table is corrupt", episode=e)




def _checked_state(root: Path, record: dict) -> StoreState:
    state = read_state(root, resolve=False)
    if not same_source(state.source, record):
        held, asked = describe_record(origin(state.source)), describe_record(record)
        if held == asked:  # same folder or repo: its content changed since the store was made
            held += " as it was when the store was made"
            asked = "its current content (its files changed since: " + (
                f"fingerprint {str(record.get('fingerprint'))[:12]}, was "
                f"{str(origin(state.source).get('fingerprint'))[:12]})" if record.get("fingerprint") else
                "another commit)")
        raise SourceMismatchError(
            f"{root}: this store was made from {held}, not from {asked}; delete the folder or pick another root= "
            f"for this source", path=root)
    return state


def transcode(source: LeRobotSource, root: str | os.PathLike, *, episodes: Sequence[int] | None = None,
              progress: bool = True, storage: Mapping[str, CameraStorage | str] | None = None,
              resize: Mapping[str, Resize] | None = None, client: Any = None,
              pack_bytes: int = DEFAULT_PACK_BYTES, doctor: bool = True) -> StoreState:
    """Write the given episodes (default: all) of ``source`` into the store at ``root``; return its state.

    Creates the store if needed (packs of about ``pack_bytes`` of the widest feature) and skips episodes already
    committed. ``storage`` and ``resize`` choose how a new store keeps cameras (:func:`camera_array`). ``doctor``
    checks the data as it passes by and keeps the findings in the store (:mod:`lerobot_zarr.doctor`). With a
    ``dask.distributed.Client`` the episodes are split by pack across its
    workers, which write their rows straight into the store (a folder every worker sees at the same path); this
    process commits.
    """
    root = Path(root)
    record = source.record()
    n_episodes = len(source.episodes)
    wanted = range(n_episodes) if episodes is None else sorted(set(int(e) for e in episodes))
    bad = [e for e in wanted if not 0 <= e < n_episodes]
    if bad:
        raise FrameIndexError(f"{source.files.location()}: episode {bad[0]} does not exist ({n_episodes} episodes)",
                              episode=bad[0])
    if wanted:  # frame shapes from a data file this call reads anyway (footers fetched together, when needed)
        source.will_read(wanted)
    if storage is not None or resize is not None:
        cameras = {k: v for k, v in source.stored_features.items() if v.kind in CAMERA_DTYPES}
        storage, resize = every_camera(storage, resize, list(cameras), [k for k, v in cameras.items() if v.depth])
    if has_commit_point(root):
        state = _checked_state(root, record)
        state = _heal_cameras(source, root, state, storage, resize)
        if storage or resize:
            wanted_arrays = _camera_arrays(source, storage, resize)
            for name in {*(storage or {}), *(resize or {})}:
                held = state.arrays.get(name)
                want = wanted_arrays[name]
                if held is None or (held.storage, held.codec_spec if held.storage == "compact" else None,
                                    held.resize) != (want.storage, want.codec_spec if want.storage == "compact"
                                                     else None, want.resize):
                    raise SourceMismatchError(f"{root}: the store keeps {name!r} {kept_description(held)}, not "
                                              f"{kept_description(want)} as asked; choose another root for another "
                                              f"storage or size", path=root, feature=name)
        if state.source.get("kind") == "edited":
            return state  # complete (writers need that) and since changed in place: nothing to fetch into it
        if served_episodes(state)[list(wanted)].all():
            return state
    else:
        check_new_store_location(root)
        # before the lock: the arrays' frame shapes come from a data file's footer, which may be a Hub read (a
        # stalled one must not keep other processes from making the store and fetching their episodes)
        arrays = _camera_arrays(source, storage, resize)
        _check_storable(source, arrays)  # before the folder is made
        with WriterLock(root):
            if not has_commit_point(root):
                remove_creation_debris(root)
                _create(source, root, record, arrays, pack_bytes)
        state = _checked_state(root, record)
    if state.unresolved:  # the row groups this reader read resolve their episodes (a commit of their lengths)
        state = commit_resolved(root, source.episodes)
        unresolved = state.unresolved_mask()
        pending = [e for e in wanted if unresolved[e]]
        if pending:
            raise NotMaterializedError(f"{root}: episodes {pending[:20]} are not resolved in the store and this reader "
                                       f"of its source did not read them", path=root, episode=pending[0])
    done = served_episodes(state)
    todo = [e for e in wanted if not done[e]]
    if not todo:
        return state
    checkup = _checkup(source, root, state) if doctor else None
    if client is not None:
        return _write_distributed(source, root, state, todo, progress, client, checkup)
    return _write_episodes(source, root, state, todo, progress, checkup)


def _checkup(source: LeRobotSource, root: Path, state: StoreState) -> Checkup:
    """The doctor of this transcode (its moments go on from those the store keeps)."""
    from ..doctor.checkup import Checkup
    from ..doctor.findings import load_moments

    return Checkup.of_source(source, covered=load_moments(root, len(state.table)).covered)


def missing_episodes(store: str | os.PathLike, episodes: Iterable[int] | None) -> list[int]:
    """The episodes among ``episodes`` (None: all) that the store cannot serve here yet, sorted (indices outside
    the store are left out)."""
    complete = served_episodes(read_state(store, resolve=False))
    wanted = range(len(complete)) if episodes is None else episodes
    return sorted({int(e) for e in wanted if 0 <= e < len(complete) and not complete[e]})


def fetch_missing(store: str | os.PathLike, episodes: Iterable[int], *, progress: bool = True,
                  token: str | bool | None = None) -> None:
    """Fetch or transcode the episodes among ``episodes`` that a store lacks from the source it records (a Hub repo
    at its recorded commit, a LeRobot folder, a folder of a bucket), if that is reachable; else raise
    ``NotMaterializedError``."""
    missing = missing_episodes(store, episodes)
    if missing:
        transcode(recorded_source(store, missing, token=token), store, episodes=missing, progress=progress)


def recorded_source(store: str | os.PathLike, episodes: Sequence[int], *, token: str | bool | None = None
                    ) -> LeRobotSource:
    """The source a store records, reopened by its kind (:meth:`~lerobot_zarr.sources.base.Source.from_record`: a
    Hub repo at its recorded commit from the endpoint configured now, which may be a mirror of the one the store was
    made from; a LeRobot folder; a bucket folder) and checked to hold the data the store was made from.
    ``NotMaterializedError`` when it cannot be reached (offline, the folder gone, a store recorded or edited in
    place), ``SourceMismatchError`` when its content changed since; both name ``episodes``, those wanted from it."""
    store, wanted = Path(store), list(episodes)[:20]
    recorded = read_state(store, resolve=False).source
    kind = kind_of_record(recorded)
    if kind is None or not made_from_source(recorded):
        raise NotMaterializedError(f"{store}: episodes {wanted} are not in the store and its source "
                                   f"({describe_record(recorded)}) is not available to transcode them")
    try:
        source = kind.from_record(recorded, token=token)
    except NotMaterializedError as exc:
        raise NotMaterializedError(f"{store}: episodes {wanted} are not in the store, and {exc}") from None
    why = source.offline()
    if why:
        raise NotMaterializedError(f"{store}: {why} and episodes {wanted} are not in the store")
    dataset = located_source(source, store, episodes)
    _checked_state(store, dataset.record())
    return dataset


def located_source(src: Source, store: Path, episodes: Iterable[int] | None, *,
                   storage: Mapping[str, Any] | None = None, resize: Mapping[str, Any] | None = None
                   ) -> LeRobotSource:
    """The reader of ``src`` for a transcode of ``episodes`` into ``store``. Where the store, made from this very
    source (same identity), holds every episode's start and length already and the source is read by ranges (a Hub
    repo, a bucket), one that locates only these episodes (the footers of the episode table and the row groups
    holding them: :class:`~lerobot_zarr.lerobot.source_meta.KnownEpisodes`), not LeRobot's whole episode table;
    for a new store, one that takes every episode's start, length and task from the table's footers where they give
    them (:func:`_first_open_source`); else (many episodes, cameras to heal or choose, a local folder) the source's
    whole reader."""
    from ..lerobot.source import LeRobotSource
    from ..lerobot.source_meta import LOCATE_MOST, KnownEpisodes

    # (a dataset read whole already: a bucket's cache path needs its data files)
    if src.held_dataset() is not None or episodes is None or storage is not None or resize is not None:
        return src.dataset()
    if not has_commit_point(store):  # a first open: the store is made from what the table's footers give
        return _first_open_source(src, episodes)
    state = read_state(store, resolve=False)
    n = len(state.table)
    wanted = sorted({int(e) for e in episodes})
    if (not wanted or len(wanted) > max(1, n // LOCATE_MOST) or not all(0 <= e < n for e in wanted)
            or origin(state.source) != state.source
            or any(why.startswith(_OLD_PYAV_REASON) for why in state.not_materialized.values())):
        return src.dataset()
    files = src.files()
    if files.local_path("meta/info.json") is not None:  # a folder on this machine: its table is read at disk speed
        return src.dataset()
    reader = LeRobotSource(files, KnownEpisodes(*known_lengths(state), tuple(wanted), state.info))
    return reader if same_source(state.source, reader.record()) else src.dataset()


def _first_open_source(src: Source, episodes: Iterable[int]) -> LeRobotSource:
    """The reader of a source read by ranges (a Hub repo, a bucket) for the first transcode of ``episodes``: every
    episode's start, length and tasks from the episode table's footers and the row groups they need, not the whole
    table, where LeRobot's layout allows (:meth:`~lerobot_zarr.lerobot.source_meta.KnownEpisodes.first_open`)."""
    from ..lerobot.source import LeRobotSource
    from ..lerobot.source_meta import KnownEpisodes

    wanted = sorted({int(e) for e in episodes})
    if not wanted:
        return src.dataset()
    files = src.files()
    if files.local_path("meta/info.json") is not None:  # a folder on this machine: its table is read at disk speed
        return src.dataset()
    return LeRobotSource(files, KnownEpisodes.first_open(wanted))


_OLD_PYAV_REASON = "decoding videos needs PyAV"  # what earlier versions recorded in a store made without it


def _heal_cameras(source: LeRobotSource, root: Path, state: StoreState,
                  storage: Mapping[str, CameraStorage | str] | None, resize: Mapping[str, Resize] | None
                  ) -> StoreState:
    """Give back their array to the video cameras that an earlier version left out of a store because PyAV was
    not installed then (it recorded that as a property of the data): where PyAV is installed now, the camera is
    added (kept as ``storage``/``resize`` ask, else raw) with no episode decoded, so this transcode decodes it."""
    lost = [name for name, why in state.not_materialized.items()
            if why.startswith(_OLD_PYAV_REASON) and name not in state.arrays
            and getattr(source.features.get(name), "kind", None) == "video"]
    if not lost or state.source.get("kind") == "edited" or not have_pyav():
        return state
    arrays = _camera_arrays(source, {k: v for k, v in (storage or {}).items() if k in lost},
                            {k: v for k, v in (resize or {}).items() if k in lost})
    with WriterLock(root):
        state = read_state(root, resolve=False)
        lost = [name for name in lost if name in state.not_materialized and name not in state.arrays]
        if not lost:
            return state
        for name in lost:
            if arrays[name].storage == "mp4":
                write_mp4_index(source, root, name)
        return commit(replace(state, arrays={**state.arrays, **{name: arrays[name] for name in lost}},
                              not_materialized={k: v for k, v in state.not_materialized.items() if k not in lost}),
                      previous=state)


_UNIT_EPISODES = 64  # at most this many episodes per distributed task (of one pack): retries redo little


def _units(source: LeRobotSource, state: StoreState, todo: list[int]) -> list[list[int]]:
    """Episodes grouped by data file (each read once; a bad file fails only its units) and pack, in groups of at
    most ``_UNIT_EPISODES``; whole packs when a camera is compact (one process may append to a compact pack)."""
    if any(spec.storage != "raw" for spec in state.arrays.values()):
        by_pack: dict[int, list[int]] = {}
        for e in todo:
            by_pack.setdefault(int(state.table.chunk[e]), []).append(e)
        return list(by_pack.values())
    groups: dict[tuple[str, int], list[int]] = {}
    for e in todo:
        groups.setdefault((source.episodes.data_file[e], int(state.table.chunk[e])), []).append(e)
    return [eps[i:i + _UNIT_EPISODES] for eps in groups.values() for i in range(0, len(eps), _UNIT_EPISODES)]


def transcode_unit(files: SourceFiles, root: str, episodes: list[int], doctor: bool = False) -> tuple:
    """A distributed task: write the rows of ``episodes`` into the store at ``root`` (not committed); return them,
    the cameras they lack (unavailable, with why), the cameras this worker could not decode (no PyAV), the
    content hash of every episode and feature written, and (``doctor``) what the doctor found in them.

    Writing the same rows again is harmless, so a task retried after a worker died (or run twice) leaves the
    same bytes; only the caller's commit makes them part of the store."""
    from ..lerobot.source import LeRobotSource

    source = LeRobotSource(files)
    state = read_state(Path(root), resolve=False)
    unavailable: dict[str, dict[int, str]] = {}
    rows = _Rows(root, state)
    checkup = _checkup(source, Path(root), state) if doctor else None
    for e, timestamps, frames in rows.inputs(source, episodes):
        if checkup is not None and frames is not None:
            checkup.frames(e, frames)
        for name in rows.take(e, frames):
            try:
                rows.hashes.setdefault(e, {})[name] = _decode(source, root, state, e, name, timestamps, checkup)
            except VideoUnavailable as exc:
                unavailable.setdefault(name, {})[e] = str(exc)
    rows.flush()
    return list(episodes), unavailable, rows.skipped, rows.hashes, checkup.handed_over() if checkup else None


def _write_distributed(source: LeRobotSource, root: Path, state: StoreState, todo: list[int], progress: bool,
                       client: Any, checkup: Checkup | None = None) -> StoreState:
    """Fan the episodes out to a dask cluster's workers, committing here about every second as tasks finish."""
    from distributed import as_completed

    units = _units(source, state, todo)
    futures = client.map(transcode_unit, [source.files] * len(units), [str(root)] * len(units), units,
                         [checkup is not None] * len(units), pure=False, retries=3)
    commits = _Commits(root, checkup=checkup)
    with progress_bar(int(source.episodes.length[todo].sum()),
                      f"transcoding {source.files.name} on {len(client.scheduler_info()['workers'])} workers",
                      progress) as bar:
        try:
            for future in as_completed(futures, loop=client.loop):
                episodes, gaps, skipped, hashes, found = future.result()
                if checkup is not None and found is not None:
                    checkup.ingest(*found)
                commits.add(episodes, gaps, skipped, hashes)
                bar.update(int(source.episodes.length[episodes].sum()))
        finally:
            client.cancel(futures)
            commits.flush()
    state = read_state(root, resolve=False)
    if checkup is not None:
        checkup.finish(root, state)  # keeps its files in .doctor/, outside the store's state
    return state


class _Commits:
    """Episodes written (or known unavailable for some features), with their content hashes, committed about every
    second and at the end. Each commit takes the writer lock briefly and merges into the store's latest state."""

    def __init__(self, root: Path, before: Any = None, checkup: Checkup | None = None):
        self.root, self.before = root, before  # before: called first at each commit (pending writes)
        self.checkup = checkup  # the doctor: its findings of the episodes are kept just before their commit
        self.done: list[int] = []
        self.unavailable: dict[str, dict[int, str]] = {}
        self.skipped: dict[str, set[int]] = {}  # cameras not decoded (no PyAV where the rows were written)
        self.hashes: dict[int, dict[str, int]] = {}
        self.last = time.monotonic()

    def add(self, episodes: list[int], unavailable: dict[str, dict[int, str]], skipped: list[str],
            hashes: Mapping[int, Mapping[str, int]]) -> None:
        self.done.extend(episodes)
        for name, reasons in unavailable.items():
            self.unavailable.setdefault(name, {}).update(reasons)
        for name in skipped:
            self.skipped.setdefault(name, set()).update(episodes)
        for e, per in hashes.items():
            self.hashes.setdefault(int(e), {}).update(per)
        if time.monotonic() - self.last >= _COMMIT_EVERY_S:
            self.flush(whole=False)

    def flush(self, *, whole: bool = True) -> None:
        """Commit the episodes added so far. ``before(whole=...)`` writes what is pending and names the episodes
        whose rows it holds back (``whole=False``: the tail of a run, see :class:`_Rows`): they wait for the next
        commit."""
        if not self.done:
            return
        waiting = set(self.before(whole=whole)) if self.before is not None else set()
        if self.checkup is not None:  # episodes whose findings wait for their batch wait with them
            waiting.update(self.checkup.waiting(whole, _HOLD_S))
        ready = [e for e in self.done if e not in waiting]
        if ready:
            with WriterLock(self.root):
                state = read_state(self.root, resolve=False)
                unavailable = {name: {e: why for e, why in reasons.items() if e not in waiting}
                               for name, reasons in self.unavailable.items()}
                written = {name: [e for e in ready if e not in unavailable.get(name, {})
                                  and e not in self.skipped.get(name, ())] for name in state.arrays}
                t = state.table
                hashes = {(int(t.chunk[e]), int(t.offset[e])): {name: h for name, h in per.items()
                                                                if name in state.arrays}
                          for e, per in self.hashes.items() if e not in waiting}
                if self.checkup is not None:
                    self.checkup.save(self.root, state, ready, self.hashes)
                commit(state.with_materialized(written, unavailable).with_hashes(hashes), previous=state)
        self.done = [e for e in self.done if e in waiting]
        self.unavailable = {name: kept for name, reasons in self.unavailable.items()
                            if (kept := {e: why for e, why in reasons.items() if e in waiting})}
        self.skipped = {name: kept for name, eps in self.skipped.items() if (kept := eps & waiting)}
        self.hashes = {e: per for e, per in self.hashes.items() if e in waiting}
        self.last = time.monotonic()


def _undecodable(state: StoreState) -> set[str]:
    """The video cameras this process cannot write: all of them where PyAV is not installed. Their episodes stay
    not decoded (a missing package is not a property of the data; an episode with no video file is: unavailable),
    and the samples of this process leave them out, saying what to install."""
    cameras = {name for name, spec in state.arrays.items() if spec.kind == "video"}
    return cameras if cameras and not have_pyav() else set()


def _location(state: StoreState, e: int) -> tuple[int, int, int]:
    pack = int(state.table.chunk[e])
    return pack, int(state.table.offset[e]), int(state.packs.rows[pack])


class _Rows:
    """The rows read from the data files, written per pack and feature in large writes. Consecutive episodes of a
    pack are gathered and written in one system call per feature (:func:`write_pack_bytes`); until the run ends
    (another pack, a gap, the end), a write stops at the last :data:`HUGE_PAGE` boundary of the pack file and the
    rest waits for the next one, so every huge page of a pack is filled by one write and the page cache holds it
    as one huge folio: sampling right after a transcode gets huge pages too. A tail waits at most ``_HOLD_S``
    (an interrupted transcode loses no more; a slow one, decoding cameras, writes its small features as they come
    and gets their huge pages when they are read back from disk). Compact features are written per episode at
    once. ``hashes[e][feature]``: the content hash of what was written, computed from the buffers."""

    def __init__(self, root: str | Path, state: StoreState):
        self.root, self.state = root, state
        self.raw = {n: s for n, s in state.arrays.items() if s.kind != "video" and s.storage == "raw"}
        self.compact = {n: s for n, s in state.arrays.items() if s.kind != "video" and s.storage != "raw"}
        videos = [n for n, s in state.arrays.items() if s.kind == "video"]
        self.skipped = sorted(_undecodable(state))
        # per camera this process decodes, the episodes it still lacks
        self.cameras = {n: ~state.done_mask(n) for n in videos if n not in self.skipped}
        self.others_done = state.complete_episodes(skip=videos)  # episodes whose data-file features are stored
        self.resized = {n: s.resize_spec for n, s in state.arrays.items() if s.resize and s.kind == "image"}
        self.parts: dict[str, list[np.ndarray]] = {n: [] for n in self.raw}  # bytes from self.at[n] on
        self.at = dict.fromkeys(self.raw, 0)
        self.waiting: list[tuple[int, int, float]] = []  # (episode, its end row, when) of those not all written
        self.pack, self.next, self.nbytes = -1, 0, 0
        self.hashes: dict[int, dict[str, int]] = {}

    def inputs(self, source: LeRobotSource, episodes: Sequence[int]
               ) -> Iterator[tuple[int, np.ndarray, dict[str, np.ndarray] | None]]:
        """``(episode, timestamps, frames)``: frames read from the data files, or None for an episode whose
        data-file features the store holds already (a camera decoded later: its timestamps come from the store,
        nothing is downloaded again)."""
        stored = [e for e in episodes if self.others_done[e]]
        for e in stored:
            pack, offset, rows = _location(self.state, e)
            yield e, read_raw_rows(self.root, "timestamp", self.state.arrays["timestamp"], pack, rows, offset,
                                   int(self.state.table.length[e])), None
        for e, frames in source.iter_episodes([e for e in episodes if not self.others_done[e]]):
            yield e, frames["timestamp"], frames

    def take(self, e: int, frames: dict[str, np.ndarray] | None) -> list[str]:
        """Write episode ``e``'s data-file features (unless ``frames`` is None); return the cameras left to
        decode."""
        if frames is not None:
            self.add(e, frames)
        return [n for n, todo in self.cameras.items() if todo[e]]  # (a camera's pack is made as it is written)

    def add(self, e: int, frames: dict[str, np.ndarray]) -> None:
        """Take episode ``e``'s frames (written by the next :meth:`flush` that reaches them)."""
        pack, offset, rows = _location(self.state, e)
        if self.waiting and (pack != self.pack or offset != self.next):
            self.flush()
        elif self.nbytes >= _WRITE_BYTES:
            self.flush(whole=False)
        ensure_pack(self.root, self.raw, pack, rows)  # cameras make their pack file when they write a frame
        if not self.waiting:
            self.pack = pack
            self.at = {name: offset * spec.frame_bytes for name, spec in self.raw.items()}
        for name, how in self.resized.items():
            frames[name] = resize_frames(frames[name], how["size"], crop=how.get("crop"),
                                         interpolation=how["interpolation"])
        hashes = self.hashes.setdefault(e, {})
        for name, spec in self.raw.items():
            part = np.ascontiguousarray(frames[name], dtype=spec.dtype)
            self.parts[name].append(part.reshape(-1).view(np.uint8))
            self.nbytes += part.nbytes
            hashes[name] = crc32c(part)
        self.next = offset + int(self.state.table.length[e])
        if self.raw:
            self.waiting.append((e, self.next, time.monotonic()))
        for name, spec in self.compact.items():
            hashes[name] = write_rows(self.root, name, spec, pack, offset, frames[name], rows)

    def flush(self, *, whole: bool = True) -> list[int]:
        """Write what was gathered: all of it (``whole``, or when a tail has waited ``_HOLD_S``), or up to each
        feature's last huge-page boundary. Return the episodes whose rows are not all written yet (they must not
        be committed)."""
        if self.waiting and time.monotonic() - self.waiting[0][2] >= _HOLD_S:
            whole = True
        if self.nbytes:
            self.nbytes = 0
            for name, spec in self.raw.items():
                parts = self.parts[name]
                if not parts:  # all written by the last flush, which ended on a page boundary
                    continue
                data = parts[0] if len(parts) == 1 else np.concatenate(parts)
                start = self.at[name]
                end = start + len(data)
                cut = end if whole else max(start, end - end % HUGE_PAGE)
                if cut > start:
                    write_pack_bytes(self.root, name, spec, self.pack, start, data[:cut - start])
                self.parts[name] = [data[cut - start:]] if cut < end else []
                self.at[name] = cut
                self.nbytes += end - cut
        written = min((self.at[name] // spec.frame_bytes for name, spec in self.raw.items()), default=0)
        self.waiting = [w for w in self.waiting if w[1] > written]
        return [w[0] for w in self.waiting]


_WRITE_BYTES = 32 << 20
_HOLD_S = 10.0


def _decode(source: LeRobotSource, root: str | Path, state: StoreState, e: int, name: str, timestamps: np.ndarray,
            checkup: Checkup | None = None) -> int:
    """One episode of a video camera into the store: decoded into its rows (resized first if the store keeps the
    camera smaller; ``checkup`` watching), or, kept as mp4, its file copied into the store. Returns the content hash
    of what the store holds for it (the rows written, or the whole mp4 file)."""
    spec = state.arrays[name]
    if spec.storage == "mp4":
        return keep_mp4(source, Path(root), e, name)
    watch = checkup.camera(e, name, timestamps) if checkup is not None else None
    with watch or contextlib.nullcontext():
        pack, offset, rows = _location(state, e)
        with row_writer(root, name, spec, pack, offset, len(timestamps), rows) as writer:
            sink = writer.write
            if spec.resize:
                how = spec.resize_spec
                shape = tuple(how["from"])

                def sink(frame: bytes) -> None:
                    writer.write(resize_frame(np.frombuffer(frame, np.uint8).reshape(shape), how["size"],
                                              crop=how.get("crop"), interpolation=how["interpolation"]))

            source.decode_video(e, name, timestamps, watch.wrap(sink) if watch else sink,
                                rewind=watch.rewinding(writer.rewind) if watch else writer.rewind,
                                log=watch.log if watch else None)
        if writer.written != len(timestamps):
            raise VideoUnavailable(f"episode {e}, camera {name!r}: decoded {writer.written} of its "
                                   f"{len(timestamps)} frames")
        return writer.crc


def _write_episodes(source: LeRobotSource, root: Path, state: StoreState, todo: list[int], progress: bool,
                    checkup: Checkup | None = None) -> StoreState:
    """Write ``todo``'s rows (cameras decoded in a thread pool, parallel across episodes and cameras; ``checkup``
    checking them), commit about every second. An episode is committed when all its features are written or known
    unavailable."""
    rows = _Rows(root, state)
    cameras = list(rows.cameras)
    workers = min(8, _cpu_count()) if cameras else 0
    commits = _Commits(root, before=rows.flush, checkup=checkup)

    def finish(e: int, decoding: dict[str, Future]) -> None:
        unavailable = {name: {e: f"episode {e}, camera {name!r}: {why}"} for name in rows.skipped
                       if (why := source.video_missing(e, name)) is not None}
        hashes = rows.hashes.pop(e, {})
        for name, future in decoding.items():
            try:
                hashes[name] = future.result()
            except VideoUnavailable as exc:
                unavailable[name] = {e: str(exc)}
        commits.add([e], unavailable, rows.skipped, {e: hashes})
        bar.update(int(source.episodes.length[e]))

    what = f"transcoding {source.files.name}"
    if cameras:
        what += f" (decoding {len(cameras)} camera{'s' if len(cameras) > 1 else ''})"
    with (progress_bar(int(source.episodes.length[todo].sum()), what, progress) as bar,
          ThreadPoolExecutor(max(1, workers), thread_name_prefix="lerobot_zarr-video") as pool):
        in_flight: deque[tuple[int, dict[str, Future]]] = deque()
        try:
            for e, timestamps, frames in prefetched(rows.inputs(source, todo), depth=4):
                if checkup is not None and frames is not None:
                    checkup.frames(e, frames)
                decoding = {name: pool.submit(_decode, source, root, state, e, name, timestamps, checkup)
                            for name in rows.take(e, frames)}
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
    state = read_state(root, resolve=False)
    if checkup is not None:
        checkup.finish(root, state)  # keeps its files in .doctor/, outside the store's state
    return state


set_resolver(functools.partial(resolve_store, source_of=recorded_source))  # (read_state resolves through it)
