"""A store back to LeRobot's v3.0 format: ``to_lerobot`` (a local folder) and ``push`` (a Hub repo, one commit).

The output is what LeRobot writes: data files of bounded size with one row group per episode (vectors as
``fixed_size_list``, images as ``struct<bytes, path>`` PNG), ``meta/info.json``, ``meta/episodes`` with per-episode
stats, ``meta/tasks.parquet`` (task text in a pandas index named ``task``), ``meta/stats.json`` with quantiles and a
dataset card. Bytes are deterministic for the same store, so pushing an unchanged store changes nothing. Alongside,
``meta/lerobot_zarr_index.json`` (:mod:`lerobot_zarr.hub_index`) gives our readers all the metadata and the data
files' footers in one file. Features the store does not hold (videos) are left out of the export.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ._progress import progress_bar
from .dataset import LeRobotZarrDataset, forwarded
from .errors import ArgumentError, NotMaterializedError, StoreError
from .hub_index import INDEX_FILE, write_index
from .lerobot_v3 import (
    CHUNKS_SIZE,
    DEFAULT_FEATURES,
    STAT_NAMES,
    V3_DATA_PATH,
    V3_VIDEO_PATH,
    aggregate_stats,
    huggingface_metadata,
    nested_list,
    stats_json,
    write_json,
    write_tasks_parquet,
)
from .lerobot_v3 import (
    episode_stats as lerobot_stats,
)
from .video import ENCODING, VideoWriter

__all__ = ["to_lerobot", "push", "INDEX_FILE"]

_TAG = "v3.0"
_AV1_RATIO = 20  # raw camera bytes per byte of LeRobot's AV1 (crf 30), roughly: sizes video files


def _encode_png(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame if frame.shape[-1] != 1 else frame[..., 0]).save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def _column(values: np.ndarray, kind: str, e: int) -> pa.Array:
    if kind in ("image", "video"):
        data = pa.array([_encode_png(frame) for frame in values], pa.binary())
        paths = pa.array([f"frame-{e:06d}-{i:06d}.png" for i in range(len(values))], pa.string())
        return pa.StructArray.from_arrays([data, paths], names=["bytes", "path"])
    if values.ndim == 1:
        return pa.array(np.ascontiguousarray(values))
    return nested_list(np.ascontiguousarray(values), fixed=True)


def _card(info: dict) -> str:
    return (
        "---\nlicense: apache-2.0\ntask_categories:\n- robotics\ntags:\n- LeRobot\nconfigs:\n- config_name: default\n"
        "  data_files: data/*/*.parquet\n---\n\n"
        "This dataset uses the [LeRobot](https://github.com/huggingface/lerobot) v3.0 format. It was written by "
        "lerobot_zarr from a local store.\n\n## Dataset structure\n\n[meta/info.json](meta/info.json):\n"
        f"```json\n{json.dumps(info, indent=4)}\n```\n"
    )


@forwarded("to_lerobot")
def to_lerobot(dataset: LeRobotZarrDataset | str | os.PathLike, path: str | os.PathLike, *,
               data_files_size_in_mb: int = 100, video_files_size_in_mb: int = 200, videos: bool | None = None,
               progress: bool = True) -> Path:
    """Export a complete store to a new LeRobot v3.0 folder at ``path`` (written aside, then renamed in place).

    Cameras go out as the source had them (``videos=None``): mp4 videos (AV1, LeRobot's encoding, episodes
    concatenated per file) or PNG image features; ``videos=True`` / ``False`` makes every camera a video / an
    image feature. A camera some episodes lack (missing source videos) is left out, with a warning."""
    ds = dataset if isinstance(dataset, LeRobotZarrDataset) else LeRobotZarrDataset(dataset)
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise StoreError(f"{path}: exists and is not an empty folder; to_lerobot writes a new dataset")
    _check_exportable(ds)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        _write(ds, tmp, data_files_size_in_mb, video_files_size_in_mb, videos, progress)
        if path.exists():
            path.rmdir()
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _check_exportable(ds: LeRobotZarrDataset) -> None:
    """An export holds whole episodes: every one the store lists, or a selection made for it with
    ``ds.select([...])``, renumbered from 0. A dataset opened on some episodes (or a store that lacks some) is not
    published by accident as a smaller dataset."""
    if not ds._sel.whole(ds.meta.episode_length):
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


def _features(ds: LeRobotZarrDataset, videos: bool | None) -> dict:
    """The ``features`` of the exported info.json (also what push compares with the remote's before exporting)."""
    info, specs = ds.meta.info, ds.array_specs
    cameras = [k for k, spec in specs.items() if spec.kind in ("image", "video")]
    as_video = [k for k in cameras if (specs[k].kind == "video" if videos is None else videos)]
    features = {k: dict(v) for k, v in info["features"].items() if k in specs}
    for k, dtype in DEFAULT_FEATURES.items():
        features.setdefault(k, {"dtype": dtype, "shape": [1], "names": None})
    for k in cameras:
        height, width, channels = specs[k].frame_shape
        features[k] = {"dtype": "video" if k in as_video else "image", "shape": [height, width, channels],
                       "names": features.get(k, {}).get("names") or ["height", "width", "channels"]}
        if k in as_video and specs[k].storage == "mp4" and not specs[k].resize and "info" in info["features"][k]:
            features[k]["info"] = info["features"][k]["info"]  # the source's files go out as they are
        elif k in as_video:
            features[k]["info"] = {"video.height": height, "video.width": width, "video.codec": "av1",
                                   "video.pix_fmt": ENCODING["pix_fmt"], "video.is_depth_map": False,
                                   "video.fps": info["fps"], "video.channels": channels, "has_audio": False}
    return features


def _write(ds: LeRobotZarrDataset, root: Path, size_mb: int, video_size_mb: int, videos: bool | None,
           progress: bool) -> None:
    meta = ds.meta
    info = meta.info
    specs = ds.array_specs
    for name, why in ds.left_out.items():
        warnings.warn(f"{ds.root}: feature {name!r} is left out of the export: {why}", stacklevel=3)
    cameras = [k for k, spec in specs.items() if spec.kind in ("image", "video")]
    as_video = [k for k in cameras if (specs[k].kind == "video" if videos is None else videos)]
    order = [k for k in info["features"] if k in specs] + [k for k in specs if k not in info["features"]]
    kinds = {k: specs[k].kind for k in order}
    columns_order = [k for k in order if k not in as_video]
    features = _features(ds, videos)

    selected = ds.episodes.tolist()  # the store's episodes, exported as 0 .. n_episodes - 1
    lengths = meta.episode_length[selected]
    n_episodes = len(lengths)
    new_start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    if n_episodes < meta.total_episodes:
        warnings.warn(f"{ds.root}: exporting {n_episodes} of the store's {meta.total_episodes} episodes "
                      f"({selected[:10]}{'...' if n_episodes > 10 else ''}), renumbered 0..{n_episodes - 1}",
                      stacklevel=3)

    episode_rows: list[dict] = []
    episode_stats: dict[str, list[dict[str, np.ndarray]]] = {k: [] for k in order}
    ranges: list[dict] = []
    bar = progress_bar(int(lengths.sum()), f"exporting {ds.root.name}", progress)
    limit = size_mb * 2**20
    number, e = 0, 0
    while e < n_episodes:  # one data file per pass: episodes until the file would pass the size limit
        chunk, file = divmod(number, CHUNKS_SIZE)
        rel = V3_DATA_PATH.format(chunk_index=chunk, file_index=file)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        writer, eps, frames_written = None, [], 0
        while e < n_episodes:
            written = (root / rel).stat().st_size if writer is not None else 0
            if eps and written + written / frames_written * int(lengths[e]) > limit:
                break
            arrays = dict(ds.episode(selected[e]))
            n = int(lengths[e])
            arrays["episode_index"] = np.full(n, e, dtype=np.int64)
            arrays["index"] = np.arange(new_start[e], new_start[e] + n, dtype=np.int64)
            table = pa.table({k: _column(arrays[k], kinds[k], e) for k in columns_order})
            if writer is None:
                schema = table.schema.with_metadata({"huggingface": huggingface_metadata(table.schema, "v3.0")})
                writer = pq.ParquetWriter(root / rel, schema, compression="snappy")
            writer.write_table(table.replace_schema_metadata(schema.metadata), row_group_size=max(len(table), 1))
            task_index = np.asarray(arrays["task_index"]).reshape(-1)
            first_seen = task_index[np.sort(np.unique(task_index, return_index=True)[1])]
            episode_rows.append({"episode_index": e, "tasks": [meta.tasks[t] for t in first_seen.tolist()],
                                 "length": int(lengths[e]), "data/chunk_index": chunk, "data/file_index": file})
            for k in order:
                episode_stats[k].append(lerobot_stats(np.asarray(arrays[k]), kinds[k]))
            bar.update(int(lengths[e]))
            eps.append(e)
            frames_written += int(lengths[e])
            e += 1
        writer.close()
        footer = pq.ParquetFile(root / rel).metadata
        file_row = 0
        for g, ep in enumerate(eps):
            ranges.append({"episode_index": ep, "data_file": rel, "file_row": file_row})
            file_row += footer.row_group(g).num_rows
        number += 1
    bar.close()
    for k in as_video:  # one camera at a time: two live SVT-AV1 encoders in a process have been seen to hang
        if specs[k].storage == "mp4" and not specs[k].resize:  # the source's bytes, unchanged
            _copy_mp4(ds, root, k, selected, episode_rows)
            continue
        out = _VideoFiles(root, k, float(info["fps"]), specs[k].frame_shape, video_size_mb)
        try:
            with progress_bar(int(lengths.sum()), f"encoding {k}", progress) as video_bar:
                for e in range(n_episodes):
                    episode_rows[e][k] = out.add(np.asarray(ds.episode(selected[e], features=[k])[k]))
                    video_bar.update(int(lengths[e]))
        finally:
            out.close()  # also after a failure: an encoder left to the garbage collector can hang in its deinit
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    columns: dict[str, pa.Array] = {
        "episode_index": pa.array(np.arange(n_episodes, dtype=np.int64)),
        "tasks": pa.array([r["tasks"] for r in episode_rows], pa.list_(pa.string())),
        "length": pa.array(lengths.astype(np.int64)),
        "data/chunk_index": pa.array([r["data/chunk_index"] for r in episode_rows], pa.int64()),
        "data/file_index": pa.array([r["data/file_index"] for r in episode_rows], pa.int64()),
        "dataset_from_index": pa.array(starts),
        "dataset_to_index": pa.array(starts + lengths),
    }
    for k in as_video:
        places = [r[k] for r in episode_rows]
        for i, column in enumerate(("chunk_index", "file_index")):
            columns[f"videos/{k}/{column}"] = pa.array([p[i] for p in places], pa.int64())
        for i, column in enumerate(("from_timestamp", "to_timestamp"), start=2):
            columns[f"videos/{k}/{column}"] = pa.array([p[i] for p in places], pa.float64())
    stacked = {k: {name: np.stack([s[name] for s in episode_stats[k]]) for name in STAT_NAMES} for k in order}
    for k, stats in stacked.items():
        for name, values in stats.items():
            columns[f"stats/{k}/{name}"] = nested_list(
                values.astype(np.float64) if values.dtype.kind == "f" else values.astype(np.int64), fixed=False)
    zeros = pa.array(np.zeros(n_episodes, dtype=np.int64))
    columns["meta/episodes/chunk_index"] = zeros
    columns["meta/episodes/file_index"] = zeros
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), root / "meta/episodes/chunk-000/file-000.parquet", compression="snappy")
    write_tasks_parquet(root / "meta/tasks.parquet", list(meta.tasks))
    write_json(root / "meta/stats.json", {k: stats_json(aggregate_stats(s)) for k, s in stacked.items()})
    out_info = {
        "codebase_version": "v3.0",
        "robot_type": info.get("robot_type"),
        "total_episodes": n_episodes,
        "total_frames": int(lengths.sum()),
        "total_tasks": len(meta.tasks),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": size_mb,
        "video_files_size_in_mb": video_size_mb,
        "fps": info["fps"],
        "splits": {"train": f"0:{n_episodes}"},
        "data_path": V3_DATA_PATH,
        "video_path": V3_VIDEO_PATH if as_video else None,
        "features": features,
    }
    write_json(root / "meta/info.json", out_info)
    (root / "README.md").write_text(_card(out_info), encoding="utf-8")
    write_index(root, info=out_info, tasks=list(meta.tasks),
                stats=json.loads((root / "meta/stats.json").read_text()), length=lengths.tolist(),
                data_file=[r["data_file"] for r in ranges], file_row=[r["file_row"] for r in ranges],
                episode_tasks=[r["tasks"] for r in episode_rows],
                videos={k: [(_video_rel(k, *r[k][:2]), r[k][2]) for r in episode_rows] for k in as_video})


def _copy_mp4(ds: LeRobotZarrDataset, root: Path, key: str, selected: list[int], episode_rows: list[dict]) -> None:
    """A camera kept as mp4: the files holding the exported episodes copied unchanged (renumbered as LeRobot's
    ``file-NNN``), each episode at the same seconds of its file."""
    from ._cameras import read_mp4_index

    index = read_mp4_index(ds.root, key, ds.meta.total_episodes)
    numbers: dict[int, int] = {}
    for e, src in enumerate(selected):
        f = int(index["file"][src])
        if f not in numbers:
            numbers[f] = len(numbers)
            target = root / _video_rel(key, *divmod(numbers[f], CHUNKS_SIZE))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ds.root / key / "videos" / index["files"][f], target, follow_symlinks=False)
        chunk, file = divmod(numbers[f], CHUNKS_SIZE)
        episode_rows[e][key] = (chunk, file, float(index["from_timestamp"][src]), float(index["to_timestamp"][src]))


def _video_rel(key: str, chunk: int, file: int) -> str:
    return V3_VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)


class _VideoFiles:
    """One camera's mp4 files: episodes appended to the current file until it is estimated to pass the size
    limit. The estimate (raw frame bytes / ``_AV1_RATIO``) keeps exports byte-deterministic: the encoder's own
    threads make the size of a file still being written vary from run to run."""

    def __init__(self, root: Path, key: str, fps: float, frame_shape: tuple[int, ...], size_mb: int):
        self.root, self.key, self.fps = root, key, fps
        self.height, self.width, self.channels = frame_shape
        self.limit = size_mb * 2**20 * _AV1_RATIO
        self.number = 0
        self.raw = 0
        self.writer: VideoWriter | None = None

    def add(self, frames: np.ndarray) -> tuple[int, int, float, float]:
        """Encode one episode; its ``(chunk_index, file_index, from_timestamp, to_timestamp)``."""
        chunk, file = divmod(self.number, CHUNKS_SIZE)
        if self.writer is None:
            path = self.root / _video_rel(self.key, chunk, file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.path = path
            self.writer = VideoWriter(path, self.fps, self.width, self.height, self.channels)
        start, stop = self.writer.add(frames)
        self.raw += frames.nbytes
        if self.raw >= self.limit:
            self.close()
        return chunk, file, start, stop

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self.number += 1
            self.raw = 0


@forwarded("push")
def push(dataset: LeRobotZarrDataset | str | os.PathLike, repo_id: str, *, revision: str | None = None,
         private: bool = False, token: str | bool | None = None, commit_message: str | None = None,
         videos: bool | None = None, progress: bool = True) -> str | None:
    """Publish a complete store to a Hub dataset repo as LeRobot v3.0, in one commit, tagged ``v3.0``.

    Before exporting anything: the dataset holds whole episodes, all of the store's or a :meth:`select` of them
    (renumbered from 0), a token with write access is there (``token=``, else the
    login or ``HF_TOKEN``; none: :class:`HubAuthError` at once), the repo exists (else it is created, ``private``)
    and its branch holds nothing or a dataset with the same features, fps and robot type (else
    :class:`StoreError`). Files identical to the remote ones are not uploaded again; if nothing changed no commit
    is made. ``progress=False`` also hides huggingface_hub's upload bars. An error says what the remote holds
    then; running push again completes a push that failed after its commit (see :mod:`lerobot_zarr.publish`).
    Returns the new commit sha, or None when nothing changed.
    """
    from .hub import parse_repo_id
    from .publish import Publisher

    parse_repo_id(repo_id)
    ds = dataset if isinstance(dataset, LeRobotZarrDataset) else LeRobotZarrDataset(dataset)
    _check_exportable(ds)
    publisher = Publisher(repo_id, branch=revision or "main", token=token, private=private, progress=progress)
    publisher.check()
    publisher.check_same_dataset({"features": _features(ds, videos), "fps": ds.meta.info["fps"],
                                  "robot_type": ds.meta.info.get("robot_type")})
    with tempfile.TemporaryDirectory(prefix="lerobot_zarr-push-") as tmp:
        out = to_lerobot(ds, Path(tmp) / "dataset", videos=videos, progress=progress)
        publisher.check_same_dataset(json.loads((out / "meta/info.json").read_text()))
        return publisher.publish(out, commit_message)
