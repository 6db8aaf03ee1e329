"""``open_dataset``: resolve a source to its local store, transcode what is missing, and open it for sampling."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .errors import ArgumentError, HubError, NotMaterializedError, warn_once
from .hub.files import HubFiles
from .hub.revisions import resolve_revision
from .resolve import resolve_source
from .sampling.dataset import DEPTH_UNITS, DepthUnit, EpisodeSelection, ImageFormat, LeRobotZarrDataset
from .sampling.meta import DatasetMeta
from .sampling.selection import check_selection
from .store.cache import cache_home, hub_store_path, note_use, read_ref, record_ref, store_path_for, variant_path
from .store.cameras import kept_description
from .store.state import has_commit_point, read_state
from .store.tables import DEFAULT_PACK_BYTES
from .writing.camera_choices import CameraStorage, camera_choices_key
from .writing.transcode import fetch_missing, missing_episodes, transcode

if TYPE_CHECKING:
    from .lerobot.source import LeRobotSource

__all__ = ["open_dataset", "inspect", "materialize", "cache_home", "store_path_for", "Mode"]

Mode = Literal["r", "r+"]  # open_dataset: read, or read and write


def _lerobot_source(where: Any) -> LeRobotSource:
    """A LeRobot folder or Hub repo to read: :mod:`~lerobot_zarr.lerobot.source` (and pyarrow) are imported when one is
    read, not with the package (opening a store needs neither)."""
    from .lerobot.source import LeRobotSource

    return LeRobotSource(where)


def open_dataset(
    source: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    episodes: EpisodeSelection | None = None,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    revision: str | None = None,
    token: str | bool | None = None,
    image_format: ImageFormat = "uint8_hwc",
    depth_unit: DepthUnit = "mm",
    progress: bool = True,
    lazy: bool = False,
    mode: Mode = "r",
    storage: Mapping[str, CameraStorage | str] | None = None,
    resize: Mapping[str, Any] | None = None,
    client: Any = None,
    pack_bytes: int = DEFAULT_PACK_BYTES,
) -> LeRobotZarrDataset:
    """Open a LeRobot dataset (folder or Hub repo; transcoded into a local store on first use) or a store.

    Args:
        source: a LeRobot dataset folder (v3.x or v2.x), a store folder made by this package, or a Hub dataset
            repo id ``org/name`` (only the episodes asked for are downloaded, by range reads of their row groups).
        root: where the store lives; default under :func:`cache_home`, keyed by source (and Hub commit).
        episodes: episode indices to use (default all), or ``{episode: slice(first, stop)}`` for frame ranges
            (whole episodes are stored; windows see the whole episode); missing ones are fetched or transcoded.
        delta_timestamps: ``{feature: [seconds, ...]}`` temporal windows, as in LeRobotDataset.
        revision: Hub branch, tag or commit (default: LeRobot's choice, tag ``v3.0``); token: Hub token.
        image_format: ``"uint8_hwc"`` (default) or LeRobot's ``"float32_chw"`` in [0, 1].
        depth_unit: depth cameras (``meta.depth_keys``) come as float32 depth in ``"mm"`` (default, LeRobot's) or
            ``"m"``, dequantized or converted as LeRobot does, and their stats in the same unit
            (:mod:`lerobot_zarr.cameras.depth`). Other features keep their stored dtype.
        progress: show a progress bar while transcoding (also off with HF_HUB_DISABLE_PROGRESS_BARS=1).
        lazy: fetch nothing up front (the store holds the metadata only) and fetch each episode the first time a
            sample touches it, in the process that samples (DataLoader workers use the default Hub credentials,
            not ``token``). Off by default: a training step that hits the network is slow and can fail; offline,
            touching a missing episode raises ``NotMaterializedError`` naming it.
        storage: how a new store keeps each camera, ``{feature: choice}`` (fixed when the store is made; the
            README compares them on real footage): ``"raw"`` (default: memory-mapped frames, fastest, biggest),
            ``"lossless"`` (delta-zstd per frame), ``"compact"`` (zstd per frame), ``"jpeg"`` / ``"jpeg:Q"``
            (lossy, quality Q, default 90; decoded in parallel per batch), ``"mp4"`` (video features: the source's
            mp4 files kept as they are, decoded on read), or any codec of :mod:`lerobot_zarr.cameras.frame_codecs`.
        resize: ``{feature: (height, width)}`` (or ``{"size", "crop", "interpolation"}``): cameras stored resized
            (antialiased bilinear by default, as torchvision's ``Resize``); ``info`` then gives the stored shape.
        client: a ``dask.distributed.Client``: transcode on its workers (split by pack; they write into ``root``,
            which they must see at the same path), committed here. Default: in this process.
        pack_bytes: target size of a new store's packs (consecutive episodes in one chunk file per feature), for
            its widest raw feature; default 32 MiB. Fixed when the store is made.
        mode: ``"r"`` (default) to read, or ``"r+"`` to also write: returns a
            :class:`~lerobot_zarr.writing.writer.WritableDataset` over every episode (all fetched first), holding the
            store's writer lock.
    """
    if mode not in ("r", "r+"):
        raise ArgumentError(f"mode must be 'r' or 'r+', got {mode!r}")
    if depth_unit not in DEPTH_UNITS:
        raise ArgumentError(f"depth_unit must be one of {DEPTH_UNITS}, got {depth_unit!r:.40}")
    episodes = check_selection(episodes)
    if mode == "r+" and (episodes is not None or lazy):
        raise ArgumentError("mode='r+' opens every episode: episodes= and lazy=True do not apply")
    src = resolve_source(source, revision=revision, token=token)
    if src.kind == "store":
        store = src.path
        if root is not None and Path(root).resolve() != store.resolve():
            raise ArgumentError(f"{store} is a store already; root={root!r} would be a second copy")
        if mode == "r+":
            _check_not_shared(store)
            materialize(store, range(len(read_state(store).table)), progress=progress, token=token)
        elif not lazy:
            materialize(store, episodes, progress=progress, token=token)
    elif src.kind == "folder":
        folder = _lerobot_source(src.path)
        if mode == "r+":
            store = _writable_copy(src.path, root, store_path_for(folder))
        else:
            store = Path(root).expanduser() if root is not None else _variant(store_path_for(folder), storage, resize)
        transcode(folder, store, episodes=[] if lazy else episodes, progress=progress, storage=storage, resize=resize,
                  client=client,
                  pack_bytes=pack_bytes)
    else:
        store = _open_hub(src.repo_id, root=root, episodes=[] if lazy else episodes, revision=revision, token=token,
                          progress=progress, storage=storage, resize=resize, client=client, pack_bytes=pack_bytes,
                          writable=mode == "r+")
    if src.kind != "store" and storage is None and resize is None:
        _note_camera_choices(store)
    if mode == "r+":
        from .writing.writer import WritableDataset

        return WritableDataset(store, delta_timestamps=delta_timestamps, image_format=image_format,
                               depth_unit=depth_unit)
    note_use(store)  # `cache ls` says when a store was last read
    return LeRobotZarrDataset(store, episodes=episodes, delta_timestamps=delta_timestamps, image_format=image_format,
                              lazy=lazy, fetch=_fetch if lazy else None, depth_unit=depth_unit)


def _variant(store: Path, storage: Mapping[str, Any] | None, resize: Mapping[str, Any] | None) -> Path:
    """The cache's store of a source for these camera choices: the plain store, or one of its own next to it
    (``<store>+<digest of the choices>``), so that ``storage=``/``resize=`` never change what plain opens read."""
    return variant_path(store, camera_choices_key(storage, resize))


def _note_camera_choices(store: Path) -> None:
    """Warn when a store made earlier keeps a camera with other values than the source's (resized, lossy) and this
    open did not ask for it: its ``storage=``/``resize=`` were chosen by the open that made the store."""
    cached = store.resolve().is_relative_to(cache_home().resolve())
    for name, spec in read_state(store).arrays.items():
        if spec.resize or (spec.storage == "compact" and spec.codec_spec.get("codec") == "jpeg"):
            fix = (f"this cached store was made so by an earlier lerobot_zarr (camera choices now get a store of "
                   f"their own): `lerobot-zarr cache rm {store}` and open again for the source's values" if cached
                   else "pass the same storage=/resize= to open it without this warning, or root= (a new folder) "
                        "for other choices")
            warn_once(str(store), f"{store}: camera {name!r} is stored {kept_description(spec)}, as chosen when this "
                                  f"store was made, so its values differ from the source's; {fix}")


def _check_not_shared(store: Path) -> None:
    """Refuse to write into the cache's store of a Hub repo or folder: every later open of that source reads it."""
    home = cache_home().resolve()
    if store.resolve().is_relative_to(home) and read_state(store).source.get("kind") in ("hub", "local"):
        raise ArgumentError(f"{store}: is the cache's shared store of its source, which every open of that source "
                            f"reads; open the source with mode='r+' and root= (a folder of your own: a copy-on-write "
                            f"copy of this store) to write", path=store)


def _writable_copy(source: str | os.PathLike, root: str | os.PathLike | None, shared: Path) -> Path:
    """The store that ``mode="r+"`` on a folder or Hub repo writes to: never the shared store of the cache (other
    opens of the source read it), but ``root``, started as a copy-on-write copy of the shared store when that one
    holds every episode (its packs are shared by hard links until written), else transcoded there."""
    if root is None:
        raise ArgumentError(f"{source}: mode='r+' on a LeRobot folder or Hub repo writes to a store of its own, "
                            f"so that other opens of the source keep reading the source's data: pass root= (a new "
                            f"folder: it starts as a copy of the cached store, sharing its files until they are "
                            f"written)")
    store = Path(root).expanduser()
    if store.resolve() == shared.resolve():
        raise ArgumentError(f"{store}: is the cache's shared store of {source}; pass another root= to write")
    if not has_commit_point(store) and has_commit_point(shared) and read_state(shared).complete_episodes().all():
        from .writing.writer import fork

        fork(shared, store)
    return store


def _fetch(store: Path, episodes: list[int]) -> None:
    """What a lazy dataset calls (in any process) to bring missing episodes into its store."""
    materialize(store, episodes, progress=False)


def _open_hub(repo_id: str, *, root, episodes, revision, token, progress, storage, resize, client, pack_bytes,
              writable: bool = False) -> Path:
    """Resolve the revision (offline: from the last resolution), then fetch the episodes the store lacks."""
    from huggingface_hub import constants

    if constants.is_offline_mode():  # the commit the revision last resolved to on this machine
        commit = read_ref(repo_id, revision)
        if commit is None:
            raise HubError(f"{repo_id}: HF_HUB_OFFLINE is set and revision {revision or '(default)'} was never "
                           f"opened on this machine")
    else:
        asked = revision
        revision, commit = resolve_revision(repo_id, revision, token=token)
        record_ref(repo_id, asked, commit)
    if writable:
        store = _writable_copy(repo_id, root, hub_store_path(repo_id, commit))
    else:
        store = Path(root).expanduser() if root is not None else _variant(hub_store_path(repo_id, commit), storage,
                                                                           resize)
    if has_commit_point(store):
        missing = missing_episodes(store, episodes)
        if not missing:
            return store
        if constants.is_offline_mode():
            raise NotMaterializedError(f"{store}: HF_HUB_OFFLINE is set and episodes {missing[:20]} are not in the "
                                       f"local store")
    elif constants.is_offline_mode():
        raise HubError(f"{repo_id}: HF_HUB_OFFLINE is set and there is no local store at {store}")
    transcode(_lerobot_source(HubFiles(repo_id, commit, revision=revision, token=token)), store,
              episodes=episodes, progress=progress, storage=storage, resize=resize, client=client,
              pack_bytes=pack_bytes)
    return store


def materialize(store: str | os.PathLike, episodes: EpisodeSelection | None, *, progress: bool = True,
                token: str | bool | None = None) -> None:
    """Fetch or transcode the episodes a store lacks from the source it was made from (Hub repo at its recorded
    commit, or local folder), if that is reachable."""
    episodes = check_selection(episodes)
    if episodes is not None:
        fetch_missing(store, episodes, progress=progress, token=token)


def inspect(source: str | os.PathLike, *, revision: str | None = None,
            token: str | bool | None = None, depth_unit: DepthUnit = "mm") -> DatasetMeta:
    """What a dataset holds, from its metadata alone: features, fps, robot type, episodes and their lengths,
    tasks, stats (depth cameras' in ``depth_unit``), depth cameras (``meta.depth_keys``), features no store can hold
    (``meta.not_materialized``, with why), and in ``meta.unavailable`` the episodes whose camera video file is
    missing. ``source`` is a Hub
    repo id (info.json, the episode table without per-episode stats, tasks and stats.json are read;
    ``meta.source["hub_bytes"]`` gives the bytes of data and videos on the Hub), a LeRobot folder (its metadata
    files) or a store (its root ``zarr.json``). No data file is read. With ``HF_HUB_OFFLINE=1`` a Hub repo's
    metadata comes from the store this machine holds for it (the revision as last resolved here)."""
    src = resolve_source(source, revision=revision, token=token, hub_first=True)
    if src.kind == "store":
        return DatasetMeta.from_state(read_state(src.path), depth_unit)
    if src.kind == "folder":
        lerobot = _lerobot_source(src.path)
        meta = DatasetMeta.from_source(lerobot, depth_unit)
    else:
        from huggingface_hub import constants

        if constants.is_offline_mode():  # the metadata of the store this machine holds for the revision
            commit = read_ref(src.repo_id, revision)
            store = hub_store_path(src.repo_id, commit) if commit is not None else None
            if store is None or not has_commit_point(store):
                raise HubError(f"{src.repo_id}: HF_HUB_OFFLINE is set and revision {revision or '(default)'} was "
                               f"never opened on this machine (no local store holds its metadata)",
                               repo_id=src.repo_id, revision=revision)
            return DatasetMeta.from_state(read_state(store), depth_unit)
        revision, commit = resolve_revision(src.repo_id, revision, token=token)
        files = HubFiles(src.repo_id, commit, revision=revision, token=token)
        lerobot = _lerobot_source(files)
        meta = DatasetMeta.from_source(lerobot, depth_unit)
        meta.source["hub_bytes"] = {top: sum(n for p, n in files.sizes.items() if p.startswith(top + "/"))
                                    for top in ("data", "videos", "meta")}
    exists = functools.cache(lerobot.files.exists)  # one check per file, not per episode
    for name, refs in lerobot.episodes.videos.items():
        reasons = {e: why for e in range(len(refs)) if (why := lerobot.video_missing(e, name, exists)) is not None}
        if reasons:
            meta.unavailable[name] = reasons
    return meta
