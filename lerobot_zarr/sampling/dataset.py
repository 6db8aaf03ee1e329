"""Sampling from a local store with LeRobot's semantics: ``ds[i]``, ``ds.get_batch(indices)``, episodes, meta.

Which frames a dataset serves is :mod:`~lerobot_zarr.sampling.selection`'s arithmetic, windows are
:mod:`~lerobot_zarr.sampling.windows`' kernel, and the data comes from memory maps of the store's packs
(:mod:`lerobot_zarr.sampling.maps`), opened lazily in each process, never through zarr-python.
"""

from __future__ import annotations

import operator
import os
import threading
import weakref
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from ..cameras.depth import DEPTH_UNITS, DepthOutput, DepthUnit, unservable_depth
from ..cameras.images import to_float32_chw
from ..errors import (
    ArgumentError,
    CorruptStoreError,
    FrameIndexError,
    NotMaterializedError,
    StoreClosedError,
    UnknownFeatureError,
    warn_once,
)
from ..lerobot.format import CAMERA_DTYPES
from ..sources.home import MIRROR_MARKER
from ..store.cameras import served_episodes
from ..store.packs import open_array_pack, read_raw_rows, read_text_rows
from ..store.state import StoreState, read_state
from ..store.tables import ArraySpec, PackLayout, pack_rows_target, sorted_distinct
from .camera_readers import CodecFrames, TextFrames, VideoFrames, stored_timestamps
from .conveniences import Conveniences
from .maps import PackMaps
from .meta import DatasetMeta
from .selection import EpisodeSelection, Selection, episode_ranges, frame_range
from .windows import frames_read, window_offsets, windows

__all__ = ["LeRobotZarrDataset", "IMAGE_FORMATS", "ImageFormat", "DEPTH_UNITS", "DepthUnit",
           "read_episode_rows", "frame_range", "episode_ranges", "window_offsets", "EpisodeSelection"]

ImageFormat = Literal["uint8_hwc", "float32_chw"]
IMAGE_FORMATS = get_args(ImageFormat)
MAX_MAPS_ENV = "LEROBOT_ZARR_MAX_MAPS"
_DEFAULT_MAX_MAPS = 4096
_live_datasets: weakref.WeakSet = weakref.WeakSet()


def _default_max_maps() -> int:
    raw = os.environ.get(MAX_MAPS_ENV, str(_DEFAULT_MAX_MAPS))
    try:
        value = int(raw)
    except ValueError:
        raise ArgumentError(f"{MAX_MAPS_ENV}={raw!r} is not an integer") from None
    if value < 1:
        raise ArgumentError(f"{MAX_MAPS_ENV} must be positive, got {value}")
    return value


def _reset_locks_after_fork() -> None:
    # a fork taken while another thread sampled would leave the child's lock held forever
    for ds in list(_live_datasets):
        ds._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_after_fork)


_OLD_STRINGS = "string features are not stored"  # what earlier versions recorded of a source's string features
_OLD_STRINGS_FIX = (" by the lerobot_zarr version that made this store (this one stores them: make the store again "
                    "from its source, e.g. `lerobot-zarr cache rm` then open it, to have them)")


def read_episode_rows(root: str | os.PathLike, name: str, spec: ArraySpec, pack: int, pack_rows: int, offset: int,
                      length: int) -> np.ndarray:
    """A copy of one episode's stored frames of one feature: ``length`` rows from ``offset`` of pack ``pack`` (a text
    array's: an object array of its stored strings)."""
    if spec.is_text:
        return read_text_rows(root, name, spec, pack, pack_rows, offset, length)
    if spec.storage == "compact":
        reader = CodecFrames(root, name, spec, PackLayout(np.array([0] * pack + [pack_rows])), 1)
        try:
            return reader.read_rows(np.full(length, pack), np.arange(offset, offset + length))
        finally:
            reader.close()
    return read_raw_rows(root, name, spec, pack, pack_rows, offset, length)


class LeRobotZarrDataset(Conveniences):
    """Random access to a store's frames, as ``LeRobotDataset`` returns them but in numpy.

    ``len(ds)`` is the number of frames of the selected episodes (or frame ranges of episodes: windows still see
    the whole episode, padding only at its true edges); ``ds[i]`` is the i-th of them. The object pickles as its
    arguments and reopens its maps lazily in each process, so it works in DataLoader workers. ``close()`` (or
    ``with``) releases its memory maps at once; dropping the last reference does too. ``headroom``: address space
    reserved past the packs for appends (a fraction of their rows); a writer's dataset takes 1.0, so that packs its
    commits append map next to the others (see :meth:`reload`); copies in other processes do not keep it.
    ``remote``: a store in a bucket (a :class:`~lerobot_zarr.sources.remote_store.RemoteStore`, made by
    ``open_dataset``): ``root`` is its local mirror, and each sample's frames are made present there before they
    are read (:meth:`prefetch` fetches those of samples to come).

    What items hold, per kind of feature (numpy; dtypes as stored): numbers as arrays of their declared shape
    (0-d for shape ``(1,)``); cameras uint8 HWC (``image_format="float32_chw"``: float32 CHW in [0, 1]); depth
    cameras float32 in ``depth_unit`` (``"mm"``, LeRobot's default, or ``"m"``: :mod:`~lerobot_zarr.cameras.depth`),
    ``(H, W, 1)`` or with ``"float32_chw"`` LeRobot's ``(1, H, W)``; ``string`` features a ``str``; language
    columns what LeRobot gives (a new list of row dicts). Windows stack numbers and cameras along a new first axis
    and give text as a list; batches stack along the batch axis and give text as lists (of lists for windows).
    """

    def __init__(self, root: str | os.PathLike, *, episodes: EpisodeSelection | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                 image_format: ImageFormat = "uint8_hwc", max_open_maps: int | None = None, lazy: bool = False,
                 fetch: Callable[[Path, list[int]], None] | None = None, headroom: float = 0.0,
                 depth_unit: DepthUnit = "mm", remote: Any = None):
        if image_format not in IMAGE_FORMATS:
            raise ArgumentError(f"image_format must be one of {IMAGE_FORMATS}, got {image_format!r}")
        if depth_unit not in DEPTH_UNITS:
            raise ArgumentError(f"depth_unit must be one of {DEPTH_UNITS}, got {depth_unit!r:.40}")
        self.depth_unit: DepthUnit = depth_unit
        if lazy and fetch is None:
            raise ArgumentError("lazy=True needs fetch=, the callable that brings missing episodes into the store "
                             "(open_dataset(..., lazy=True) passes it)")
        self._remote = remote
        self.root = Path(root) if remote is None else remote.root
        if remote is None and (self.root / MIRROR_MARKER).exists():  # holding only the rows read so far
            url = (self.root / MIRROR_MARKER).read_text()[:200]
            raise ArgumentError(f"{self.root}: is the local mirror of a store in a bucket; open {url} instead")
        self.image_format = image_format
        if not (isinstance(headroom, (int, float)) and 0 <= headroom < float("inf")):
            raise ArgumentError(f"headroom must be a finite number >= 0, got {headroom!r:.40}")
        self._request = (episodes, delta_timestamps, _default_max_maps() if max_open_maps is None
                         else int(max_open_maps), bool(lazy), fetch)
        self._headroom = float(headroom)
        self._lock = threading.Lock()
        self._maps: PackMaps | None = None
        self._closed = False
        self._load(self._read_state())
        if self._left_out:
            (first, why), *others = self._left_out.items()
            text = f"{first!r} is left out of samples: {why}" + (
                f"; so are {', '.join(map(repr, dict(others)))} (ds.left_out says why for each)" if others else "")
            warn_once(str(self.root), f"{self.root}: {text}")
        _live_datasets.add(self)

    # state ------------------------------------------------------------------------------------------------
    def _read_state(self) -> StoreState:
        """The store's state; its unresolved episodes (format 5) resolved only if the selection holds some, or is
        every episode of a lazy dataset (without ``episodes``, a dataset that is not lazy serves the episodes the
        store holds, never unresolved ones): ``meta`` resolves them when its per-episode arrays are read."""
        wanted, lazy = self._request[0], self._request[3]
        return read_state(self.root, resolve=bool(lazy) if wanted is None else wanted)

    def _load(self, state: StoreState) -> None:
        """Set up index arithmetic for a committed state (maps are opened lazily; on a reload, packs keep their
        maps)."""
        episodes, delta_timestamps, max_open_maps, lazy, _ = self._request
        self._state = state
        self.meta = meta = DatasetMeta.from_state(state, self.depth_unit, rows_local=self._remote is None)
        present = meta.materialized_episodes
        selection = Selection.of(episodes, state.table.length, np.ones(len(present), bool) if lazy else present)
        wanted = selection.episodes
        missing = {name: why + _OLD_STRINGS_FIX if why == _OLD_STRINGS else why
                   for name, why in state.not_materialized.items()}
        for name, reasons in meta.unavailable.items():
            hit = [e for e in wanted.tolist() if e in reasons]
            if hit:  # a camera some selected episodes lack: left out of samples, not the episodes
                have = [e for e in np.flatnonzero(present).tolist() if e not in reasons]
                fix = (f"to sample it, select episodes that have it: episodes={have[:10]}"
                       f"{f'... ({len(have)} episodes)' if len(have) > 10 else ''}" if have else
                       "no episode has it: samples go without it (to remove it from a store of your own: "
                       "drop_features, or `lerobot-zarr edit --drop-features`)")
                missing[name] = (f"unavailable in {len(hit)} of the {len(wanted)} selected episodes "
                                 f"{hit[:10]}{'...' if len(hit) > 10 else ''}; episode {hit[0]}: {reasons[hit[0]]}; "
                                 f"{fix}")
        for name, why in meta.needs_pyav.items():  # this process lacks PyAV: a camera not decoded (or kept as mp4)
            if name not in missing and (state.arrays[name].storage == "mp4"
                                        or not state.done_mask(name)[wanted].all()):
                missing[name] = why
        for name in meta.depth_keys:
            spec = state.arrays.get(name)
            if spec is not None and name not in missing and (why := unservable_depth(self.root, name, spec)):
                missing[name] = why
        # what samples lack: stored features this selection cannot serve, and the source's features no store holds
        self._left_out = {name: why for name, why in missing.items() if name in state.arrays or name in meta.features}
        self._offsets = window_offsets(delta_timestamps, state.fps, list(state.arrays), missing)
        absent = wanted[~present[wanted]]
        if absent.size and not lazy:
            raise NotMaterializedError(f"{self.root}: episodes {absent.tolist()[:20]} are not in the local store",
                                       path=self.root, episode=int(absent[0]))
        self._sel = selection
        self.episodes = selection.episodes
        self.delta_timestamps = None if delta_timestamps is None else {k: list(v) for k, v in delta_timestamps.items()}
        self._lazy, self._present = lazy, present.copy()
        self._specs = {name: spec for name, spec in state.arrays.items() if name not in self._left_out}
        self._windows = windows(self._offsets)
        self._lengths = state.table.length.copy()  # bounds for reads: never a user-visible array
        self._chunk = state.table.chunk
        self._tasks = np.array(meta.tasks, dtype=object)
        # stored episode_index / index values exceed LeRobot's after earlier episodes were deleted
        shifts = {"episode_index": state.table.episode_index_shift, "index": state.table.index_shift}
        self._shifts = [(name, shift, shift.tolist()) for name, shift in shifts.items()
                        if name in self._specs and shift.any()]
        self._shifts_checked = np.zeros(len(state.packs), dtype=bool)  # packs whose stored numbers were checked
        n_raw = sum(spec.storage == "raw" for spec in self._specs.values())
        self._max_packs = max(1, max_open_maps // max(1, n_raw))
        raw = {name: spec for name, spec in self._specs.items() if spec.storage == "raw"}
        if self._maps is None or set(self._maps.specs) != set(raw) or not self._maps.update(state.packs):
            if self._maps is not None:
                self._maps.close()
            headroom = int(self._headroom * (state.packs.rows.sum() + 4 * pack_rows_target(raw, state.pack_bytes)))
            self._maps = PackMaps(self.root, raw, state.packs, max_packs=self._max_packs, headroom_rows=headroom)
        for reader in getattr(self, "_cameras", {}).values():
            reader.close()
        table = state.table
        times = stored_timestamps(self._maps, table.chunk, table.offset)
        self._cameras = {name: (TextFrames(self.root, name, spec, state.packs, table.chunk, table.offset,
                                           self._max_packs) if spec.is_text else
                                CodecFrames(self.root, name, spec, state.packs, table.chunk, table.offset,
                                            self._max_packs) if spec.storage == "compact" else
                                VideoFrames(self.root, name, spec, len(table), times,
                                            None if self._remote is None else self._remote.mp4_opener(name)))
                         for name, spec in self._specs.items() if spec.storage != "raw"}
        self._index()

    def _index(self) -> None:
        """The hot path's per-episode places and per-feature views. Features whose packs have the same slots
        (those of the same frame alignment) share their rows: one row computation per group, not per feature."""
        maps = self._maps
        sel = self._sel
        self._offset = self._state.table.offset
        self._sel_packs = sorted_distinct(self._chunk[sel.episodes])
        self._len = len(sel)
        views = maps.views
        bases: list[np.ndarray] = []

        def group(name: str) -> int:
            rows = maps.base_rows(name)
            for g, other in enumerate(bases):
                if other is rows or np.array_equal(other, rows):
                    return g
            bases.append(rows)
            return len(bases) - 1

        self._plain = [(name, views[name], views[name].ndim == 1, group(name)) for name in views
                       if name not in self._windows]
        self._windowed = []
        for name, w in self._windows.items():
            if name not in views:
                continue
            view = views[name]
            blocks = None
            if w.contiguous:  # one block of consecutive rows per window: a strided view copies whole blocks
                n = len(w.offsets)
                blocks = np.lib.stride_tricks.as_strided(
                    view, (max(view.shape[0] - n + 1, 0), n, *view.shape[1:]), (view.strides[0], *view.strides),
                    writeable=False)
            self._windowed.append((w, view, blocks, group(name), w.lo, w.hi))
        self._depth = {name: DepthOutput(self.meta.features[name], spec.kind, self.depth_unit)
                       for name, spec in self._specs.items() if name in self.meta.depth_keys}
        self._images = [name for name, s in self._specs.items() if s.kind in CAMERA_DTYPES and name not in self._depth]
        self._text = {name for name, s in self._specs.items() if s.is_text}
        task = views.get("task_index")
        self._task = None if task is None else (task, task.ndim > 1, group("task_index"))
        # per selected episode k, one row of int64s (one cache line for a batch's lookups): what turns a dataset
        # index into the frame inside its episode (+ to_frame), the episode's length, and per group the row of
        # its first frame
        e = sel.episodes
        self._ktab = np.empty((len(e), 2 + len(bases)), dtype=np.int64)
        self._ktab[:, 0] = sel.to_frame
        self._ktab[:, 1] = self._lengths[e]
        for g, rows in enumerate(bases):
            self._ktab[:, 2 + g] = rows[self._chunk[e]] + self._offset[e]
        self._item_places: tuple[list[int], list[int], list[int], list[list[int]]] | None = None  # by ds[i]
        self._extras = bool(self._shifts or self._cameras)  # per-sample work beyond the maps (rare): one test
        self._all_mapped = False

    def _make_item_places(self) -> tuple[list[int], list[int], list[int], list[list[int]]]:
        """The item path's lists (a list lookup is a third of a numpy one), made when first needed: the selection's
        index lookup, then per selected episode its length and per group the row of its first frame."""
        self._item_places = (*self._sel.item_lookup, self._ktab[:, 1].tolist(),
                             [self._ktab[:, g].tolist() for g in range(2, self._ktab.shape[1])])
        return self._item_places

    def _learn_tasks(self, task_index: Any) -> None:
        """A writer gave frames a task added after this dataset's commit (set_task works in place): tasks are
        only ever appended, so the latest list names it. A ``task_index`` it does not name is damage."""
        self._tasks = np.array(read_state(self.root, resolve=False).tasks, dtype=object)
        values = np.asarray(task_index)
        if values.size and (values.min() < 0 or values.max() >= len(self._tasks)):
            bad = int(values.min() if values.min() < 0 else values.max())
            raise CorruptStoreError(f"{self.root}: a frame's stored task_index is {bad}, not one of the store's "
                                    f"{len(self._tasks)} tasks (damaged rows? `lerobot-zarr verify` checks them)",
                                    path=self.root, feature="task_index")

    def index_shifts(self) -> dict[str, np.ndarray]:
        """What the stored ``episode_index`` / ``index`` values of each episode exceed LeRobot's by (after
        deletions; all zero otherwise)."""
        return {name: shift for name, shift, _ in self._shifts}

    def refresh(self) -> bool:
        """Pick up what writers committed since this dataset was opened (appended or deleted episodes, new
        tasks): the same arguments applied to the latest commit. Returns whether anything changed.

        In-place changes of frames (``edit``, ``set_task``) need no refresh: they are visible at once. A dataset
        otherwise keeps the commit it opened, so indices stay stable for a sampler until it refreshes."""
        if self._remote is not None:  # the bucket's latest commit, in a mirror laid out anew
            state = self._remote.refresh()
            if state is None:
                return False
            with self._lock:
                self._check_not_closed()
                if self._maps is not None:
                    self._maps.close()
                    self._maps = None
                self.root = self._remote.root  # (the mirror of that commit)
                self._load(state)
            return True
        state = self._read_state()
        if state.generation == self._state.generation:
            return False
        self.reload(state)
        return True

    def reload(self, state: StoreState) -> None:
        """Serve ``state``, a commit of this dataset's store, from now on with the same arguments (what
        :meth:`refresh` does with the latest commit; a writer passes each of its commits). Packs keep their maps."""
        with self._lock:
            self._check_not_closed()
            self._load(state)

    # lifetime ---------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the memory maps and open files now. The dataset cannot sample afterwards."""
        with self._lock:
            if self._maps is not None:
                self._maps.close()
            for reader in self._cameras.values():
                reader.close()
            self._windowed, self._plain, self._task = [], [], None
            self._all_mapped = False
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> LeRobotZarrDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_not_closed(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.root}: this dataset was closed; open it again to sample",
                                   path=self.root)

    # pickling: arguments only ------------------------------------------------------------------------------
    def __getstate__(self) -> tuple:
        _, _, max_maps, lazy, fetch = self._request
        return (str(self.root), self._sel.to_args(self._state.table.length), self.delta_timestamps,
                self.image_format, max_maps, lazy, fetch, self.depth_unit, self._remote)

    def __setstate__(self, args: tuple) -> None:
        root, selection, deltas, image_format, max_maps, lazy, fetch, depth_unit, remote = args
        self.__init__(root, episodes=Selection.from_args(selection), delta_timestamps=deltas,
                      image_format=image_format, max_open_maps=max_maps, lazy=lazy, fetch=fetch, depth_unit=depth_unit,
                      remote=remote)

    def __repr__(self) -> str:
        return (f"LeRobotZarrDataset(root={str(self.root)!r}, frames={self._len}, episodes={len(self.episodes)}, "
                f"features={list(self._specs)}, windows={ {k: len(v) for k, v in self._offsets.items()} })")

    def __len__(self) -> int:
        return self._len

    @property
    def left_out(self) -> dict[str, str]:
        """Features of the dataset that samples of this selection lack, with why: a feature no store holds (a dtype
        LeRobot does not write, a depth map whose quantizer cannot be read), a camera whose video is missing for
        some selected episodes (select only the episodes that have it to get it)..."""
        return dict(self._left_out)

    @property
    def array_specs(self) -> dict[str, ArraySpec]:
        """The store's arrays: dtype, per-frame shape and kind (numeric or image) of each stored feature."""
        return dict(self._specs)

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    def select(self, episodes: EpisodeSelection) -> LeRobotZarrDataset:
        """A new dataset over the same store holding only ``episodes`` (LeRobot episode indices, or
        ``{episode: frames}``); this one is unchanged. Its samples, xarray view and exports (``to_lerobot``,
        ``push``: the selected whole episodes, renumbered from 0) hold just those."""
        _, _, max_maps, lazy, fetch = self._request
        view = LeRobotZarrDataset(self.root, episodes=episodes, delta_timestamps=self.delta_timestamps,
                                  image_format=self.image_format, max_open_maps=max_maps, lazy=lazy, fetch=fetch,
                                  depth_unit=self.depth_unit, remote=self._remote)
        view._selected = True
        return view

    _selected = False

    def with_windows(self, delta_timestamps: Mapping[str, Sequence[float]] | None) -> LeRobotZarrDataset:
        """A new dataset over the same store and episodes with other windows (``delta_timestamps``), this one kept."""
        episodes, _, max_maps, lazy, fetch = self._request  # (as asked: None follows the store's new episodes)
        view = LeRobotZarrDataset(self.root, episodes=episodes, delta_timestamps=delta_timestamps,
                                  image_format=self.image_format, max_open_maps=max_maps, lazy=lazy, fetch=fetch,
                                  depth_unit=self.depth_unit, remote=self._remote)
        view._selected = self._selected
        return view

    @property
    def in_bucket(self) -> bool:
        """Whether the store is read in a bucket, where it lies (then :meth:`prefetch` pays: loaders call it)."""
        return self._remote is not None

    @property
    def location(self) -> str:
        """Where the store is: its folder (links resolved), or the URL of a store in a bucket."""
        return os.path.realpath(self.root) if self._remote is None else self._remote.location()

    @property
    def selected_explicitly(self) -> bool:
        """Whether this dataset is a :meth:`select` of its store's episodes: exports publish exactly those. Other
        datasets export every episode of the store, and refuse when the store lacks some."""
        return self._selected

    def episode_frames(self, episode_index: int) -> range:
        """Dataset indices (for ``ds[i]``) of the selected frames of one selected episode."""
        return self._sel.frames_of(operator.index(episode_index))

    # a store in a bucket -----------------------------------------------------------------------------------
    def _frames_read(self, local: np.ndarray, length: np.ndarray) -> dict[str, np.ndarray]:
        names = [name for name in self._specs if name not in self._remote.settled]  # held whole: nothing to ask
        mp4 = [name for name in names if self._specs[name].storage == "mp4"]
        return frames_read(self._windows, names, local, length, mp4, "timestamp" in self._state.arrays)

    def _fetch_frames(self, eps: np.ndarray, local: np.ndarray, length: np.ndarray) -> None:
        """A store in a bucket: the frames these samples read, made present in the mirror (under the lock)."""
        self._check_not_closed()
        if len(eps) and (frames := self._frames_read(local, length)):
            self._remote.ensure(eps, frames)

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """The samples at ``indices`` will be read soon (a sampler's next batches): a store in a bucket fetches
        their frames in the background now, so that reading them waits on nothing (a no-op for a local store)."""
        if self._remote is None or self._remote.settled.issuperset(self._specs):  # (held whole: nothing to fetch)
            return
        k, idx = self._sel.locate_k(indices)
        if len(k):
            place = self._ktab[k]
            self._remote.prefetch(self._sel.episodes[k], self._frames_read(idx + place[:, 0], place[:, 1]))

    # maps -------------------------------------------------------------------------------------------------
    def _ensure_mapped(self, eps: np.ndarray) -> None:
        """Map the packs of the given episodes (fetching missing episodes first in lazy mode)."""
        self._check_not_closed()
        if self._lazy:
            need = sorted_distinct(eps)
            if not self._present[need].all():
                self._fetch_missing(need[~self._present[need]])
        packs = sorted_distinct(self._chunk[eps])
        try:
            self._maps.ensure(packs)
        except CorruptStoreError as exc:
            pack = getattr(exc, "pack", None)
            hit = eps[self._chunk[eps] == pack]
            if not len(hit):
                raise
            e = int(hit[0])
            raise CorruptStoreError(f"{exc} (pack {pack} holds episode {e}, asked for here)", path=exc.path,
                                    episode=e, feature=exc.feature) from None
        if self._shifts and not self._shifts_checked[packs].all():
            self._check_shifts(packs[~self._shifts_checked[packs]])
        self._all_mapped = bool(self._maps.mapped[self._sel_packs].all()) and (
            not self._lazy or bool(self._present[self._sel.episodes].all()))

    def _check_shifts(self, packs: np.ndarray) -> None:
        """Before serving numbers corrected by the table's shifts (after deletions), check them against the stored
        ones, episode by episode: the stored ``index`` of an episode's first frame is its start plus its
        ``index_shift``, and its stored ``episode_index`` the episode plus its ``episode_index_shift``; a root
        whose shifts disagree would serve other (even negative) numbers."""
        table = self._state.table
        eps = np.flatnonzero(np.isin(table.chunk, packs) & self._present)
        for name, shift, _ in self._shifts:
            view, base = self._maps.views[name], self._maps.base_rows(name)
            stored = np.asarray(view[base[table.chunk[eps]] + table.offset[eps]]).reshape(len(eps), -1)[:, 0]
            want = (table.start[eps] if name == "index" else eps) + shift[eps]
            bad = np.flatnonzero(stored != want)
            if len(bad):
                e = int(eps[bad[0]])
                raise CorruptStoreError(
                    f"{self.root}: episode {e}'s stored {name} is {int(stored[bad[0]])}, but the table gives "
                    f"{int(want[bad[0]])} ({'start' if name == 'index' else 'episode'} + {name}_shift "
                    f"{int(shift[e])}): the root's shifts disagree with the data", path=self.root, episode=e,
                    feature=name)
        missing = table.chunk[~self._present]  # (lazy) episodes fetched later are checked then
        self._shifts_checked[packs[~np.isin(packs, missing)]] = True

    def _touch(self, e: int, pack: int) -> None:
        """The item path's check: map the pack of episode ``e`` if needed, else mark it recently used."""
        maps = self._maps
        if maps.mapped[pack] and (not self._lazy or self._present[e]):
            maps.last_used[pack] = maps.tick
        else:
            self._ensure_mapped(np.array([e]))

    def _fetch_missing(self, episodes: np.ndarray) -> None:
        """Lazy mode: bring missing episodes into the store from its recorded source (Hub or local folder)."""
        fetch = self._request[4]
        fetch(self.root, episodes.tolist())
        state = read_state(self.root, resolve=False)
        wanted = set(episodes.tolist())
        for name in self._specs:
            gone = {e: why for e, why in state.unavailable_of(name).items() if e in wanted}
            if gone:
                e = min(gone)
                raise NotMaterializedError(f"{self.root}: episode {e} has no {name!r} frames ({gone[e]}); open the "
                                           f"dataset without lazy=True to leave the camera out, or select episodes "
                                           f"that have it", path=self.root, episode=e, feature=name)
        self._present = served_episodes(state)
        for reader in self._cameras.values():  # compact packs grew: their maps and shard indexes are read again
            if isinstance(reader, CodecFrames):
                reader.close()
        absent = episodes[~self._present[episodes]]
        if absent.size:
            raise NotMaterializedError(f"{self.root}: episodes {absent.tolist()[:20]} could not be fetched",
                                       path=self.root, episode=int(absent[0]))

    def _image_out(self, out: dict[str, Any]) -> None:
        """Cameras as asked: depth maps as float32 depth in ``depth_unit``, and with ``"float32_chw"`` colour
        cameras as float32 CHW in [0, 1] and depth maps channel first."""
        chw = self.image_format == "float32_chw"
        for name, depth in self._depth.items():
            if name in out:
                out[name] = np.moveaxis(depth(out[name]), -1, -3) if chw else depth(out[name])
        if chw:
            for name in self._images:
                out[name] = to_float32_chw(out[name])

    def __getattr__(self, name: str) -> Any:
        hint = "" if name.startswith("_") else (  # a public name it lacks may be a writer's: say how to write
            " (this dataset is read-only: open it with open_dataset(..., mode='r+') to write; a Hub repo or LeRobot "
            "folder also needs root=, a folder of your own)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}{hint}", name=name, obj=self)

    # sampling ---------------------------------------------------------------------------------------------
    def __getitem__(self, i: int) -> dict[str, Any]:
        """Frame ``i`` with every stored feature, windows and ``*_is_pad`` masks, and the ``task`` string."""
        cum, to_frame, lengths, row0s = self._item_places or self._make_item_places()
        try:
            index = operator.index(i)
        except TypeError:
            raise ArgumentError(f"frame indices are integers, got {i!r:.40} ({type(i).__name__}); get_batch takes "
                                f"many") from None
        i = index + self._len if index < 0 else index
        if not 0 <= i < self._len:
            raise self._sel.index_error(index)
        k = bisect_right(cum, i) - 1  # selected episode k
        local = i + to_frame[k]  # the frame inside it
        length = lengths[k]
        rows = [row0[k] + local for row0 in row0s]  # the frame's row, per group of features
        out: dict[str, Any] = {}
        with self._lock:
            if self._remote is not None:
                self._fetch_frames(np.array([self._sel._episode_list[k]]), np.array([local]), np.array([length]))
            if not self._all_mapped:
                e = self._sel._episode_list[k]
                self._touch(e, int(self._chunk[e]))
            for w, view, blocks, g, lo, hi in self._windowed:
                row = rows[g]
                if local + lo >= 0 and local + hi < length:  # the usual case: no padding
                    out[w.name] = blocks[row + lo].copy() if blocks is not None else view[w.offsets + row]
                    out[w.pad_key] = w.no_pad.copy()
                else:
                    q, pad = w.frames(local, length)
                    out[w.name] = view[q + (row - local)]
                    out[w.pad_key] = pad
            for name, view, scalar, g in self._plain:
                out[name] = view[rows[g]] if scalar else view[rows[g]].copy()
            if self._task is not None:
                view, vector, g = self._task
                task_index = view[rows[g]]
                task_index = task_index[0] if vector else task_index
                try:
                    if task_index < 0:
                        raise IndexError(task_index)
                    out["task"] = self._tasks[task_index]
                except IndexError:  # a writer's set_task gave frames a task added after this commit
                    self._learn_tasks(task_index)
                    out["task"] = self._tasks[task_index]
            if self._extras:
                e = self._sel._episode_list[k]
                for name, _, shift in self._shifts:
                    out[name] = out[name] - shift[e]
                for name, reader in self._cameras.items():
                    self._camera_item(out, name, reader, e, local, length)
        if self._images or self._depth:
            self._image_out(out)
        return out

    def _camera_item(self, out: dict, name: str, reader: Any, e: int, local: int, length: int) -> None:
        w = self._windows.get(name)
        if w is None:
            out[name] = reader.read(np.array([e]), np.array([local]))[0]
            return
        q, out[w.pad_key] = w.frames(local, length)
        frames = reader.read(np.full(len(q), e), q)
        out[name] = frames.tolist() if name in self._text else frames

    def get_batch(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """The same dict as ``ds[i]`` for many frames, stacked along a leading batch axis (one gather per
        feature). ``indices`` is 1-D."""
        k, idx = self._sel.locate_k(indices)
        if self._all_mapped or len(k) <= self._max_packs:
            return self._gather(k, idx)
        packs = self._chunk[self._sel.episodes[k]]
        unique = sorted_distinct(packs)
        if len(unique) <= self._max_packs:
            return self._gather(k, idx)
        # more packs than may be mapped at once: gather in parts of at most the budget, then reassemble
        part_of = np.searchsorted(unique, packs) // self._max_packs
        parts = [np.flatnonzero(part_of == p) for p in range(int(part_of.max()) + 1)]
        results = [self._gather(k[m], idx[m]) for m in parts]
        order = np.concatenate(parts)
        out: dict[str, Any] = {}
        for key in results[0]:
            if key == "task" or key in self._text:  # lists
                values = np.empty(len(k), dtype=object)
                for i, value in zip(order.tolist(), (v for r in results for v in r[key]), strict=True):
                    values[i] = value
                out[key] = values.tolist()
            else:
                merged = np.concatenate([r[key] for r in results])
                out[key] = np.empty_like(merged)
                out[key][order] = merged
        return out

    def _gather(self, k: np.ndarray, idx: np.ndarray) -> dict[str, Any]:
        """The batch of dataset indices ``idx`` of selected episodes ``k``: one lookup of the episodes' places,
        then per group of features one row computation, per window one fused clamp and pad, per feature one
        gather."""
        place = self._ktab[k]
        local = idx + place[:, 0]  # frame inside the episode
        length = place[:, 1]
        rows = [place[:, 2 + g] + local for g in range(place.shape[1] - 2)]
        n = len(k)
        out: dict[str, Any] = {}
        with self._lock:
            if self._remote is not None:
                self._fetch_frames(self._sel.episodes[k], local, length)
            if not self._all_mapped:
                self._ensure_mapped(self._sel.episodes[k])
            left = None  # frames after each one in its episode: a window of offsets lo..hi is inside when
            for w, view, blocks, g, _, _ in self._windowed:  # local + lo >= 0 and local + hi < length
                r = rows[g]
                if blocks is not None:
                    if left is None:
                        left = length - local
                    inside = (local >= -w.lo) & (left > w.hi)
                    inner = np.flatnonzero(inside)
                    if len(inner) == n:
                        out[w.name] = blocks[r + w.lo]
                        out[w.pad_key] = np.zeros((n, len(w.offsets)), dtype=bool)
                        continue
                    if 2 * len(inner) >= n:  # mostly inside: whole blocks, gathered rows at the edges only
                        edge = np.flatnonzero(~inside)
                        first = place[edge, 2 + g]
                        clamped, edge_pad = w.rows_batch(r[edge], first, first + length[edge] - 1)
                        data = np.empty((n, *blocks.shape[1:]), dtype=view.dtype)
                        data[inner] = blocks[r[inner] + w.lo]
                        data[edge] = view[clamped]
                        pad = np.zeros((n, len(w.offsets)), dtype=bool)
                        pad[edge] = edge_pad
                        out[w.name], out[w.pad_key] = data, pad
                        continue
                first = place[:, 2 + g]
                clamped, pad = w.rows_batch(r, first, first + length - 1)
                out[w.name], out[w.pad_key] = view[clamped], pad
            for name, view, _, g in self._plain:
                out[name] = view[rows[g]]
            if self._task is not None:
                view, vector, g = self._task
                task_index = view[rows[g]]
                task_index = task_index[:, 0] if vector else task_index
                if len(task_index) and (task_index.max() >= len(self._tasks) or task_index.min() < 0):
                    self._learn_tasks(task_index)
                out["task"] = self._tasks[task_index].tolist()
            if self._extras:
                eps = self._sel.episodes[k]
                for name, shift, _ in self._shifts:
                    out[name] = out[name] - shift[eps].reshape(-1, *[1] * (out[name].ndim - 1))
                for name, reader in self._cameras.items():
                    self._camera_batch(out, name, reader, eps, local, length)
        if self._images or self._depth:
            self._image_out(out)
        return out

    def _camera_batch(self, out: dict, name: str, reader: Any, eps: np.ndarray, local: np.ndarray,
                      length: np.ndarray) -> None:
        w = self._windows.get(name)
        if w is None:
            frames = reader.read(eps, local)
        else:
            q, out[w.pad_key] = w.frames_batch(local, length)
            frames = reader.read(np.repeat(eps, len(w.offsets)), q.reshape(-1))
            frames = frames.reshape(len(eps), len(w.offsets), *frames.shape[1:])
        out[name] = frames.tolist() if name in self._text else frames

    def episode(self, episode_index: int, *, features: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """The frames of one selected episode (those the selection holds: all of them unless it chose a frame
        range), as the store holds them: read-only memory maps of its rows, one per feature of the samples (or per
        feature of ``features``); ``episode_index`` and ``index`` are corrected copies once earlier episodes were
        deleted, compact cameras decoded arrays, text features object arrays (a ``str`` per frame, a language
        column's JSON text), depth maps their stored values (a video's 12-bit codes, an image's uint16 or
        float32). An episode outside the selection raises :class:`FrameIndexError`."""
        self._check_not_closed()
        e = operator.index(episode_index)
        if not 0 <= e < self.meta.total_episodes:
            raise FrameIndexError(f"episode {e} does not exist ({self.meta.total_episodes} episodes)", episode=e)
        hits = np.flatnonzero(self._sel.episodes == e)
        if not hits.size:
            chosen = self._sel.episodes.tolist()
            raise FrameIndexError(f"{self.root}: episode {e} is not in this dataset's selection ({len(chosen)} "
                                  f"episodes: {chosen[:10]}{'...' if len(chosen) > 10 else ''}); open the store "
                                  f"with it selected to read it", path=self.root, episode=e)
        if not self.meta.materialized_episodes[e]:
            raise NotMaterializedError(f"{self.root}: episode {e} is not in the local store", path=self.root,
                                       episode=e)
        unknown = [name for name in dict.fromkeys(features or ()) if name not in self._specs]
        if unknown:
            name = unknown[0]
            if name in self._left_out or name in self.meta.features:
                why = self._left_out.get(name) or self.meta.not_materialized.get(name, "not stored")
                raise NotMaterializedError(f"{self.root}: feature {name!r} is not in this dataset's samples: {why}",
                                           path=self.root, feature=name, episode=e)
            raise UnknownFeatureError(f"{self.root}: no feature {name!r} (the samples hold {list(self._specs)})",
                                      path=self.root, feature=name, episode=e)
        k = int(hits[0])
        first = int(self._sel.first[k])
        n = int(self._sel.cum[k + 1] - self._sel.cum[k])  # the selected frames [first, first + n)
        pack, offset = int(self._chunk[e]), int(self._state.table.offset[e]) + first
        rows = int(self._state.packs.rows[pack])
        if self._remote is not None:  # a store in a bucket: its rows fetched, and copied (the mirror evicts)
            with self._lock:
                self._fetch_frames(np.full(n, e), np.arange(first, first + n), np.full(n, self._lengths[e]))
        out = {}
        for name, spec in self._specs.items():
            if features is not None and name not in features:
                continue
            if spec.storage != "raw":
                with self._lock:
                    self._ensure_mapped(np.array([e]))
                    reader = self._cameras[name]
                    read = reader.read_stored if spec.is_text else reader.read
                    out[name] = read(np.full(n, e), np.arange(first, first + n))
                continue
            try:
                fd = open_array_pack(self.root, name, spec, pack, rows)
            except CorruptStoreError as exc:
                raise CorruptStoreError(f"{exc} (pack {pack} holds episode {e}, asked for here)", path=exc.path,
                                        episode=e, feature=name) from None
            with os.fdopen(fd, "rb") as f:
                out[name] = np.memmap(f, dtype=spec.dtype, mode="r", offset=offset * spec.frame_bytes,
                                      shape=(n, *spec.frame_shape))
            if self._remote is not None:
                out[name] = np.array(out[name])
        for name, shift, _ in self._shifts:
            if name in out:
                stored = np.asarray(out[name])
                first = stored.reshape(n, -1)[0, 0] if n else 0
                want = (int(self._state.table.start[e]) if name == "index" else e) + int(shift[e])
                if n and first != want:
                    raise CorruptStoreError(f"{self.root}: episode {e}'s stored {name} is {int(first)}, but the table "
                                            f"gives {want}: the root's shifts disagree with the data", path=self.root,
                                            episode=e, feature=name)
                out[name] = stored - shift[e]
        return out

    def episode_location(self, episode_index: int) -> tuple[int, int, int]:
        """``(pack, row offset, pack rows)`` of an episode in the store (see :mod:`lerobot_zarr.store`)."""
        e = operator.index(episode_index)
        pack = int(self._chunk[e])
        return pack, int(self._state.table.offset[e]), int(self._state.packs.rows[pack])

    def gather_layout(self) -> dict[str, Any]:
        """Where the samples lie in the packs, for :class:`~lerobot_zarr.sampling.fused.FusedGather`."""
        return {"state": self._state, "selection": self._sel, "max_packs": self._max_packs,
                "absent": bool(self._lazy and not self._present[self._sel.episodes].all()),
                "remote": self._remote is not None}
