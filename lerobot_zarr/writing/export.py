"""A store back to LeRobot's v3.0 format: ``to_lerobot`` (a local folder) and ``push`` (a Hub repo, one commit).

The output is what LeRobot writes: data files of bounded size with one row group per episode (vectors as
``fixed_size_list``, images as ``struct<bytes, path>`` PNG), ``meta/info.json``, ``meta/episodes`` with per-episode
stats, ``meta/tasks.parquet`` (task text in a pandas index named ``task``), ``meta/stats.json`` with quantiles and a
dataset card. Bytes are deterministic for the same store, so pushing an unchanged store changes nothing. Alongside,
``meta/lerobot_zarr_index.json`` (:mod:`lerobot_zarr.lerobot.index_file`) gives our readers all the metadata and the
data files' footers in one file. Features the store does not hold (videos) are left out of the export. Cameras
exported as videos are encoded episode by episode and the episodes' mp4s joined without re-encoding, as LeRobot's
recorder makes its files; an episode whose mp4 the background encoder or an earlier export already made
(:mod:`.segments`) is joined as it is, and an episode the export encodes is kept there as its segment (a second push
of an unchanged store encodes nothing).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cameras.depth import Quantizer
from ..cameras.video import DEPTH_ENCODING, ENCODING, pyav_missing
from ..errors import ArgumentError, EmptyStoreError, NotMaterializedError, StoreExistsError, warn_user
from ..lerobot.format import CAMERA_DTYPES, STAT_NAMES, default_features, video_file_rel, video_info
from ..lerobot.index_file import INDEX_FILE, write_index
from ..sampling.dataset import LeRobotZarrDataset
from ..store.tables import ArraySpec
from ..store.text import text_value
from ..utils.progress import progress_bar
from .beside_cache import BesideCache, DataFileRecord, EpisodeRows, episode_keys, linked_file
from .export_videos import write_videos
from .segments import SEGMENTS, encode_in_parallel, lacking_cameras, prune_segments, recorded_encoder, wanted_segments
from .values import stats_of_stored

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["to_lerobot", "export_beside", "BesideCache", "exported_beside", "edited_beside", "check_unedited_beside",
           "info_beside", "push", "check_push", "INDEX_FILE", "EXPORT_MARKER", "LEROBOT_ENTRIES"]

_INFO_KEPT = ("tools",)  # info.json keys of the source an export keeps (lerobot-annotate's tool schemas)
#: the top-level entries of a LeRobot v3.0 folder as LeRobot's recorder leaves it (finalized): what
#: :func:`export_beside` puts beside a store, so no feature of a store it writes beside may have these names
LEROBOT_ENTRIES = ("meta", "data", "videos")
#: which store commit the LeRobot files beside a store are of (:func:`export_beside`), inside ``meta`` so that it
#: comes and goes with them
EXPORT_MARKER = "meta/lerobot_zarr_export.json"
_BESIDE_TMP, _BESIDE_OLD = ".lerobot-export.tmp-", ".lerobot-previous.tmp-"  # debris names (``.*.tmp-*``)
#: held while the files beside a store are moved into place, or its info.json written (a recorder exports in a thread)
_BESIDE_LOCK = threading.Lock()


def _encode_image(frame: np.ndarray) -> bytes:
    """A colour camera's frame as PNG; a depth map's (uint16 millimetres, float32 metres) as LeRobot writes them:
    an uncompressed TIFF keeping its dtype."""
    from PIL import Image

    buf = io.BytesIO()
    image = Image.fromarray(np.ascontiguousarray(frame if frame.shape[-1] != 1 else frame[..., 0]))
    if frame.dtype == np.uint8:
        image.save(buf, format="PNG", compress_level=6)
    else:
        image.save(buf, format="TIFF", compression="raw")
    return buf.getvalue()


def _column(values: np.ndarray, spec: ArraySpec, name: str, e: int) -> pa.Array:
    import pyarrow as pa

    from ..lerobot.writers import language_column, nested_list

    if spec.kind in CAMERA_DTYPES:
        data = pa.array([_encode_image(frame) for frame in values], pa.binary())
        suffix = "png" if spec.dtype == np.uint8 else "tiff"
        paths = pa.array([f"frame-{e:06d}-{i:06d}.{suffix}" for i in range(len(values))], pa.string())
        return pa.StructArray.from_arrays([data, paths], names=["bytes", "path"])
    if spec.kind == "string":
        return pa.array(list(values), pa.string())
    if spec.kind == "language":
        return language_column(name, [text_value("language", text, name) for text in values])
    if values.ndim == 1:
        return pa.array(np.ascontiguousarray(values))
    return nested_list(np.ascontiguousarray(values), fixed=True)


def _reader(dataset: Any) -> LeRobotZarrDataset:
    """The reader of what to export: a dataset, a writable dataset's reader, or a store path opened."""
    if isinstance(dataset, LeRobotZarrDataset):
        return dataset
    reader = getattr(dataset, "reader", None)  # a WritableDataset composes one
    return reader if isinstance(reader, LeRobotZarrDataset) else LeRobotZarrDataset(dataset)


def to_lerobot(dataset: LeRobotZarrDataset | str | os.PathLike, path: str | os.PathLike, *,
               data_files_size_in_mb: int = 100, video_files_size_in_mb: int = 200, videos: bool | None = None,
               progress: bool = True, card: dict[str, Any] | None = None, encoder_threads: int | None = None) -> Path:
    """Export a complete store to a new LeRobot v3.0 folder at ``path`` (written aside, then renamed in place).

    Cameras go out as the source had them (``videos=None``): mp4 videos (AV1, LeRobot's encoding, episodes
    concatenated per file) or PNG image features; ``videos=True`` / ``False`` makes every camera a video / an
    image feature. A camera some episodes lack (missing source videos) is left out, with a warning. A camera
    recorded with encoder settings (``LeRobotDataset.create``'s ``rgb_encoder``...) is encoded with them
    (``encoder_threads``: LeRobot's; None: the one recorded with them). ``card``: the dataset card's fields
    (``lerobot.writers.write_card``)."""
    ds = _reader(dataset)
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise StoreExistsError(f"{path}: exists and is not an empty folder; to_lerobot writes a new dataset")
    _check_exportable(ds)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    except OSError as exc:  # a read-only volume, a full disk: typed, naming the folder
        from ..utils.fileio import disk_error

        raise disk_error(exc, path) from None
    try:
        _write(ds, tmp, data_files_size_in_mb, video_files_size_in_mb, videos, progress, card, encoder_threads)
        if path.exists():
            path.rmdir()
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def export_beside(dataset: LeRobotZarrDataset | str | os.PathLike, *, progress: bool = False,
                  encoder_threads: int | None = None, before_videos: Callable[[], None] | None = None,
                  cache: BesideCache | None = None, encode: bool = True) -> bool:
    """Put the LeRobot v3.0 files of a store's last commit beside it, under its own root (``meta/``, ``data/``,
    ``videos/``, as LeRobot's recorder leaves a folder at ``finalize()``), so that LeRobot's class, its tools and an
    upload of the folder read it as a LeRobot dataset; the store stays what lerobot_zarr opens there. Returns
    whether anything was written: files already of this commit (:data:`EXPORT_MARKER`) are left as they are.

    Made as :func:`to_lerobot` makes a folder (sizes from the store's info; each camera's episodes joined from the
    segments the background encoder or an earlier export made, :mod:`.segments`, else encoded and kept as segments;
    a video file holding one episode is that segment hard linked), into a temporary folder under the root, then
    moved into place ``meta/`` last: a reader never sees them half-written, and a process killed on the way leaves
    the previous files or none (no ``meta/info.json``; the leftovers are removed by the next export, and by the
    store's next writer as debris). The caller holds the store's writer lock (a recorder does). ``before_videos``:
    called once the data files are written, before the segments are looked for (a recorder waits there for its
    background encoders, whose last videos are made meanwhile).

    ``cache`` (a recorder's, one per recording): what earlier exports of the same store computed is not computed
    again (each episode's rows and stats; a data file that an earlier export closed and whose episodes are unchanged
    is hard linked from the files beside, and so is a video file it closed, of the same segments), so that exporting
    after each saved episode computes that episode's rows and stats, joins the last (open) video file of each camera
    again and writes the last data file and the metadata again (:mod:`.beside_cache`). ``encode=False``: nothing is
    encoded; if an episode lacks a valid segment (after ``before_videos``), nothing is written (False)."""
    ds = _reader(dataset)
    root = Path(ds.root)
    clash = sorted(set(ds.meta.info["features"]) & set(LEROBOT_ENTRIES))
    if clash:
        raise ArgumentError(f"{root}: feature {clash[0]!r} has the name of a folder of LeRobot's files, which "
                            f"cannot be put beside this store (export it elsewhere: to_lerobot)")
    if exported_beside(ds):
        return False
    check_unedited_beside(root)
    marker = _export_marker(ds.gather_layout()["state"])
    _check_exportable(ds)
    if not encode and before_videos is None and lacking_cameras(ds, encoder_threads):
        return False
    with _BESIDE_LOCK:
        for debris in [*root.glob(f"{_BESIDE_TMP}*"), *root.glob(f"{_BESIDE_OLD}*")]:  # of an export killed
            shutil.rmtree(debris, ignore_errors=True)
        try:
            tmp = Path(tempfile.mkdtemp(prefix=_BESIDE_TMP, dir=root))
        except OSError as exc:
            from ..utils.fileio import disk_error

            raise disk_error(exc, root) from None
    def videos_next() -> None:
        if before_videos is not None:
            before_videos()
        lacking = lacking_cameras(ds, encoder_threads) if encode else []
        if len(lacking) > 1:  # the cameras encoded in parallel (one is by _write, in this process, as for one)
            encode_in_parallel(root, encoder_threads, cameras=lacking)

    try:
        info = ds.meta.info
        if not _write(ds, tmp, int(info.get("data_files_size_in_mb") or 100),
                      int(info.get("video_files_size_in_mb") or 200), None, progress, False, encoder_threads,
                      link=True, before_videos=videos_next, cache=cache, encode=encode):
            return False  # encode=False and a segment is missing or invalid
        (tmp / EXPORT_MARKER).write_text(json.dumps({**marker, "files": _files_signature(tmp)}))
        with _BESIDE_LOCK:
            if not (tmp / "meta/info.json").is_file():  # removed meanwhile (another process's debris sweep)
                raise FileNotFoundError(f"{tmp}: the export's files vanished before they were moved into place; "
                                        f"the files beside the store are left as they were")
            old = Path(tempfile.mkdtemp(prefix=_BESIDE_OLD, dir=root))
            for name in LEROBOT_ENTRIES:  # meta first: from here to the last rename, no info.json (no dataset)
                if (root / name).exists() or (root / name).is_symlink():
                    os.replace(root / name, old / name)
            for name in (*LEROBOT_ENTRIES[1:], LEROBOT_ENTRIES[0]):  # meta last: the dataset appears complete
                if (tmp / name).exists():  # (videos/: none without cameras exported as videos)
                    os.replace(tmp / name, root / name)
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def info_beside(dataset: LeRobotZarrDataset | str | os.PathLike) -> None:
    """While a store is recorded: ``meta/info.json`` beside it as LeRobot's recorder keeps it (written at create and
    at each saved episode, its counts and features as :func:`export_beside` would write them), unless LeRobot files
    of an earlier commit are there (a resumed recording: those stay whole until the next :func:`export_beside`).
    Replaced atomically."""
    from ..lerobot.writers import write_info

    ds = _reader(dataset)
    root = Path(ds.root)
    with _BESIDE_LOCK:  # never while an export of this process moves its files into place
        if exported_state(root) is None and not set(ds.meta.info["features"]) & set(LEROBOT_ENTRIES):
            _info_beside(ds, root, write_info)


def _info_beside(ds: LeRobotZarrDataset, root: Path, write_info: Callable[..., Any]) -> None:
    meta = ds.meta
    tmp = Path(tempfile.mkdtemp(prefix=_BESIDE_TMP, dir=root))
    try:
        write_info(tmp, robot_type=meta.info.get("robot_type"), lengths=meta.episode_length,
                   total_tasks=len(meta.tasks), fps=meta.info["fps"], features=_features(ds, None),
                   data_files_size_in_mb=int(meta.info.get("data_files_size_in_mb") or 100),
                   video_files_size_in_mb=int(meta.info.get("video_files_size_in_mb") or 200),
                   extra={k: meta.info[k] for k in _INFO_KEPT if meta.info.get(k) is not None})
        (root / "meta").mkdir(exist_ok=True)
        os.replace(tmp / "meta/info.json", root / "meta/info.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _export_marker(state: Any) -> dict[str, int]:
    """What :data:`EXPORT_MARKER` says of LeRobot files made from a store's commit ``state``."""
    return {"generation": int(state.generation), "episodes": len(state.table), "frames": int(state.table.length.sum())}


def _files_signature(folder: Path) -> list[list]:
    """LeRobot's files under ``folder`` as they are: each one's path, size and modification time (a LeRobot tool
    that rewrites one in place changes them)."""
    out = []
    for name in LEROBOT_ENTRIES:
        for path in sorted((folder / name).rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if rel != EXPORT_MARKER and path.is_file():
                st = path.stat()
                out.append([rel, st.st_size, st.st_mtime_ns])
    return out


def exported_beside(dataset: LeRobotZarrDataset | Any) -> bool:
    """Whether LeRobot's files beside a store (:func:`export_beside`) are of the commit ``dataset`` reads (a
    dataset, or a store's committed state) and as the export wrote them."""
    state = dataset.gather_layout()["state"] if isinstance(dataset, LeRobotZarrDataset) else dataset
    marker = exported_state(state.root)
    return marker is not None and {k: marker.get(k) for k in ("generation", "episodes", "frames")} == \
        _export_marker(state) and marker.get("files") == _files_signature(Path(state.root))


def check_unedited_beside(root: str | os.PathLike) -> None:
    """Refuse (:class:`StoreExistsError`) to write beside a store whose LeRobot files a LeRobot tool changed since
    they were written: that would undo the change."""
    edited = edited_beside(root)
    if edited:
        raise StoreExistsError(f"{root}: LeRobot's files beside the store were changed since they were written "
                               f"({edited[:3]}{'...' if len(edited) > 3 else ''}: by a LeRobot tool working in "
                               f"place?); writing them again would undo that: move meta/, data/ and videos/ "
                               f"elsewhere first (LeRobot's class reads them there)", path=root)


def edited_beside(root: str | os.PathLike) -> list[str]:
    """LeRobot's files beside the store at ``root`` changed since :func:`export_beside` wrote them (by a LeRobot
    tool working in place: ``modify_tasks``...), added or removed: their paths (empty: none changed)."""
    marker = exported_state(root)
    if marker is None or "files" not in marker:
        return []
    was = {rel: (size, mtime) for rel, size, mtime in marker["files"]}
    now = {rel: (size, mtime) for rel, size, mtime in _files_signature(Path(root))}
    return sorted(rel for rel in was.keys() | now.keys() if was.get(rel) != now.get(rel))


def exported_state(root: str | os.PathLike) -> dict[str, int] | None:
    """Which store commit the LeRobot files beside the store at ``root`` are of (:func:`export_beside`), or None."""
    from ..utils.fileio import load_json, read_bounded

    try:
        doc = load_json(read_bounded(Path(root) / EXPORT_MARKER, 1 << 12, what="export marker"),
                        f"{root}/{EXPORT_MARKER}")
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _check_exportable(ds: LeRobotZarrDataset) -> None:
    """An export holds whole episodes: every one the store lists, or a selection made for it with
    ``ds.select([...])``, renumbered from 0. A dataset opened on some episodes (or a store that lacks some) is not
    published by accident as a smaller dataset."""
    if len(ds.episodes) == 0:
        raise EmptyStoreError(f"{ds.root}: the dataset has no episodes: nothing to export or push", path=ds.root)
    undecoded = [name for name in ds.meta.needs_pyav if name in ds.left_out]
    if undecoded:  # not a property of the data: publishing it without the camera would lose it
        raise pyav_missing(f"{ds.root}: exporting camera {undecoded[0]!r}", path=ds.root, feature=undecoded[0])
    if len(ds) != int(ds.meta.episode_length[ds.episodes].sum()):  # some episodes' frames only
        raise ArgumentError(f"{ds.root}: an export holds whole episodes; this dataset selects frame ranges of some "
                            f"(select whole episodes with ds.select([...]))")
    if not ds.selected_explicitly and len(ds.episodes) < ds.meta.total_episodes:
        missing = np.setdiff1d(np.arange(ds.meta.total_episodes), ds.episodes)
        held = ds.episodes.tolist()
        raise NotMaterializedError(
            f"{ds.root}: this dataset holds {len(held)} of the store's {ds.meta.total_episodes} episodes (lacking "
            f"{missing[:10].tolist()}{'...' if missing.size > 10 else ''}). Fetch them first "
            f"(open_dataset(<its source>) or `lerobot-zarr convert <its source>`) and export them all, or publish "
            f"these as "
            f"a new dataset, renumbered from 0: ds.select({held[:5]}{'...' if len(held) > 5 else ''}) then "
            f"push/to_lerobot (CLI: `lerobot-zarr push STORE REPO_ID --episodes ...`)", path=ds.root,
            episode=int(missing[0]))


def _video_keys(ds: LeRobotZarrDataset, videos: bool | None) -> list[str]:
    """The cameras exported as videos (the others go out as image features). A depth camera keeps its kind
    (making one the other would change its values: LeRobot quantizes depth videos)."""
    specs, depth = ds.array_specs, ds.meta.depth_keys
    return [k for k, spec in specs.items() if spec.kind in CAMERA_DTYPES
            and (spec.kind == "video" if videos is None or k in depth else videos)]


def _features(ds: LeRobotZarrDataset, videos: bool | None) -> dict:
    """The ``features`` of the exported info.json (also what push compares with the remote's before exporting)."""
    info, specs = ds.meta.info, ds.array_specs
    as_video = _video_keys(ds, videos)
    features = {k: dict(v) for k, v in info["features"].items() if k in specs}
    for k, entry in default_features().items():
        features.setdefault(k, entry)
    depth = ds.meta.depth_keys
    for k in (k for k, spec in specs.items() if spec.kind in CAMERA_DTYPES):
        height, width, channels = specs[k].frame_shape
        declared = features.get(k, {})
        chw = list(declared.get("shape") or ()) == [channels, height, width] != [height, width, channels]
        features[k] = {"dtype": "video" if k in as_video else "image",  # the declared axis order: [C, H, W] too
                       "shape": [channels, height, width] if chw else [height, width, channels],
                       "names": declared.get("names") or (["channels", "height", "width"] if chw
                                                          else ["height", "width", "channels"])}
        encoder = recorded_encoder(info["features"].get(k, {})) if k in as_video else None
        if encoder is not None:
            features[k]["info"] = _recorded_video_info(info["features"][k], encoder, height, width, channels,
                                                       info["fps"], k in depth)
        elif k in depth:
            features[k]["info"] = _depth_info(info["features"][k], k in as_video, height, width, info["fps"])
        elif k in as_video and specs[k].storage == "mp4" and not specs[k].resize and "info" in info["features"][k]:
            features[k]["info"] = info["features"][k]["info"]  # the source's files go out as they are
        elif k in as_video:
            features[k]["info"] = video_info(height, width, channels, info["fps"], ENCODING["pix_fmt"])
    return features


def _recorded_video_info(feature: dict, encoder: dict[str, Any], height: int, width: int, channels: int,
                         fps: float, depth: bool) -> dict[str, Any]:
    """A recorded video's ``info`` as LeRobot 0.6.1's recorder writes it (``get_video_info``): the stream's keys,
    then the encoder's fields (``vcodec`` aside), ``is_depth_map`` and a depth camera's unit."""
    from ..cameras.video import codec_name

    out = video_info(height, width, 1 if depth else channels, fps, encoder["pix_fmt"])
    out.pop("video.is_depth_map")
    out["video.codec"] = codec_name(encoder["vcodec"])
    out.update({f"video.{k}": v for k, v in encoder.items() if k != "vcodec" and f"video.{k}" not in out})
    out["is_depth_map"] = depth
    unit = (feature.get("info") or {}).get("depth_unit")
    if depth and unit is not None:
        out["depth_unit"] = unit
    return out


def _depth_info(feature: dict, video: bool, height: int, width: int, fps: float) -> dict:
    """A depth camera's ``info`` as LeRobot writes it: ``is_depth_map`` and the unit it was recorded in; for a video
    its stream's keys (HEVC, gray12le) and the quantizer its codes were made with (the store keeps the codes)."""
    recorded = feature.get("info") or {}
    out: dict[str, Any] = {}
    if video:
        out.update(video_info(height, width, 1, fps, DEPTH_ENCODING["pix_fmt"]))
        out.pop("video.is_depth_map")
        out.update({"video.codec": DEPTH_ENCODING["vcodec"], "video.g": DEPTH_ENCODING["g"],
                    "video.crf": DEPTH_ENCODING["crf"], "video.extra_options": DEPTH_ENCODING["extra_options"],
                    **Quantizer.of(recorded).info()})
    out["is_depth_map"] = True
    if recorded.get("depth_unit") is not None:
        out["depth_unit"] = recorded["depth_unit"]
    return out


def _write(ds: LeRobotZarrDataset, root: Path, size_mb: int, video_size_mb: int, videos: bool | None,
           progress: bool, card: dict[str, Any] | bool | None = None, encoder_threads: int | None = None,
           link: bool = False, before_videos: Callable[[], None] | None = None, cache: BesideCache | None = None,
           encode: bool = True) -> bool:
    """Every file of the LeRobot v3.0 dataset, one writer each: data files (with the per-episode stats and tasks
    they yield), videos, then the metadata files and our index (``card=False``: no dataset card, as LeRobot's
    recorder leaves a folder; ``link``: a video file of one episode is its segment hard-linked; ``before_videos``:
    called between the data files and the videos; ``cache``: see :func:`export_beside`; ``encode=False``: nothing
    encoded and the store's stale segments kept). Whether the files were written (False: ``encode=False`` and an
    episode lacks a valid segment)."""
    from ..lerobot.writers import write_card, write_episodes_table, write_info, write_stats, write_tasks

    meta = ds.meta
    for name, why in ds.left_out.items():
        if name in meta.not_materialized:
            warn_user(f"{ds.root}: feature {name!r} of the source is not in the store, so not in the export: {why}")
        else:
            warn_user(f"{ds.root}: feature {name!r} is left out of the export: {why}")
    selected = ds.episodes.tolist()  # the store's episodes, exported as 0 .. n_episodes - 1
    lengths = meta.episode_length[selected]
    n_episodes = len(lengths)
    if n_episodes < meta.total_episodes:
        warn_user(f"{ds.root}: exporting {n_episodes} of the store's {meta.total_episodes} episodes "
                  f"({selected[:10]}{'...' if n_episodes > 10 else ''}), renumbered 0..{n_episodes - 1}")
    as_video = _video_keys(ds, videos)
    started = time.time()
    data = _write_data_files(ds, root, selected, as_video, size_mb, progress, cache)
    if before_videos is not None:
        before_videos()
    places = {}
    for k in as_video:
        placed = write_videos(ds, root, k, selected, video_size_mb, progress, encoder_threads, link, cache, encode)
        if placed is None:
            return False
        places[k] = placed
    if as_video and encode:
        _prune_segments(ds, encoder_threads, started)
    write_episodes_table(root, tasks=data.tasks, lengths=lengths, data_files=(data.chunk, data.file),
                         videos={k: tuple(zip(*p, strict=True)) for k, p in places.items()}, stats=data.stats)
    write_tasks(root, meta.tasks)
    stats = write_stats(root, data.stats)
    info = write_info(root, robot_type=meta.info.get("robot_type"), lengths=lengths, total_tasks=len(meta.tasks),
                      fps=meta.info["fps"], features=_features(ds, videos), data_files_size_in_mb=size_mb,
                      video_files_size_in_mb=video_size_mb,
                      extra={k: meta.info[k] for k in _INFO_KEPT if meta.info.get(k) is not None})
    if card is not False:
        write_card(root, info, card)
    write_index(root, info=info, tasks=list(meta.tasks), stats=stats, length=lengths.tolist(),
                data_file=data.rel, file_row=data.file_row, episode_tasks=data.tasks,
                videos={k: [(video_file_rel(k, *p[:2]), p[2]) for p in ps] for k, ps in places.items()})
    return True


@dataclass
class _DataWritten:
    """Per exported episode: where its frames went, its tasks (first seen first) and, per feature, its stats."""

    chunk: list[int] = field(default_factory=list)
    file: list[int] = field(default_factory=list)
    rel: list[str] = field(default_factory=list)
    file_row: list[int] = field(default_factory=list)
    tasks: list[list[str]] = field(default_factory=list)
    stats: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


def _write_data_files(ds: LeRobotZarrDataset, root: Path, selected: list[int], as_video: list[str], size_mb: int,
                      progress: bool, cache: BesideCache | None = None) -> _DataWritten:
    """The data files: episodes appended (one row group each) to a file until it would pass ``size_mb``, estimated
    from the bytes per frame written so far; cameras exported as videos are left out of them. With ``cache``
    (:func:`export_beside`'s, ``root`` a folder beside the store), an episode's rows and stats are taken from it
    where an earlier export made them, and a data file an earlier export closed, of the same episodes, is linked."""

    from ..lerobot.writers import DataFiles, huggingface_metadata

    info, specs, tasks = ds.meta.info, ds.array_specs, ds.meta.tasks
    order = [k for k in info["features"] if k in specs] + [k for k in specs if k not in info["features"]]
    columns = [k for k in order if k not in as_video]
    stats_of = {k: stats_of_stored(specs[k], info["features"].get(k), k) for k in order if not specs[k].is_text}
    lengths = ds.meta.episode_length[selected].tolist()
    starts = np.cumsum([0, *lengths]).tolist()
    keys = episode_keys(ds, selected, starts, columns) if cache is not None else [None] * len(selected)
    out = _DataWritten()
    episode_stats: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in stats_of}
    files = DataFiles(root)
    written: dict[str, DataFileRecord] = {}
    limit = size_mb * 2**20
    full = False  # the current file is one an earlier export closed (linked): the next episode starts a new one

    def placed(e: int, rows: EpisodeRows) -> None:
        chunk, file = files.place
        out.chunk.append(chunk)
        out.file.append(file)
        out.rel.append(files.rel)
        out.file_row.append(files.rows)
        out.tasks.append(rows.tasks)
        for k in stats_of:
            episode_stats[k].append(rows.stats[k])
        written.setdefault(files.rel, DataFileRecord([], False)).keys.append(keys[e])

    with progress_bar(sum(lengths), f"exporting {ds.root.name}", progress) as bar:
        try:
            e = 0
            while e < len(selected):
                src, n = selected[e], lengths[e]
                if full or files.rows == 0 or files.size() + files.size() / files.rows * n > limit:
                    if files.rel in written:
                        written[files.rel].closed = True
                    files.new_file()
                    linked = linked_file(cache, root, files.rel, keys[e:], limit)
                    if linked is not None:
                        for rows in linked:
                            placed(e, rows)
                            files.rows += lengths[e]
                            bar.update(lengths[e])
                            e += 1
                        full = True
                        continue
                    full = False
                rows = cache.rows(keys[e]) if cache is not None else None
                if rows is None or rows.table is None:
                    hints = cache.take_hint(src) if cache is not None else {}
                    rows = _episode_rows(ds, src, e, starts[e], columns, stats_of, tasks, known=rows, hints=hints)
                    if cache is not None:
                        cache.keep(keys[e], rows)
                table = rows.table
                if files.rows == 0:
                    table = table.replace_schema_metadata(
                        {"huggingface": huggingface_metadata(table.schema, "v3.0")})
                placed(e, rows)
                files.add(table)
                bar.update(n)
                e += 1
        finally:
            files.close()
    if cache is not None:
        cache.limit = limit
        for rel, record in written.items():
            record.stamp(root / rel)
        cache.files = written
        cache.drop_hints(selected)  # a hint given after its episode was exported without it
        for record in written.values():  # a closed file is linked by the next exports: its rows are not needed
            for key in record.keys if record.closed else ():
                rows = cache.rows(key)
                if rows is not None:
                    rows.table = None
    out.stats = {k: {name: np.stack([s[name] for s in per_episode]) for name in STAT_NAMES}
                 for k, per_episode in episode_stats.items()}
    return out


def _episode_rows(ds: LeRobotZarrDataset, src: int, e: int, start: int, columns: list[str],
                  stats_of: dict[str, Callable[[np.ndarray], dict]], tasks: Any,
                  known: EpisodeRows | None, hints: Mapping[str, dict[str, np.ndarray]] | None = None
                  ) -> EpisodeRows:
    """Episode ``src`` of the store as exported episode ``e`` (its frames from ``start``): its rows (the columns of
    the data files), stats and tasks (first seen first); ``known``: its stats and tasks computed already;
    ``hints``: some features' stats computed already (a recorder's cameras', :meth:`BesideCache.hint`)."""
    import pyarrow as pa

    specs = ds.array_specs
    n = int(ds.meta.episode_length[src])
    arrays = dict(ds.episode(src))
    arrays["episode_index"] = np.full(n, e, dtype=np.int64)
    arrays["index"] = np.arange(start, start + n, dtype=np.int64)
    table = pa.table({k: _column(np.asarray(arrays[k]), specs[k], k, e) for k in columns})
    if known is not None:
        return EpisodeRows(table, known.stats, known.tasks)
    task_index = np.asarray(arrays["task_index"]).reshape(-1)
    first_seen = task_index[np.sort(np.unique(task_index, return_index=True)[1])]
    stats = {k: (hints or {}).get(k) or stats(np.asarray(arrays[k])) for k, stats in stats_of.items()}
    return EpisodeRows(table, stats, [tasks[t] for t in first_seen.tolist()])


def _prune_segments(ds: LeRobotZarrDataset, threads: int | None, started: float) -> None:
    """Remove the store's segments that neither this export's episodes nor the store's latest commit have (stale:
    of episodes deleted or changed since they were made), leaving those made since ``started`` (a writer's
    newer episodes'). A store this process cannot open or write keeps them."""
    from ..errors import LeRobotZarrError

    if not (Path(ds.root) / SEGMENTS).is_dir():
        return
    try:
        latest = LeRobotZarrDataset(ds.root)
    except (OSError, LeRobotZarrError):
        return
    try:
        keep = wanted_segments(ds, threads) | wanted_segments(latest, threads)
    finally:
        latest.close()
    prune_segments(ds.root, keep, started)


def check_push(dataset: LeRobotZarrDataset | None, repo_id: str, *, revision: str | None = None,
               token: str | bool | None = None, videos: bool | None = None, drop: Sequence[str] = ()) -> None:
    """What :func:`push` checks before exporting, changing nothing anywhere (a missing repo is not created):
    for commands that change a store and then push it (``edit --push``), so that a push bound to fail is refused
    before the store changes. ``dataset``: the data as it will be pushed, less the features in ``drop`` (None:
    check the token and the remote only)."""
    from ..hub.http import parse_repo_id
    from ..hub.publish import Publisher

    parse_repo_id(repo_id)
    publisher = Publisher(repo_id, branch=revision or "main", token=token, progress=False)
    publisher.check(create=False)
    if dataset is not None:
        features = {k: v for k, v in _features(dataset, videos).items() if k not in drop}
        publisher.check_same_dataset({"features": features, "fps": dataset.meta.info["fps"],
                                      "robot_type": dataset.meta.info.get("robot_type")})


def push(dataset: LeRobotZarrDataset | str | os.PathLike, repo_id: str, *, revision: str | None = None,
         private: bool | None = False, token: str | bool | None = None, commit_message: str | None = None,
         videos: bool | None = None, progress: bool = True, card: dict[str, Any] | None = None,
         tag_version: bool = True, videos_pushed: bool = True, allow_patterns: Sequence[str] | str | None = None,
         encoder_threads: int | None = None, data_files_size_in_mb: int = 100,
         video_files_size_in_mb: int = 200) -> str | None:
    """Publish a complete store to a Hub dataset repo as LeRobot v3.0, in one commit, tagged ``v3.0``.

    Before exporting anything: the dataset holds whole episodes, all of the store's or a :meth:`select` of them
    (renumbered from 0), a token with write access is there (``token=``, else the
    login or ``HF_TOKEN``; none: :class:`HubAuthError` at once), the repo exists (else it is created, ``private``)
    and its branch holds nothing or a dataset with the same features, fps and robot type (else
    :class:`SourceMismatchError`). Files identical to the remote ones are not uploaded again; if nothing changed no
    commit is made. ``progress=False`` also hides huggingface_hub's upload bars. An error says what the remote holds
    then; running push again completes a push that failed after its commit (see :mod:`lerobot_zarr.hub.publish`).
    Returns the new commit sha, or None when nothing changed.

    LeRobot's ``push_to_hub`` options: ``card`` (the dataset card's fields), ``tag_version=False`` (tag v3.0 left
    where it is), ``videos_pushed=False`` (no file under ``videos/`` uploaded or removed), ``allow_patterns`` (only
    the files matching them uploaded or removed, as huggingface_hub matches them), ``private=None`` (a new repo
    takes the Hub's default visibility), the sizes of the data and video files (``to_lerobot``'s).
    """
    from ..hub.http import parse_repo_id
    from ..hub.publish import Publisher

    parse_repo_id(repo_id)
    ds = _reader(dataset)
    _check_exportable(ds)
    publisher = Publisher(repo_id, branch=revision or "main", token=token, private=private, progress=progress)
    publisher.check()
    publisher.check_same_dataset({"features": _features(ds, videos), "fps": ds.meta.info["fps"],
                                  "robot_type": ds.meta.info.get("robot_type")})
    with tempfile.TemporaryDirectory(prefix="lerobot_zarr-push-") as tmp:
        out = to_lerobot(ds, Path(tmp) / "dataset", videos=videos, progress=progress, card=card,
                         encoder_threads=encoder_threads, data_files_size_in_mb=data_files_size_in_mb,
                         video_files_size_in_mb=video_files_size_in_mb)
        publisher.check_same_dataset(json.loads((out / "meta/info.json").read_text()))
        return publisher.publish(out, commit_message, tag=tag_version, keep=_kept(videos_pushed, allow_patterns))


def _kept(videos_pushed: bool, allow_patterns: Sequence[str] | str | None) -> Callable[[str], bool] | None:
    """Which of the exported files a push may upload or remove (None: all), as LeRobot's ``push_to_hub`` filters
    them (huggingface_hub's patterns: one ending in "/" matches everything under it)."""
    from fnmatch import fnmatch

    if videos_pushed and allow_patterns is None:
        return None
    patterns = [allow_patterns] if isinstance(allow_patterns, str) else allow_patterns
    if patterns is not None:
        patterns = [p + "*" if p.endswith("/") else p for p in patterns]

    def keep(rel: str) -> bool:
        if not videos_pushed and rel.startswith("videos/"):
            return False
        return patterns is None or any(fnmatch(rel, p) for p in patterns)
    return keep
