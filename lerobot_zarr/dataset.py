"""Sampling from a local store with LeRobot's semantics: ``ds[i]``, ``ds.get_batch(indices)``, episodes, meta.

Frame lookups and temporal windows are index arithmetic on the episode table; data comes from memory maps of
the chunk files (see ``_region``), opened lazily in each process, never through zarr-python.
"""

from __future__ import annotations

import operator
import os
import threading
import warnings
import weakref
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._region import EpisodeRegion
from .errors import DeltaTimestampsError, FrameIndexError, LeRobotZarrWarning, NotMaterializedError
from .store import (
    ArraySpec,
    StoreState,
    chunk_path,
    from_ranges,
    open_chunk,
    read_shard_index,
    read_state,
    retired_path,
    to_ranges,
)

if TYPE_CHECKING:
    from .source import LeRobotSource

__all__ = ["DatasetMeta", "LeRobotZarrDataset", "IMAGE_FORMATS"]

IMAGE_FORMATS = ("uint8_hwc", "float32_chw")
DELTA_TOLERANCE_S = 1e-4
MAX_MAPS_ENV = "LEROBOT_ZARR_MAX_MAPS"
_live_datasets: weakref.WeakSet = weakref.WeakSet()


def _default_max_maps() -> int:
    raw = os.environ.get(MAX_MAPS_ENV, "16384")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{MAX_MAPS_ENV}={raw!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{MAX_MAPS_ENV} must be positive, got {value}")
    return value


def _reset_locks_after_fork() -> None:
    # a fork taken while another thread sampled would leave the child's lock held forever
    for ds in list(_live_datasets):
        ds._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_after_fork)


@dataclass(frozen=True)
class DatasetMeta:
    """What the store knows about its dataset (LeRobot's info, tasks, stats, episode table)."""

    root: Path | str  # the store folder; for a source's metadata (no store), its location (folder or repo@rev)
    info: dict
    tasks: list[str]
    stats: dict
    source: dict
    episode_start: np.ndarray
    episode_end: np.ndarray
    episode_length: np.ndarray
    materialized_episodes: np.ndarray  # bool mask: episodes whose every stored feature is committed
    not_materialized: dict[str, str]
    stored_features: tuple[str, ...] = field(default=())
    # per stored feature, episodes the source could not give (missing or broken videos) and why
    unavailable: dict[str, dict[int, str]] = field(default_factory=dict)
    episode_task_index: np.ndarray | None = None  # each episode's first task (-1: unknown)

    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def features(self) -> dict[str, dict]:
        """LeRobot feature specs (dtype, shape, names), videos included."""
        return self.info["features"]

    @property
    def total_episodes(self) -> int:
        return len(self.episode_length)

    @property
    def total_frames(self) -> int:
        return int(self.episode_length.sum())

    @classmethod
    def from_state(cls, state: StoreState) -> DatasetMeta:
        a = state.attrs
        return cls(state.root, a["info"], a["tasks"], a["stats"], a["source"], state.episode_start,
                   state.episode_end, state.episode_length, state.complete_episodes(),
                   dict(a.get("not_materialized", {})), tuple(state.arrays),
                   {name: state.unavailable(name) for name in state.arrays if state.unavailable(name)},
                   state.table.task_index)

    @classmethod
    def from_source(cls, source: LeRobotSource) -> DatasetMeta:
        """Metadata of a LeRobot folder that has no store yet (nothing materialized)."""
        t = source.episodes
        stored = tuple(k for k, v in source.features.items()
                       if v.kind in ("numeric", "image", "video") and k not in source.not_materialized)
        return cls(source.files.location(), source.info, source.tasks, source.stats, source.record(),
                   t.start, t.end, t.length, np.zeros(len(t), dtype=bool), source.not_materialized,
                   stored)

    def __repr__(self) -> str:
        return (f"DatasetMeta(root={str(self.root)!r}, fps={self.fps:g}, robot_type={self.robot_type!r}, "
                f"episodes={self.total_episodes} ({int(self.materialized_episodes.sum())} local), "
                f"frames={self.total_frames}, features={list(self.features)})")


def window_offsets(delta_timestamps: Mapping[str, Sequence[float]] | None, fps: float, known: Sequence[str],
                    missing: Mapping[str, str]) -> dict[str, np.ndarray]:
    """Validate deltas (multiples of 1/fps within 1e-4 s) and turn them into frame offsets."""
    out: dict[str, np.ndarray] = {}
    for key, deltas in (delta_timestamps or {}).items():
        if key in missing:
            raise NotMaterializedError(f"delta_timestamps: feature {key!r} is not materialized: {missing[key]}")
        if key not in known:
            raise DeltaTimestampsError(f"delta_timestamps: unknown feature {key!r} (features: {list(known)})")
        if isinstance(deltas, (str, bytes)) or not isinstance(deltas, Sequence | np.ndarray):
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a list of seconds, got {deltas!r}")
        try:
            values = np.asarray(list(deltas), dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a list of seconds, got {deltas!r}") from None
        if values.size == 0 or not np.isfinite(values).all():
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}] must be a non-empty list of finite seconds")
        frames = np.round(values * fps)
        bad = np.flatnonzero(np.abs(values - frames / fps) > DELTA_TOLERANCE_S)
        if bad.size:
            raise DeltaTimestampsError(f"delta_timestamps[{key!r}]: {values[bad[0]]} s is not a multiple of "
                                       f"1/fps = {1 / fps:.6g} s (tolerance {DELTA_TOLERANCE_S} s)")
        out[key] = frames.astype(np.int64)
    return out


EpisodeSelection = Sequence[int] | Mapping[int, slice | range | tuple[int, int] | None]


def frame_range(frames: slice | range | tuple[int, int] | None, n: int, where: str) -> tuple[int, int]:
    """``[first, stop)`` of a frame selection of an episode of ``n`` frames (None: all; negative from the end)."""
    if frames is None:
        return 0, n
    if isinstance(frames, tuple):
        frames = slice(*frames)
    if not isinstance(frames, (slice, range)) or frames.step not in (None, 1):
        raise ValueError(f"{where}: frames must be a slice, range or (first, stop) of step 1, got {frames!r}")
    first, stop, _ = slice(frames.start, frames.stop).indices(n)
    return first, stop


def episode_ranges(episodes: EpisodeSelection, lengths: np.ndarray) -> list[tuple[int, int, int]]:
    """Normalise an episode selection to sorted ``(episode, first_frame, stop_frame)`` triples.

    ``[3, 5]`` selects whole episodes; ``{3: slice(100, 200), 5: None}`` selects frames 100..199 of episode 3
    (episode-local frame indices, negative ones from the end, step 1) and all of episode 5. Like LeRobot's
    filtering, the order given does not matter: frames come in episode order.
    """
    items = episodes.items() if isinstance(episodes, Mapping) else ((e, None) for e in episodes)
    out: dict[int, tuple[int, int, int]] = {}
    for e, frames in items:
        e = operator.index(e)
        if not 0 <= e < len(lengths):
            raise FrameIndexError(f"episode {e} does not exist ({len(lengths)} episodes)")
        n = int(lengths[e])
        first, stop = frame_range(frames, n, f"episode {e}")
        if stop <= first:
            raise FrameIndexError(f"episode {e}: frame range {frames!r} is empty for an episode of {n} frames")
        out[e] = (e, first, stop)
    return [out[e] for e in sorted(out)]


class _Window:
    """A windowed feature's view with its frame offsets, precomputed for the sampling hot path."""

    def __init__(self, name: str, region: EpisodeRegion, offsets: np.ndarray):
        self.name, self.pad_key = name, f"{name}_is_pad"
        self.view, self.rows, self.rows_list = region.view, region.rows, region.rows.tolist()
        self.offsets = offsets
        self.lo, self.hi = int(offsets.min()), int(offsets.max())
        self.no_pad = np.zeros(len(offsets), dtype=bool)
        # Offsets lo..hi in steps of one frame: every window is a block of consecutive rows, so a strided view
        # with one block per starting row lets a batch copy whole blocks. Only blocks inside an episode are read.
        self.blocks = None
        if np.array_equal(offsets, np.arange(self.lo, self.hi + 1)):
            v = self.view
            n = len(offsets)
            self.blocks = np.lib.stride_tricks.as_strided(
                v, (v.shape[0] - n + 1, n, *v.shape[1:]), (v.strides[0], *v.strides), writeable=False)


def read_episode_chunk(root: str | os.PathLike, name: str, spec: ArraySpec, chunk: int, length: int,
                       episode: int) -> np.ndarray:
    """A copy of one episode's stored frames of one feature, from chunk ``chunk`` (or its retired copy)."""
    path = chunk_path(root, name, chunk, spec.ndim)
    retired = retired_path(root, name, chunk)
    if spec.storage == "compact":
        reader = _Compact(name, spec, np.full(episode + 1, length), lambda e: (path, retired), 1, None)
        return reader.frames(np.full(length, episode), np.arange(length))
    fd = open_chunk(path, length * spec.frame_bytes, episode, name, retired=retired)
    with os.fdopen(fd, "rb") as f:
        return np.fromfile(f, dtype=spec.dtype).reshape(length, *spec.frame_shape)


class _Compact:
    """A compact feature (zstd-compressed frames in a zarr shard per episode): frames are read with ``pread``
    and decompressed with numcodecs, the shard indexes of at most ``max_open`` episodes kept open."""

    def __init__(self, name: str, spec: ArraySpec, lengths: np.ndarray, path_of: Any, max_open: int,
                 offsets: np.ndarray | None):
        from numcodecs import Zstd

        self.name, self.spec, self.lengths, self.path_of = name, spec, lengths, path_of
        self.codec = Zstd()
        self.max_open = max(1, max_open)
        self.offsets = offsets
        self.pad_key = f"{name}_is_pad"
        self.open: dict[int, tuple[int, np.ndarray]] = {}  # episode -> (fd, shard index), oldest first
        self._finalizer = weakref.finalize(self, _close_all, self.open)

    def _episode(self, e: int) -> tuple[int, np.ndarray]:
        entry = self.open.pop(e, None)
        if entry is None:
            path, retired = self.path_of(e)
            fd = open_chunk(path, -1, e, self.name, retired=retired)
            try:
                entry = (fd, read_shard_index(fd, int(self.lengths[e]), f"{path} (episode {e})"))
            except BaseException:
                os.close(fd)
                raise
            while len(self.open) >= self.max_open:
                os.close(self.open.pop(next(iter(self.open)))[0])
        self.open[e] = entry  # most recently used last
        return entry

    def frames(self, eps: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(eps), *self.spec.frame_shape), dtype=self.spec.dtype)
        flat = out.reshape(len(eps), -1).view(np.uint8)
        for k, (e, r) in enumerate(zip(np.asarray(eps).tolist(), np.asarray(rows).tolist(), strict=True)):
            fd, index = self._episode(e)
            offset, nbytes = index[r]
            flat[k] = np.frombuffer(self.codec.decode(os.pread(fd, int(nbytes), int(offset))), dtype=np.uint8)
        return out

    def item(self, out: dict[str, Any], e: int, local: int, length: int) -> None:
        if self.offsets is None:
            out[self.name] = self.frames(np.array([e]), np.array([local]))[0]
            return
        q = self.offsets + local
        out[self.pad_key] = (q < 0) | (q >= length)
        out[self.name] = self.frames(np.full(len(q), e), np.clip(q, 0, length - 1))

    def batch(self, out: dict[str, Any], eps: np.ndarray, local: np.ndarray, length: np.ndarray) -> None:
        if self.offsets is None:
            out[self.name] = self.frames(eps, local)
            return
        q = local[:, None] + self.offsets
        out[self.pad_key] = (q < 0) | (q >= length[:, None])
        rows = np.minimum(np.maximum(q, 0), (length - 1)[:, None])
        frames = self.frames(np.repeat(eps, len(self.offsets)), rows.reshape(-1))
        out[self.name] = frames.reshape(len(eps), len(self.offsets), *self.spec.frame_shape)


def _close_all(open_files: dict[int, tuple[int, np.ndarray]]) -> None:
    for fd, _ in open_files.values():
        os.close(fd)
    open_files.clear()


class LeRobotZarrDataset:
    """Random access to a store's frames, as ``LeRobotDataset`` returns them but in numpy.

    ``len(ds)`` is the number of frames of the selected episodes (or frame ranges of episodes: windows still see
    the whole episode, padding only at its true edges); ``ds[i]`` is the i-th of them. The object
    pickles as its arguments and reopens its maps lazily in each process, so it works in DataLoader workers.
    """

    _headroom = 0.0  # address space reserved past the episodes for appends (a writer's dataset sets it)

    def __init__(self, root: str | os.PathLike, *, episodes: EpisodeSelection | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, image_format: str = "uint8_hwc",
                 max_open_maps: int | None = None, lazy: bool = False):
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {IMAGE_FORMATS}, got {image_format!r}")
        self.root = Path(root)
        self.image_format = image_format
        self._request = (episodes, delta_timestamps, _default_max_maps() if max_open_maps is None
                         else int(max_open_maps), bool(lazy))
        self._lock = threading.Lock()
        self._load(read_state(self.root))
        left_out = {name: why for name, why in self._left_out.items() if name not in self.meta.not_materialized}
        if left_out:
            warnings.warn(f"{self.root}: " + "; ".join(f"{n!r} is left out of samples: {w}" for n, w in left_out.items()),
                          LeRobotZarrWarning, skip_file_prefixes=(os.path.dirname(__file__),))
        _live_datasets.add(self)

    def _load(self, state: StoreState) -> None:
        """Set up index arithmetic for a committed state (maps are opened lazily; on a reload, episodes whose chunk
        is unchanged keep their maps)."""
        previous = getattr(self, "_regions", None), getattr(self, "_chunks", None), getattr(self, "_specs", None)
        episodes, delta_timestamps, max_open_maps, lazy = self._request
        ranges = None if episodes is None else episode_ranges(episodes, state.episode_length)
        self.meta = DatasetMeta.from_state(state)
        wanted = (np.array([e for e, _, _ in ranges], dtype=np.int64) if ranges is not None
                  else np.arange(len(state.table)))
        missing = dict(state.attrs.get("not_materialized", {}))
        for name, reasons in self.meta.unavailable.items():
            hit = [e for e in wanted.tolist() if e in reasons]
            if hit:  # a camera some selected episodes lack: left out of samples, not the episodes
                missing[name] = (f"unavailable in {len(hit)} of the {len(wanted)} selected episodes "
                                 f"{hit[:10]}{'...' if len(hit) > 10 else ''}; episode {hit[0]}: {reasons[hit[0]]}")
        self._left_out = {name: why for name, why in missing.items() if name in state.arrays}
        self._offsets = window_offsets(delta_timestamps, float(state.attrs["info"]["fps"]), list(state.arrays),
                                        missing)
        self._generation = state.generation
        self._specs = {name: spec for name, spec in state.arrays.items() if name not in self._left_out}
        n_ep = self.meta.total_episodes
        present = self.meta.materialized_episodes
        self._lazy = lazy
        self._present = present.copy()
        if ranges is None:
            selected = np.arange(n_ep) if lazy else np.flatnonzero(present)
            lengths = self.meta.episode_length[selected].tolist()
            ranges = [(e, 0, n) for e, n in zip(selected.tolist(), lengths, strict=True)]
        table = np.array(ranges, dtype=np.int64).reshape(-1, 3)
        selected, first, stop = table[:, 0], table[:, 1], table[:, 2]
        absent = selected[~present[selected]]
        if absent.size and not lazy:
            raise NotMaterializedError(f"{self.root}: episodes {absent.tolist()[:20]} are not in the local store")
        self.episodes = selected
        self.delta_timestamps = None if delta_timestamps is None else {k: list(v) for k, v in delta_timestamps.items()}
        # pickled: the resolved selection (not "whatever is committed when unpickled"), compactly
        whole = bool((first == 0).all() and (stop == self.meta.episode_length[selected]).all())
        selection = ("whole", to_ranges(selected.tolist())) if whole else ("frames", table.tolist())
        self._args = (str(self.root), selection, self.delta_timestamps, self.image_format, max_open_maps, lazy)
        self._first = first  # selected frames of episode k: [first[k], stop[k]) (whole episodes by default)
        self._cum = np.concatenate([[0], np.cumsum(stop - first)]).astype(np.int64)
        self._len = int(self._cum[-1])
        self._cum_list = self._cum.tolist()
        self._sel_list = selected.tolist()
        self._first_list = first.tolist()
        self._lengths = self.meta.episode_length.copy()  # bounds for reads: never a user-visible array
        self._length_list = self._lengths.tolist()
        self._chunks = state.table.chunk
        # stored episode_index / index values exceed LeRobot's after earlier episodes were deleted
        shifts = {"episode_index": state.table.episode_index_shift, "index": state.table.index_shift}
        self._shifts = [(name, shift, shift.tolist()) for name, shift in shifts.items()
                        if name in self._specs and shift.any()]
        self._tasks = np.array(self.meta.tasks, dtype=object)
        self._max_maps = max(1, int(max_open_maps) // max(1, len(self._specs)))
        self._regions: dict[str, EpisodeRegion] | None = None
        if previous[0] is not None and previous[2] == self._specs:
            self._relayout(previous[0], previous[1])

    def _relayout(self, regions: dict[str, EpisodeRegion], old_chunks: np.ndarray) -> None:
        """Keep the maps of a previous commit's episodes whose chunk is still listed (same file, same frames)."""
        where = {int(c): i for i, c in enumerate(old_chunks.tolist())}
        keep = np.array([where.get(int(c), -1) for c in self._chunks.tolist()], dtype=np.int64)
        drop = np.setdiff1d(np.flatnonzero(self._mapped), keep[keep >= 0])
        for region in regions.values():
            if not region.relayout(keep, self.meta.episode_length, drop):
                self._headroom = 1.0  # out of reserved room: start afresh (lazily), with room for what comes next
                return
        mapped = np.zeros(len(keep), dtype=bool)
        last_used = np.zeros(len(keep), dtype=np.int64)
        mapped[keep >= 0] = self._mapped[keep[keep >= 0]]
        last_used[keep >= 0] = self._last_used[keep[keep >= 0]]
        self._mapped, self._last_used, self._n_mapped = mapped, last_used, int(mapped.sum())
        self._compact = {name: _Compact(name, reader.spec, self.meta.episode_length, reader.path_of, self._max_maps,
                                        self._offsets.get(name)) for name, reader in self._compact.items()}
        self._index_regions(regions)

    def _learn_tasks(self) -> None:
        """A writer gave frames a task added after this dataset's commit (set_task works in place): tasks are
        only ever appended, so the latest list names it."""
        self._tasks = np.array(read_state(self.root).attrs["tasks"], dtype=object)

    def index_shifts(self) -> dict[str, np.ndarray]:
        """What the stored ``episode_index`` / ``index`` values of each episode exceed LeRobot's by (after
        deletions; all zero otherwise)."""
        return {name: shift for name, shift, _ in self._shifts}

    def refresh(self) -> bool:
        """Pick up what writers committed since this dataset was opened (appended or deleted episodes, new
        tasks): the same arguments applied to the latest commit. Returns whether anything changed.

        In-place changes of frames (``edit``, ``set_task``) need no refresh: they are visible at once. A dataset
        otherwise keeps the commit it opened, so indices stay stable for a sampler until it refreshes."""
        state = read_state(self.root)
        if state.generation == self._generation:
            return False
        with self._lock:
            self._load(state)
        return True

    # pickling: arguments only ---------------------------------------------------------------------------
    def __getstate__(self) -> tuple:
        return self._args

    def __setstate__(self, args: tuple) -> None:
        root, (kind, selection), deltas, image_format, max_maps, lazy = args
        episodes = from_ranges(selection) if kind == "whole" else {e: (a, b) for e, a, b in selection}
        self.__init__(root, episodes=episodes, delta_timestamps=deltas, image_format=image_format,
                      max_open_maps=max_maps, lazy=lazy)

    def __repr__(self) -> str:
        return (f"LeRobotZarrDataset(root={str(self.root)!r}, frames={self._len}, episodes={len(self.episodes)}, "
                f"features={list(self._specs)}, windows={ {k: len(v) for k, v in self._offsets.items()} })")

    def __len__(self) -> int:
        return self._len

    @property
    def left_out(self) -> dict[str, str]:
        """Features the store lists but samples of this selection lack, with why (e.g. a camera whose video is
        missing for some selected episodes: select only the episodes that have it to get it)."""
        return dict(self._left_out)

    @property
    def array_specs(self) -> dict[str, ArraySpec]:
        """The store's arrays: dtype, per-frame shape and kind (numeric or image) of each stored feature."""
        return dict(self._specs)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    # maps -----------------------------------------------------------------------------------------------
    def _open_regions(self) -> dict[str, EpisodeRegion]:
        lengths = self.meta.episode_length
        regions = {}
        self._compact = {}
        for name, spec in self._specs.items():
            path_of = partial(self._chunk_files, name, spec.ndim)
            if spec.storage == "compact":
                self._compact[name] = _Compact(name, spec, lengths, path_of, self._max_maps,
                                               self._offsets.get(name))
            else:
                regions[name] = EpisodeRegion(name, spec.dtype, spec.frame_shape, lengths, path_of,
                                              headroom=self._headroom)
        self._mapped = np.zeros(len(lengths), dtype=bool)
        self._n_mapped = 0
        self._last_used = np.zeros(len(lengths), dtype=np.int64)
        self._tick = 0
        self._index_regions(regions)
        return regions

    def _index_regions(self, regions: dict[str, EpisodeRegion]) -> None:
        """The hot path's per-feature views and row offsets."""
        self._plain = [(name, r.view, r.rows, r.rows.tolist()) for name, r in regions.items()
                       if name not in self._offsets]
        self._windowed = [_Window(name, r, self._offsets[name]) for name, r in regions.items() if name in self._offsets]
        self._images = [name for name, s in self._specs.items() if s.kind in ("image", "video")]
        task = regions["task_index"]  # read again for the task text: it may be windowed, or stored as a 1-vector
        self._task_source = (task.view, task.rows, task.rows.tolist(), task.view.ndim > 1)
        self._extras = bool(self._shifts or self._compact)  # per-sample work beyond the maps (rare): one test
        self._regions = regions

    def _chunk_files(self, name: str, ndim: int, e: int) -> tuple[str, str]:
        chunk = int(self._chunks[e])
        return chunk_path(self.root, name, chunk, ndim), retired_path(self.root, name, chunk)

    def _ensure_mapped(self, eps: np.ndarray) -> None:
        """Map the given episodes (at most the budget) in every feature, evicting the least recently used."""
        if self._regions is None:
            self._open_regions()
        self._tick += 1
        self._last_used[eps] = self._tick
        need = np.unique(eps[~self._mapped[eps]])
        if self._lazy and not self._present[need].all():
            self._fetch(need[~self._present[need]])
        excess = self._n_mapped + len(need) - self._max_maps
        if excess > 0:
            candidates = np.flatnonzero(self._mapped & (self._last_used < self._tick))
            order = np.argsort(self._last_used[candidates], kind="stable")
            drop = candidates[order[:max(excess, self._n_mapped // 4)]]
            for region in self._regions.values():
                for e in drop.tolist():
                    region.unmap(e)
            self._mapped[drop] = False
            self._n_mapped -= len(drop)
        for e in need.tolist():
            for region in self._regions.values():
                region.map(e)
            self._mapped[e] = True
            self._n_mapped += 1

    def _fetch(self, episodes: np.ndarray) -> None:
        """Lazy mode: bring missing episodes into the store from its recorded source (Hub or local folder)."""
        from .api import materialize

        materialize(self.root, episodes.tolist(), progress=False)
        state = read_state(self.root)
        for name in self._specs:
            gone = {e: why for e, why in state.unavailable(name).items() if e in set(episodes.tolist())}
            if gone:
                e = min(gone)
                raise NotMaterializedError(f"{self.root}: episode {e} has no {name!r} frames ({gone[e]}); open the "
                                           f"dataset without lazy=True to leave the camera out, or select episodes "
                                           f"that have it")
        self._present = state.complete_episodes()
        absent = episodes[~self._present[episodes]]
        if absent.size:
            raise NotMaterializedError(f"{self.root}: episodes {absent.tolist()[:20]} could not be fetched")

    # index arithmetic -----------------------------------------------------------------------------------
    def _locate(self, index: int) -> tuple[int, int]:
        n = self._len
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise FrameIndexError(f"frame index {index} is out of range for a dataset of {n} frames")
        k = bisect_right(self._cum_list, i) - 1
        return self._sel_list[k], i - self._cum_list[k] + self._first_list[k]

    def _locate_many(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indices)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=True).reshape(-1)
        idx[idx < 0] += self._len
        bad = (idx < 0) | (idx >= self._len)
        if bad.any():
            raise FrameIndexError(f"frame index {int(np.asarray(indices).reshape(-1)[np.argmax(bad)])} is out of "
                                  f"range for a dataset of {self._len} frames")
        k = np.searchsorted(self._cum, idx, side="right") - 1
        return self.episodes[k], idx - self._cum[k] + self._first[k]

    def _image_out(self, out: dict[str, Any]) -> None:
        if self.image_format == "float32_chw":
            for name in self._images:
                arr = out[name]
                out[name] = np.moveaxis(arr, -1, -3).astype(np.float32) / np.float32(255)

    # sampling -------------------------------------------------------------------------------------------
    def __getitem__(self, i: int) -> dict[str, Any]:
        """Frame ``i`` with every stored feature, windows and ``*_is_pad`` masks, and the ``task`` string."""
        e, local = self._locate(operator.index(i))
        length = self._length_list[e]
        out: dict[str, Any] = {}
        with self._lock:
            if self._regions is None or not self._mapped[e]:
                self._ensure_mapped(np.array([e]))
            else:
                self._last_used[e] = self._tick
            for w in self._windowed:
                base = w.rows_list[e]
                if local + w.lo >= 0 and local + w.hi < length:  # the usual case: no padding
                    out[w.name] = w.view[w.offsets + (base + local)]
                    out[w.pad_key] = w.no_pad.copy()
                else:
                    q = w.offsets + local
                    out[w.pad_key] = (q < 0) | (q >= length)
                    out[w.name] = w.view[np.minimum(np.maximum(q, 0), length - 1) + base]
            for name, view, _, rows_list in self._plain:
                value = view[rows_list[e] + local]
                out[name] = value.copy() if isinstance(value, np.ndarray) else value
            task_view, _, task_rows, vector = self._task_source
            task_index = task_view[task_rows[e] + local]
            task_index = task_index[0] if vector else task_index
            try:
                out["task"] = self._tasks[task_index]
            except IndexError:  # a writer's set_task gave frames a task added after this commit
                self._learn_tasks()
                out["task"] = self._tasks[task_index]
            if self._extras:
                for name, _, shift in self._shifts:
                    out[name] = out[name] - shift[e]
                for compact in self._compact.values():
                    compact.item(out, e, local, length)
        if self._images:
            self._image_out(out)
        return out

    def get_batch(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """The same dict as ``ds[i]`` for many frames, stacked along a leading batch axis (one gather per feature)."""
        eps, local = self._locate_many(indices)
        if len(eps) <= self._max_maps:
            return self._gather(eps, local)
        unique = np.unique(eps)
        if len(unique) <= self._max_maps:
            return self._gather(eps, local)
        # more episodes than may be mapped at once: gather in parts of at most the budget, then reassemble
        part_of = np.searchsorted(unique, eps) // self._max_maps
        parts = [np.flatnonzero(part_of == p) for p in range(int(part_of.max()) + 1)]
        results = [self._gather(eps[m], local[m]) for m in parts]
        order = np.concatenate(parts)
        out: dict[str, Any] = {}
        for key in results[0]:
            if key == "task":
                tasks = np.empty(len(eps), dtype=object)
                tasks[order] = [t for r in results for t in r[key]]
                out[key] = tasks.tolist()
            else:
                merged = np.concatenate([r[key] for r in results])
                out[key] = np.empty_like(merged)
                out[key][order] = merged
        return out

    def _gather(self, eps: np.ndarray, local: np.ndarray) -> dict[str, Any]:
        length = self._lengths[eps]
        out: dict[str, Any] = {}
        with self._lock:
            if self._regions is None or not self._mapped[eps].all():
                self._ensure_mapped(eps)
            else:
                self._tick += 1
                self._last_used[eps] = self._tick
            for w in self._windowed:
                base = w.rows[eps]
                q = local[:, None] + w.offsets
                pad = (q < 0) | (q >= length[:, None])
                out[w.pad_key] = pad
                if w.blocks is None:
                    out[w.name] = w.view[np.minimum(np.maximum(q, 0), (length - 1)[:, None]) + base[:, None]]
                    continue
                # contiguous window: copy whole blocks where it lies inside the episode, gather rows at the edges
                edge = pad.any(axis=1)
                if not edge.any():
                    out[w.name] = w.blocks[base + local + w.lo]
                    continue
                data = np.empty((len(eps), *w.blocks.shape[1:]), dtype=w.view.dtype)
                inside = ~edge
                data[inside] = w.blocks[base[inside] + local[inside] + w.lo]
                clamped = np.minimum(np.maximum(q[edge], 0), (length[edge] - 1)[:, None])
                data[edge] = w.view[clamped + base[edge][:, None]]
                out[w.name] = data
            for name, view, rows, _ in self._plain:
                out[name] = view[rows[eps] + local]
            task_view, task_rows, _, vector = self._task_source
            task_index = task_view[task_rows[eps] + local]
            task_index = task_index[:, 0] if vector else task_index
            if len(task_index) and task_index.max() >= len(self._tasks):
                self._learn_tasks()
            out["task"] = self._tasks[task_index].tolist()
            if self._extras:
                for name, shift, _ in self._shifts:
                    out[name] = out[name] - shift[eps].reshape(-1, *[1] * (out[name].ndim - 1))
                for compact in self._compact.values():
                    compact.batch(out, eps, local, length)
        if self._images:
            self._image_out(out)
        return out

    def episode(self, episode_index: int, *, features: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """All frames of one episode: read-only memory maps of its chunk files, one per stored feature (or per
        feature of ``features``); ``episode_index`` and ``index`` are corrected copies once earlier episodes
        were deleted, compact cameras decoded arrays."""
        e = operator.index(episode_index)
        if not 0 <= e < self.meta.total_episodes:
            raise FrameIndexError(f"episode {e} does not exist ({self.meta.total_episodes} episodes)")
        if not self.meta.materialized_episodes[e]:
            raise NotMaterializedError(f"{self.root}: episode {e} is not in the local store")
        n = int(self.meta.episode_length[e])
        out = {}
        unknown = sorted(set(features or ()) - set(self._specs))
        if unknown:
            raise NotMaterializedError(f"{self.root}: features {unknown} are not in the samples of this dataset "
                                       f"(stored: {list(self._specs)})")
        for name, spec in self._specs.items():
            if features is not None and name not in features:
                continue
            if spec.storage == "compact":
                out[name] = read_episode_chunk(self.root, name, spec, int(self._chunks[e]), n, e)
                continue
            path, retired = self._chunk_files(name, spec.ndim, e)
            with os.fdopen(open_chunk(path, n * spec.frame_bytes, e, name, retired=retired), "rb") as f:
                out[name] = np.memmap(f, dtype=spec.dtype, mode="r", shape=(n, *spec.frame_shape))
        for name, shift, _ in self._shifts:
            if name in out:
                out[name] = np.asarray(out[name]) - shift[e]
        return out

    def to_lerobot(self, path: str | os.PathLike, *, data_files_size_in_mb: int = 100,
                   video_files_size_in_mb: int = 200, videos: bool | None = None, progress: bool = True) -> Path:
        """Export the (complete) store as a LeRobot v3.0 folder at ``path``; see :mod:`lerobot_zarr.export`
        (``videos``: cameras as the source had them by default, or all as videos / all as images)."""
        from .export import to_lerobot

        return to_lerobot(self, path, data_files_size_in_mb=data_files_size_in_mb,
                          video_files_size_in_mb=video_files_size_in_mb, videos=videos, progress=progress)

    def push(self, repo_id: str, *, revision: str | None = None, private: bool = False,
             token: str | bool | None = None, commit_message: str | None = None, videos: bool | None = None,
             progress: bool = True) -> str | None:
        """Publish the store to the Hub as LeRobot v3.0 in one commit tagged ``v3.0`` (only changed files are
        uploaded; an unchanged store makes no commit). Returns the commit sha, or None if nothing changed."""
        from .export import push

        return push(self, repo_id, revision=revision, private=private, token=token,
                    commit_message=commit_message, videos=videos, progress=progress)

    def to_xarray(self) -> Any:
        """The selected, materialized episodes as a lazy ``xarray.Dataset`` (xarray extra): one dask chunk per
        episode; dims ``frame`` and ``<feature>.<axis>`` (named from LeRobot's ``names`` where it names an axis,
        with its labels as coordinates); ``episode_index``, ``frame_index``, ``timestamp`` and ``index`` as
        coordinates; and the episode table over dim ``episode`` (with ``episode_materialized``: a partial store
        lists the episodes it lacks instead of filling them with zeros)."""
        from .analysis import to_xarray

        return to_xarray(self)

    def episode_frames(self, episode_index: int) -> range:
        """Dataset indices (for ``ds[i]``) of the selected frames of one selected episode."""
        hits = np.flatnonzero(self.episodes == operator.index(episode_index))
        if not hits.size:
            raise FrameIndexError(f"episode {episode_index} is not selected in this dataset")
        k = int(hits[0])
        return range(self._cum_list[k], self._cum_list[k + 1])
