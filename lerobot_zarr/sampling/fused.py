"""Gathers fused across datasets: a batch drawn from many datasets at one dataset's cost (mixtures).

A dataset maps its packs side by side in one reserved address range per feature (:mod:`.maps`), so that a batch is
one index lookup and one gather per feature. A batch of a mixture touching ``D`` datasets through their own
``get_batch`` pays that fixed cost ``D`` times. Here every feature's packs of all datasets are mapped side by side
in ONE range (dataset after dataset: each dataset's :class:`~.maps.PackMaps` placed in its part of it), and the
datasets' selected episodes form one table: a batch is one lookup, per window one clamp, per feature one gather,
whatever the number of datasets.

A feature whose frames differ in dtype or shape between datasets gets one range per kind (one gather each, cast or
zero-padded into the output); a dataset lacking a feature gives zeros (``<key>_is_pad`` True); compressed or video
cameras are read by each dataset (its own ``get_batch`` of the batch's rows of it). Datasets whose samples
need their own path (:attr:`GatherLayout.why_not`: lazy, deleted episodes, converted images, closed) are not fused:
:meth:`FusedGather.gather` returns None for a batch touching one, and the caller serves it per dataset. A dataset
refreshed (or committed to by its writer) is noticed at the next batch, and the ranges are laid out again.
"""

from __future__ import annotations

import operator
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..errors import StoreError
from ..lerobot.format import CAMERA_DTYPES
from ..store.state import read_state
from ..store.tables import ArraySpec
from .maps import PackMaps, Reservation, shared_alignment, slot_rows
from .selection import Selection
from .windows import Window, window_offsets, windows

if TYPE_CHECKING:
    from .dataset import LeRobotZarrDataset

__all__ = ["FusedGather", "GatherLayout"]

_live: weakref.WeakSet = weakref.WeakSet()
_TASK = "\0task_index"  # the datasets' task_index when no output feature is it: read for the task strings only
_ROWS = 5  # columns of the episode table before the rows: dataset, to_frame, length, task base and limit


def _reset_locks_after_fork() -> None:
    for fused in list(_live):
        fused._lock = threading.Lock()


_META, _CLOSED = operator.attrgetter("meta"), operator.attrgetter("closed")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_after_fork)


@dataclass(frozen=True, kw_only=True)
class GatherLayout:
    """Where a dataset's samples lie in its store, and why they need its own path if they do."""

    meta: Any  # the dataset's DatasetMeta: a new object after a refresh or a writer's commit
    state: Any  # the commit (StoreState)
    root: str
    max_packs: int
    specs: dict[str, ArraySpec]  # features read from the maps of the packs
    outside: tuple[str, ...]  # features the dataset reads itself (compressed or video cameras)
    windows: dict[str, Window]
    episodes: np.ndarray  # the selected episodes; per selected episode: its first and past-last selected frame,
    first: np.ndarray
    stop: np.ndarray
    length: np.ndarray  # its length,
    pack: np.ndarray  # its pack and the row of its frame 0 in that pack
    offset: np.ndarray
    tasks: np.ndarray
    why_not: str | None = None

    @classmethod
    def of(cls, ds: LeRobotZarrDataset) -> GatherLayout:
        """The layout of ``ds``'s samples: its :meth:`~.dataset.LeRobotZarrDataset.gather_layout` and public face."""
        got = ds.gather_layout()
        state, sel = got["state"], got["selection"]
        e = sel.episodes
        specs = ds.array_specs
        raw = {name: spec for name, spec in specs.items() if spec.storage == "raw"}
        converts = ds.image_format != "uint8_hwc" and any(s.kind in CAMERA_DTYPES for s in specs.values())
        depth = [k for k in ds.meta.depth_keys if k in specs]
        text = [k for k, s in specs.items() if s.is_text]
        why = ("closed" if ds.closed else
               "lazy: some selected episodes are not local yet (fetched on first use)" if got["absent"] else
               "in a bucket: the rows of each batch are fetched before it is read" if got.get("remote") else
               "episodes were deleted: stored episode_index / index are corrected per episode" if ds.index_shifts()
               else f"images are converted to {ds.image_format}" if converts else
               f"depth maps are converted to float32 {ds.depth_unit} ({depth[0]!r})" if depth else
               f"text features are given as lists ({text[0]!r})" if text else None)
        offsets = window_offsets(ds.delta_timestamps, ds.meta.fps, list(specs), {})
        # lengths from the state, not meta's (reading those resolves a lazy store: its source's whole table)
        return cls(meta=ds.meta, state=state, root=str(ds.root), max_packs=got["max_packs"], specs=raw,
                   outside=tuple(name for name in specs if name not in raw), windows=windows(offsets), episodes=e,
                   first=sel.first, stop=sel.first + np.diff(sel.cum), length=state.table.length[e],
                   pack=state.table.chunk[e], offset=state.table.offset[e],
                   tasks=np.array(ds.meta.tasks, dtype=object), why_not=why)


class _Batch(NamedTuple):
    """One batch's arrays, per sample: index in the episode table's order, that table's row, dataset, frame in its
    episode, episode length, storage row per group of ranges; and the datasets' own batches (cameras they read)."""

    idx: np.ndarray
    place: np.ndarray
    d: np.ndarray
    local: np.ndarray
    length: np.ndarray
    at: list[np.ndarray]
    own: dict[int, dict[str, Any]]


class _Stale(Exception):
    """A batch the fused path cannot serve as it stands (a task added since the layout): serve it per dataset."""


@dataclass
class _Range:
    """One reserved range: the packs of one output feature in the datasets whose frames have one kind."""

    key: str
    spec: ArraySpec
    members: dict[int, str]  # dataset -> its name of the feature
    start: dict[int, int]  # dataset -> first row of its part
    view: np.ndarray | None = None
    blocks: np.ndarray | None = None  # windows of consecutive rows as one strided block each
    group: int = 0  # column of the row table
    member_mask: np.ndarray | None = None


@dataclass
class _Column:
    """How one output feature is filled: from ranges (one gather each), datasets' own reads, or zeros."""

    key: str
    shape: tuple[int, ...]
    dtype: np.dtype
    window: Window | None
    pad_key: str | None  # the output's `<key>_is_pad`, if it has one
    ranges: list[_Range]
    outside: dict[int, str]  # dataset -> its name, for features it reads itself
    holders: np.ndarray  # bool per dataset
    direct: bool  # one range of every dataset, same dtype and shape: the gather is the output
    zeroed: bool  # some samples leave part of it zero (a dataset lacks it, or it is padded)


class FusedGather:
    """One gather per feature across ``datasets``. ``columns``: each output feature's name in each dataset (None:
    the dataset lacks it); ``outputs``: per output key (features and their ``_is_pad`` masks) its per-sample shape
    and dtype. Thread-safe; rebuilt in each process (it pickles as nothing: its owner rebuilds it)."""

    def __init__(self, datasets: Sequence[LeRobotZarrDataset], columns: Mapping[str, Sequence[str | None]],
                 outputs: Mapping[str, tuple[tuple[int, ...], np.dtype]], sizes: Sequence[int]):
        self.datasets = list(datasets)
        # the caller's index space: dataset d's frames at sizes[:d].sum() onwards, kept when a refresh resizes it
        self._outer = Selection(np.arange(len(sizes)), np.zeros(len(sizes), dtype=np.int64), np.asarray(sizes),
                                len(sizes))
        self._columns = {key: list(srcs) for key, srcs in columns.items()}
        self._outputs = dict(outputs)
        self._lock = threading.Lock()
        self._reservations: list[Reservation] = []
        self._maps: dict[int, PackMaps] = {}
        self.disabled: str | None = None  # why nothing is fused (address space), once a build failed
        self._build()
        _live.add(self)

    # layout ---------------------------------------------------------------------------------------------------
    def _build(self) -> None:
        self._release()
        self.disabled = None
        self._ktab: np.ndarray | None = None
        layouts = [GatherLayout.of(ds) for ds in self.datasets]
        self._metas = [lay.meta for lay in layouts]
        self._closed = [ds.closed for ds in self.datasets]
        self._roots = [lay.root for lay in layouts]
        self.why_not = {d: lay.why_not for d, lay in enumerate(layouts) if lay.why_not is not None}
        # every dataset's selected episodes in mixture order: one selection over them all
        firsts = np.concatenate([lay.first for lay in layouts])
        stops = np.concatenate([lay.stop for lay in layouts])
        self._sel = Selection(np.arange(len(firsts)), firsts, stops, len(firsts))
        self._k_dataset = np.repeat(np.arange(len(layouts)), [len(lay.first) for lay in layouts])
        self._k_pack = np.concatenate([lay.pack for lay in layouts])
        self._k_start = np.concatenate([[0], np.cumsum([len(lay.first) for lay in layouts])])
        sizes = np.array([int((lay.stop - lay.first).sum()) for lay in layouts], dtype=np.int64)
        self._resized = not np.array_equal(sizes, np.diff(self._outer.cum))
        self._sizes, self._starts = sizes, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self._task_tables([lay.tasks for lay in layouts])
        self._tasks_stale = False
        self._check_windows(layouts)
        fused = np.array([d not in self.why_not for d in range(len(layouts))])
        ranges, columns = self._plan(layouts, fused)
        try:
            self._lay_out(layouts, ranges)
        except StoreError as exc:  # no room for the ranges: every batch goes through the datasets
            self._release()
            self.disabled = str(exc)
            fused[:] = False
        else:
            self._plan_rows(layouts, ranges, columns)
        self.fused = fused
        self._all_fused = bool(fused.all())
        self._k_fused = fused[self._k_dataset]
        self._all_mapped = not self._maps

    def _task_tables(self, tasks: Sequence[np.ndarray]) -> None:
        """Every dataset's task strings in one table: a frame's string is at its dataset's base plus its
        ``task_index``, which must be below its dataset's limit."""
        counts = np.array([len(t) for t in tasks], dtype=np.int64)
        base = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        self._task_base, self._task_limit = base[self._k_dataset], (base + counts)[self._k_dataset]
        self._task_table = np.concatenate(tasks)
        if self._ktab is not None:
            self._ktab[:, 3], self._ktab[:, 4] = self._task_base, self._task_limit

    def _check_windows(self, layouts: Sequence[GatherLayout]) -> None:
        """Datasets that keep their own path besides those whose layout says so: one whose window of a feature
        differs from another holder's, or whose feature is in neither its maps nor its own reads."""
        for key, srcs in self._columns.items():
            seen: list[int] | None = None  # the first holder's window offsets ([]: it has no window)
            for d, src in enumerate(srcs):
                if src is None or d in self.why_not:
                    continue
                lay = layouts[d]
                if src not in lay.specs and src not in lay.outside:
                    self.why_not[d] = f"{src!r} is not in its samples"
                    continue
                w = lay.windows.get(src)
                offsets = [] if w is None else w.offsets.tolist()
                if seen is None:
                    seen = offsets
                elif offsets != seen:
                    self.why_not[d] = f"its window of {src!r} differs from another dataset's"

    def _plan(self, layouts: Sequence[GatherLayout], fused: np.ndarray) -> tuple[list[_Range], list[_Column]]:
        """The ranges (one per output feature and kind of frame among the fused datasets holding it) and how each
        output feature is filled; the datasets' ``task_index`` is one more column when no output is exactly it."""
        columns_in = dict(self._columns)
        task_key = next((key for key, srcs in columns_in.items() if all(s == "task_index" for s in srcs)), None)
        if task_key is None:
            columns_in[_TASK] = ["task_index"] * len(layouts)
            task_key = _TASK
        self._task_key = task_key
        ranges: list[_Range] = []
        columns: list[_Column] = []
        for key, srcs in columns_in.items():
            kinds: dict[tuple, _Range] = {}
            outside: dict[int, str] = {}
            window = None
            for d, src in enumerate(srcs):
                if src is None or not fused[d]:
                    continue
                lay = layouts[d]
                window = window or lay.windows.get(src)
                if src in lay.specs:
                    spec = lay.specs[src]
                    kind = (spec.dtype.str, tuple(spec.frame_shape))
                    if kind not in kinds:
                        kinds[kind] = _Range(f"{key}#{len(kinds)}", spec, {}, {})
                    kinds[kind].members[d] = src
                else:
                    outside[d] = src
            if key in self._outputs:
                shape, dtype = tuple(self._outputs[key][0]), np.dtype(self._outputs[key][1])
            else:  # the datasets' task_index, for the task strings only
                shape, dtype = (), np.dtype(np.int64)
            pad_key = f"{key}_is_pad" if f"{key}_is_pad" in self._outputs else None
            found = list(kinds.values())
            holders = np.array([src is not None for src in srcs])
            direct = (len(found) == 1 and not outside and len(found[0].members) == len(srcs)
                      and found[0].spec.dtype == dtype and self._frame(found[0].spec, window) == shape)
            zeroed = not holders.all() or any(self._frame(r.spec, window) != shape for r in found)
            ranges.extend(found)
            columns.append(_Column(key, shape, dtype, window, pad_key, found, outside, holders, direct, zeroed))
        return ranges, columns

    @staticmethod
    def _frame(spec: ArraySpec, window: Window | None) -> tuple[int, ...]:
        frame = tuple(spec.frame_shape)
        return frame if window is None else (len(window.offsets), *frame)

    def _lay_out(self, layouts: Sequence[GatherLayout], ranges: list[_Range]) -> None:
        """Reserve each range (its datasets' parts one after the other) and place each dataset's maps in them."""
        align = shared_alignment({r.key: r.spec for r in ranges})
        places: dict[int, dict[str, tuple[int, int, int]]] = {}
        specs: dict[int, dict[str, ArraySpec]] = {}
        for r in ranges:
            rows = align[r.key]
            parts = {d: slot_rows(layouts[d].state.packs.rows, rows) for d in r.members}
            at = 0
            for d in r.members:
                r.start[d] = at
                at += parts[d]
            reservation = Reservation(r.key, r.spec, at)
            self._reservations.append(reservation)
            r.view = reservation.view
            for d, src in r.members.items():
                places.setdefault(d, {})[src] = (reservation.base + r.start[d] * r.spec.frame_bytes, parts[d], rows)
                specs.setdefault(d, {})[src] = r.spec
        for d, place in places.items():
            lay = layouts[d]
            self._maps[d] = PackMaps(lay.root, specs[d], lay.state.packs, max_packs=lay.max_packs, place=place)

    def _plan_rows(self, layouts: Sequence[GatherLayout], ranges: list[_Range], columns: list[_Column]) -> None:
        """Per selected episode of all datasets one row of int64s: its dataset, what turns a mixture index into
        the frame inside it, its length, and per group of ranges laid out alike the row of its frame 0."""
        n = len(self._k_dataset)
        groups: list[np.ndarray] = []
        for r in ranges:
            rows = np.zeros(n, dtype=np.int64)
            for d, src in r.members.items():
                lay, lo, hi = layouts[d], self._k_start[d], self._k_start[d + 1]
                rows[lo:hi] = r.start[d] + self._maps[d].base_rows(src)[lay.pack] + lay.offset
            r.member_mask = np.zeros(len(layouts), dtype=bool)
            r.member_mask[list(r.members)] = True
            r.group = next((g for g, other in enumerate(groups) if np.array_equal(other, rows)), len(groups))
            if r.group == len(groups):
                groups.append(rows)
        self._ktab = np.empty((n, _ROWS + len(groups)), dtype=np.int64)
        self._ktab[:, 0] = self._k_dataset
        self._ktab[:, 1] = self._sel.to_frame
        self._ktab[:, 2] = np.concatenate([lay.length for lay in layouts])
        self._ktab[:, 3], self._ktab[:, 4] = self._task_base, self._task_limit
        for g, rows in enumerate(groups):
            self._ktab[:, _ROWS + g] = rows
        for col in columns:
            for r in col.ranges:
                if col.window is not None and col.window.contiguous:
                    t, view = len(col.window.offsets), r.view
                    r.blocks = np.lib.stride_tricks.as_strided(
                        view, (max(view.shape[0] - t + 1, 0), t, *view.shape[1:]),
                        (view.strides[0], *view.strides), writeable=False)
        self._columns_plan = [c for c in columns if c.key != _TASK]
        self._task_column = next(c for c in columns if c.key == self._task_key)
        self._packs_of = {d: np.unique(lay.pack) for d, lay in enumerate(layouts) if d in self._maps}

    def _release(self) -> None:
        for maps in self._maps.values():
            maps.close()
        self._maps = {}
        for reservation in self._reservations:
            reservation.release()
        self._reservations = []

    def close(self) -> None:
        """Release every map and range now."""
        with self._lock:
            self._release()
            self._all_fused, self._all_mapped = False, False
            self.fused = np.zeros(len(self.datasets), dtype=bool)
            self._k_fused = np.zeros(len(self._k_dataset), dtype=bool)
            self.disabled = "closed"

    # sampling -------------------------------------------------------------------------------------------------
    def gather(self, indices: Sequence[int] | np.ndarray) -> tuple[dict[str, Any], np.ndarray] | None:
        """The batch at mixture ``indices`` in the output names (features, their masks and ``task``), and each
        sample's dataset; None when the datasets must serve it: it touches a dataset that is not fused, a dataset
        is closed, its indices are not 1-D integers in range, or a pack cannot be mapped (their own path raises
        the error that says why)."""
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.dtype.kind not in "iu" and idx.size):
            return None
        with self._lock:
            if self.disabled == "closed":
                return None
            if (any(map(operator.is_not, map(_META, self.datasets), self._metas))
                    or list(map(_CLOSED, self.datasets)) != self._closed):
                self._build()  # a dataset refreshed, committed to by its writer or closed: lay the ranges out again
            if self.disabled:
                return None
            try:
                if self._resized:  # a dataset refreshed to another size: the caller's indices stay where they were
                    d, local = self._outer.locate_many(idx)
                    if len(d) and (local >= self._sizes[d]).any():
                        return None
                    idx = self._starts[d] + local
                k, idx = self._sel.locate_k(idx)
            except IndexError:
                return None
            if not self._all_fused and not self._k_fused[k].all():
                return None
            try:
                return self._gather(k, idx)
            except (_Stale, StoreError, OSError):
                return None

    def _gather(self, k: np.ndarray, idx: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
        if self._tasks_stale:  # tasks are only ever appended: the latest commit names them
            self._task_tables([np.array(read_state(root).tasks, dtype=object) for root in self._roots])
            self._tasks_stale = False
        place = self._ktab[k]
        local = idx + place[:, 1]
        b = _Batch(idx, place, place[:, 0], local, place[:, 2],
                   [place[:, _ROWS + g] + local for g in range(self._ktab.shape[1] - _ROWS)], {})
        if not self._all_mapped:
            self._ensure_mapped(k, b.d)
        out: dict[str, Any] = {}
        for col in self._columns_plan:
            self._fill(out, col, b)
        if self._task_key in out:
            task_index = out[self._task_key]
        else:
            scratch: dict[str, Any] = {}
            self._fill(scratch, self._task_column, b)
            task_index = scratch[self._task_key]
        task_index = task_index.reshape(len(k), -1)[:, 0] if task_index.ndim > 1 else task_index
        at = task_index + place[:, 3]
        if len(k) and ((task_index < 0).any() or (at >= place[:, 4]).any()):
            # a writer's set_task gave frames a task added after the layout: the datasets learn it on their path
            self._tasks_stale = True
            raise _Stale
        out["task"] = self._task_table[at].tolist()
        return out, b.d.copy()

    def _ensure_mapped(self, k: np.ndarray, d: np.ndarray) -> None:
        packs = self._k_pack[k]
        for dd in np.unique(d).tolist():
            maps = self._maps.get(dd)
            if maps is not None:
                maps.ensure(np.unique(packs[d == dd]))
        self._all_mapped = all(bool(maps.mapped[self._packs_of[dd]].all()) for dd, maps in self._maps.items())

    def _fill(self, out: dict[str, Any], col: _Column, b: _Batch) -> None:
        """Output feature ``col`` (and its padding mask) of the batch: one gather per range."""
        w, n = col.window, len(b.d)
        if col.direct:
            r = col.ranges[0]
            data, pad = self._read(r, w, b.place[:, _ROWS + r.group], b.at[r.group], b.local, b.length)
            out[col.key] = data
            if col.pad_key is not None:
                out[col.pad_key] = pad if w is not None else np.zeros(n, dtype=bool)
            return
        data = (np.zeros if col.zeroed else np.empty)((n, *col.shape), dtype=col.dtype)
        pad = None
        if col.pad_key is not None:
            pad = np.ones((n, len(w.offsets)) if w is not None else n, dtype=bool)
            if w is None:
                pad[col.holders[b.d]] = False
        parts = [(np.flatnonzero(r.member_mask[b.d]), r) for r in col.ranges]
        parts += [(np.flatnonzero(b.d == dd), (dd, src)) for dd, src in col.outside.items()]
        for rows, source in parts:
            if not len(rows):
                continue
            if isinstance(source, _Range):
                got, got_pad = self._read(source, w, b.place[rows, _ROWS + source.group], b.at[source.group][rows],
                                          b.local[rows], b.length[rows])
            else:  # a compressed or video camera: the dataset's own get_batch of these rows (once per batch)
                dd, src = source
                if dd not in b.own:
                    b.own[dd] = self.datasets[dd].get_batch(b.idx[rows] - self._starts[dd])
                got, got_pad = b.own[dd][src], b.own[dd].get(f"{src}_is_pad")
            if got.shape[1:] != col.shape:  # a vector zero-padded to the mixture's width
                data[rows, ..., :got.shape[-1]] = got
            else:
                data[rows] = got
            if got_pad is not None and pad is not None:
                pad[rows] = got_pad
        out[col.key] = data
        if pad is not None:
            out[col.pad_key] = pad

    @staticmethod
    def _read(r: _Range, w: Window | None, first: np.ndarray, at: np.ndarray, local: np.ndarray,
              length: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Frames of range ``r`` at rows ``at``: frames ``local`` of episodes of ``length`` frames whose frame 0 is
        at row ``first``. One gather, windows clamped to their episodes as the datasets' ``get_batch`` does."""
        view = r.view
        if w is None:
            return view[at], None
        n = len(at)
        if r.blocks is not None:
            inside = (local >= -w.lo) & (length - local > w.hi)
            inner = np.flatnonzero(inside)
            if len(inner) == n:
                return r.blocks[at + w.lo], np.zeros((n, len(w.offsets)), dtype=bool)
            if 2 * len(inner) >= n:  # mostly inside: whole blocks, gathered rows at the edges only
                edge = np.flatnonzero(~inside)
                clamped, edge_pad = w.rows_batch(at[edge], first[edge], first[edge] + length[edge] - 1)
                data = np.empty((n, *r.blocks.shape[1:]), dtype=view.dtype)
                data[inner] = r.blocks[at[inner] + w.lo]
                data[edge] = view[clamped]
                pad = np.zeros((n, len(w.offsets)), dtype=bool)
                pad[edge] = edge_pad
                return data, pad
        clamped, pad = w.rows_batch(at, first, first + length - 1)
        return view[clamped], pad
