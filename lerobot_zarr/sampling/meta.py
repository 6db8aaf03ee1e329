"""What a dataset holds, from its metadata alone (:class:`DatasetMeta`): of a store's committed state, or of a
LeRobot source that has no store yet (``inspect``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cameras.video import have_pyav, pyav_missing
from ..lerobot.format import CAMERA_DTYPES
from ..store.cameras import cameras_needing_pyav, served_episodes
from ..store.state import StoreState

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource

__all__ = ["DatasetMeta"]


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
    def total_episodes(self) -> int:
        return len(self.episode_length)

    @property
    def total_frames(self) -> int:
        return int(self.episode_length.sum())

    @classmethod
    def from_state(cls, state: StoreState) -> DatasetMeta:
        unavailable = {name: state.unavailable_of(name) for name in state.arrays}
        needs_pyav = cameras_needing_pyav(state)
        return cls(root=state.root, info=state.info, tasks=list(state.tasks), stats=state.stats,
                   source=state.source, episode_start=state.episode_start, episode_end=state.episode_end,
                   episode_length=state.episode_length, materialized_episodes=served_episodes(state, needs_pyav),
                   not_materialized=dict(state.not_materialized), stored_features=tuple(state.arrays),
                   unavailable={k: v for k, v in unavailable.items() if v},
                   episode_task_index=state.table.task_index, needs_pyav=needs_pyav)

    @classmethod
    def from_source(cls, source: LeRobotSource) -> DatasetMeta:
        """Metadata of a LeRobot folder or Hub repo that has no store yet (nothing materialized)."""
        t = source.episodes
        stored = tuple(k for k, v in source.features.items()
                       if v.kind in ("numeric", *CAMERA_DTYPES) and k not in source.not_materialized)
        videos = [k for k in stored if source.features[k].kind == "video"]
        needs_pyav = {k: str(pyav_missing()) for k in videos} if videos and not have_pyav() else {}
        return cls(root=source.files.location(), info=source.info, tasks=source.tasks, stats=source.stats,
                   source=source.record(), episode_start=t.start, episode_end=t.end, episode_length=t.length,
                   materialized_episodes=np.zeros(len(t), dtype=bool), not_materialized=source.not_materialized,
                   stored_features=stored, needs_pyav=needs_pyav)

    def __repr__(self) -> str:
        return (f"DatasetMeta(root={str(self.root)!r}, fps={self.fps:g}, robot_type={self.robot_type!r}, "
                f"episodes={self.total_episodes} ({int(self.materialized_episodes.sum())} local), "
                f"frames={self.total_frames}, features={list(self.features)})")
