"""``open_dataset``: resolve a source to its local store, transcode what is missing, and open it for sampling."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from .errors import ArgumentError, NotMaterializedError, warn_once
from .sampling.dataset import DEPTH_UNITS, DepthUnit, EpisodeSelection, ImageFormat, LeRobotZarrDataset
from .sampling.meta import DatasetMeta
from .sampling.selection import check_selection
from .sources.base import Source
from .sources.cache import note_use
from .sources.home import cache_home, variant_path
from .sources.registry import made_from_source, same_source
from .sources.resolve import resolve_source
from .store.cameras import kept_description
from .store.state import has_commit_point, read_state
from .store.tables import DEFAULT_PACK_BYTES
from .writing.camera_choices import CameraStorage, camera_choices_key
from .writing.transcode import fetch_missing, located_source, missing_episodes, transcode

__all__ = ["open_dataset", "inspect", "materialize", "cache_home", "Mode"]

Mode = Literal["r", "r+"]  # open_dataset: read, or read and write


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
    storage_options: Mapping[str, Any] | None = None,
    cache_bytes: int | None = None,
    doctor: bool = True,
) -> LeRobotZarrDataset:
    """Open a LeRobot dataset (a folder, a Hub repo or a bucket folder; transcoded into a local store on first use)
    or a store (a folder, or a bucket folder: read where it is).

    Args:
        source: a LeRobot dataset folder (v3.x or v2.x), a store folder made by this package, a Hub dataset repo id
            ``org/name`` (only the episodes asked for are downloaded, by range reads of their row groups), or a
            folder of a bucket, ``s3://``, ``gs://``, ``az://bucket/folder`` or ``hf://buckets/ns/bucket/folder``,
            holding either (a store there is not copied: each batch's rows are fetched into a bounded local
            cache; docs/object-storage.md).
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
            (lossy, quality Q, default 90; decoded in parallel per batch), ``"mp4"`` (video features, depth videos
            too: the source's mp4 files kept as they are, decoded on read), or any codec of
            :mod:`lerobot_zarr.cameras.frame_codecs`.
        resize: ``{feature: (height, width)}`` (or ``{"size", "crop", "interpolation"}``): cameras stored resized
            (antialiased bilinear by default, as torchvision's ``Resize``); ``info`` then gives the stored shape.
        client: a ``dask.distributed.Client``: transcode on its workers (split by pack; they write into ``root``,
            which they must see at the same path), committed here. Default: in this process.
        pack_bytes: target size of a new store's packs (consecutive episodes in one chunk file per feature), for
            its widest raw feature; default 32 MiB. Fixed when the store is made.
        doctor: check the data for defects as it is transcoded (:mod:`lerobot_zarr.doctor`; ``ds.defects`` gives
            the report, kept in the store). On by default: it costs a few percent of the transcode.
        mode: ``"r"`` (default) to read, or ``"r+"`` to also write: returns a
            :class:`~lerobot_zarr.writing.writer.WritableDataset` over every episode (all fetched first), holding the
            store's writer lock.
        storage_options: a bucket's client settings (obstore's keys: ``access_key_id``, ``secret_access_key``,
            ``endpoint``, ``region``..., or ``profile``), over those of the environment (``AWS_*``...).
        cache_bytes: a store in a bucket: the most its local cache holds (default
            ``$LEROBOT_ZARR_BUCKET_CACHE_BYTES``, else 8 GiB; for all the processes of the machine reading it).
    """
    if mode not in ("r", "r+"):
        raise ArgumentError(f"mode must be 'r' or 'r+', got {mode!r}")
    if depth_unit not in DEPTH_UNITS:
        raise ArgumentError(f"depth_unit must be one of {DEPTH_UNITS}, got {depth_unit!r:.40}")
    episodes = check_selection(episodes)
    if mode == "r+" and (episodes is not None or lazy):
        raise ArgumentError("mode='r+' opens every episode: episodes= and lazy=True do not apply")
    src = resolve_source(source, revision=revision, token=token, options=storage_options)
    store = src.store()
    if store is not None:  # a store on this machine, opened as it is
        if root is not None and Path(root).resolve() != store.resolve():
            raise ArgumentError(f"{store} is a store already; root={root!r} would be a second copy")
        if mode == "r+":
            _check_not_shared(store)
            materialize(store, range(len(read_state(store).table)), progress=progress, token=token)
        elif not lazy:
            materialize(store, episodes, progress=progress, token=token)
    else:
        remote = src.remote(cache_bytes=cache_bytes)
        if remote is not None:  # a store elsewhere, read where it is
            if mode == "r+" or root is not None:
                raise ArgumentError(f"{src}: a store in a bucket is read where it is (mode='r+' and root= do not "
                                    f"apply); to write, copy it (`lerobot-zarr sync {src} DIR`), open the copy with "
                                    f"mode='r+' and publish it back (ds.push_store)")
            return LeRobotZarrDataset(remote.root, episodes=episodes, delta_timestamps=delta_timestamps,
                                      image_format=image_format, depth_unit=depth_unit, remote=remote)
        store = _from_lerobot(src, root=root, episodes=[] if lazy else episodes, progress=progress,
                              storage=storage, resize=resize, client=client, pack_bytes=pack_bytes,
                              writable=mode == "r+", doctor=doctor)
        if storage is None and resize is None:
            _note_camera_choices(store)
    if mode == "r+":
        from .writing.writer import WritableDataset

        return WritableDataset(store, delta_timestamps=delta_timestamps, image_format=image_format,
                               depth_unit=depth_unit)
    note_use(store)  # `cache ls` says when a store was last read
    return LeRobotZarrDataset(store, episodes=episodes, delta_timestamps=delta_timestamps, image_format=image_format,
                              lazy=lazy, fetch=_fetch if lazy else None, depth_unit=depth_unit)


def _from_lerobot(src: Source, *, root, episodes, progress, storage, resize, client, pack_bytes,
                  writable: bool, doctor: bool = True) -> Path:
    """The local store of a LeRobot dataset: ``root``, or the cache's store of the source (of its camera choices),
    holding the episodes asked for (transcoded now if missing). A store of the source whose identity is known
    without reading its files (a Hub commit) that holds them already is opened without a request."""
    if writable:
        store = _writable_copy(src, root, src.cache_path())
    else:
        store = Path(root).expanduser() if root is not None else _variant(src.cache_path(), storage, resize)
    known = src.known_record()
    if known is not None and has_commit_point(store) and storage is None and resize is None \
            and same_source(read_state(store, resolve=False).source, known) and not missing_episodes(store, episodes):
        return store
    why = src.offline()
    if why:
        if has_commit_point(store):
            missing = missing_episodes(store, episodes)
            raise NotMaterializedError(f"{store}: {why} and episodes {missing[:20]} are not in the local store")
        raise NotMaterializedError(f"{src}: {why} and there is no local store of it at {store}")
    transcode(located_source(src, store, episodes, storage=storage, resize=resize), store, episodes=episodes,
              progress=progress, storage=storage, resize=resize, client=client, pack_bytes=pack_bytes, doctor=doctor)
    return store


def _variant(store: Path, storage: Mapping[str, Any] | None, resize: Mapping[str, Any] | None) -> Path:
    """The cache's store of a source for these camera choices: the plain store, or one of its own next to it
    (``<store>+<digest of the choices>``), so that ``storage=``/``resize=`` never change what plain opens read."""
    return variant_path(store, camera_choices_key(storage, resize))


def _note_camera_choices(store: Path) -> None:
    """Warn when a store made earlier keeps a camera with other values than the source's (resized, lossy) and this
    open did not ask for it: its ``storage=``/``resize=`` were chosen by the open that made the store."""
    cached = store.resolve().is_relative_to(cache_home().resolve())
    for name, spec in read_state(store, resolve=False).arrays.items():
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
    if store.resolve().is_relative_to(home) and made_from_source(read_state(store).source):
        raise ArgumentError(f"{store}: is the cache's shared store of its source, which every open of that source "
                            f"reads; open the source with mode='r+' and root= (a folder of your own: a copy-on-write "
                            f"copy of this store) to write", path=store)


def _writable_copy(source: Source, root: str | os.PathLike | None, shared: Path) -> Path:
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
        from .writing.forks import fork

        fork(shared, store)
    return store


def _fetch(store: Path, episodes: list[int]) -> None:
    """What a lazy dataset calls (in any process) to bring missing episodes into its store."""
    materialize(store, episodes, progress=False)


def materialize(store: str | os.PathLike, episodes: EpisodeSelection | None, *, progress: bool = True,
                token: str | bool | None = None) -> None:
    """Fetch or transcode the episodes a store lacks from the source it was made from (Hub repo at its recorded
    commit, or local folder), if that is reachable."""
    episodes = check_selection(episodes)
    if episodes is not None:
        fetch_missing(store, episodes, progress=progress, token=token)


def inspect(source: str | os.PathLike, *, revision: str | None = None, token: str | bool | None = None,
            storage_options: Mapping[str, Any] | None = None, depth_unit: DepthUnit = "mm") -> DatasetMeta:
    """What a dataset holds, from its metadata alone: features, fps, robot type, episodes and their lengths,
    tasks, stats (depth cameras' in ``depth_unit``), depth cameras (``meta.depth_keys``), features no store can hold
    (``meta.not_materialized``, with why), and in ``meta.unavailable`` the episodes whose camera video file is
    missing. ``source`` is a Hub repo id (info.json, the episode table without per-episode stats, tasks and
    stats.json are read), a bucket folder (the same, or a store's root), a LeRobot folder (its metadata files) or a
    store (its root ``zarr.json``); for a remote source ``meta.source["remote_bytes"]`` gives the bytes of its data,
    videos and metadata. No data file is read. Where the source's files cannot be read now (``HF_HUB_OFFLINE=1``
    for a Hub repo) its metadata comes from the store this machine holds for it (a Hub revision as last resolved
    here)."""
    src = resolve_source(source, revision=revision, token=token, options=storage_options, hub_first=True)
    store = src.store() or src.held_store()
    if store is not None:
        return DatasetMeta.from_state(read_state(store, resolve=False), depth_unit)
    remote = src.remote()
    if remote is not None:
        try:
            return replace(DatasetMeta.from_state(remote.state, depth_unit), root=str(src))
        finally:
            remote.close()
    lerobot = src.dataset()
    meta = DatasetMeta.from_source(lerobot, depth_unit)
    if lerobot.files.sizes:  # listed: a remote source
        files = lerobot.files  # (a bucket lists data/ and videos/ for it)
        meta.source["remote_bytes"] = {top: sum(files.size(rel) for rel in files.list(top))
                                       for top in ("data", "videos", "meta")}
    exists = functools.cache(lerobot.files.exists)  # one check per file, not per episode
    for name, refs in lerobot.episodes.videos.items():
        reasons = {e: why for e in range(len(refs)) if (why := lerobot.video_missing(e, name, exists)) is not None}
        if reasons:
            meta.unavailable[name] = reasons
    return meta
