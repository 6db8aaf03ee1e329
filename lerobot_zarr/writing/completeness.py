"""Whether a writer can take a store: every episode held, and every video camera decoded (or PyAV there to decode
it), since each commit says every feature of every episode is in the store."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..cameras.video import have_pyav, pyav_missing
from ..errors import NotMaterializedError
from ..store.state import StoreState

__all__ = ["undecoded_cameras", "undecoded_error", "check_complete"]


def undecoded_cameras(state: StoreState) -> dict[str, list[int]]:
    """Video cameras of a store (not kept as mp4) with episodes not decoded yet -> those episodes (an episode with
    no video is unavailable, so not among them): what a writer decodes first, which needs PyAV."""
    return {name: np.flatnonzero(~state.done_mask(name)).tolist() for name, spec in state.arrays.items()
            if spec.kind == "video" and spec.storage != "mp4" and not state.done_mask(name).all()}


def undecoded_error(root: str | os.PathLike, camera: str, episodes: Sequence[int]) -> Exception:
    """What a writer (or an edit's plan) says where PyAV is missing and ``camera`` has ``episodes`` (those that have
    a video) not decoded yet."""
    return pyav_missing(f"{root}: writing to this store (each commit holds every feature of every episode) first "
                        f"decodes camera {camera!r} in episodes {list(episodes)[:10]}"
                        f"{'...' if len(episodes) > 10 else ''}, which", path=root, feature=camera)


def check_complete(state: StoreState) -> None:
    """Refuse a store a commit of this writer could not describe: each commit says every feature of every episode
    is there, so the store must hold every episode, and PyAV is needed to decode cameras not decoded yet."""
    root = state.root
    undecoded = undecoded_cameras(state)
    if undecoded and not have_pyav():
        name, episodes = next(iter(undecoded.items()))
        raise undecoded_error(root, name, episodes)
    missing = np.flatnonzero(~state.complete_episodes())
    if missing.size:
        raise NotMaterializedError(f"{root}: episodes {missing[:20].tolist()} are not in the local store; "
                                   f"open it with every episode before writing to it", path=root,
                                   episode=int(missing[0]))
