"""Writing a store in place: record episodes, edit frames, delete episodes or frames, keep a ring buffer.

One writer per store (the ``.lock`` flock, released by the kernel when the writer dies), any number of readers
in other processes. Every change is one commit of the root ``zarr.json`` (see :mod:`lerobot_zarr.store`): new rows
are written where no committed episode points (the free rows of the last pack, or a new pack) and flushed before
the commit that lists them; packs left without a live episode are retired after it; so a writer killed at any
instant leaves the store at its last commit. Frame edits (:meth:`WritableDataset.edit`) are the exception by
nature: they write through shared memory maps, so readers see them at once, and a crash in the middle of one
leaves it partly applied (the next writer then recomputes the stats of that episode).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
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

from ..utils.fileio import (
    WriterLock,
    atomic_write,
    check_in_store,
    copy_file,
    find_links,
    link_or_copy,
    load_json,
    read_bounded,
)
from ..utils.hashing import crc32c
from ..store.packs import remove_retired, retire_pack, write_rows
from ..utils.progress import progress_bar
from ..sampling.dataset import ImageFormat, LeRobotZarrDataset, _pack_file
from ..errors import (
    ArgumentError,
    CorruptStoreError,
    DiskSpaceError,
    FrameIndexError,
    NotMaterializedError,
    SchemaMismatchError,
    StoreClosedError,
    StoreError,
    UnknownFeatureError,
    UnsupportedDtypeError,
    ValueRangeError,
    warn_user,
)
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES, NUMERIC_DTYPES, aggregate_stats, episode_stats, stats_json
from ..sampling.selection import episode_index, frame_range
from ..store.committing import (
    check_new_store_location,
    commit,
    create_store,
    live_matches,
    live_runs,
    remove_creation_debris,
    repair_live,
)
from ..store.hashes import ContentHashes
from ..store.state import CREATING_MARKER, StoreState, check_array_name, chunk_path, read_state, stats_path
from ..store.tables import (
    DEFAULT_PACK_BYTES,
    MAX_FRAME_BYTES,
    ArraySpec,
    EpisodeTable,
    PackLayout,
    array_spec,
    pack_rows_target,
)
from ..cameras.video import have_pyav, pyav_missing

__all__ = ["create", "fork", "WritableDataset", "EditFrames", "MIN_FREE_ENV", "RETIRE_AFTER_S", "RESERVED_NAMES"]

MIN_FREE_ENV = "LEROBOT_ZARR_MIN_FREE_BYTES"
_DEFAULT_MIN_FREE = 256 * 2**20
RETIRE_AFTER_S = 60.0  # how long a retired pack's files stay readable for readers of older commits
_LOCATION_STATS = ("min", "max", "mean", "q01", "q10", "q50", "q90", "q99")
_INDEX_COLUMNS = ("episode_index", "index")  # stored values may exceed LeRobot's by the table's shifts
_STATS_PENDING = ".stats-pending"  # stats files newer than the committed stats.json may exist
_EDITING = ".editing"  # <pack>-<offset>: features of an episode edited in place since the last commit
_MAX_STATS_FILE = 16 << 20  # bytes of one episode's stats file
RESERVED_NAMES = ("task",)  # sample keys a feature may not take (with LeRobot's own columns and '*_is_pad')
_RAW_DTYPES = frozenset(np.dtype(t).type for t in NUMERIC_DTYPES)
_INLINE_STATS_BYTES = 1 << 20  # smaller appends compute their stats before writing, not in a thread alongside


def _count(name: str, value: Any, low: int) -> int:
    """``value`` checked as an integer (not a bool) of at least ``low``; ``name`` is the argument, for the message."""
    try:
        count = None if isinstance(value, (bool, np.bool_)) else operator.index(value)
    except TypeError:
        count = None
    if count is None or count < low:
        raise ArgumentError(f"{name} must be an integer >= {low}, got {value!r:.40}")
    return count


def _min_free_bytes(value: int | None) -> int:
    if value is not None:
        return _count("min_free_bytes", value, 0)
    raw = os.environ.get(MIN_FREE_ENV)
    if raw is None:
        return _DEFAULT_MIN_FREE
    try:
        value = int(raw)
    except ValueError:
        raise ArgumentError(f"{MIN_FREE_ENV}={raw!r} is not an integer") from None
    return _count(f"${MIN_FREE_ENV}", value, 0)


def _feature_specs(features: Mapping[str, Mapping[str, Any]]) -> tuple[dict, dict[str, ArraySpec]]:
    """LeRobot feature specs (``{"dtype", "shape", "names"}``) -> info features with LeRobot's defaults added,
    and the store arrays they map to."""
    if not isinstance(features, Mapping) or not features:
        raise SchemaMismatchError(f"features must be a non-empty mapping {{name: {{'dtype', 'shape'}}}}, got "
                                  f"{features!r:.80}")
    info: dict[str, dict] = {}
    for name, ft in features.items():
        if not isinstance(name, str):
            raise SchemaMismatchError(f"feature names must be strings, got {name!r}")
        if not isinstance(ft, Mapping) or "dtype" not in ft or "shape" not in ft:
            raise SchemaMismatchError(f"feature {name!r}: a feature is a dict with 'dtype' and 'shape', got {ft!r}",
                                      feature=name)
        if name in RESERVED_NAMES or name.endswith("_is_pad"):
            raise SchemaMismatchError(f"feature {name!r}: the name is taken by samples ('task' and '<feature>_is_pad' "
                                      f"keys); choose another", feature=name)
        check_array_name(name)
        dtype = str(ft["dtype"])
        if dtype in ("video", "string"):
            raise UnsupportedDtypeError(f"feature {name!r}: dtype {dtype!r} cannot be recorded into a store (store "
                                        f"cameras as dtype 'image')", feature=name)
        if dtype != "image":
            try:
                scalar = np.dtype(dtype).type
            except TypeError:
                raise UnsupportedDtypeError(f"feature {name!r}: unknown dtype {dtype!r}", feature=name) from None
            if scalar not in _RAW_DTYPES:
                raise UnsupportedDtypeError(f"feature {name!r}: dtype {dtype!r} cannot be stored as portable raw bytes "
                                            f"(use bool, int8..int64, uint8..uint64, float16, float32 or float64)",
                                            feature=name)
        try:
            shape = tuple(operator.index(s) for s in ft["shape"])
        except TypeError:
            raise SchemaMismatchError(f"feature {name!r}: shape must be a list of integers, got {ft['shape']!r:.60}",
                                      feature=name) from None
        if not shape or any(s < 1 for s in shape) or (dtype == "image" and (len(shape) != 3
                                                                             or shape[-1] not in (1, 3, 4))):
            raise SchemaMismatchError(f"feature {name!r}: shape {list(shape)} is not valid for dtype {dtype!r}",
                                      feature=name)
        itemsize = 1 if dtype == "image" else np.dtype(dtype).itemsize
        if len(shape) > 8 or math.prod(shape) * itemsize > MAX_FRAME_BYTES:
            raise SchemaMismatchError(f"feature {name!r}: shape {list(shape)[:9]} makes frames of "
                                      f"{math.prod(shape) * itemsize} bytes; a store holds frames of at most "
                                      f"{MAX_FRAME_BYTES} bytes and 8 dimensions", feature=name)
        names = ft.get("names")
        if (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)
                and len(names) not in (shape[0], len(shape))):
            raise SchemaMismatchError(f"feature {name!r}: {len(names)} names {list(names)!r:.80} for shape "
                                      f"{list(shape)} (one per element of a vector, or one per axis)", feature=name)
        if dtype == "image" and names is None:
            names = ["height", "width", "channels"]
        info[name] = {"dtype": dtype, "shape": list(shape), "names": names}
    for name, dtype in DEFAULT_FEATURES.items():
        if name in info and (info[name]["dtype"] != dtype or info[name]["shape"] != [1]):
            raise SchemaMismatchError(f"feature {name!r} is LeRobot's own, filled by the writer: dtype {dtype!r}, "
                                      f"shape [1]; leave it out", feature=name)
        info.setdefault(name, {"dtype": dtype, "shape": [1], "names": None})
    arrays = {name: array_spec(ft["dtype"], () if ft["shape"] == [1] and ft["dtype"] != "image" else tuple(ft["shape"]),
                               ft["names"]) for name, ft in info.items()}
    return info, arrays


def create(root: str | os.PathLike, *, fps: float, features: Mapping[str, Mapping[str, Any]],
           robot_type: str | None = None, capacity_frames: int | None = None, durable: bool = True,
           min_free_bytes: int | None = None, pack_bytes: int = DEFAULT_PACK_BYTES) -> WritableDataset:
    """Make a new, empty store at ``root`` and open it for writing.

    Args:
        fps: frames per second (timestamps are ``frame_index / fps``); finite and positive.
        features: LeRobot feature specs, ``{name: {"dtype": "float32", "shape": [14], "names": [...]}}``;
            cameras are ``{"dtype": "image", "shape": [H, W, C]}``. LeRobot's ``timestamp``, ``frame_index``,
            ``episode_index``, ``index`` and ``task_index`` are added and filled by the writer.
        capacity_frames: make the store a ring buffer of at most this many frames: appending past it drops the
            oldest episodes first.
        durable: flush to disk at every commit (survives power loss); ``False`` is still safe when the writer
            process is killed, and much faster for small episodes.
        min_free_bytes: refuse writes that would leave less free space on the volume (default 256 MiB, or
            ``$LEROBOT_ZARR_MIN_FREE_BYTES``).
        pack_bytes: target size of a pack (consecutive episodes in one chunk file per feature) for the widest
            feature; an episode bigger than that gets a pack of its own.
    """
    root = Path(root)
    try:
        fps = float(fps)
    except (TypeError, ValueError):
        raise ArgumentError(f"fps must be a number, got {fps!r:.40}") from None
    if not (math.isfinite(fps) and fps > 0):
        raise ArgumentError(f"fps must be finite and positive, got {fps}")
    if capacity_frames is not None:
        capacity_frames = _count("capacity_frames", capacity_frames, 1)
    pack_bytes = _count("pack_bytes", pack_bytes, 1)
    min_free_bytes = _min_free_bytes(min_free_bytes)
    info_features, arrays = _feature_specs(features)
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
                                capacity_frames=capacity_frames, pack_bytes=pack_bytes))
    return WritableDataset(root, durable=durable, min_free_bytes=min_free_bytes)


def fork(source: str | os.PathLike, root: str | os.PathLike) -> StoreState:
    """Make ``root`` a copy of the complete store ``source`` that shares its pack files by hard links (instant, no
    disk space) until a writer changes a pack, which it copies first (:meth:`WritableDataset._own_pack`): writes
    to the copy never reach ``source``. On another filesystem (no hard links) the packs are copied."""
    source, root = Path(source), Path(root)
    state = read_state(source)
    if not state.complete_episodes().all():
        raise NotMaterializedError(f"{source}: a store is copied with every episode; this one lacks some",
                                   path=source)
    with WriterLock(root, blocking=False):
        check_new_store_location(root)
        remove_creation_debris(root)
        for pack in np.flatnonzero(state.packs.rows > 0).tolist():
            for name, spec in state.arrays.items():
                src = check_in_store(source, chunk_path(source, name, pack, spec.ndim))
                dst = Path(check_in_store(root, chunk_path(root, name, pack, spec.ndim)))
                if not os.path.lexists(src):  # a camera no episode of the pack has: no file
                    continue
                dst.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    dst.unlink()  # debris of a copy killed midway
                link_or_copy(src, dst)
        _copy_stats_files(source, root)
        new = create_store(replace(state, root=root, retired=()), keep_files=True)
    return new


class WritableDataset(LeRobotZarrDataset):
    """A store open for writing, and for sampling like any :class:`LeRobotZarrDataset` (always every episode;
    after each write the sampler sees the new commit, so indices stay consistent).

    Structural changes (:meth:`add_episode`, :meth:`save_episode`, :meth:`delete_episodes`,
    :meth:`delete_frames`) are atomic commits: readers of older commits keep their view until they refresh.
    :meth:`edit` and :meth:`set_task` change frames IN PLACE: every reader sees them at once. Use as a context
    manager, or call :meth:`close`, to release the writer lock (a dead process releases it too).
    """

    _headroom = 1.0  # appended packs get maps next to the others: sampling keeps its maps across commits

    def __init__(self, root: str | os.PathLike, *, delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                 image_format: ImageFormat = "uint8_hwc", max_open_maps: int | None = None, durable: bool = True,
                 min_free_bytes: int | None = None):
        root = Path(root)
        lock = WriterLock(root, blocking=False).__enter__()
        try:
            state = read_state(root)
            undecoded = [name for name, spec in state.arrays.items()
                         if spec.kind == "video" and spec.storage != "mp4" and not state.done_mask(name).all()]
            if undecoded and not have_pyav():  # a writer's commit says every feature of every episode is there
                lacking = np.flatnonzero(~state.done_mask(undecoded[0]))
                raise pyav_missing(f"{root}: writing to this store (each commit holds every feature of every "
                                   f"episode) first decodes camera {undecoded[0]!r} in episodes "
                                   f"{lacking[:10].tolist()}{'...' if lacking.size > 10 else ''}, which",
                                   path=root, feature=undecoded[0])
            missing = np.flatnonzero(~state.complete_episodes())
            if missing.size:
                raise NotMaterializedError(f"{root}: episodes {missing[:20].tolist()} are not in the local store; "
                                           f"open it with every episode before writing to it", path=root,
                                           episode=int(missing[0]))
            state = _drop_empty_features(state)
            # episodes whose frames of a feature the source could not give (missing videos): kept by position
            self._gaps = {name: state.unavailable_of(name) for name in state.arrays if state.unavailable_of(name)}
            compact = [name for name, spec in state.arrays.items() if spec.storage != "raw"]
            if compact:
                raise StoreError(f"{root}: features {compact} are stored compact (compressed frames), which "
                                 f"cannot be written in place; use a store with raw storage to write", path=root)
            self.root = root
            self._state = state
            self._cleanup()
            super().__init__(root, delta_timestamps=delta_timestamps, image_format=image_format,
                             max_open_maps=max_open_maps)
            broken = self._state.hashes.readable()
            if broken is not None:  # not a reason to refuse writes: hashes are recorded anew from here on
                warn_user(f"{root}: the store's content hashes cannot be read ({broken}); the episodes committed "
                          f"so far are unverifiable (`lerobot-zarr verify --record` records them anew)")
                self._state = replace(self._state, hashes=ContentHashes())
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        self._writer_lock = lock
        self._release = weakref.finalize(self, lock.__exit__, None, None, None)
        self.durable = bool(durable)
        self.min_free_bytes = _min_free_bytes(min_free_bytes)
        self._episode_buffer: list[tuple[dict[str, np.ndarray], str]] = []
        self._stats_rows: dict[str, dict[str, np.ndarray]] | None = None  # per-episode stats of stored values
        # (pack, offset) -> features edited since the last commit (those a writer killed midway left, on open)
        self._dirty: dict[tuple[int, int], set[str]] = self._edit_markers()
        self._fresh: dict[tuple[int, int], dict[str, int]] = {}  # content hashes of rows written since the commit
        try:
            if self._state.pending_tasks:  # a set_task killed midway: finish it (idempotent)
                self._rewrite_task_index(list(self._state.pending_tasks))
            if self._dirty or (self.root / _STATS_PENDING).exists() or self._stats_missing():
                # an edit was cut short by a crash (stats dropped, or written but not committed): recompute the
                # edited episodes' stats and content hashes, and commit
                self._commit(self._state, self._episode_stats_rows())
        except DiskSpaceError as exc:  # a full volume: open anyway, so that episodes can be deleted to make room
            warn_user(f"{self.root}: finishing an interrupted edit was put off ({exc}); the next commit does it")

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
        return self._state.capacity_frames

    @property
    def features(self) -> dict[str, dict]:
        return self.meta.features

    # housekeeping ---------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._release.alive:
            raise StoreClosedError(f"{self.root}: this writable dataset was closed; open it again with mode='r+'",
                                   path=self.root)
        if not self._writer_lock.held:
            raise StoreClosedError(f"{self.root}: this writable dataset was opened by another process (this one is "
                                   f"a fork of it); a forked process may read it but not write to it",
                                   path=self.root)

    def _cleanup(self) -> None:
        """After a crash: drop pack files no commit lists, finish retiring, delete what expired, remove debris.
        First, a store holding a symbolic link anywhere is refused: a writer never follows one out of the store."""
        links = find_links(self.root)
        if links:
            raise CorruptStoreError(f"{links[0]}: is a symbolic link; a store holds none (it could point writes "
                                    f"outside the store){f' (and {len(links) - 1} more)' if len(links) > 1 else ''}; "
                                    f"`lerobot-zarr verify --repair {self.root}` removes them", path=links[0])
        state = self._state
        n_packs = len(state.packs)
        retired = {pack for pack, _ in state.retired}
        for name in [*state.arrays, "frame_live"]:
            folder = Path(check_in_store(self.root, self.root / name / "c" / "_")).parent  # no link on the way
            if folder.is_symlink():
                raise CorruptStoreError(f"{folder}: is a symbolic link; a store's folders must be real folders",
                                        path=folder)
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if not entry.name.isdigit():
                    _remove(entry)  # debris of a pack creation killed before its rename
                    continue
                pack = int(entry.name)
                if pack >= n_packs or (state.packs.rows[pack] == 0 and (pack not in retired or name == "frame_live")):
                    _remove(entry)  # a pack created for an append that never committed, or retired and expired
                elif state.packs.rows[pack] == 0:
                    retire_pack(self.root, {name: state.arrays[name]}, pack)  # retired by a commit, not moved yet
        live = {(int(c), int(o)) for c, o in zip(state.table.chunk.tolist(), state.table.offset.tolist(), strict=True)}
        for folder, suffix in ((self.root / ".episode_stats", ".json"), (self.root / _EDITING, "")):
            check_in_store(self.root, folder / "_")
            if folder.is_symlink():
                _remove(folder)
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                key = tuple(entry.name.removesuffix(suffix).split("-"))
                if not (len(key) == 2 and all(k.isdigit() for k in key) and (int(key[0]), int(key[1])) in live
                        and entry.name.endswith(suffix)):
                    _remove(entry)
        for pattern in (".*.tmp-*", "*/.*.tmp-*", "*/c/.*.tmp-*", "*/c/*/.*.tmp-*", ".episode_stats/.*.tmp-*",
                        CREATING_MARKER):
            for tmp in self.root.glob(pattern):  # debris of writes killed before their rename
                _remove(tmp)
        try:  # zarr's copies of the commit are for zarr readers only (lerobot_zarr reads the root): may wait
            if state.read_version < 3 or (self.root / ".frame_live-pending").exists():
                # upgrade the format / a commit was cut short: its zarr copies and frame_live rewritten
                self._state = commit(state, previous=state, durable=True)
            elif not all(live_matches(self.root, pack, int(state.packs.rows[pack]), runs)
                         for pack, runs in live_runs(state).items()):
                repair_live(state)  # frame_live damaged since: rewritten from the table
        except DiskSpaceError as exc:
            if state.read_version < 3:
                raise
            warn_user(f"{self.root}: zarr's copy of the last commit (frame_live, episode_*) could not be repaired "
                      f"now ({exc}); the next commit repairs it")

    def _check_space(self, nbytes: int) -> None:
        st = os.statvfs(self.root)
        free = st.f_bavail * st.f_frsize
        if free - nbytes < self.min_free_bytes:
            raise DiskSpaceError(errno.ENOSPC, f"{self.root}: writing {nbytes} bytes would leave {free - nbytes} "
                                               f"bytes free on its volume, below the margin of {self.min_free_bytes}"
                                               f" bytes (min_free_bytes= or ${MIN_FREE_ENV}); nothing was written",
                                 path=self.root)

    # stats ----------------------------------------------------------------------------------------------
    def _write_stats_file(self, pack: int, offset: int, stats: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        path = stats_path(self.root, pack, offset)
        check_in_store(self.root, path)
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, json.dumps({k: stats_json(v) for k, v in stats.items()}).encode(), durable=False,
                     root=self.root)

    def _stats_of(self, pack: int, offset: int, arrays: Mapping[str, np.ndarray], episode: int | None = None
                  ) -> dict[str, dict[str, np.ndarray]]:
        """Per-episode stats of one episode's stored values, computed and kept next to it. A feature the episode
        lacks (a gap: its video was missing) gets the stats of one zero frame, which no merge counts."""
        gaps = [name for name, g in self._gaps.items() if episode in g] if episode is not None else []
        stats = {name: episode_stats(np.asarray(arrays[name][:1] if name in gaps else arrays[name]), spec.kind)
                 for name, spec in self._state.arrays.items()}
        self._write_stats_file(pack, offset, stats)
        return stats

    def _rows_map(self, name: str, pack: int, offset: int, length: int, *, writable: bool = False) -> np.memmap:
        """A memory map of one committed episode's rows of one feature (symlinks refused, size checked)."""
        spec = self._state.arrays[name]
        rows = int(self._state.packs.rows[pack])
        fd = _pack_file(self.root, name, spec, pack, rows, os.O_RDWR if writable else os.O_RDONLY)
        with os.fdopen(fd, "r+b" if writable else "rb") as f:
            return np.memmap(f, dtype=spec.dtype, mode="r+" if writable else "r", offset=offset * spec.frame_bytes,
                             shape=(length, *spec.frame_shape))

    def _read_episode(self, e: int, table: EpisodeTable | None = None) -> dict[str, np.ndarray]:
        """Episode ``e``'s rows of every feature (zeros for a feature it has no frames of)."""
        t = self._state.table if table is None else table
        pack, offset, length = int(t.chunk[e]), int(t.offset[e]), int(t.length[e])
        gaps = self._gap_features(pack, offset)
        return {name: np.zeros((length, *spec.frame_shape), spec.dtype) if name in gaps
                else self._rows_map(name, pack, offset, length) for name, spec in self._state.arrays.items()}

    def _stats_missing(self) -> bool:
        """Whether some episode lacks its stats file while others have one (an edit's crash dropped it)."""
        try:
            present = set(os.listdir(self.root / ".episode_stats"))
        except FileNotFoundError:
            return False
        t = self._state.table
        return any(f"{c}-{o}.json" not in present for c, o in zip(t.chunk.tolist(), t.offset.tolist(), strict=True))

    def _mark_editing(self, key: tuple[int, int], names: set[str]) -> None:
        """Record, before an in-place edit writes, which features of the episode at ``key`` it edits."""
        path = self.root / _EDITING / f"{key[0]}-{key[1]}"
        check_in_store(self.root, path)
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, json.dumps(sorted(names)).encode(), durable=False, root=self.root)

    def _edit_markers(self) -> dict[tuple[int, int], set[str]]:
        """Features of committed episodes an in-place edit changed without a commit after it (a writer killed
        during or after an edit block): their stats and content hashes are recomputed at the next commit."""
        folder = self.root / _EDITING
        out: dict[tuple[int, int], set[str]] = {}
        if not folder.is_dir() or folder.is_symlink():
            return out
        for entry in folder.iterdir():
            key = entry.name.split("-")
            try:
                names = load_json(read_bounded(entry, 1 << 20, root=self.root, what="edit marker"), str(entry))
            except (CorruptStoreError, OSError):
                names = list(self._state.arrays)  # unreadable: assume every feature was edited
            if len(key) == 2 and all(k.isdigit() for k in key) and isinstance(names, list):
                out[(int(key[0]), int(key[1]))] = {n for n in names if n in self._state.arrays}
        return out

    def _checked_stats(self, doc: Any, length: int, episode: int) -> dict[str, dict[str, np.ndarray]]:
        """An episode's stats file (a cache of this writer's), taken only if it has every feature's stats, shaped
        as computed ones, over ``length`` frames (one for a feature the episode lacks: see :meth:`_stats_of`); else
        ValueError (it is recomputed from the data)."""
        out = {}
        for name, spec in self._state.arrays.items():
            probe = episode_stats(np.zeros((1, *spec.frame_shape), dtype=spec.dtype), spec.kind)
            got = {k: np.asarray(v, dtype=np.float64) for k, v in doc[name].items()}
            frames = 1 if episode in self._gaps.get(name, {}) else length
            if got.keys() != probe.keys() or any(got[k].shape != np.shape(v) for k, v in probe.items()) \
                    or int(got["count"].reshape(-1)[0]) != frames:
                raise ValueError(f"stats of {name!r} do not fit the episode")
            out[name] = got
        return out

    def _episode_stats_rows(self, episodes: Sequence[int] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """Per-episode stats, stacked: of every episode (rows in episode order), or only of ``episodes`` (rows in
        that order: a deletion needs the kept ones only). Computed once where missing, with a progress bar."""
        if self._stats_rows is not None:
            rows = self._stats_rows
            return rows if episodes is None else {name: {k: v[list(episodes)] for k, v in stats.items()}
                                                  for name, stats in rows.items()}
        table = self._state.table
        chosen = range(len(table)) if episodes is None else [int(e) for e in episodes]
        found: list[dict] = []
        todo = []
        for i, e in enumerate(chosen):
            try:
                path = stats_path(self.root, int(table.chunk[e]), int(table.offset[e]))
                doc = load_json(read_bounded(path, _MAX_STATS_FILE, root=self.root, what="episode stats"), str(path))
                found.append(self._checked_stats(doc, int(table.length[e]), e))
            except (FileNotFoundError, KeyError, ValueError, TypeError, AttributeError):
                found.append({})
                todo.append((i, e))
        with progress_bar(sum(int(table.length[e]) for _, e in todo), f"episode stats of {self.root.name}",
                          len(todo) > 1) as bar:
            for i, e in todo:
                found[i] = self._stats_of(int(table.chunk[e]), int(table.offset[e]), self._read_episode(e), e)
                bar.update(int(table.length[e]))
        stacked = {name: _stack([row[name] for row in found], spec) for name, spec in self._state.arrays.items()}
        if episodes is None:
            self._stats_rows = stacked
        return stacked

    def _dataset_stats(self, table: EpisodeTable, rows: dict[str, dict[str, np.ndarray]],
                       gaps_of: Mapping[str, Mapping[int, str]]) -> dict:
        """LeRobot's stats.json from per-episode stats: count-weighted merge, index columns shifted back."""
        if not len(table):
            return {}
        out = {}
        for name, stats in rows.items():
            gaps = gaps_of.get(name)
            if gaps:  # episodes without this feature's frames (zeros in the store) do not count
                keep = np.ones(len(table), dtype=bool)
                keep[[e for e in gaps if e < len(table)]] = False
                if not keep.any():
                    continue
                stats = {k: v[keep] for k, v in stats.items()}
            if name in _INDEX_COLUMNS:
                shift = (table.episode_index_shift if name == "episode_index" else table.index_shift)
                stats = dict(stats)
                for key in _LOCATION_STATS:
                    stats[key] = stats[key] - shift.reshape(-1, *[1] * (stats[key].ndim - 1))
            out[name] = stats_json(aggregate_stats(stats))
        return out

    def _fold_dirty(self, table: EpisodeTable, rows: dict[str, dict[str, np.ndarray]]
                    ) -> dict[str, dict[str, np.ndarray]]:
        """``rows`` (aligned with ``table``) with the stats of edited features recomputed from the data."""
        position = {(int(c), int(o)): i for i, (c, o) in enumerate(zip(table.chunk.tolist(), table.offset.tolist(),
                                                                      strict=True))}
        rows = {name: {k: v.copy() for k, v in rows[name].items()} for name in rows}
        for (pack, offset), names in self._dirty.items():
            e = position.get((pack, offset))
            if e is None:  # deleted or moved since: its new rows got fresh stats
                continue
            length = int(table.length[e])
            for name in names:
                values = np.asarray(self._rows_map(name, pack, offset, length))
                stats = episode_stats(values, self._state.arrays[name].kind)
                self._fresh.setdefault((pack, offset), {})[name] = crc32c(values)  # the edit's new content
                for k in rows[name]:
                    rows[name][k][e] = stats[k]
            self._write_stats_file(pack, offset, {name: {k: v[e] for k, v in rows[name].items()} for name in rows})
        return rows

    # committing -----------------------------------------------------------------------------------------
    def _commit(self, state: StoreState, rows: dict[str, dict[str, np.ndarray]] | None, *,
                gaps: dict[str, dict[int, str]] | None = None, **changes: Any) -> None:
        """One commit of ``state`` (its table, packs, tasks...) with ``changes`` applied: info counters, stats,
        source, and ``gaps`` (per feature, the positions of episodes without its frames, if they moved); packs
        left without a live episode are retired after it (expired retired packs deleted); the sampler reloads.
        Stats of in-place edits not committed yet are folded in."""
        previous = self._state
        gaps = self._gaps if gaps is None else {name: g for name, g in gaps.items() if g}
        state = replace(state, **changes)
        table = state.table
        folded = list(self._dirty)
        if self._dirty:
            # first the marker, then the edited episodes' new stats files: a writer killed in between leaves the
            # marker, and the next writer recomputes the stats.json those files make stale
            (self.root / _STATS_PENDING).touch()
            rows = self._fold_dirty(table, self._episode_stats_rows() if rows is None else rows)
        tasks = list(state.tasks)
        info = dict(state.info, total_episodes=len(table), total_frames=int(table.length.sum()),
                    total_tasks=len(tasks), splits={"train": f"0:{len(table)}"} if len(table) else {})
        now = time.time()
        packs = state.packs
        live = np.zeros(len(packs), dtype=bool)
        live[table.chunk] = True
        if len(packs):
            live[-1] |= packs.free_rows() > 0 and packs.rows[-1] > 0  # the open pack stays for the next append
        retire = np.flatnonzero(~live & (packs.rows > 0)).tolist()
        retired = [(c, t) for c, t in state.retired if now - t < RETIRE_AFTER_S]
        expired = [c for c, t in state.retired if now - t >= RETIRE_AFTER_S]
        retired += [(int(c), now) for c in retire]
        source = state.source
        if source.get("kind") not in ("recorded", "edited"):
            source = {"kind": "edited", "from": source}
        stats = self._dataset_stats(table, rows, gaps) if rows is not None else state.stats
        new = replace(state, info=info, source=source, stats=stats, retired=tuple(retired),
                      packs=packs.retire(retire)).all_materialized()
        new = replace(new, unavailable={}).with_materialized({}, gaps).with_hashes(self._fresh)
        self._state = commit(new, previous=previous, durable=self.durable)
        self._gaps = gaps
        self._fresh = {}
        with contextlib.suppress(FileNotFoundError):
            (self.root / _STATS_PENDING).unlink()
        for pack, offset in folded:
            _remove(self.root / _EDITING / f"{pack}-{offset}")
        self._dirty = {}
        if rows is not None:
            self._stats_rows = rows
        kept = {(int(c), int(o)) for c, o in zip(table.chunk.tolist(), table.offset.tolist(), strict=True)}
        gone = {(int(c), int(o)) for c, o in zip(previous.table.chunk.tolist(), previous.table.offset.tolist(),
                                                 strict=True)} - kept
        for pack, offset in gone:
            _remove(stats_path(self.root, pack, offset))
        for pack in retire:
            retire_pack(self.root, self._state.arrays, pack)
        for pack in expired:
            remove_retired(self.root, self._state.arrays, pack)
        with self._lock:
            self._load(self._state)

    # recording ------------------------------------------------------------------------------------------
    def _task_indices(self, task: str | Sequence[str], n: int) -> tuple[np.ndarray, list[str]]:
        tasks = list(self._state.tasks)
        per_frame = [task] * n if isinstance(task, str) else list(task) if isinstance(task, Sequence) else None
        if per_frame is None or len(per_frame) != n or not all(isinstance(t, str) and t for t in per_frame):
            raise ArgumentError(f"task must be a non-empty string or one per frame ({n}), got {task!r:.200}")
        lookup = {t: i for i, t in enumerate(tasks)}
        out = np.empty(n, dtype=np.int64)
        for i, t in enumerate(per_frame):
            if t not in lookup:
                lookup[t] = len(tasks)
                tasks.append(t)
            out[i] = lookup[t]
        return out, tasks

    def _frames_of(self, frames: Mapping[str, Any], episode: int) -> tuple[int, dict[str, np.ndarray]]:
        """Validate one episode's user features: every one present, same length, right shape, values that fit."""
        if not isinstance(frames, Mapping):
            raise SchemaMismatchError(f"{self.root}: an episode is a mapping {{feature: frames}}, got "
                                      f"{type(frames).__name__}")
        user = [name for name in self._state.arrays if name not in DEFAULT_FEATURES]
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
            values = _as_frames(name, frames[name], self._state.arrays[name], episode)
            if n is None:
                n = len(values)
            elif len(values) != n:
                raise SchemaMismatchError(f"feature {name!r} has {len(values)} frames, {user[0]!r} has {n}",
                                          feature=name, episode=episode)
            out[name] = values
        if not n:
            raise SchemaMismatchError(f"{self.root}: an episode needs at least one frame", episode=episode)
        return n, out

    def _shared(self, pack: int) -> bool:
        """Whether the pack's files are hard links shared with another store (a copy made by :func:`fork`)."""
        for name, spec in self._state.arrays.items():
            try:
                if os.stat(chunk_path(self.root, name, pack, spec.ndim), follow_symlinks=False).st_nlink > 1:
                    return True
            except FileNotFoundError:
                pass
        return False

    def _own_pack(self, pack: int) -> int:
        """The id under which pack ``pack`` is this store's own, to write in place: a pack shared with another
        store by hard links is first copied to a new pack (one commit; the other store never changes)."""
        if not self._shared(pack):
            return pack
        state = self._state
        rows = int(state.packs.rows[pack])
        new = len(state.packs)
        self._check_space(rows * sum(spec.frame_bytes for spec in self._state.arrays.values()))
        for name, spec in self._state.arrays.items():
            src = check_in_store(self.root, chunk_path(self.root, name, pack, spec.ndim))
            dst = Path(check_in_store(self.root, chunk_path(self.root, name, new, spec.ndim)))
            if not os.path.lexists(src):  # a camera none of the pack's episodes has
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
            copy_file(src, tmp)
            os.replace(tmp, dst)
        table = state.table
        moved = table.chunk == pack
        for offset in table.offset[moved].tolist():
            with contextlib.suppress(FileNotFoundError):
                os.replace(stats_path(self.root, pack, offset), stats_path(self.root, new, offset))
        for e in np.flatnonzero(moved).tolist():  # the same bytes under a new pack id: the same hashes
            self._fresh[(new, int(table.offset[e]))] = self._recorded_hashes(e, table)
        chunk = np.where(moved, new, table.chunk)
        self._commit(state, None, table=EpisodeTable(table.start, table.length, table.task_index, chunk,
                                                     table.offset, table.episode_index_shift, table.index_shift),
                     packs=state.packs.with_pack(rows, rows))
        return new

    def _allocate(self, packs: PackLayout, n: int, room: int = 0) -> tuple[PackLayout, int, int]:
        """Rows for ``n`` new frames: the free rows of the last pack if they fit (and it is this store's own),
        else a new pack (of the target size, or ``max(n, room)`` rows for a bigger episode: ``room`` leaves space
        to extend it). Returns the new layout, the pack and the row offset."""
        if len(packs) and packs.rows[-1] > 0 and packs.free_rows() >= max(n, room) and not self._shared(
                len(packs) - 1):
            return PackLayout(packs.rows, packs.next_row + n), len(packs) - 1, packs.next_row
        target = pack_rows_target(self._state.arrays, self._state.pack_bytes)
        if self.capacity_frames is not None:  # a ring buffer frees a pack once all of it was evicted: keep them small
            target = min(target, max(1, self.capacity_frames // 8))
        rows = max(target, n, room)
        return packs.with_pack(rows, n), len(packs), 0

    def _write_episode(self, packs: PackLayout, pack: int, offset: int, data: Mapping[str, np.ndarray],
                       skip: Sequence[str] = ()) -> None:
        """Write one episode's rows of every feature (but ``skip``: features it has no frames of) and note their
        content hashes for the next commit."""
        hashes = self._fresh.setdefault((pack, offset), {})
        for name, spec in self._state.arrays.items():
            if name not in skip:
                hashes[name] = write_rows(self.root, name, spec, pack, offset, data[name], int(packs.rows[pack]))

    def add_episode(self, frames: Mapping[str, Any], *, task: str | Sequence[str], tail: int = 0) -> int:
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
        """
        return self._append(frames, task, extend=False, tail=tail)

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

    def _append(self, frames: Mapping[str, Any], task: str | Sequence[str], *, extend: bool, tail: int) -> int:
        self._check_open()
        table = self._state.table
        tail = _count("tail", tail, 0)
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
        task_index, tasks = self._task_indices(task, total)
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
        packs = self._state.packs
        pack, offset = (int(table.chunk[e]), int(table.offset[e])) if extend else (-1, 0)
        in_place = extend and self._room_after(e, total)
        relocated = extend and not in_place
        frame_bytes = sum(spec.frame_bytes for spec in self._state.arrays.values())
        self._check_space((total + (before if relocated else 0)) * frame_bytes)
        fps = self.meta.fps
        frame_index = np.arange(before, before + total, dtype=np.int64)
        data.setdefault("timestamp", (frame_index / fps).astype(np.float32))
        if extend:  # the values the episode's frames hold (stored values never change when others are dropped)
            stored_episode = e + int(table.episode_index_shift[e])
            first_index = int(table.start[e] + table.index_shift[e])
        else:
            stored_episode, first_index = e - drop, int(table.length[drop:].sum())
        data.update(frame_index=frame_index, episode_index=np.full(total, stored_episode, dtype=np.int64),
                    index=first_index + frame_index, task_index=task_index)
        data = {name: _stored(data[name], spec) for name, spec in self._state.arrays.items()}
        old = self._read_episode(e) if extend else {}
        if in_place:  # its stats file goes first: a crash before the commit leaves it to be recomputed
            _remove(stats_path(self.root, pack, offset))
            packs = PackLayout(packs.rows, max(packs.next_row, offset + before + total))
            write_at, written = offset + before, data
        else:
            if relocated:
                data = {name: np.concatenate([np.asarray(old[name]), data[name]]) for name in data}
            rows = len(next(iter(data.values())))
            # an episode moved to be extended gets room to grow in place: doubling keeps long ones linear
            packs, pack, offset = self._allocate(packs, rows, 2 * rows if relocated else 0)
            write_at, written = offset, data
        episode = {name: _Frames(np.asarray(old[name]) if in_place else None, written[name][:n] if in_place
                                 else written[name][:before + n]) for name in written}
        if sum(v.nbytes for v in written.values()) < _INLINE_STATS_BYTES:  # a thread costs more than it saves
            new_stats = self._episode_stats_of(episode)
            self._write_episode(packs, pack, write_at, written)
        else:  # numpy stats overlap the row writes (system calls release the GIL)
            with ThreadPoolExecutor(1) as pool:
                stats = pool.submit(self._episode_stats_of, episode)
                self._write_episode(packs, pack, write_at, written)
                new_stats = stats.result()
        # the content hash covers the episode's rows: the committed ones it keeps, the new ones, not the tail rows
        del self._fresh[(pack, write_at)]
        self._fresh[(pack, offset)] = {
            name: crc32c(frames.new, 0 if frames.head is None else crc32c(np.ascontiguousarray(frames.head)))
            for name, frames in episode.items()}
        if not in_place:
            self._write_stats_file(pack, offset, new_stats)
        rows = self._episode_stats_rows()
        kept = slice(drop, len(table) - 1 if extend else None)  # the other episodes that stay
        dropped = int(table.length[:drop].sum())
        first_task = int(table.task_index[e]) if extend else int(task_index[0])
        shifts = (int(table.episode_index_shift[e]) + drop, int(table.index_shift[e]) + dropped) if extend else (0, 0)
        new_table = EpisodeTable.contiguous(
            [*table.length[kept].tolist(), before + n], [*table.task_index[kept].tolist(), first_task],
            [*table.chunk[kept].tolist(), pack], [*table.offset[kept].tolist(), offset],
            [*(table.episode_index_shift[kept] + drop).tolist(), shifts[0]],
            [*(table.index_shift[kept] + dropped).tolist(), shifts[1]])
        new_rows = {name: {k: np.concatenate([v[kept], new_stats[name][k][None]]) for k, v in rows[name].items()}
                    for name in rows}
        gaps = {name: {p - drop: why for p, why in g.items() if p >= drop} for name, g in self._gaps.items()}
        self._commit(self._state, new_rows, table=new_table, packs=packs, tasks=tuple(tasks), gaps=gaps)
        if in_place:
            self._write_stats_file(pack, offset, new_stats)
        return len(new_table) - 1

    def _room_after(self, e: int, n: int) -> bool:
        """Whether ``n`` rows fit right after episode ``e``'s in its pack: the last pack, this store's own, with no
        other episode after it there."""
        table, packs = self._state.table, self._state.packs
        pack, end = int(table.chunk[e]), int(table.offset[e] + table.length[e])
        if pack != len(packs) - 1 or end + n > int(packs.rows[pack]) or self._shared(pack):
            return False
        return not ((table.chunk == pack) & (table.offset > table.offset[e])).any()

    def _episode_stats_of(self, episode: Mapping[str, _Frames]) -> dict[str, dict[str, np.ndarray]]:
        return {name: episode_stats(frames.numeric() if spec.kind not in CAMERA_DTYPES else frames, spec.kind)
                for name, spec in self._state.arrays.items() for frames in [episode[name]]}

    def set_capacity(self, capacity_frames: int | None) -> None:
        """Make the store a ring buffer of at most ``capacity_frames`` frames (None: unbounded), dropping its oldest
        episodes now if it holds more; one commit."""
        self._check_open()
        capacity = None if capacity_frames is None else _count("capacity_frames", capacity_frames, 1)
        table = self._state.table
        held, drop = int(table.length.sum()), 0
        while capacity is not None and held > capacity:
            held -= int(table.length[drop])
            drop += 1
        if capacity == self.capacity_frames and not drop:
            return
        rows = self._episode_stats_rows()
        new_table = EpisodeTable.contiguous(table.length[drop:], table.task_index[drop:], table.chunk[drop:],
                                            table.offset[drop:], table.episode_index_shift[drop:] + drop,
                                            table.index_shift[drop:] + int(table.length[:drop].sum()))
        new_rows = {name: {k: v[drop:] for k, v in rows[name].items()} for name in rows}
        gaps = {name: {p - drop: why for p, why in g.items() if p >= drop} for name, g in self._gaps.items()}
        self._commit(self._state, new_rows, table=new_table, gaps=gaps, capacity_frames=capacity)

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
        episode = len(self._state.table)
        for name, value in frame.items():
            if name == "task":
                continue
            if name not in self._state.arrays or name in DEFAULT_FEATURES and name != "timestamp":
                raise SchemaMismatchError(f"{self.root}: unknown or writer-filled feature {name!r} in add_frame",
                                          feature=str(name))
            values[name] = _as_frames(name, np.asarray(value)[None], self._state.arrays[name], episode)[0]
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
        frames = {name: np.stack([values[name] for values, _ in self._episode_buffer]) for name in names}
        e = self.add_episode(frames, task=[t for _, t in self._episode_buffer])
        self._episode_buffer = []
        return e

    # editing --------------------------------------------------------------------------------------------
    def _episode_index(self, episode: Any) -> int:
        return episode_index(episode, len(self._state.table), negative=True, where=f"{self.root}: ")

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
        columns) as :class:`EditFrames`, each memory-mapped when first looked up: assignments are checked (values
        the dtype cannot hold raise ``ValueRangeError``) and written in place. Writes reach every reader's maps at
        once and are flushed to the file when the block ends; the episode's stats are recomputed for those
        features at the next commit (:meth:`flush`, :meth:`close` or any other change), so many small edits cost
        little more than the writes. Not atomic: a crash during the block can leave an edit half applied (the next
        writer then recomputes that episode's stats).
        """
        self._check_open()
        e = self._episode_index(episode)
        editable = [name for name in self._state.arrays if name not in DEFAULT_FEATURES]
        names = editable if features is None else list(features)
        wrong = [name for name in names if name not in editable]
        if wrong:
            raise ArgumentError(f"{self.root}: cannot edit {wrong} in place (editable features: {editable}; tasks "
                             f"change with set_task, indices with delete_episodes/delete_frames)")
        first, stop = frame_range(frames, int(self._state.table.length[e]), f"{self.root}: episode {e}", e)
        lacking = [name for name in names if e in self._gaps.get(name, {})]
        if lacking:
            raise NotMaterializedError(f"{self.root}: episode {e} has no frames of {lacking} to edit "
                                       f"({self._gaps[lacking[0]][e]})", path=self.root, episode=e,
                                       feature=lacking[0])
        self._own_pack(int(self._state.table.chunk[e]))
        table = self._state.table
        pack, offset, length = int(table.chunk[e]), int(table.offset[e]), int(table.length[e])
        maps = _EditMaps(self, e, pack, offset, length, slice(first, stop), names)
        try:
            yield maps
        finally:
            maps.close()

    def flush(self) -> None:
        """Commit what in-place edits changed (their episodes' stats); a no-op when nothing is pending."""
        self._check_open()
        if self._dirty:
            self._commit(self._state, self._episode_stats_rows())

    def drop_features(self, features: str | Sequence[str]) -> None:
        """Remove features from the store IN PLACE, in one commit (their files are deleted after it): e.g. a
        camera whose videos are missing in some episodes, before publishing the rest. LeRobot's own columns
        cannot be dropped; a feature listed in ``info`` but not stored (a video left out) is removed from
        ``info`` too."""
        self._check_open()
        names = [features] if isinstance(features, str) else list(features)
        state = self._state
        unknown = [n for n in names if n not in state.arrays and n not in state.info.get("features", {})]
        if unknown:
            raise ArgumentError(f"{self.root}: no features {unknown} to drop (features: "
                                f"{list(state.info.get('features', {}))})")
        own = [n for n in names if n in DEFAULT_FEATURES]
        if own:
            raise ArgumentError(f"{self.root}: {own} are LeRobot's own columns; they cannot be dropped")
        if not names:
            return
        rows = {k: v for k, v in self._episode_stats_rows().items() if k not in names}
        info = dict(state.info, features={k: v for k, v in state.info["features"].items() if k not in names})
        stats = {k: v for k, v in state.stats.items() if k not in names}
        new = replace(state, info=info, stats=stats,
                      arrays={k: v for k, v in state.arrays.items() if k not in names},
                      materialized={k: v for k, v in state.materialized.items() if k not in names},
                      not_materialized={k: v for k, v in state.not_materialized.items() if k not in names})
        self._commit(new, rows, gaps={k: v for k, v in self._gaps.items() if k not in names})
        self._stats_rows = rows
        for name in names:
            _remove(self.root / name)
            _remove(self.root / ".retired" / name)

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
        for pack in sorted({int(self._state.table.chunk[e]) for e in eps}):
            self._own_pack(pack)
        tasks = list(self._state.tasks)
        if task not in tasks:
            tasks.append(task)
        k = tasks.index(task)
        table = self._state.table
        task_index = table.task_index.copy()
        task_index[eps] = k
        pending = [(int(table.chunk[e]), int(table.offset[e]), k) for e in eps]
        new_table = EpisodeTable(table.start, table.length, task_index, table.chunk, table.offset,
                                 table.episode_index_shift, table.index_shift)
        self._commit(self._state, None, table=new_table, tasks=tuple(tasks), pending_tasks=tuple(pending))
        self._rewrite_task_index(pending)

    def _rewrite_task_index(self, pending: list[tuple[int, int, int]]) -> None:
        """Write each listed episode's ``task_index`` frames in place, then commit (with their stats)."""
        table = self._state.table
        position = {(int(c), int(o)): i for i, (c, o) in enumerate(zip(table.chunk.tolist(), table.offset.tolist(),
                                                                      strict=True))}
        for pack, offset, k in pending:
            e = position.get((int(pack), int(offset)))
            if e is None:
                continue
            m = self._rows_map("task_index", int(pack), int(offset), int(table.length[e]), writable=True)
            m[:] = k
            m.flush()
            del m
            _remove(stats_path(self.root, int(pack), int(offset)))
            self._dirty.setdefault((int(pack), int(offset)), set()).add("task_index")
        self._commit(self._state, self._episode_stats_rows(), pending_tasks=())

    def _relocate(self, packs: PackLayout, data: Mapping[str, np.ndarray], skip: Sequence[str] = ()
                  ) -> tuple[PackLayout, int, int]:
        """Write one episode's (possibly changed) frames into fresh rows; return the layout, pack and offset."""
        n = len(next(iter(data.values())))
        packs, pack, offset = self._allocate(packs, n)
        self._write_episode(packs, pack, offset, data, skip)
        return packs, pack, offset

    def _recorded_hashes(self, e: int, table: EpisodeTable) -> dict[str, int]:
        """The content hashes recorded for episode ``e`` of ``table`` (by its location), feature by feature."""
        one = table.take(np.array([e]))
        return {name: int(self._state.hashes.aligned(one, name)[0]) for name in self._state.arrays}

    def _damaged(self, e: int, table: EpisodeTable, data: Mapping[str, np.ndarray]) -> list[str]:
        """Features of episode ``e`` (of ``table``) whose rows just read (``data``) differ from their recorded
        content hash (features without one, without frames in the episode, or edited in place since the last
        commit, are not checked)."""
        recorded = self._recorded_hashes(e, table)
        key = (int(table.chunk[e]), int(table.offset[e]))
        skip = self._gap_features(*key) | self._dirty.get(key, set())
        return [name for name, values in data.items() if name not in skip and recorded.get(name, -1) >= 0
                and crc32c(np.ascontiguousarray(values)) != recorded[name]]

    def _gap_features(self, pack: int, offset: int) -> set[str]:
        """Features the episode at (pack, offset) has no frames of (a camera whose video the source lacked)."""
        if not self._gaps:
            return set()
        table = self._state.table
        hit = np.flatnonzero((table.chunk == pack) & (table.offset == offset))
        return {name for name, g in self._gaps.items() if len(hit) and int(hit[0]) in g}

    def _compact_packs(self, table: EpisodeTable, packs: PackLayout, rows: dict[str, dict[str, np.ndarray]]
                 ) -> tuple[EpisodeTable, PackLayout]:
        """Move the live episodes of packs left mostly dead (live rows under half the pack, the last pack
        excepted) to fresh rows, so that the next commit retires those packs and their disk space is freed."""
        live_rows = np.bincount(table.chunk, weights=table.length, minlength=len(packs))
        sparse = np.flatnonzero((packs.rows > 0) & (live_rows > 0) & (live_rows * 2 < packs.rows))
        sparse = sparse[sparse != len(packs) - 1]
        if not len(sparse):
            return table, packs
        chunk, offset = table.chunk.copy(), table.offset.copy()
        moving = np.flatnonzero(np.isin(table.chunk, sparse))
        try:
            self._check_space(int(table.length[moving].sum()) * sum(s.frame_bytes
                                                                    for s in self._state.arrays.values()))
        except DiskSpaceError:  # compaction only frees space later: on a full volume, deletions go on without it
            return table, packs
        for e in moving.tolist():
            gaps = self._gap_features(int(table.chunk[e]), int(table.offset[e]))
            data = {name: np.asarray(v) for name, v in self._read_episode(e, table).items()}
            damaged = self._damaged(e, table, data)
            if damaged:
                warn_user(f"{self.root}: moving episode {e} (pack {int(table.chunk[e])}), its rows of {damaged} differ "
                          f"from the content hash recorded when they were committed (damaged on disk?); they keep "
                          f"that hash, so `lerobot-zarr verify` names them")
            recorded = self._recorded_hashes(e, table)
            edited = self._dirty.get((int(table.chunk[e]), int(table.offset[e])), set())  # edited, not committed
            for name in edited:
                recorded[name] = crc32c(np.ascontiguousarray(data[name]))
            packs, chunk[e], offset[e] = self._relocate(packs, data, gaps)
            self._fresh[(int(chunk[e]), int(offset[e]))] = recorded  # the same rows: the hashes recorded for them
            if edited:  # ``rows`` holds its stats from before the edit: recomputed from the values moved
                for name in edited:
                    fresh = episode_stats(data[name][:1] if name in gaps else data[name], self._state.arrays[name].kind)
                    for k in rows[name]:
                        rows[name][k][e] = fresh[k]
            self._write_stats_file(int(chunk[e]), int(offset[e]), {name: {k: v[e] for k, v in rows[name].items()}
                                                                   for name in rows})
        return EpisodeTable(table.start, table.length, table.task_index, chunk, offset, table.episode_index_shift,
                            table.index_shift), packs

    def delete_episodes(self, episodes: int | Sequence[int]) -> None:
        """Delete whole episodes in one commit. Later episodes are renumbered (``episode_index``, ``index``
        stay contiguous, as LeRobot needs) without rewriting their data; a pack left mostly dead has its other
        episodes moved (work proportional to the pack, not the dataset)."""
        self._check_open()
        eps = self._episode_list(episodes)
        if not eps:
            return
        table = self._state.table
        gone = np.zeros(len(table), dtype=bool)
        gone[eps] = True
        keep = ~gone
        new_rows = self._episode_stats_rows(np.flatnonzero(keep))  # the deleted episodes' stats are not needed
        episodes_before = np.cumsum(gone) - gone
        frames_before = np.cumsum(np.where(gone, table.length, 0)) - np.where(gone, table.length, 0)
        new_table = EpisodeTable.contiguous(table.length[keep], table.task_index[keep], table.chunk[keep],
                                            table.offset[keep], (table.episode_index_shift + episodes_before)[keep],
                                            (table.index_shift + frames_before)[keep])
        new_table, packs = self._compact_packs(new_table, self._state.packs, new_rows)
        position = np.cumsum(keep) - 1
        gaps = {name: {int(position[p]): why for p, why in g.items() if keep[p]} for name, g in self._gaps.items()}
        self._commit(self._state, new_rows, table=new_table, packs=packs, gaps=gaps)

    def delete_frames(self, episode: int, frames: slice | range | tuple[int, int] | Sequence[int]) -> None:
        """Delete frames of one episode (a range or a list of frame indices; negative ones from the end, any outside
        the episode raise :class:`~lerobot_zarr.errors.FrameIndexError`) in one commit.

        The episode keeps LeRobot's invariants (``frame_index`` 0..n-1, ``timestamp`` = frame_index / fps) and
        the later episodes' ``index`` stays contiguous: the shortened episode is written into fresh rows (work
        proportional to the episode, and to its pack when that is left mostly dead), later episodes are
        renumbered through the table. Deleting every frame deletes the episode."""
        self._check_open()
        e = self._episode_index(episode)
        table = self._state.table
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
        rows = self._episode_stats_rows()
        n = length - int(gone.sum())
        self._check_space(n * sum(spec.frame_bytes for spec in self._state.arrays.values()))
        old = {name: np.asarray(v) for name, v in self._read_episode(e).items()}
        damaged = self._damaged(e, table, old)
        if damaged:  # the kept frames would be recorded anew, damage included
            raise CorruptStoreError(f"{self.root}: episode {e}'s rows of {damaged} differ from the content hash "
                                    f"recorded when they were committed (damaged on disk?); run `lerobot-zarr verify "
                                    f"{self.root}` (--repair re-fetches a Hub or folder source's episodes), or delete "
                                    f"the episode", path=self.root, episode=e, feature=damaged[0])
        gaps = self._gap_features(int(table.chunk[e]), int(table.offset[e]))
        data = {name: v[~gone] for name, v in old.items()}
        data["frame_index"] = np.arange(n, dtype=np.int64)
        data["timestamp"] = (np.arange(n) / self.meta.fps).astype(np.float32)
        data["index"] = np.arange(n, dtype=np.int64) + int(table.start[e] + table.index_shift[e])
        data = {name: _stored(data[name], spec) for name, spec in self._state.arrays.items()}
        packs, pack, offset = self._relocate(self._state.packs, data, gaps)
        stats = self._stats_of(pack, offset, data)
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
        new_table, packs = self._compact_packs(new_table, packs, new_rows)
        self._commit(self._state, new_rows, table=new_table, packs=packs)


class EditFrames:
    """One feature's frames of an episode being edited (what ``ds.edit(...)[feature]`` gives): reading gives
    read-only numpy views; assignments (``ep[k][10:20] = x``, ``ep[k] += 1``) are checked first (values of another
    shape raise :class:`~lerobot_zarr.errors.SchemaMismatchError`, values the feature's dtype cannot hold
    :class:`~lerobot_zarr.errors.ValueRangeError`) and then written in place. A scalar feature (LeRobot shape
    ``[1]``) also takes ``(T, 1)`` values, as :meth:`WritableDataset.add_episode` does."""

    def __init__(self, name: str, frames: np.ndarray, kind: str, episode: int):
        self.name, self._kind, self.episode = name, kind, episode
        self._frames: np.ndarray | None = frames  # None once the edit block has ended

    def _live(self) -> np.ndarray:
        if self._frames is None:
            raise StoreClosedError(f"feature {self.name!r}, episode {self.episode}: its edit block has ended; edit in "
                                   f"a new `with ds.edit(...)` block", feature=self.name, episode=self.episode)
        return self._frames

    @property
    def shape(self) -> tuple[int, ...]:
        return self._live().shape

    @property
    def dtype(self) -> np.dtype:
        return self._live().dtype

    @property
    def ndim(self) -> int:
        return self._live().ndim

    def __len__(self) -> int:
        return len(self._live())

    def _read_only(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            value = value.view(np.ndarray)
            value.flags.writeable = False
        return value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._read_only(self._live())
        return out.astype(dtype) if dtype is not None else (out.copy() if copy else out)

    def __getitem__(self, key: Any) -> Any:
        return self._read_only(self._live()[key])

    def __setitem__(self, key: Any, value: Any) -> None:
        value = np.asarray(value.__array__() if isinstance(value, EditFrames) else value)
        _check_assignable(self.name, value, self.dtype, self.episode)
        self._live()[key] = self._shaped(value, key)

    def _shaped(self, value: np.ndarray, key: Any) -> np.ndarray:
        """``value`` broadcast to the frames ``self[key]``; a scalar feature also takes values with a trailing axis
        of 1, as :meth:`WritableDataset.add_episode` does."""
        target = np.broadcast_to(np.empty((), np.bool_), self.shape)[key].shape
        given = value.shape
        if self.ndim == 1 and value.ndim == len(target) + 1 and given[-1:] == (1,):
            value = value[..., 0]
        try:
            return np.broadcast_to(value, target)
        except ValueError:
            raise SchemaMismatchError(f"feature {self.name!r}, episode {self.episode}: values of shape {given} cannot "
                                      f"be assigned to frames of shape {target}", feature=self.name,
                                      episode=self.episode) from None

    def _inplace(self, op: Any, other: Any) -> EditFrames:
        with np.errstate(all="ignore"):
            self[...] = op(np.asarray(self), self._shaped(np.asarray(other), ...))
        return self

    def __iadd__(self, other: Any) -> EditFrames:
        return self._inplace(np.add, other)

    def __isub__(self, other: Any) -> EditFrames:
        return self._inplace(np.subtract, other)

    def __imul__(self, other: Any) -> EditFrames:
        return self._inplace(np.multiply, other)

    def __itruediv__(self, other: Any) -> EditFrames:
        return self._inplace(np.true_divide, other)

    def __repr__(self) -> str:
        if self._frames is None:
            return f"EditFrames({self.name!r}, episode={self.episode}, edit block ended)"
        return f"EditFrames({self.name!r}, episode={self.episode}, shape={self.shape}, dtype={self.dtype})"


class _EditMaps(Mapping):
    """What ``edit`` yields: each feature's frames mapped writable on first lookup (as :class:`EditFrames`),
    flushed at the end, and the episode's stats marked for recomputation for the features looked up. When the
    block ends, it and its frames refuse any use (``StoreClosedError``)."""

    def __init__(self, ds: WritableDataset, episode: int, pack: int, offset: int, length: int, frames: slice,
                 names: list[str]):
        self.ds, self.episode, self.key, self.length, self.frames, self.names = (ds, episode, (pack, offset), length,
                                                                                  frames, names)
        self.maps: dict[str, np.memmap] = {}
        self.views: dict[str, EditFrames] = {}
        self.ended = False

    def __getitem__(self, name: str) -> EditFrames:
        if self.ended:
            raise StoreClosedError(f"{self.ds.root}: the edit block of episode {self.episode} has ended; edit in a "
                                   f"new `with ds.edit(...)` block", path=self.ds.root, episode=self.episode,
                                   feature=str(name))
        if name not in self.views:
            if name not in self.names:
                own = "LeRobot's own columns change with set_task, delete_episodes, delete_frames; " \
                    if name in DEFAULT_FEATURES else ""
                raise UnknownFeatureError(f"{self.ds.root}: no feature {name!r} to edit in episode {self.episode} "
                                          f"({own}editable here: {self.names})", path=self.ds.root,
                                          episode=self.episode, feature=str(name))
            self.maps[name] = self.ds._rows_map(name, *self.key, self.length, writable=True)
            dirty = self.ds._dirty.setdefault(self.key, set())
            if name not in dirty:  # a writer after a crash recomputes the stats and hashes of what it lists
                self.ds._mark_editing(self.key, dirty | {name})
            if not dirty:  # until recomputed its stats are gone from disk
                _remove(stats_path(self.ds.root, *self.key))
            dirty.add(name)
            self.views[name] = EditFrames(name, self.maps[name][self.frames], self.ds._state.arrays[name].kind,
                                          self.episode)
        return self.views[name]

    def __setitem__(self, name: str, value: Any) -> None:
        """``ep[k] = values`` (or the result of ``ep[k] += x``): every selected frame of the feature."""
        target = self[name]
        if value is not target:
            target[...] = value

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def close(self) -> None:
        self.ended = True
        for m in self.maps.values():
            m.flush()
        for view in self.views.values():
            view._frames = None
        self.maps.clear()
        self.views.clear()


def _drop_empty_features(state: StoreState) -> StoreState:
    """Drop arrays the source could give for no episode (cameras whose videos are all missing): the store then
    lists them as not materialized, as one made without them would, and stays writable."""
    n = len(state.table)
    empty = [name for name in state.arrays if n and len(state.unavailable_of(name)) == n]
    if not empty:
        return state
    not_materialized = dict(state.not_materialized)
    for name in empty:
        not_materialized[name] = f"unavailable in every episode; episode 0: {state.unavailable_of(name)[0]}"
    new_state = commit(replace(state, arrays={k: v for k, v in state.arrays.items() if k not in empty},
                               materialized={k: v for k, v in state.materialized.items() if k not in empty},
                               unavailable={k: v for k, v in state.unavailable.items() if k not in empty},
                               not_materialized=not_materialized), previous=state)
    for name in empty:
        _remove(state.root / name)
    return new_state


def _copy_stats_files(source: Path, root: Path) -> None:
    """The per-episode stats files of ``source`` copied into ``root`` (regular files only: a link is not
    followed out of the store)."""
    folder = Path(check_in_store(source, source / ".episode_stats" / "_")).parent
    if folder.is_symlink() or not folder.is_dir():
        return
    target = root / ".episode_stats"
    target.mkdir(exist_ok=True)
    for entry in folder.iterdir():
        if entry.is_file() and not entry.is_symlink() and entry.name.endswith(".json"):
            with contextlib.suppress(FileExistsError):
                copy_file(entry, target / entry.name)


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


class _Frames:
    """One feature's frames of an episode being extended: its committed rows (a memory map) then the new ones,
    without copying the committed rows for what needs only some of them (image stats take a sample of frames)."""

    def __init__(self, head: np.ndarray | None, new: np.ndarray):
        self.head, self.new = head, new
        self.before = 0 if head is None else len(head)

    def __len__(self) -> int:
        return self.before + len(self.new)

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index)
        out = np.empty((len(index), *self.new.shape[1:]), dtype=self.new.dtype)
        old = index < self.before
        if old.any():
            out[old] = self.head[index[old]]
        out[~old] = self.new[index[~old] - self.before]
        return out

    def numeric(self) -> np.ndarray:
        return self.new if self.head is None else np.concatenate([self.head, self.new])


def _stored(values: np.ndarray, spec: ArraySpec) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=spec.dtype)


def _check_fits(name: str, arr: np.ndarray, dtype: np.dtype, episode: int) -> None:
    """Refuse values the stored dtype would change: out of range, NaN/inf or fractions into integers, finite
    floats that overflow to infinity. (float64 -> float32 rounding is what a float32 feature means.)"""
    if arr.dtype == dtype or not arr.size:
        return
    where = f"feature {name!r}, episode {episode}"
    if dtype.kind == "b":
        if not np.isin(arr, (0, 1)).all():
            raise ValueRangeError(f"{where}: bool values must be 0/1 or True/False", feature=name, episode=episode)
        return
    if arr.dtype.kind == "b":
        return
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if arr.dtype.kind == "f":
            if not np.isfinite(arr).all():
                raise ValueRangeError(f"{where}: NaN or infinite values cannot be stored as {dtype}", feature=name,
                                      episode=episode)
            if (arr != np.round(arr)).any():
                raise ValueRangeError(f"{where}: fractional values cannot be stored as {dtype}", feature=name,
                                      episode=episode)
        low, high = arr.min(), arr.max()
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise ValueRangeError(f"{where}: value {bad} does not fit {dtype} [{info.min}, {info.max}]", feature=name,
                                  episode=episode)
        return
    if dtype.kind == "f" and arr.dtype.kind in "iuf":
        with np.errstate(over="ignore", invalid="ignore"):
            cast = arr.astype(dtype)
        overflow = np.isinf(cast) & ~np.isinf(arr) if arr.dtype.kind == "f" else np.isinf(cast)
        if overflow.any():
            raise ValueRangeError(f"{where}: value {arr[overflow].reshape(-1)[0]} overflows {dtype}", feature=name,
                                  episode=episode)


def _as_frames(name: str, value: Any, spec: ArraySpec, episode: int) -> np.ndarray:
    """Frames of one feature as (T, *frame_shape) of the stored dtype; images may also come CHW or in [0, 1]."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise SchemaMismatchError(f"feature {name!r}, episode {episode}: {arr.dtype} values cannot be stored as "
                                  f"{spec.dtype}", feature=name, episode=episode)
    shape = spec.frame_shape
    if spec.kind == "image":
        if arr.ndim == 4 and arr.shape[1:] != shape and arr.shape[1:] == (shape[2], shape[0], shape[1]):
            arr = np.moveaxis(arr, 1, -1)  # CHW, as LeRobot's cameras give them
        if arr.dtype.kind == "f":
            if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0 and arr.max() <= 1):
                raise ValueRangeError(f"feature {name!r}, episode {episode}: float images must be finite and in "
                                      f"[0, 1]", feature=name, episode=episode)
            arr = np.round(arr * 255)
        elif arr.dtype != np.uint8:
            raise SchemaMismatchError(f"feature {name!r}: images must be uint8 or float in [0, 1], got {arr.dtype}",
                                      feature=name, episode=episode)
    if arr.ndim == 1 + len(shape) + 1 and shape == () and arr.shape[1:] == (1,):
        arr = arr[:, 0]  # scalars given as (T, 1)
    if arr.ndim != 1 + len(shape) or arr.shape[1:] != shape:
        raise SchemaMismatchError(f"feature {name!r}: expected frames of shape (T, {', '.join(map(str, shape))}), "
                                  f"got {arr.shape}".replace("(T, )", "(T,)"), feature=name, episode=episode)
    if spec.kind != "image":
        _check_assignable(name, arr, spec.dtype, episode)
    return arr.astype(spec.dtype, copy=False)


def _check_assignable(name: str, arr: np.ndarray, dtype: np.dtype, episode: int) -> None:
    """Values may become the stored dtype only without changing: integers and bools anywhere they fit, floats
    into floats (no overflow), never floats into integers or bools, never other kinds."""
    src, dst = arr.dtype.kind, dtype.kind
    allowed = src == "b" or (src in "iu" and dst in "biuf") or (src == "f" and dst == "f")
    if not allowed:
        raise SchemaMismatchError(f"feature {name!r}, episode {episode}: {arr.dtype} values cannot be stored as "
                                  f"{dtype}", feature=name, episode=episode)
    _check_fits(name, arr, dtype, episode)
