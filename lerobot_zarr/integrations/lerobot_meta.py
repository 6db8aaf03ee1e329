"""LeRobot's metadata types for the ``LeRobotDataset`` drop-in: :class:`DatasetInfo` (``meta/info.json`` with
attribute access), :class:`LeRobotDatasetMetadata` (what LeRobot's class of that name exposes for reading: ``info``,
``stats``, ``tasks`` as a pandas DataFrame indexed by task, ``episodes`` as a ``datasets.Dataset``, the key lists and
``get_*`` helpers), built on what a store (or a source's metadata) knows.

pandas and ``datasets`` are imported where a property needs them (``tasks``, ``episodes``): both come with LeRobot,
and with lerobot_zarr's ``lerobot`` extra.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..cameras.depth import depth_stats, is_depth_feature
from ..errors import ArgumentError, CorruptSourceError, SourceNotFoundError, import_optional, warn_user
from ..lerobot.format import CAMERA_DTYPES, LANGUAGE_EVENTS, LANGUAGE_PERSISTENT, V3_VIDEO_PATH

__all__ = ["CODEBASE_VERSION", "DatasetInfo", "LeRobotDatasetMetadata", "episode_tasks", "is_store", "lerobot_home",
           "local_source"]

CODEBASE_VERSION = "v3.0"


def lerobot_home() -> Path:
    """LeRobot's home for local datasets: ``$HF_LEROBOT_HOME``, else ``$HF_HOME/lerobot``."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_LEROBOT_HOME", Path(constants.HF_HOME) / "lerobot")).expanduser()


@dataclasses.dataclass
class DatasetInfo:
    """``meta/info.json`` with attribute access, as LeRobot's ``DatasetInfo``: the same fields and defaults, shapes
    as tuples, ``to_dict()`` for JSON, and the deprecated dict-style access (``info["fps"]``) LeRobot still takes."""

    codebase_version: str
    fps: int
    features: dict[str, dict]
    total_episodes: int = 0
    total_frames: int = 0
    total_tasks: int = 0
    chunks_size: int = 1000
    data_files_size_in_mb: int = 100
    video_files_size_in_mb: int = 200
    data_path: str = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    video_path: str | None = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    robot_type: str | None = None
    splits: dict[str, str] = dataclasses.field(default_factory=dict)
    tools: list[dict] | None = None

    def __post_init__(self) -> None:
        for ft in self.features.values():
            if isinstance(ft.get("shape"), list):
                ft["shape"] = tuple(ft["shape"])
        for name in ("fps", "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def to_dict(self) -> dict:
        """A JSON-ready dict (shapes as lists; ``tools`` only when set)."""
        d = dataclasses.asdict(self)
        for ft in d["features"].values():
            if isinstance(ft.get("shape"), tuple):
                ft["shape"] = list(ft["shape"])
        if d.get("tools") is None:
            d.pop("tools", None)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> DatasetInfo:
        """From info.json's dict (a deep copy); keys LeRobot does not know (v2.x's ``total_videos``...) are
        dropped, as LeRobot drops them."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: copy.deepcopy(v) for k, v in data.items() if k in known})

    def __getitem__(self, key: str) -> Any:
        import warnings

        warnings.warn(f"Accessing DatasetInfo with dict-style syntax info['{key}'] is deprecated. Use attribute "
                      f"access info.{key} instead.", DeprecationWarning, stacklevel=2)
        try:
            return getattr(self, key)
        except AttributeError as err:
            raise KeyError(key) from err

    def __setitem__(self, key: str, value: Any) -> None:
        import warnings

        warnings.warn(f"Setting DatasetInfo with dict-style syntax info['{key}'] = ... is deprecated. Use attribute "
                      f"assignment info.{key} = ... instead.", DeprecationWarning, stacklevel=2)
        if not hasattr(self, key):
            raise KeyError(f"DatasetInfo has no field '{key}'")
        setattr(self, key, value)

    def __contains__(self, key: str) -> bool:
        return hasattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def _stats_as_numpy(stats: dict) -> dict:
    """stats.json's values as LeRobot loads them: every leaf an at-least-1-d numpy array."""
    out: dict = {}
    for key, value in (stats or {}).items():
        out[key] = _stats_as_numpy(value) if isinstance(value, dict) else np.atleast_1d(np.array(value))
    return out


def _episode_rows(table: Any) -> Any:
    """The episode table as LeRobot's ``meta.episodes``: a ``datasets.Dataset`` over it (in memory)."""
    datasets = import_optional("datasets", "LeRobotDataset.meta.episodes (a datasets.Dataset, as LeRobot's)")
    from datasets.table import InMemoryTable

    return datasets.Dataset(InMemoryTable(table))


class LeRobotDatasetMetadata:
    """What LeRobot's ``LeRobotDatasetMetadata`` exposes for reading, for a dataset served by lerobot_zarr.

    Made by the drop-in (``LeRobotDataset(...).meta``), or on its own as LeRobot's is, from metadata alone:
    ``LeRobotDatasetMetadata(repo_id, root=None, revision=None, ...)`` reads ``root`` (a LeRobot folder or a store),
    else ``$HF_LEROBOT_HOME/<repo_id>`` when it holds one, else the Hub repo (its metadata files only). Writing
    (``create``, ``save_episode``...) is LeRobot's recorder's, not provided here.
    """

    def __init__(self, repo_id: str, root: str | os.PathLike | None = None, revision: str | None = None,
                 force_cache_sync: bool = False, metadata_buffer_size: int = 10, *, repo_type: str = "dataset",
                 token: str | bool | None = None):
        from ..lerobot.source import LeRobotSource
        from ..lerobot.source_files import LocalFiles
        from ..sampling.meta import DatasetMeta
        from ..store.state import read_state

        if repo_type != "dataset":
            raise ValueError(f"repo_type must be 'dataset' (lerobot_zarr does not read buckets), got {repo_type!r}")
        where = local_source(repo_id, root, force_cache_sync)
        from ..writing.export import edited_beside, exported_beside

        if where is not None and is_store(where) and not edited_beside(where):  # (else: LeRobot's files as edited)
            state = read_state(where)
            meta, stats, files, tasks = DatasetMeta.from_state(state), state.stats, None, None
            if exported_beside(state):  # a finalized recording: LeRobot's episode table (file locations) from them
                files = LocalFiles(where)
        else:
            if where is not None:
                files = LocalFiles(where)
            else:
                from ..sources import resolve_source
                from ..sources.hub import HUB_PREFIX

                files = resolve_source(HUB_PREFIX + repo_id, revision=revision, token=token).files()
            source = LeRobotSource(files)
            meta, stats, tasks = DatasetMeta.from_source(source), source.stats, source.episodes.tasks
        # stats as recorded (depth in its recorded unit), as LeRobot's: its LeRobotDataset rescales them
        self._setup(meta, repo_id=repo_id, root=Path(root) if root is not None else where, revision=revision,
                    files=files, episode_tasks=None if tasks is None else (lambda: tasks), stats=stats)

    @classmethod
    def of_store(cls, meta: Any, *, repo_id: str, root: Path, revision: str | None, folder: Path | None,
                 episode_tasks: Callable[[], list[list[str]]] | None = None,
                 left_out: Iterable[str] = ()) -> LeRobotDatasetMetadata:
        """The metadata of a dataset a store serves (``meta``: its :class:`~lerobot_zarr.sampling.meta.DatasetMeta`);
        ``folder``: the LeRobot folder it came from, if local (its episode table is read as is);
        ``episode_tasks``: each episode's tasks, when the episode table has to be made from the store. Its stats are
        ``meta``'s (depth in the unit it was opened with, as LeRobot's dataset rescales them). ``left_out``: features
        the items go without (the open warned why; ``ds.left_out`` says it): not listed, so that code building a
        policy's inputs from ``features`` / ``camera_keys`` asks only for what the items hold."""
        from ..lerobot.source_files import LocalFiles

        self = cls.__new__(cls)
        self._setup(meta, repo_id=repo_id, root=root, revision=revision,
                    files=None if folder is None else LocalFiles(folder), episode_tasks=episode_tasks,
                    stats=meta.stats, left_out=frozenset(left_out))
        if folder is not None and is_store(folder):
            self._features_info_beside()
        self._serves_items = True
        return self

    def _features_info_beside(self) -> None:
        """A finalized recording's features as LeRobot's files beside its store describe them: each camera's
        ``info`` (video size, codec, depth quantizer...) as the export wrote it into ``meta/info.json``, which is
        what LeRobot's class reads there."""
        from ..utils.fileio import load_json

        try:
            info = load_json(self._files.read_bytes("meta/info.json"), str(self._files.location("meta/info.json")),
                             error=CorruptSourceError)
            beside = info["features"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warn_user(f"{self.root}: LeRobot's meta/info.json beside the store not read ({exc!s:.200}): the features' "
                      f"info is the store's")
            return
        features = dict(self.info.features)
        for key, ft in features.items():
            theirs = beside.get(key) if isinstance(beside, dict) else None
            if isinstance(theirs, dict) and theirs.get("dtype") == ft.get("dtype") and "info" in theirs:
                features[key] = {**ft, "info": copy.deepcopy(theirs["info"])}
        self.info.features = features

    def _setup(self, meta: Any, *, repo_id: str, root: Path | None, revision: str | None, files: Any,
               episode_tasks: Callable[[], list[list[str]]] | None, stats: dict | None,
               left_out: frozenset[str] = frozenset()) -> None:
        self.repo_id = repo_id
        self.repo_type = "dataset"
        self.revision = revision if revision else CODEBASE_VERSION
        self.root = root if root is not None else Path(str(meta.root))
        self.latest_episode = None
        self._meta = meta
        self._files = files
        self._episode_tasks = episode_tasks
        info = dict(meta.info)
        info["total_episodes"], info["total_frames"] = meta.total_episodes, meta.total_frames
        info["total_tasks"] = len(meta.tasks)
        if "video_path" not in info:  # a store's info: LeRobot's recorder sets it only for video features
            info["video_path"] = (V3_VIDEO_PATH if any(ft.get("dtype") == "video" for ft in info["features"].values())
                                  else None)
        if left_out:
            info["features"] = {k: v for k, v in info["features"].items() if k not in left_out}
        self.info = DatasetInfo.from_dict(info)
        self._stats, self._stats_given = None, stats  # converted when first read (a store's may be computed then)
        self._tasks: Any = None
        self._episodes: Any = None
        self.replaced_task_names: list[str] | None = None  # the task of each task_index once tasks was replaced
        self._serves_items = False  # the metadata of a drop-in (its items come from a store), not read on its own

    # -- LeRobot's properties --------------------------------------------------------------------------------
    @property
    def stats(self) -> dict | None:
        """LeRobot's ``meta.stats`` (every leaf a numpy array); a store's ``stats_on_demand`` features' entries
        are computed the first time they are read (:mod:`lerobot_zarr.store.stats`)."""
        if self._stats_given is not None:
            given, self._stats_given = self._stats_given, None
            self._stats = _stats_as_numpy(given) if given else None
        return self._stats

    @stats.setter
    def stats(self, value: dict | None) -> None:
        self._stats, self._stats_given = value, None

    url_root = property(lambda self: f"hf://datasets/{self.repo_id}")
    data_path = property(lambda self: self.info.data_path)
    video_path = property(lambda self: self.info.video_path)
    robot_type = property(lambda self: self.info.robot_type)
    fps = property(lambda self: self.info.fps)
    features = property(lambda self: self.info.features)
    total_episodes = property(lambda self: self.info.total_episodes)
    total_frames = property(lambda self: self.info.total_frames)
    total_tasks = property(lambda self: self.info.total_tasks)
    chunks_size = property(lambda self: self.info.chunks_size)
    data_files_size_in_mb = property(lambda self: self.info.data_files_size_in_mb)
    video_files_size_in_mb = property(lambda self: self.info.video_files_size_in_mb)

    @property
    def image_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == "image"]

    @property
    def video_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == "video"]

    @property
    def camera_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] in CAMERA_DTYPES]

    @property
    def depth_keys(self) -> list[str]:
        """Depth cameras (``info.is_depth_map``, or the legacy ``video.is_depth_map``), video or image."""
        return [key for key, ft in self.features.items() if is_depth_feature(ft)]

    @property
    def has_language_columns(self) -> bool:
        return any(col in self.features for col in (LANGUAGE_PERSISTENT, LANGUAGE_EVENTS))

    @property
    def names(self) -> dict[str, Any]:
        return {key: ft["names"] for key, ft in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple]:
        return {key: tuple(ft["shape"]) for key, ft in self.features.items()}

    @property
    def tools(self) -> list[dict]:
        """The tool schemas info.json declares, else LeRobot's default (``say``; empty without lerobot)."""
        if self.info.tools:
            return [dict(t) for t in self.info.tools]
        try:
            from lerobot.datasets.language import DEFAULT_TOOLS
        except ImportError:
            return []
        return [dict(t) for t in DEFAULT_TOOLS]

    @property
    def tasks(self) -> Any:
        """A pandas DataFrame indexed by task string (index name ``task``) with a ``task_index`` column, as LeRobot's
        (None for a dataset without tasks)."""
        if self._tasks is None and self._meta.tasks:
            pd = import_optional("pandas", "LeRobotDataset.meta.tasks (a pandas DataFrame, as LeRobot's)")
            self._tasks = pd.DataFrame({"task_index": np.arange(len(self._meta.tasks), dtype=np.int64)},
                                       index=pd.Index(list(self._meta.tasks), name="task"))
        return self._tasks

    @tasks.setter
    def tasks(self, value: Any) -> None:
        """Replace the tasks (LeRobot's tools do, e.g. ``modify_tasks``): items then name their task from it, as
        LeRobot's do (``tasks.iloc[task_index]``)."""
        self._tasks = value
        self.replaced_task_names = None if value is None else [str(t) for t in value.index]

    @property
    def episodes(self) -> Any:
        """LeRobot's episode table without its per-episode stats, as a ``datasets.Dataset``: row ``i`` is a dict,
        a column a list. Read from the dataset's LeRobot files (its local folder; the Hub repo's for metadata read on
        its own); for a dataset the drop-in serves from the Hub or a store, made from what the store knows
        (``episode_index``, ``tasks``, ``length``, ``dataset_from_index``, ``dataset_to_index``: LeRobot's file
        locations would name files that are not here)."""
        if self._episodes is None:
            self._episodes = _episode_rows(self._episode_table())
        return self._episodes

    @episodes.setter
    def episodes(self, value: Any) -> None:
        self._episodes = value

    def _episode_table(self) -> Any:
        import pyarrow as pa

        if self._files is not None:
            rels = sorted(rel for rel in self._files.list("meta/episodes") if rel.endswith(".parquet"))
            if rels:  # LeRobot's own table (v3): its files, in their order
                table = pa.concat_tables([self._files.parquet(rel).read() for rel in rels],
                                         promote_options="permissive")
                return table.select([c for c in table.column_names if not c.startswith("stats/")])
        meta = self._meta
        tasks = (self._episode_tasks() if self._episode_tasks is not None else
                 [[meta.tasks[t]] if t >= 0 else [] for t in meta.episode_task_index.tolist()])
        return pa.table({"episode_index": pa.array(np.arange(meta.total_episodes, dtype=np.int64)),
                         "tasks": pa.array(tasks, type=pa.list_(pa.string())),
                         "length": pa.array(np.asarray(meta.episode_length, dtype=np.int64)),
                         "dataset_from_index": pa.array(np.asarray(meta.episode_start, dtype=np.int64)),
                         "dataset_to_index": pa.array(np.asarray(meta.episode_end, dtype=np.int64))})

    # -- LeRobot's methods -----------------------------------------------------------------------------------
    def get_task_index(self, task: str) -> int | None:
        """The ``task_index`` of a task string (from :attr:`tasks` once replaced), None if there is no such task."""
        if self.replaced_task_names is not None:
            return int(self._tasks.loc[task].task_index) if task in self._tasks.index else None
        tasks = list(self._meta.tasks)
        return tasks.index(task) if task in tasks else None

    def filter_episodes(self, predicate: Callable[[dict], bool], candidates: Sequence[int] | None = None) -> list[int]:
        """The sorted ``episode_index`` of every row of :attr:`episodes` the predicate keeps (among ``candidates``
        when given), as LeRobot's."""
        rows = self.episodes
        chosen = None if candidates is None else {int(e) for e in candidates}
        return sorted(int(row["episode_index"]) for row in rows
                      if (chosen is None or row["episode_index"] in chosen) and predicate(row))

    def get_data_file_path(self, ep_index: int) -> Path:
        """The data file of an episode, relative to ``root`` (a dataset read from a LeRobot folder)."""
        ep = self._episode_row(ep_index, "data/chunk_index")
        return Path(self.data_path.format(chunk_index=ep["data/chunk_index"], file_index=ep["data/file_index"]))

    def get_video_file_path(self, ep_index: int, vid_key: str) -> Path:
        """The video file of an episode's camera, relative to ``root`` (a dataset read from a LeRobot folder)."""
        ep = self._episode_row(ep_index, f"videos/{vid_key}/chunk_index")
        return Path(self.video_path.format(video_key=vid_key, chunk_index=ep[f"videos/{vid_key}/chunk_index"],
                                           file_index=ep[f"videos/{vid_key}/file_index"]))

    def _episode_row(self, ep_index: int, column: str) -> dict:
        rows = self.episodes
        if ep_index >= len(rows):
            raise IndexError(f"Episode index {ep_index} out of range. Episodes: {len(rows)}")
        if column not in rows.column_names:
            raise ArgumentError(f"{self.repo_id}: the episode table has no {column!r}: LeRobot's file locations are "
                                f"known for a dataset read from a LeRobot folder, not from the Hub or a store")
        return rows[ep_index]

    def update_video_info(self, video_key: str | None = None, video_encoder: Any = None,
                          preserve_keys: Iterable[str] | None = None) -> None:
        """LeRobot's: refresh ``info.features[key]["info"]`` of every video camera (or ``video_key``) from the
        streams of its first video file under ``root`` (chunk 0, file 0), ``video_encoder``'s fields (LeRobot's
        ``RGBEncoderConfig`` / ``DepthEncoderConfig`` or a dict of their fields) recorded as ``video.<field>``
        where the streams say nothing, ``is_depth_map`` true for a depth encoder, the keys of ``preserve_keys``
        kept as they are. In memory, as LeRobot's (its ``write_info`` writes it): what LeRobot's tools that
        re-encode a dataset's files in place (``reencode_dataset``) call on a dataset read from a LeRobot folder.

        The items of a drop-in keep serving the frames it read when it was opened (its store): said in a warning;
        a drop-in opened again reads the re-encoded files."""
        from ..cameras.video import stream_info

        if video_key is not None and video_key not in self.video_keys:
            raise ValueError(f"Video key {video_key} not found in dataset")
        if video_encoder is None:
            fields: dict[str, Any] = {}
        elif dataclasses.is_dataclass(video_encoder) and not isinstance(video_encoder, type):
            fields = dataclasses.asdict(video_encoder)
        elif isinstance(video_encoder, dict):
            fields = dict(video_encoder)
        else:
            raise TypeError(f"video_encoder is LeRobot's RGBEncoderConfig / DepthEncoderConfig or a dict of their "
                            f"fields, got {type(video_encoder).__name__}")
        keep = set(preserve_keys or ())
        keys = [video_key] if video_key is not None else self.video_keys
        for key in keys:
            path = Path(self.root) / self.video_path.format(video_key=key, chunk_index=0, file_index=0)
            if not path.is_file():
                raise SourceNotFoundError(f"{path}: no such video file: update_video_info reads the first video of "
                                          f"{key!r} in a LeRobot folder, and {self.root} holds none (a dataset from "
                                          f"the Hub or a store)", path=path, feature=key)
            fresh = stream_info(path)
            for name, value in fields.items():
                if name != "vcodec":  # the stream says which codec
                    fresh.setdefault(f"video.{name}", value)
            fresh["is_depth_map"] = "depth_min" in fields  # LeRobot's rule: a DepthEncoderConfig was given
            merged = {**(self.features[key].get("info") or {}), **{k: v for k, v in fresh.items() if k not in keep}}
            if "video.is_depth_map" in merged:  # LeRobot moves the legacy marker to its key
                merged.setdefault("is_depth_map", merged.pop("video.is_depth_map"))
            self.info.features[key]["info"] = merged
        if self._serves_items and keys:
            warn_user(f"{self.root}: info of {keys} refreshed from the video files; this dataset's items keep the "
                      f"frames it read when it was opened: open it again to read the files as they are now")

    def rescale_depth_stats(self, output_unit: str) -> None:
        """Depth cameras' stats (recorded in ``info.depth_unit``) rescaled in place to ``output_unit``, as LeRobot's
        dataset does when it opens (the drop-in's ``meta.stats`` come rescaled already)."""
        if self.stats is None:
            return
        for key in self.depth_keys:
            if key in self.stats:
                unit = (self.features[key].get("info") or {}).get("depth_unit")
                self.stats[key] = _stats_as_numpy(depth_stats(self.stats[key], unit, output_unit))

    def ensure_readable(self) -> None:
        """(LeRobot's: load metadata a recorder has not loaded; always loaded here.)"""

    def get_chunk_settings(self) -> dict[str, int]:
        return {"chunks_size": self.chunks_size, "data_files_size_in_mb": self.data_files_size_in_mb,
                "video_files_size_in_mb": self.video_files_size_in_mb}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({{\n    Repository ID: '{self.repo_id}',\n    Total episodes: "
                f"'{self.total_episodes}',\n    Total frames: '{self.total_frames}',\n    Features: "
                f"'{list(self.features)}',\n}})',\n")


def episode_tasks(meta: Any) -> list[list[str]]:
    """Each episode's tasks in a store (``meta``: its DatasetMeta), in the order its frames first name them (episodes
    the store does not hold: their first task)."""
    from ..sampling.dataset import LeRobotZarrDataset

    out = []
    with LeRobotZarrDataset(meta.root) as every:
        for e, first in enumerate(meta.episode_task_index.tolist()):
            if meta.materialized_episodes[e]:
                index = np.asarray(every.episode(e, features=["task_index"])["task_index"]).reshape(-1)
                out.append([meta.tasks[t] for t in dict.fromkeys(index.tolist())])
            else:
                out.append([meta.tasks[first]] if first >= 0 else [])
    return out


def is_store(path: Path) -> bool:
    """Whether ``path`` is a lerobot_zarr store (its commit point is there)."""
    from ..store.state import has_commit_point

    return has_commit_point(path)


def local_source(repo_id: str, root: str | os.PathLike | None, force_cache_sync: bool) -> Path | None:
    """Where LeRobot would read ``repo_id`` without the Hub: ``root`` when it holds a LeRobot dataset (or a store),
    else, without ``root``, ``$HF_LEROBOT_HOME/<repo_id>`` when it does (not a legacy Hub mirror, which LeRobot
    downloads again). None: the Hub (always with ``force_cache_sync``, as LeRobot refreshes from it then)."""
    from ..lerobot.source_files import is_lerobot_folder

    if force_cache_sync:
        return None
    if root is not None:
        path = Path(root).expanduser()
        return path if is_lerobot_folder(path) or is_store(path) else None
    path = lerobot_home() / repo_id
    if (path / ".cache" / "huggingface" / "download").exists():
        return None
    return path if is_lerobot_folder(path) or is_store(path) else None
