"""``open_dataset``: resolve a source to its local store, transcode what is missing, and open it for sampling."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from .dataset import LeRobotZarrDataset
from .errors import NotMaterializedError, SourceNotFoundError
from .source import LeRobotSource, is_lerobot_folder
from .store import has_commit_point, read_state
from .transcode import transcode

__all__ = ["open_dataset", "cache_home", "store_path_for"]

CACHE_ENV = "LEROBOT_ZARR_HOME"


def cache_home() -> Path:
    """Where stores go when no ``root`` is given: ``$LEROBOT_ZARR_HOME``, else ``$HF_HOME/lerobot_zarr``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "lerobot_zarr"


def store_path_for(source: LeRobotSource) -> Path:
    """Cache location of a local source's store, keyed by its path and content fingerprint.

    A source folder whose metadata or data files change gets a new store; two sources never share one.
    """
    record = source.record()
    key = hashlib.sha256(f"{record['path']}\0{record['fingerprint']}".encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", source.files.name) or "dataset"
    return cache_home() / "local" / f"{name}-{key}"


def open_dataset(
    source: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    episodes: Sequence[int] | None = None,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    revision: str | None = None,
    token: str | bool | None = None,
    image_format: str = "uint8_hwc",
    progress: bool = True,
) -> LeRobotZarrDataset:
    """Open a LeRobot dataset folder (transcoding it into a local store on first use) or an existing store.

    Args:
        source: a LeRobot dataset folder (v3.x or v2.x) or a store folder made by this package.
        root: where the store lives; default under :func:`cache_home`, keyed by source.
        episodes: episode indices to use (default all); missing ones are transcoded from a local source.
        delta_timestamps: ``{feature: [seconds, ...]}`` temporal windows, as in LeRobotDataset.
        revision, token: for Hub repositories (not supported for local folders).
        image_format: ``"uint8_hwc"`` (default) or LeRobot's ``"float32_chw"`` in [0, 1].
        progress: show a progress bar while transcoding (also off with HF_HUB_DISABLE_PROGRESS_BARS=1).
    """
    path = Path(source).expanduser()
    if has_commit_point(path):
        if root is not None and Path(root).resolve() != path.resolve():
            raise ValueError(f"{path} is a store already; root={root!r} would be a second copy")
        store = path
        _materialize_from_recorded_source(store, episodes, progress)
    elif is_lerobot_folder(path):
        if revision is not None:
            raise ValueError(f"{path}: revision={revision!r} applies to Hub repositories, not to a local folder")
        src = LeRobotSource(path)
        store = Path(root).expanduser() if root is not None else store_path_for(src)
        transcode(src, store, episodes=episodes, progress=progress)
    elif path.exists():
        raise SourceNotFoundError(f"{path}: neither a LeRobot dataset folder (meta/info.json) nor a lerobot_zarr store")
    else:
        raise SourceNotFoundError(f"{source}: no such folder (Hub repositories are not supported by this version)")
    return LeRobotZarrDataset(store, episodes=episodes, delta_timestamps=delta_timestamps, image_format=image_format)


def _materialize_from_recorded_source(store: Path, episodes: Sequence[int] | None, progress: bool) -> None:
    """Transcode requested episodes a store lacks from the local folder it was made from, if that still exists."""
    state = read_state(store)
    if episodes is None:
        return
    complete = state.complete_episodes()
    missing = sorted({int(e) for e in episodes if 0 <= e < len(complete) and not complete[e]})
    if not missing:
        return
    recorded = state.attrs["source"]
    origin = Path(recorded.get("path", ""))
    if recorded.get("kind") != "local" or not is_lerobot_folder(origin):
        raise NotMaterializedError(f"{store}: episodes {missing[:20]} are not in the store and its source "
                                   f"{recorded.get('path')!r} is not available to transcode them")
    transcode(LeRobotSource(origin), store, episodes=missing, progress=progress)
