"""What a dataset holds, as LeRobot describes it: :class:`DatasetMeta` (info, tasks, stats, the episode table,
which episodes are local, depth cameras and the unit their maps and stats are given in), made from a store's committed
state or from a LeRobot source's metadata alone."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cameras.depth import DEPTH_UNITS, DepthUnit, depth_stats, is_depth_feature
from ..cameras.video import have_pyav, pyav_missing
from ..errors import ArgumentError, warn_once
from ..lerobot.format import CAMERA_DTYPES
from ..store.cameras import cameras_needing_pyav, served_episodes
from ..store.state import StoreState, read_state
from ..store.stats import on_demand_stats

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource

__all__ = ["DatasetMeta", "OnDemandStats"]

_PER_EPISODE = frozenset({"episode_start", "episode_end", "episode_length", "episode_task_index"})
_resolving = threading.Lock()


class OnDemandStats(dict):
    """A store's ``stats.json`` (a dict) whose ``stats_on_demand`` features' entries are computed from the store
    the first time the dict is read (any read: keys, items, ``in``, ``len``, copies, JSON), not when it is opened
    (:func:`~lerobot_zarr.store.stats.on_demand_stats`: what a commit would have recorded)."""

    def __init__(self, stats: dict, state: StoreState):
        super().__init__(stats)
        self._state: StoreState | None = state
        self._lock = threading.Lock()

    def _fill(self) -> None:
        if self._state is not None:
            with self._lock:
                if self._state is not None:
                    dict.update(self, on_demand_stats(self._state))
                    self._state = None

    def __reduce__(self):  # pickled as the dict it is, computed first (a dataset pickles as its arguments)
        return (dict, (dict(self),))


def _filled(method: str):
    base = getattr(dict, method)

    def read(self, *args, **kwargs):
        self._fill()
        return base(self, *args, **kwargs)

    read.__name__ = method
    return read


for _method in ("__getitem__", "get", "__iter__", "keys", "items", "values", "__contains__", "__len__", "copy",
                "__eq__", "__ne__", "__repr__", "__or__", "__ror__", "pop", "popitem", "setdefault", "update",
                "__setitem__", "__delitem__"):
    setattr(OnDemandStats, _method, _filled(_method))


@dataclass(frozen=True, kw_only=True)
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
    stored_features: tuple[str, ...] = ()
    # per stored feature, episodes the source could not give (missing or broken videos) and why
    unavailable: dict[str, dict[int, str]] = field(default_factory=dict)
    episode_task_index: np.ndarray | None = None  # each episode's first task (-1: unknown)
    # video cameras this process cannot serve because PyAV is not installed, with the reason (not the store's)
    needs_pyav: dict[str, str] = field(default_factory=dict)
    depth_unit: DepthUnit = "mm"  # the unit depth maps and their stats are given in
    # made from a store with unresolved episodes (format 5): their entries in the episode_* arrays are the store's
    # placeholders, and reading any of those arrays resolves the store first (its source read, then a commit)
    unresolved: bool = False

    def __getattribute__(self, name: str) -> Any:
        if name in _PER_EPISODE and object.__getattribute__(self, "unresolved"):
            object.__getattribute__(self, "_resolve")()
        return object.__getattribute__(self, name)

    def _resolve(self) -> None:
        """The episode table of the store resolved (:func:`~lerobot_zarr.store.state.read_state`), once."""
        with _resolving:
            if object.__getattribute__(self, "unresolved"):
                state = read_state(object.__getattribute__(self, "root"))
                for name, values in (("episode_start", state.episode_start), ("episode_end", state.episode_end),
                                     ("episode_length", state.episode_length),
                                     ("episode_task_index", state.table.task_index)):
                    object.__setattr__(self, name, values)
                object.__setattr__(self, "unresolved", False)

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
    def camera_keys(self) -> list[str]:
        """Image and video features, as LeRobot names them."""
        return [k for k, v in self.features.items() if v.get("dtype") in CAMERA_DTYPES]

    @property
    def depth_keys(self) -> list[str]:
        """Depth cameras (image or video features whose ``info`` says ``is_depth_map``), as LeRobot names them."""
        return [k for k, v in self.features.items() if _is_depth_camera(v)]

    @property
    def total_episodes(self) -> int:
        return len(self.materialized_episodes)

    @property
    def total_frames(self) -> int:  # (an unresolved row group's placeholders hold its frames: no need to resolve)
        return int(object.__getattribute__(self, "episode_length").sum())

    @classmethod
    def from_state(cls, state: StoreState, depth_unit: DepthUnit = "mm", rows_local: bool = True) -> DatasetMeta:
        """``rows_local``: the store's rows are on this machine (not a bucket's, of which a mirror holds only the
        rows read): the stats of its ``stats_on_demand`` features can be computed from them."""
        unavailable = {name: state.unavailable_of(name) for name in state.arrays}
        needs_pyav = cameras_needing_pyav(state)
        stats = _depth_stats(state.info, state.stats, depth_unit)
        if state.stats_on_demand and not rows_local:
            warn_once(str(state.root), f"{state.root}: the stats of {list(state.stats_on_demand)} are computed from "
                      f"the store's rows when asked; a store read from a bucket holds only the rows read: they are "
                      f"left out of meta.stats (pull_store the store to compute them)")
        elif state.stats_on_demand:
            stats = OnDemandStats(stats, state)
        return cls(root=state.root, info=state.info, tasks=list(state.tasks), stats=stats, depth_unit=depth_unit,
                   source=state.source, episode_start=state.episode_start, episode_end=state.episode_end,
                   episode_length=state.episode_length, materialized_episodes=served_episodes(state, needs_pyav),
                   not_materialized=dict(state.not_materialized), stored_features=tuple(state.arrays),
                   unavailable={k: v for k, v in unavailable.items() if v},
                   episode_task_index=state.table.task_index, needs_pyav=needs_pyav,
                   unresolved=bool(state.unresolved))

    @classmethod
    def from_source(cls, source: LeRobotSource, depth_unit: DepthUnit = "mm") -> DatasetMeta:
        """Metadata of a LeRobot folder or Hub repo that has no store yet (nothing materialized)."""
        t = source.episodes
        stored = tuple(k for k in source.features if k not in source.not_materialized)
        videos = [k for k in stored if source.features[k].kind == "video"]
        needs_pyav = {k: str(pyav_missing()) for k in videos} if videos and not have_pyav() else {}
        return cls(root=source.files.location(), info=source.info, tasks=source.tasks,
                   stats=_depth_stats(source.info, source.stats, depth_unit), depth_unit=depth_unit,
                   source=source.record(), episode_start=t.start, episode_end=t.end, episode_length=t.length,
                   materialized_episodes=np.zeros(len(t), dtype=bool), not_materialized=source.not_materialized,
                   stored_features=stored, needs_pyav=needs_pyav)

    def __repr__(self) -> str:
        return (f"DatasetMeta(root={str(self.root)!r}, fps={self.fps:g}, robot_type={self.robot_type!r}, "
                f"episodes={self.total_episodes} ({int(self.materialized_episodes.sum())} local), "
                f"frames={self.total_frames}, features={list(self.features)})")


def _depth_stats(info: dict, stats: dict, unit: DepthUnit) -> dict:
    """``stats`` with every depth camera's rescaled from its recorded unit to ``unit`` (LeRobot's
    ``rescale_depth_stats``); the same dict when none changes."""
    if unit not in DEPTH_UNITS:
        raise ArgumentError(f"depth_unit must be one of {DEPTH_UNITS}, got {unit!r:.40}")
    features = info.get("features", {})
    changed = {k: depth_stats(stats[k], v.get("info", {}).get("depth_unit") if isinstance(v.get("info"), dict)
                              else None, unit)
               for k, v in features.items() if k in stats and _is_depth_camera(v)}
    return {**stats, **changed} if changed else stats


def _is_depth_camera(feature: Any) -> bool:
    """Whether a ``features`` entry (of a store: untrusted) is a depth camera."""
    return isinstance(feature, dict) and isinstance(feature.get("dtype"), str) and feature["dtype"] in CAMERA_DTYPES \
        and is_depth_feature(feature)
