"""Mixtures: several datasets sampled as one, each with a weight (``open_mixture``).

A mixture is built on the datasets' public faces: each source is opened with :func:`~lerobot_zarr.open_dataset`
(its own store, episodes and options), a batch is one gather per feature across all of them
(:mod:`~lerobot_zarr.sampling.fused`; datasets that need their own path, :attr:`LeRobotZarrMixture.fused_out`,
give one ``get_batch`` each), and the features of the datasets are matched by name (after ``rename``) into one
schema: the features every dataset has (``features="intersection"``, as LeRobot's ``MultiLeRobotDataset``) or
all of them (``"union"``: a dataset that lacks one gives zeros and ``<key>_is_pad`` True). Vectors of different
widths are zero-padded to ``pad_to`` with a ``<key>_dim_is_pad`` mask. Which dataset and frame each sample takes
is :mod:`~lerobot_zarr.mixtures.sampler`'s arithmetic (weights, passes without replacement, elastic and resumable
state).

Global index ``i`` of a mixture is ``offsets[k] + j``: frame ``j`` of dataset ``k`` (in the order given).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..api import open_dataset
from ..errors import ArgumentError, DeltaTimestampsError, LeRobotZarrWarning, SchemaMismatchError, warn_user
from ..lerobot.format import CAMERA_DTYPES, DEFAULT_FEATURES, QUANTILES, aggregate_stats
from ..sampling.dataset import ImageFormat, LeRobotZarrDataset
from ..sampling.fused import FusedGather
from ..sampling.meta import DatasetMeta
from ..sampling.selection import Selection
from ..store.tables import location_key
from .sampler import MixtureSampler, MixtureSchedule, check_weights, frame_weights

__all__ = ["LeRobotZarrMixture", "MixtureMeta", "content_key", "merge_stats", "open_mixture"]

Source = str | os.PathLike
FeatureMode = Literal["intersection", "union"]
RESERVED = ("dataset_index", "task")

# how one dataset fills one output key of a batch
_COPY, _CAST, _PAD, _ZERO, _TRUE, _FALSE = "copy", "cast", "pad", "zero", "true", "false"


@dataclass(frozen=True)
class _Output:
    """One key of the mixture's samples: its per-sample shape and dtype, and whether some dataset leaves part of
    it zero (padding, or a feature it lacks)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    zeroed: bool = False


@dataclass(frozen=True, kw_only=True)
class MixtureMeta:
    """What a mixture serves: its features (the mixture's names and shapes), each dataset's own metadata and stats
    (in the mixture's names), the merged stats (LeRobot's aggregation) and the normalized weights."""

    fps: float
    features: dict[str, dict]
    sources: tuple[str, ...]
    weights: tuple[float, ...]
    datasets: tuple[DatasetMeta, ...]
    dataset_stats: tuple[dict[str, dict[str, np.ndarray]], ...]
    stats: dict[str, dict[str, np.ndarray]]
    left_out: dict[str, str] = field(default_factory=dict)

    @property
    def camera_keys(self) -> list[str]:
        return [k for k, v in self.features.items() if v.get("dtype") in CAMERA_DTYPES]

    @property
    def robot_types(self) -> tuple[str | None, ...]:
        return tuple(m.robot_type for m in self.datasets)

    @property
    def robot_type(self) -> str | None:
        """The datasets' robot type when they share one, else None (see :attr:`robot_types`)."""
        kinds = set(self.robot_types)
        return kinds.pop() if len(kinds) == 1 else None

    @property
    def tasks(self) -> list[str]:
        """Every dataset's task strings, each once, in order of first appearance."""
        return list(dict.fromkeys(t for m in self.datasets for t in m.tasks))

    @property
    def total_episodes(self) -> int:
        return sum(m.total_episodes for m in self.datasets)

    def __repr__(self) -> str:
        return (f"MixtureMeta(fps={self.fps:g}, datasets={list(self.sources)}, weights={list(self.weights)}, "
                f"features={list(self.features)})")


def merge_stats(stats: Sequence[Mapping[str, Any]], width: int | None = None) -> dict[str, np.ndarray]:
    """One feature's stats merged over datasets as LeRobot's ``aggregate_stats`` does (count-weighted means,
    parallel variance, min of mins, max of maxes, count-weighted quantiles where every dataset has them).

    With ``width`` (a feature zero-padded to that width), each dimension is merged over the datasets that have
    it, ``count`` is the total; dimensions no dataset has are 0 in every statistic."""
    stats = [{name: np.asarray(value) for name, value in s.items()} for s in stats]
    if width is None:
        return aggregate_stats(_stacked(stats))
    widths = [s["mean"].shape[-1] for s in stats]
    out = {name: np.zeros(width) for name in stats[0] if name != "count"}
    bounds = sorted({0, *widths})
    for lo, hi in itertools.pairwise(bounds):
        holders = [{name: (value if name == "count" else value[..., lo:hi]) for name, value in s.items()}
                   for s, w in zip(stats, widths) if w >= hi]
        for name, value in aggregate_stats(_stacked(holders)).items():
            if name != "count":
                out.setdefault(name, np.zeros(width))[lo:hi] = value
    out = {name: value for name, value in out.items()
           if name in ("min", "max", "mean", "std") or all(name in s for s in stats)}
    out["count"] = np.array([sum(int(np.asarray(s["count"]).reshape(-1)[0]) for s in stats)])
    return out


def _stacked(stats: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    names = [n for n in ("min", "max", "mean", "std", "count", *QUANTILES) if all(n in s for s in stats)]
    return {n: np.stack([np.asarray(s[n], dtype=np.int64 if n == "count" else np.float64).reshape(
        (1,) if n == "count" else np.shape(s[n])) for s in stats]) for n in names}


def content_key(ds: LeRobotZarrDataset) -> str:
    """What a dataset serves, as a short digest: its selection (episodes and frames) and, per selected episode,
    its length and the content hash of every feature it serves (where none is recorded, the rows it holds, which
    are never given to another episode). Equal keys: the same frames in the same order, which a sampler state
    saved on one mixture needs to continue on another."""
    layout = ds.gather_layout()
    state, selection = layout["state"], layout["selection"]
    table, episodes = state.table, selection.episodes
    digest = hashlib.sha256(json.dumps(selection.to_args(table.length)).encode())
    digest.update(np.ascontiguousarray(table.length[episodes], dtype="<i8").tobytes())
    rows = location_key(table.chunk[episodes], table.offset[episodes])
    for name in sorted(ds.array_specs):
        hashes = state.episode_hashes(name)[episodes]
        digest.update(name.encode() + b"\0" + np.where(hashes >= 0, hashes, -1 - rows).astype("<i8").tobytes())
    return digest.hexdigest()[:32]


def _key(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    raise ArgumentError(f"a mixture's sources are Hub repo ids or paths (what open_dataset takes), got "
                        f"{source!r:.80} ({type(source).__name__})")


def _per_source(option: str, value: Any, sources: list[str], *, shared: tuple[type, ...] = ()) -> dict[str, Any]:
    """``{source: value}`` of a per-source option: a mapping keyed by the sources as given (every key one of
    them), or one value of the ``shared`` types for all."""
    if value is None:
        return {}
    if shared and isinstance(value, shared):
        return dict.fromkeys(sources, value)
    if not isinstance(value, Mapping):
        raise ArgumentError(f"{option} must be a mapping {{source: value}} keyed by the mixture's sources, got "
                            f"{value!r:.80}")
    out = {}
    for key, item in value.items():
        name = _key(key)
        if name not in sources:
            raise ArgumentError(f"{option}: {name!r} is not one of the mixture's sources {sources}")
        out[name] = item
    return out


class LeRobotZarrMixture:
    """Several datasets sampled as one (see :func:`open_mixture` and the module docs).

    ``len(mix)`` is the frames of all datasets; ``mix[i]`` / ``mix.get_batch(indices)`` give LeRobot's item layout
    in the mixture's names plus ``dataset_index``; ``mix.sampler(...)`` gives weighted, resumable batches of
    indices. Pickles as its datasets do (cheaply), for DataLoader workers."""

    def __init__(self, datasets: Sequence[LeRobotZarrDataset], *, sources: Sequence[str], weights: np.ndarray,
                 rename: Mapping[str, Mapping[str, str]], features: FeatureMode = "intersection",
                 pad_to: Mapping[str, int] | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None):
        self.datasets = list(datasets)
        self._outputs: dict[str, _Output] = {}
        self.sources = tuple(sources)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.delta_timestamps = None if delta_timestamps is None else {k: list(v) for k, v in
                                                                       delta_timestamps.items()}
        sizes = [len(ds) for ds in self.datasets]
        empty = [s for s, n in zip(self.sources, sizes) if n == 0]
        if empty:
            raise ArgumentError(f"datasets {empty} of the mixture have no frames (check their episodes=)")
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._len = int(self.offsets[-1])
        # the datasets as the "episodes" of a selection: its index arithmetic maps global indices to them
        self._index = Selection(np.arange(len(sizes)), np.zeros(len(sizes), dtype=np.int64), np.array(sizes),
                                len(sizes))
        self._args = ({k: dict(v) for k, v in rename.items()}, features, dict(pad_to or {}))
        self._build(*self._args)

    # schema ---------------------------------------------------------------------------------------------------
    def _build(self, rename: Mapping[str, Mapping[str, str]], mode: FeatureMode, pad_to: dict[str, int]) -> None:
        """Match the datasets' features by name (after ``rename``) into the mixture's outputs, and plan how each
        dataset fills each output."""
        names = self.sources
        fps = [ds.meta.fps for ds in self.datasets]
        if any(abs(f - fps[0]) > 1e-9 for f in fps):
            k = next(k for k, f in enumerate(fps) if abs(f - fps[0]) > 1e-9)
            raise SchemaMismatchError(f"a mixture samples windows in frames of one fps: {names[0]!r} has "
                                      f"{fps[0]:g} fps, {names[k]!r} {fps[k]:g}")
        self.fps = fps[0]
        # every dataset's samples, by the mixture's name of each feature: (its own name, per-sample shape, dtype)
        held: list[dict[str, tuple[str, tuple[int, ...], np.dtype]]] = []
        windowed: set[str] = set()
        text: dict[str, str] = {}  # text features (string, language) are lists, not arrays: not mixed
        for k, ds in enumerate(self.datasets):
            probe = ds.get_batch(np.zeros(0, dtype=np.int64))
            mapping = rename.get(names[k], {})
            own: dict[str, tuple[str, tuple[int, ...], np.dtype]] = {}
            for name, spec in ds.array_specs.items():
                target = mapping.get(name, name)
                if spec.is_text:
                    text.setdefault(target, f"a {spec.kind} feature (text: a mixture batches arrays) in {names[k]!r}")
                    continue
                value = probe[name]
                own[target] = (name, value.shape[1:], value.dtype)
                if f"{name}_is_pad" in probe:
                    windowed.add(target)
            held.append(own)
        everywhere = set.intersection(*(set(h) for h in held))
        order = list(dict.fromkeys(f for h in held for f in h if f not in text))
        left_out = dict(text)
        if mode == "intersection":
            for f in order:
                if f not in everywhere:
                    lacking = [names[k] for k, h in enumerate(held) if f not in h]
                    left_out[f] = f"not in {lacking}"
            order = [f for f in order if f in everywhere]
            if not set(order) - set(DEFAULT_FEATURES):
                raise SchemaMismatchError(f"the datasets {list(names)} have no feature in common besides LeRobot's "
                                          f"index columns; match their features with rename= or keep them all with "
                                          f"features='union'")
        unknown = sorted(set(pad_to) - set(order))
        if unknown:
            raise ArgumentError(f"pad_to names {unknown}, not features of the mixture ({order})")
        self.left_out = left_out
        if left_out:
            first = next(iter(left_out))
            warn_user(f"mixture of {list(names)}: features {list(left_out)} are left out, as not every dataset has "
                      f"them ({first!r} is {left_out[first]}; mix.left_out says it for each); features='union' keeps "
                      f"them (zero-filled where a dataset lacks one, with <key>_is_pad), or rename= a feature of "
                      f"theirs to the name")
        self._outputs: dict[str, _Output] = {}
        self._plans: list[list[tuple[str, str | None, str, int]]] = [[] for _ in self.datasets]
        self._dim_masks: dict[str, np.ndarray] = {}
        feature_specs = {}
        for f in order:
            self._add_feature(f, held, f in windowed, pad_to.get(f))
            feature_specs[f] = self._feature_spec(f, held, pad_to.get(f))
        for key in RESERVED:
            if key in self._outputs:
                raise SchemaMismatchError(f"feature {key!r} of the mixture clashes with the key the mixture adds "
                                          f"({key}); rename= it", feature=key)
        self._add_stats_and_meta(feature_specs, pad_to)

    def _add_output(self, key: str, output: _Output) -> None:
        if key in self._outputs:
            raise SchemaMismatchError(f"two of the mixture's keys are named {key!r} (a feature and another's mask); "
                                      f"rename= one of them", feature=key)
        self._outputs[key] = output

    def _add_feature(self, f: str, held: list[dict], windowed: bool, width: int | None) -> None:
        names = self.sources
        holders = [k for k, h in enumerate(held) if f in h]
        first = holders[0]
        shape, dtype = held[first][f][1], held[first][f][2]
        for k in holders[1:]:
            other_shape, other_dtype = held[k][f][1], held[k][f][2]
            if other_dtype != dtype:
                if other_dtype.kind != dtype.kind or dtype.kind not in "biuf":
                    raise SchemaMismatchError(f"feature {f!r} is {dtype} in {names[first]!r} but {other_dtype} in "
                                              f"{names[k]!r}; a mixture batches one dtype per feature", feature=f)
                dtype = np.result_type(dtype, other_dtype)
            if width is None and other_shape != shape:
                what = "camera" if self._is_camera(f, held) else "feature"
                hint = (" (cameras must have one size: make the stores with the same resize=, e.g. "
                        "open_mixture(..., resize={source: {camera: (224, 224)}}))" if what == "camera" else
                        f" (zero-pad vectors to one width with pad_to={{{f!r}: {max(shape[-1:] + other_shape[-1:])}}})"
                        if len(shape) == len(other_shape) >= 1 else "")
                raise SchemaMismatchError(f"{what} {f!r} has shape {list(self._frame(shape, windowed))} in "
                                          f"{names[first]!r} but {list(self._frame(other_shape, windowed))} in "
                                          f"{names[k]!r}{hint}", feature=f)
        if width is not None:
            bad = [(names[k], list(self._frame(held[k][f][1], windowed))) for k in holders
                   if len(self._frame(held[k][f][1], windowed)) != 1]
            if bad:
                raise ArgumentError(f"pad_to[{f!r}]: only vector features (one axis per frame) are padded; it has "
                                    f"shape {bad[0][1]} in {bad[0][0]!r}", feature=f)
            if isinstance(width, (bool, np.bool_)) or not isinstance(width, (int, np.integer)) or width < 1:
                raise ArgumentError(f"pad_to[{f!r}] must be a positive integer, got {width!r}", feature=f)
            wide = [(names[k], held[k][f][1][-1]) for k in holders if held[k][f][1][-1] > width]
            if wide:
                raise ArgumentError(f"pad_to[{f!r}] = {width} is narrower than {f!r} in {wide[0][0]!r} ({wide[0][1]}"
                                    f"); values are never cut", feature=f)
            shape = (*shape[:-1], int(width))
        missing = len(holders) < len(self.datasets)
        self._add_output(f, _Output(shape, np.dtype(dtype), zeroed=missing or width is not None))
        pad_key = f"{f}_is_pad"
        if windowed or missing:
            self._add_output(pad_key, _Output(shape[:1] if windowed else (), np.dtype(bool), zeroed=not windowed))
        if width is not None:
            self._add_output(f"{f}_dim_is_pad", _Output((int(width),), np.dtype(bool)))
            masks = np.ones((len(self.datasets), int(width)), dtype=bool)
            for k in holders:
                masks[k, :held[k][f][1][-1]] = False
            self._dim_masks[f] = masks
        for k, own in enumerate(held):
            plan = self._plans[k]
            if f not in own:
                plan.append((f, None, _ZERO, 0))
                plan.append((pad_key, None, _TRUE, 0))
                continue
            src, src_shape, src_dtype = own[f]
            if src_shape != shape:
                plan.append((f, src, _PAD, src_shape[-1]))
            else:
                plan.append((f, src, _COPY if src_dtype == dtype else _CAST, 0))
            if windowed:
                plan.append((pad_key, f"{src}_is_pad", _COPY, 0))
            elif missing:
                plan.append((pad_key, None, _FALSE, 0))

    def _is_camera(self, f: str, held: list[dict]) -> bool:
        k = next(k for k, h in enumerate(held) if f in h)
        return self.datasets[k].meta.features.get(held[k][f][0], {}).get("dtype") in CAMERA_DTYPES

    def _frame(self, shape: tuple[int, ...], windowed: bool) -> tuple[int, ...]:
        return shape[1:] if windowed else shape

    def _feature_spec(self, f: str, held: list[dict], width: int | None) -> dict:
        specs = [(k, self.datasets[k].meta.features.get(h[f][0], {})) for k, h in enumerate(held) if f in h]
        first = dict(specs[0][1])
        stored = self.datasets[specs[0][0]].array_specs[held[specs[0][0]][f][0]]
        first["shape"] = [*stored.frame_shape[:-1], width] if width is not None else list(stored.frame_shape)
        names = [s.get("names") for _, s in specs]
        first["names"] = names[0] if width is None and all(n == names[0] for n in names) else None
        if first.get("dtype") not in CAMERA_DTYPES:
            first["dtype"] = str(self._outputs[f].dtype)
        return first

    def _add_stats_and_meta(self, feature_specs: dict[str, dict], pad_to: dict[str, int]) -> None:
        per_dataset = []
        for k, ds in enumerate(self.datasets):
            back = {src: f for f, src, op, _ in self._plans[k] if src is not None and f in feature_specs}
            per_dataset.append({back[name]: {s: np.asarray(v) for s, v in st.items()}
                                for name, st in ds.meta.stats.items() if name in back})
        merged = {}
        for f in feature_specs:
            holders = [s[f] for s in per_dataset if f in s and "mean" in s[f] and "count" in s[f]]
            if holders:
                merged[f] = merge_stats(holders, pad_to.get(f))
        self.meta = MixtureMeta(fps=self.fps, features=feature_specs, sources=self.sources,
                                weights=tuple(float(w) for w in self.weights),
                                datasets=tuple(ds.meta for ds in self.datasets), dataset_stats=tuple(per_dataset),
                                stats=merged, left_out=dict(self.left_out))
        # a batch from one dataset whose samples need no change is served as that dataset gives it
        self._copy_only = [all(op == _COPY for _, _, op, _ in plan) and not self._dim_masks for plan in self._plans]
        self._sources = [{key: src for key, src, _, _ in plan} for plan in self._plans]
        self._ops = [{key: (src, op, width) for key, src, op, width in plan} for plan in self._plans]
        self._dim_keys = {f"{f}_dim_is_pad" for f in self._dim_masks}
        # several datasets: each batch one gather per feature across them all (see sampling.fused)
        self._fused = None
        if len(self.datasets) > 1:
            columns = {f: [self._ops[k][f][0] for k in range(len(self.datasets))] for f in feature_specs}
            outputs = {key: (o.shape, o.dtype) for key, o in self._outputs.items() if key not in self._dim_keys}
            self._fused = FusedGather(self.datasets, columns, outputs, np.diff(self.offsets))

    # sampling -------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def locate(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(dataset, index inside it)`` of mixture indices (1-D, any integer dtype, negative from the end)."""
        return self._index.locate_many(indices)

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """The mixture samples at ``indices`` will be read soon (a sampler's next batches): each dataset read in a
        bucket fetches its frames of them in the background now (:meth:`LeRobotZarrDataset.prefetch`); a no-op
        for a mixture of local stores."""
        ahead = [k for k, ds in enumerate(self.datasets) if getattr(ds, "in_bucket", False)]
        if not ahead:
            return
        d, local = self.locate(indices)
        for k in ahead:
            hit = d == k
            if hit.any():
                self.datasets[k].prefetch(local[hit])

    def get_batch(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """The samples of mixture indices stacked along a leading axis: each dataset's ``get_batch`` at its
        indices, in the mixture's names and shapes, plus ``dataset_index`` (int64). One gather per feature across
        the datasets (:mod:`~lerobot_zarr.sampling.fused`); a batch touching a dataset that needs its own path
        (:attr:`fused_out` says which and why) is one ``get_batch`` per dataset it touches."""
        fused = self._fused.gather(indices) if self._fused is not None else None
        if fused is None:
            return self._gather([self.locate(indices)])[0]
        return self._finish(*fused)

    def get_batches(self, batches: Sequence[Sequence[int] | np.ndarray]) -> list[dict[str, Any]]:
        """``[get_batch(b) for b in batches]`` gathered at once: one gather per feature for all of them (or, for
        batches touching a dataset that needs its own path, one ``get_batch`` per dataset)."""
        arrays = [np.asarray(b) for b in batches]
        if self._fused is not None and arrays and all(a.ndim == 1 and (a.dtype.kind in "iu" or not a.size)
                                                      for a in arrays):
            fused = self._fused.gather(np.concatenate([a.astype(np.int64, copy=False) for a in arrays]))
            if fused is not None:
                out, d = fused
                bounds = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).tolist()
                return [self._finish({key: value[lo:hi] for key, value in out.items()}, d[lo:hi])
                        for lo, hi in itertools.pairwise(bounds)]
        return self._gather([self.locate(b) for b in batches])

    def _finish(self, out: dict[str, Any], d: np.ndarray) -> dict[str, Any]:
        """A fused batch with what the mixture adds: the ``_dim_is_pad`` masks and ``dataset_index``."""
        for f, masks in self._dim_masks.items():
            out[f"{f}_dim_is_pad"] = masks[d]
        out["dataset_index"] = d
        return out

    @property
    def fused_out(self) -> dict[str, str]:
        """Datasets whose batches are served by their own ``get_batch`` rather than gathered with the others'
        (lazy ones, ones with deleted episodes, ...), with why; ``"*"`` when nothing is fused."""
        if self._fused is None:
            return {"*": "a mixture of one dataset is served by its get_batch"}
        if self._fused.disabled:
            return {"*": self._fused.disabled}
        return {self.sources[d]: why for d, why in self._fused.why_not.items()}

    def batches(self, sampler: Iterable[np.ndarray], *, gather: int = 8) -> Iterator[dict[str, Any]]:
        """The ``get_batch`` dicts of a sampler's index batches, gathered ``gather`` batches at a time with
        :meth:`get_batches` (in this process; :func:`lerobot_zarr.integrations.torch.batch_loader` does the same in its
        workers)."""
        if isinstance(gather, (bool, np.bool_)) or not isinstance(gather, (int, np.integer)) or gather < 1:
            raise ArgumentError(f"gather must be a positive integer, got {gather!r}")
        pending: list[np.ndarray] = []
        for idx in sampler:
            pending.append(idx)
            if len(pending) == gather:
                yield from self.get_batches(pending)
                pending = []
        if pending:
            yield from self.get_batches(pending)

    def _gather(self, located: list[tuple[np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:
        """The batches of ``(dataset, index inside it)`` arrays: each batch's rows sorted by dataset (if they are
        not), one ``get_batch`` per dataset over every batch's rows of it, then each batch assembled from its runs
        of rows (a concatenation per feature) and put back in the order asked for."""
        n_datasets = len(self.datasets)
        batches = []
        for d, local in located:
            order = None if len(d) < 2 or bool((d[1:] >= d[:-1]).all()) else np.argsort(d, kind="stable")
            ordered = local if order is None else local[order]
            batches.append((d, order, ordered, np.bincount(d, minlength=n_datasets)))
        counts = np.array([c for _, _, _, c in batches], dtype=np.int64).reshape(-1, n_datasets)
        first = np.cumsum(counts, axis=1) - counts  # where each dataset's run starts in each batch
        taken = np.zeros((len(batches) + 1, n_datasets), dtype=np.int64)  # and where it is in the dataset's gather
        np.cumsum(counts, axis=0, out=taken[1:])
        parts = {}
        for k in np.flatnonzero(taken[-1]).tolist():
            runs = [ordered[first[j, k]:first[j, k] + counts[j, k]] for j, (_, _, ordered, _) in enumerate(batches)
                    if counts[j, k]]
            parts[k] = self.datasets[k].get_batch(runs[0] if len(runs) == 1 else np.concatenate(runs))
        return [self._assemble(parts, j, batch, first[j], taken[j]) for j, batch in enumerate(batches)]

    def _assemble(self, parts: dict[int, dict], j: int, batch: tuple, first: np.ndarray, taken: np.ndarray
                  ) -> dict[str, Any]:
        d, order, _, counts = batch
        present = np.flatnonzero(counts).tolist()
        n = len(d)
        if not present:  # an empty batch: empty arrays of the mixture's shapes
            out = {key: np.empty((0, *o.shape), dtype=o.dtype) for key, o in self._outputs.items()
                   if key not in self._dim_keys}
            out["task"] = []
        elif len(present) == 1 and self._copy_only[present[0]]:  # one dataset, nothing to pad: views of its gather
            k = present[0]
            lo, hi = int(taken[k]), int(taken[k] + n)
            part = parts[k]
            out = {key: part[src][lo:hi] for key, src in self._sources[k].items()}
            out["task"] = part["task"][lo:hi]
        else:
            runs = [(k, int(first[k]), int(first[k] + counts[k]), int(taken[k]), parts[k]) for k in present]
            out = {}
            for key, o in self._outputs.items():
                if key in self._dim_keys:
                    continue
                ops = [self._ops[k][key] for k, _, _, _, _ in runs]
                if all(op[1] == _COPY for op in ops):  # every run as its dataset gives it: one concatenation
                    pieces = [part[src][at:at + hi - lo] for (_, lo, hi, at, part), (src, _, _) in zip(runs, ops)]
                    rows = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
                else:
                    rows = (np.zeros if o.zeroed else np.empty)((n, *o.shape), dtype=o.dtype)
                    for (_, lo, hi, at, part), (src, op, width) in zip(runs, ops):
                        if op in (_COPY, _CAST):
                            rows[lo:hi] = part[src][at:at + hi - lo]
                        elif op == _PAD:
                            rows[lo:hi, ..., :width] = part[src][at:at + hi - lo]
                        elif op == _TRUE:
                            rows[lo:hi] = True
                out[key] = rows
            out["task"] = [t for _, lo, hi, at, part in runs for t in part["task"][at:at + hi - lo]]
        if order is not None:  # back to the order asked for
            inverse = np.empty(n, dtype=np.int64)
            inverse[order] = np.arange(n)
            tasks = out.pop("task")
            out = {key: value[inverse] for key, value in out.items()}
            out["task"] = [tasks[i] for i in inverse.tolist()]
        for f, masks in self._dim_masks.items():
            out[f"{f}_dim_is_pad"] = masks[d]
        out["dataset_index"] = d
        return out

    def __getitem__(self, i: int) -> dict[str, Any]:
        """One sample: ``datasets[k][j]`` for mixture index ``i = offsets[k] + j``, in the mixture's names and
        shapes, plus ``dataset_index``."""
        try:
            (k,), (local,) = self.locate(np.array([operator.index(i)]))
        except TypeError:
            raise ArgumentError(f"mixture indices are integers, got {i!r:.40} ({type(i).__name__}); get_batch takes "
                                f"many") from None
        k = int(k)
        item = self.datasets[k][int(local)]
        out: dict[str, Any] = dict.fromkeys(self._outputs)
        for key, src, op, width in self._plans[k]:
            o = self._outputs[key]
            if op == _COPY:
                out[key] = item[src]
            elif op == _CAST:
                out[key] = np.asarray(item[src]).astype(o.dtype)[()]
            elif op == _PAD:
                value = np.zeros(o.shape, dtype=o.dtype)
                value[..., :width] = item[src]
                out[key] = value
            else:
                value = np.full(o.shape, op == _TRUE, dtype=o.dtype) if op != _ZERO else np.zeros(o.shape, o.dtype)
                out[key] = value[()] if not o.shape else value
        for f, masks in self._dim_masks.items():
            out[f"{f}_dim_is_pad"] = masks[k].copy()
        out["task"] = item["task"]
        out["dataset_index"] = np.int64(k)
        return out

    def sampler(self, batch_size: int, *, seed: int = 0, rank: int | None = None, world_size: int | None = None,
                batches_per_epoch: int | None = None) -> MixtureSampler:
        """Batches of mixture indices for one rank, drawn by the mixture's weights (see
        :class:`~lerobot_zarr.mixtures.sampler.MixtureSampler`): resumable (``state_dict``) and elastic. ``rank``
        and ``world_size`` default to ``torch.distributed``'s when it is initialized, else 0 and 1."""
        schedule = MixtureSchedule([len(ds) for ds in self.datasets], self.weights, seed, names=self.sources,
                                   contents=[content_key(ds) for ds in self.datasets])
        return MixtureSampler(schedule, batch_size=batch_size, rank=rank, world_size=world_size,
                              batches_per_epoch=batches_per_epoch)

    # pickling: the datasets (as their arguments) and the options; the schema is rebuilt -------------------------
    def __getstate__(self) -> tuple:
        return self.datasets, self.sources, self.weights, self._args, self.delta_timestamps

    def __setstate__(self, state: tuple) -> None:
        datasets, sources, weights, (rename, features, pad_to), deltas = state
        with warnings.catch_warnings():  # said where the mixture was opened
            warnings.simplefilter("ignore", LeRobotZarrWarning)
            self.__init__(datasets, sources=sources, weights=weights, rename=rename, features=features,
                          pad_to=pad_to, delta_timestamps=deltas)

    # lifetime -------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release every dataset's memory maps now."""
        if self._fused is not None:
            self._fused.close()
        for ds in self.datasets:
            ds.close()

    def __enter__(self) -> LeRobotZarrMixture:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        parts = ", ".join(f"{s!r}: {w:.3g}" for s, w in zip(self.sources, self.weights))
        features = [k for k in self._outputs if not k.endswith("_is_pad")]
        return (f"LeRobotZarrMixture({{{parts}}}, frames={self._len}, features={features}, "
                f"windows={ {k: len(v) for k, v in (self.delta_timestamps or {}).items()} })")


def open_mixture(
    sources: Mapping[Source, float] | Sequence[Source],
    *,
    weights: Sequence[float] | Literal["frames", "equal"] | None = None,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    rename: Mapping[Source, Mapping[str, str]] | None = None,
    features: FeatureMode = "intersection",
    pad_to: Mapping[str, int] | None = None,
    episodes: Mapping[Source, Any] | None = None,
    root: Mapping[Source, str | os.PathLike] | None = None,
    revision: str | Mapping[Source, str] | None = None,
    token: str | bool | Mapping[Source, str | bool] | None = None,
    storage: Mapping[Source, Mapping[str, str]] | None = None,
    resize: Mapping[Source, Mapping[str, Any]] | None = None,
    image_format: ImageFormat = "uint8_hwc",
    progress: bool = True,
    lazy: bool = False,
    client: Any = None,
) -> LeRobotZarrMixture:
    """Open several datasets as one mixture, each sampled with a weight.

    Args:
        sources: ``{source: weight}`` (any source :func:`~lerobot_zarr.open_dataset` takes: Hub repo id, LeRobot
            folder or store), or a list of sources with ``weights=``. Weights are normalized.
        weights: with a list of sources: their weights, ``"frames"`` (in proportion to each dataset's selected
            frames) or ``"equal"`` (the default for a list).
        delta_timestamps: ``{feature: [seconds, ...]}`` in the mixture's names (after ``rename``), as in
            LeRobotDataset; each dataset gets the windows of the features it has.
        rename: per source, ``{its feature name: the mixture's name}``.
        features: ``"intersection"`` (default, as LeRobot's ``MultiLeRobotDataset``): the features every dataset
            has, the others left out with a warning (``mix.left_out``); ``"union"``: all of them, a dataset that
            lacks one giving zeros and ``<key>_is_pad`` True.
        pad_to: ``{feature: width}``: vectors of different widths zero-padded to ``width``, with a
            ``<key>_dim_is_pad`` mask (without it, different widths are an error naming the datasets).
        episodes, root, storage, resize: per source, ``{source: value}``, as ``open_dataset`` takes them.
        revision, token: one value for every source, or ``{source: value}``.
        image_format, progress, lazy, client: as ``open_dataset`` takes them, for every source.
    """
    if isinstance(sources, Mapping):
        if weights is not None:
            raise ArgumentError("give weights either as the values of {source: weight} or as weights=, not both")
        names = [_key(s) for s in sources]
        given: Any = [w for w in sources.values()]
    elif isinstance(sources, (str, bytes, os.PathLike)) or not isinstance(sources, Sequence):
        raise ArgumentError(f"sources must be {{source: weight}} or a list of sources, got {sources!r:.80}")
    else:
        names = [_key(s) for s in sources]
        given = "equal" if weights is None else weights
    if not names:
        raise ArgumentError("a mixture needs at least one source")
    _check_distinct(names, [os.path.realpath(n) if os.path.exists(n) else n for n in names], "the same folder")
    if features not in ("intersection", "union"):
        raise ArgumentError(f"features must be 'intersection' or 'union', got {features!r}")
    if isinstance(given, str) and given not in ("frames", "equal"):
        raise ArgumentError(f"weights must be numbers, 'frames' or 'equal', got {given!r}")
    if not isinstance(given, str):
        given = _check_weights(given, names)
    if given != "frames":  # before any dataset opens (opening one may transcode it)
        check_weights([1.0] * len(names) if given == "equal" else given, names)
    renames = _per_source("rename", rename, names)
    for name, mapping in renames.items():
        if not isinstance(mapping, Mapping) or not all(isinstance(a, str) and isinstance(b, str)
                                                       for a, b in mapping.items()):
            raise ArgumentError(f"rename[{name!r}] must be {{its feature name: the mixture's name}}, got "
                                f"{mapping!r:.80}")
    options = {option: _per_source(option, value, names) for option, value in
               (("episodes", episodes), ("root", root), ("storage", storage), ("resize", resize))}
    options["revision"] = _per_source("revision", revision, names, shared=(str,))
    options["token"] = _per_source("token", token, names, shared=(str, bool))
    datasets: list[LeRobotZarrDataset] = []
    try:
        for name in names:
            datasets.append(_open_one(name, renames.get(name, {}), delta_timestamps, image_format=image_format,
                                      progress=progress, lazy=lazy, client=client,
                                      **{option: per[name] for option, per in options.items() if name in per}))
        _check_distinct(names, [ds.location for ds in datasets], "the same store")
        _check_windows(delta_timestamps, names, datasets, renames, features)
        if isinstance(given, str):
            given = frame_weights([len(ds) for ds in datasets]) if given == "frames" else [1.0] * len(datasets)
        return LeRobotZarrMixture(datasets, sources=names, weights=np.asarray(given, dtype=np.float64) / sum(given),
                                  rename=renames, features=features, pad_to=pad_to, delta_timestamps=delta_timestamps)
    except BaseException:
        for ds in datasets:
            ds.close()
        raise


def _check_distinct(names: list[str], places: list[str], what: str) -> None:
    """Each source once: two spellings of one folder or store (``A`` and ``A/``, a link to it, a repo id and its
    store) would sample it twice, at twice its weight."""
    first: dict[str, str] = {}
    for name, place in zip(names, places):
        if place in first and first[place] == name:
            raise ArgumentError(f"source {name!r} is given more than once")
        if place in first:
            raise ArgumentError(f"sources {first[place]!r} and {name!r} are {what} ({place}): a mixture samples each "
                                f"source once; give it once, with its weight (select episodes of it with episodes=)")
        first[place] = name


def _check_weights(given: Sequence[Any], names: list[str]) -> list[float]:
    if isinstance(given, (str, bytes)) or not isinstance(given, (Sequence, np.ndarray)) or len(given) != len(names):
        raise ArgumentError(f"weights must be one number per source ({len(names)}), got {given!r:.80}")
    out = []
    for name, w in zip(names, given):
        try:
            value = float(w)
        except (TypeError, ValueError):
            raise ArgumentError(f"the weight of {name!r} must be a number, got {w!r:.40}") from None
        if isinstance(w, (bool, np.bool_)) or not np.isfinite(value) or value < 0:
            raise ArgumentError(f"the weight of {name!r} must be a finite number >= 0, got {w!r}")
        out.append(value)
    if sum(out) <= 0:
        raise ArgumentError(f"the weights {out} sum to 0: at least one must be positive")
    return out


def _open_one(name: str, mapping: Mapping[str, str], delta_timestamps: Mapping[str, Sequence[float]] | None,
              **options: Any) -> LeRobotZarrDataset:
    """Open one source (transcoding what it lacks), then reopen its store with its share of the windows: the
    mixture's ``delta_timestamps`` in its own feature names."""
    with warnings.catch_warnings():  # the second open says it
        warnings.simplefilter("ignore", LeRobotZarrWarning)
        first = open_dataset(name, **options)
    try:
        own = list(first.array_specs)
        for src, target in mapping.items():
            if src not in own:
                raise ArgumentError(f"rename[{name!r}]: {src!r} is not a feature of its samples ({own})", feature=src)
            if target != src and target in own and target not in mapping:
                raise ArgumentError(f"rename[{name!r}]: {src!r} -> {target!r}, but it has a feature {target!r} "
                                    f"already (rename that one too)", feature=target)
        targets = [mapping.get(n, n) for n in own]
        if len(set(targets)) != len(targets):
            twice = sorted({t for t in targets if targets.count(t) > 1})
            raise ArgumentError(f"rename[{name!r}] gives two of its features the name {twice[0]!r}", feature=twice[0])
        back = {mapping.get(n, n): n for n in own}
        deltas = None if delta_timestamps is None else {back[f]: d for f, d in delta_timestamps.items() if f in back}
        return first.with_windows(deltas)
    finally:
        first.close()


def _check_windows(delta_timestamps: Mapping[str, Sequence[float]] | None, names: list[str],
                   datasets: list[LeRobotZarrDataset], renames: Mapping[str, Mapping[str, str]],
                   mode: FeatureMode) -> None:
    """Every windowed feature is one of the mixture's: in some dataset, and in every one for an intersection."""
    if delta_timestamps is None:
        return
    if not isinstance(delta_timestamps, Mapping):
        raise DeltaTimestampsError(f"delta_timestamps must be a mapping {{feature: [seconds, ...]}}, got "
                                   f"{type(delta_timestamps).__name__}")
    held = [{renames.get(n, {}).get(f, f) for f in ds.array_specs} for n, ds in zip(names, datasets)]
    for f in delta_timestamps:
        lacking = [n for n, h in zip(names, held) if f not in h]
        if len(lacking) == len(names):
            known = sorted(set().union(*held))
            raise DeltaTimestampsError(f"delta_timestamps: {f!r} is not a feature of any dataset of the mixture "
                                       f"(features, after rename=: {known})", feature=str(f))
        if lacking and mode == "intersection":
            raise DeltaTimestampsError(f"delta_timestamps: {f!r} is not in {lacking}, so the mixture's features "
                                       f"(those every dataset has) leave it out; rename= their feature to it, or "
                                       f"features='union'", feature=str(f))
