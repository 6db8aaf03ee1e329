"""The metadata of a LeRobot dataset (codebase v3.x and v2.x), read and checked when a source is opened.

:class:`LeRobotMetadata` knows where LeRobot keeps it (``meta/info.json``; the episode table in
``meta/episodes/*.parquet`` or v2.x's ``meta/episodes.jsonl``; tasks; stats, or v2.x's per-episode stats merged
LeRobot's way), or takes it all from our index file when the source has one. What it checks, so that bad input is
a typed error naming the file (and episode or field): info.json (``fps`` finite and positive, ``chunks_size``,
path templates checked before any formatting: only LeRobot's fields, plain integer specs of bounded width), the
episode table (integer, non-null indices; episodes following each other from frame 0; ``total_episodes`` /
``total_frames`` agreeing), tasks and per-episode stats; every path from metadata stays inside the dataset folder.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..cameras.depth import Quantizer, is_depth_feature
from ..errors import (
    ArgumentError,
    CorruptSourceError,
    LeRobotZarrError,
    SchemaMismatchError,
    SourceNotFoundError,
)
from ..utils.fileio import load_json
from .data_windows import data_ahead
from .format import (
    CAMERA_DTYPES,
    DEFAULT_FEATURES,
    NUMERIC_DTYPES,
    STAT_NAMES,
    TEXT_DTYPES,
    V3_DATA_PATH,
    V3_VIDEO_PATH,
    V21_DATA_PATH,
    V21_VIDEO_PATH,
    check_path_template,
    merge_episode_stats,
)
from .source_files import SourceFiles, safe_relpath
from .table_columns import float_column, int_column, task_lists
from .table_footer import column_ranges, file_last_row, file_pair_bounds, footer_table, frame_bounds, unresolved_groups

__all__ = ["LOCATE_MOST", "FeatureSpec", "KnownEpisodes", "LeRobotMetadata", "SourceEpisodes", "column_ranges",
           "open_parquet"]


@dataclass(frozen=True)
class FeatureSpec:
    """One LeRobot feature: its declared dtype and shape, and the per-frame shape stored locally.

    ``kind`` is ``"numeric"``, ``"image"`` (bytes inside the parquet, stored decoded as HWC frames), ``"video"`` (mp4
    files, decoded into the store as HWC frames with PyAV), ``"string"`` (a ``str`` per frame) or ``"language"``
    (LeRobot's language columns: a list of row dicts per frame, stored as JSON text). ``depth``: a depth map
    (``info.is_depth_map``), stored as uint16 (video: LeRobot's 12-bit codes; image: millimetres) or float32 (an
    image in metres, or of unknown unit).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    names: Any = None
    frame_shape: tuple[int, ...] = ()
    depth: bool = False
    depth_unit: str | None = None  # an image depth map's recorded unit (info.depth_unit)

    @property
    def kind(self) -> str:
        if self.dtype in CAMERA_DTYPES or self.dtype in TEXT_DTYPES:
            return self.dtype
        return "numeric"

    @property
    def numpy_dtype(self) -> np.dtype:
        if self.kind in TEXT_DTYPES:
            return np.dtype(object)
        if self.kind in CAMERA_DTYPES:
            if not self.depth:
                return np.dtype("uint8")
            return np.dtype("uint16") if self.kind == "video" or self.depth_unit == "mm" else np.dtype("float32")
        return np.dtype(self.dtype)

    def with_frame_shape(self, frame_shape: tuple[int, ...]) -> FeatureSpec:
        return replace(self, frame_shape=tuple(frame_shape))


# the columns of meta/episodes an open reads (and the videos' chunk_index, file_index and from_timestamp)
_EPISODE_COLUMNS = ("episode_index", "tasks", "length", "data/chunk_index", "data/file_index", "dataset_from_index",
                    "dataset_to_index")
# LeRobot's recorder writes meta/episodes in row groups of this many episodes, each column chunk's statistics taking
# ~140 bytes of the footer (~1.1 KB per episode with 7 features): what sizes the one read of a footer
_TABLE_ROW_GROUP = 10
_FOOTER_BYTES_PER_CHUNK = 192
# the row groups a partial read needs are read as one where less than this lies between them (about what a request
# costs at 1 Gbit/s in CPU time); farther ones in requests of their own, in flight together
_LOCATE_GAP = 64 << 10
# a first open's estimate of a table file's footer (LeRobot's: 25-40 % of the file, the stats columns' statistics)
_FOOTER_SHARE = 0.4
# a first open reads the footer of an episode table file of at least this size (then the row groups it needs), a
# smaller one whole with the other metadata files (its footer and two row groups are about as many bytes)
_FOOTER_FIRST_MIN = 1 << 20
# a partial read of the table for more than 1/LOCATE_MOST of the episodes would read most row groups: it is read whole
LOCATE_MOST = 10

log = logging.getLogger("lerobot_zarr")


@dataclass(frozen=True)
class KnownEpisodes:
    """What a store made from a source already holds of its episode table: every episode's global ``start`` and
    ``length``, and the store's copy of ``info`` (its episode count and features size the footers' reads). With it,
    :class:`LeRobotMetadata` locates only the ``episodes`` asked for (their data file and row, videos, tasks): it
    reads the footer of each table file (one request sized from ``info``) and then only the columns it needs of the
    row groups holding them, not the whole table (LeRobot's per-episode stats columns are most of it).

    A store's unresolved episodes (-1 in ``start`` and ``length``, a row group's each) are resolved by the rows
    read (those of the row groups located).

    ``start``, ``length`` and ``info`` None: a first open (no store yet). Every episode's start, length and tasks are
    taken from the footers' statistics where those determine them (a row group of 10 episodes: its frame range, and
    its episodes' lengths when they are all equal, their task when it is one and the same) and from the row groups
    read; the others' row groups are left unresolved (:attr:`SourceEpisodes.unresolved`): reading every episode's
    length would read the whole table (LeRobot writes it between per-episode stats columns)."""

    start: np.ndarray | None
    length: np.ndarray | None
    episodes: tuple[int, ...]
    info: dict | None

    @classmethod
    def first_open(cls, episodes: Sequence[int]) -> KnownEpisodes:
        return cls(None, None, tuple(sorted({int(e) for e in episodes})), None)


@dataclass(frozen=True)
class SourceEpisodes:
    """LeRobot's episodes (``meta/episodes``) in ``episode_index`` order: global frame range ``[start, end)``, the
    data file and row holding them, their videos (the store's own table is :class:`lerobot_zarr.store.EpisodeTable`)."""

    length: np.ndarray  # int64 (E,)
    start: np.ndarray  # int64 (E,), global index of the first frame
    tasks: list[list[str]]
    data_file: list[str]  # path relative to the dataset root
    file_row: np.ndarray  # int64 (E,), row of the episode's first frame inside its data file
    # per video feature and episode: (mp4 path relative to the root, second where the episode starts) or None
    videos: dict[str, list[tuple[str, float] | None]] = field(default_factory=dict)
    # the episodes whose files (data_file, file_row, videos) were read, when only some were (:class:`KnownEpisodes`);
    # None: all
    located: frozenset[int] | None = None
    # start, length and tasks hold every episode's (False: the tasks of the located episodes only, a later open's)
    complete: bool = True
    # located episodes' data files: bounds (low, high) of their rows, from the episode table's footer (where it
    # tells): where an open estimates an episode's rows lie before the file's footer
    file_rows: dict[str, tuple[int, int]] = field(default_factory=dict)
    # row groups of the episode table left unread, whose episodes' start, length and tasks are not known (-1, []):
    # ``(first, stop, frame_first, frame_stop)``, episodes ``[first, stop)`` holding frames ``[frame_first,
    # frame_stop)`` (from the footer's statistics), in order (a first open: :class:`KnownEpisodes`)
    unresolved: tuple[tuple[int, int, int, int], ...] = ()

    @property
    def total_frames(self) -> int:
        """Frames of every episode (those of :attr:`unresolved` row groups from their frame ranges)."""
        known = self.length >= 0
        return int(self.length[known].sum()) + sum(f1 - f0 for _, _, f0, f1 in self.unresolved)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.length

    def check_located(self, episodes: Sequence[int], where: str) -> None:
        """Refuse episodes whose files were not read (a partial read of the episode table)."""
        if self.located is not None:
            missing = sorted({int(e) for e in episodes} - self.located)
            if missing:
                raise ArgumentError(f"{where}: episodes {missing[:10]} were not located (the episode table was read "
                                    f"for episodes {sorted(self.located)[:10]} only)")

    def __len__(self) -> int:
        return len(self.length)


def _read_json(files: SourceFiles, rel: str) -> Any:
    try:
        data = files.read_bytes(rel)
    except FileNotFoundError:
        raise SourceNotFoundError(f"{files.location(rel)}: file not found") from None
    return load_json(data, files.location(rel), error=CorruptSourceError)


def _read_jsonl(files: SourceFiles, rel: str) -> list[dict]:
    try:
        lines = files.read_bytes(rel).decode().splitlines()
    except FileNotFoundError:
        raise SourceNotFoundError(f"{files.location(rel)}: file not found") from None
    except UnicodeDecodeError as exc:
        raise CorruptSourceError(f"{files.location(rel)}: not UTF-8 text ({exc})") from exc
    rows = []
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            row = load_json(line, f"{files.location(rel)}:{lineno}", error=CorruptSourceError)
            if not isinstance(row, dict):
                raise CorruptSourceError(f"{files.location(rel)}:{lineno}: expected a JSON object, got "
                                         f"{type(row).__name__}")
            rows.append(row)
    return rows


def _int(value: Any, where: str, what: str, *, low: int = 0) -> int:
    """A metadata integer (JSON or parquet value): an int >= ``low``, not a bool, float or None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise CorruptSourceError(f"{where}: {what} must be an integer >= {low}, got {value!r:.80}")
    return int(value)


def _parse_fps(info: dict, where: str) -> float:
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)):
        raise CorruptSourceError(f"{where}: 'fps' is missing or not a number (got {fps!r:.80})")
    fps = float(fps)
    if not (math.isfinite(fps) and fps > 0):
        raise CorruptSourceError(f"{where}: fps must be finite and positive, got {fps}")
    return fps


def open_parquet(files: SourceFiles, rel: str) -> pq.ParquetFile:
    try:
        return files.parquet(rel)
    except LeRobotZarrError:  # ours already: a Hub failure (HubError, HubAuthError) is not a corrupt file
        raise
    except FileNotFoundError:
        raise SourceNotFoundError(f"{files.location(rel)}: file not found") from None
    except (pa.ArrowException, OSError) as exc:
        raise CorruptSourceError(f"{files.location(rel)}: not a readable parquet file ({exc})") from exc


def _read_table(files: SourceFiles, rel: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A (small, metadata) parquet file's columns; a file pyarrow cannot read raises CorruptSourceError."""
    pf = open_parquet(files, rel)
    try:
        return pf.read(columns=list(columns) if columns is not None else None)
    except LeRobotZarrError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise CorruptSourceError(f"{files.location(rel)}: cannot read columns {columns} ({exc})") from exc
    finally:
        files.release(rel)


def _parse_features(info: dict, info_path: str) -> tuple[dict[str, FeatureSpec], dict[str, str]]:
    """The features of info.json, and those no store can hold (a dtype LeRobot does not write, a depth map of more
    than one channel or whose quantizer cannot be read) with why: they are left out alone, never the whole
    dataset."""
    raw = info.get("features")
    if not isinstance(raw, dict) or not raw:
        raise CorruptSourceError(f"{info_path}: 'features' is missing or empty")
    specs, refused = {}, {}
    for name, ft in raw.items():
        if not isinstance(ft, dict) or "dtype" not in ft:
            raise CorruptSourceError(f"{info_path}: feature {name!r} has no dtype")
        dtype = ft["dtype"]
        raw_shape = ft.get("shape", (1,))
        if (not isinstance(raw_shape, (list, tuple)) or not raw_shape
                or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in raw_shape)):
            raise CorruptSourceError(f"{info_path}: feature {name!r} has an invalid shape {raw_shape!r}")
        if not isinstance(dtype, str) or dtype not in NUMERIC_DTYPES | CAMERA_DTYPES | TEXT_DTYPES:
            refused[name] = (f"{info_path} gives it dtype {dtype!r:.40}, not one LeRobot 0.6.1 writes (numbers, "
                             f"image, video, string, language)")
            continue
        shape, names = tuple(raw_shape), ft.get("names")
        if dtype in CAMERA_DTYPES and len(shape) == 3 and shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4):
            # LeRobot's RL recordings (gym_manipulator, ReplayBuffer.to_lerobot_dataset) declare cameras channels
            # first; their frames are HWC like any other camera's
            shape = (shape[1], shape[2], shape[0])
            names = [names[1], names[2], names[0]] if isinstance(names, list) and len(names) == 3 else names
        if dtype in CAMERA_DTYPES and (len(shape) != 3 or shape[-1] not in (1, 3, 4)):
            raise SchemaMismatchError(f"{info_path}: {dtype} feature {name!r} must have shape (H, W, C), got {shape}")
        depth = dtype in CAMERA_DTYPES and is_depth_feature(ft)
        unit = (ft.get("info") or {}).get("depth_unit") if depth and isinstance(ft.get("info"), dict) else None
        if depth and shape[-1] != 1 and dtype == "video":
            refused[name] = f"a depth video of {shape[-1]} channels (LeRobot's are (H, W, 1))"
            continue
        # a depth image of 3 or 4 channels: LeRobot's writer records colour frames into it as 8-bit PNG, which its
        # reader serves as colour images; the first image's header says so (LeRobotSource._resolve_image_shapes)
        if depth and dtype == "video":
            try:
                Quantizer.of(ft.get("info"))
            except ValueError as exc:
                refused[name] = f"its depth quantizer cannot be read ({exc})"
                continue
        # a video's frames are what info.json declares (no data file to read them from): fixed now, so that a decode
        # never waits for (nor races) the shapes read from a data file
        specs[name] = FeatureSpec(name, dtype, shape, names, shape if dtype == "video" else (), depth=depth,
                                  depth_unit=unit if unit in ("mm", "m") else None)
    for name, dtype in DEFAULT_FEATURES.items():
        specs.setdefault(name, FeatureSpec(name, dtype, (1,)))
    return specs, refused


class LeRobotMetadata:
    """A LeRobot dataset's metadata, parsed and checked on construction: ``info``, ``major`` (the codebase
    version), ``fps``, ``features``, ``episodes`` (the :class:`SourceEpisodes`), ``tasks`` and ``stats``."""

    def __init__(self, files: SourceFiles, known: KnownEpisodes | None = None):
        self.files = files
        if self._load_index():
            return
        footers = self._footer_estimates(known) if known is not None else {}
        # all at once (a Hub repo: one round trip); the episode tables whole, or the footers of those in ``footers``
        files.prefetch([rel for rel in self._metadata_files() if rel not in footers], footers=footers)
        info_path = files.location("meta/info.json")
        if not files.exists("meta/info.json"):
            raise SourceNotFoundError(f"{files.location()}: not a LeRobot dataset (meta/info.json not found)")
        self.info: dict = _read_json(files, "meta/info.json")
        if not isinstance(self.info, dict):
            raise CorruptSourceError(f"{info_path}: expected a JSON object")
        version = str(self.info.get("codebase_version", ""))
        try:
            self.major = int(version.lstrip("v").split(".")[0])
        except ValueError:
            raise CorruptSourceError(f"{info_path}: unreadable codebase_version {version!r}") from None
        if self.major not in (2, 3):
            raise CorruptSourceError(f"{info_path}: codebase_version {version!r} is not supported (v2.x or v3.x)")
        self.fps = _parse_fps(self.info, info_path)
        self.features, self.refused = _parse_features(self.info, info_path)
        if self.major == 3:
            self.episodes = (footers and self._locate_v3(known)) or self._read_episodes_v3()
            self.tasks = self._read_tasks_v3()
        else:
            self.episodes = self._read_episodes_v2()
            self.tasks = self._read_tasks_v2()
        self.stats = self._read_stats()
        if not len(self.episodes):
            raise SchemaMismatchError(f"{files.location()}: the dataset has no episodes")
        self._check_totals(info_path)

    def _check_totals(self, info_path: str) -> None:
        """info.json's ``total_episodes`` / ``total_frames`` (where given) agree with the episode table: a table cut
        short (a crash while recording, a lost file) is not read as a smaller dataset."""
        for key, actual in (("total_episodes", len(self.episodes)), ("total_frames", self.episodes.total_frames)):
            if key in self.info and self.info[key] is not None:
                declared = _int(self.info[key], info_path, key)
                if declared != actual:
                    raise SchemaMismatchError(f"{info_path}: {key} is {declared}, the episode table "
                                              f"({self.files.location('meta')}) holds {actual}")

    def _metadata_files(self) -> list[str]:
        """The metadata files an open reads (v3.x or, without an episode table in parquet, v2.x)."""
        meta = self.files.list("meta")
        parquet = [rel for rel in meta if rel.startswith("meta/episodes/") and rel.endswith(".parquet")]
        wanted = (["meta/tasks.parquet", *parquet] if parquet
                  else ["meta/episodes.jsonl", "meta/tasks.jsonl"])
        stats = "meta/stats.json" if "meta/stats.json" in meta else "meta/episodes_stats.jsonl"
        return [rel for rel in ("meta/info.json", stats, *wanted) if rel in meta]

    def _load_index(self) -> bool:
        """Take everything from our index file (:mod:`lerobot_zarr.lerobot.index_file`) when the source has one that
        still describes its files: one request then gives the metadata, the episode table and the data files' footers
        (or their exact sizes)."""
        from .index_file import read_index

        files = self.files
        index = read_index(files)
        if index is None:
            return False
        info_path = files.location("meta/info.json")
        self.info, self.major, self.fps = index.info, 3, _parse_fps(index.info, info_path)
        self.features, self.refused = _parse_features(index.info, info_path)
        video_keys = [k for k, v in self.features.items() if v.kind == "video"]
        if sorted(index.videos) != sorted(video_keys):
            raise CorruptSourceError(f"{files.location('meta/lerobot_zarr_index.json')}: gives videos of "
                                     f"{sorted(index.videos)}, info.json declares {video_keys}")
        start = np.concatenate([[0], np.cumsum(index.length)[:-1]]).astype(np.int64)
        self.episodes = SourceEpisodes(index.length, start, index.episode_tasks, index.data_file, index.file_row,
                                       {k: list(refs) for k, refs in index.videos.items()})
        self.tasks, self.stats = index.tasks, index.stats
        for rel, size in index.footer_bytes.items():
            files.seed_footer(rel, index.footers.get(rel), size=size)
        return True

    def _table_files(self) -> list[str]:
        """The episode table's parquet files (v3), in order."""
        files = self.files
        metas = [safe_relpath(files.location(), rel, "episode metadata")
                 for rel in files.list("meta/episodes") if rel.endswith(".parquet")]
        if not metas:
            raise SourceNotFoundError(f"{files.location('meta/episodes')}: no episode metadata parquet files")
        return metas

    @functools.cached_property
    def _video_keys(self) -> list[str]:
        return [k for k, v in self.features.items() if v.kind == "video"]

    @functools.cached_property
    def _table_columns(self) -> list[str]:
        """The columns of the episode table an open reads: ours, then the videos' (by feature)."""
        return [*_EPISODE_COLUMNS, *(f"videos/{k}/{c}" for k in self._video_keys
                                     for c in ("chunk_index", "file_index", "from_timestamp"))]

    def _present(self, rel: str, pf: pq.ParquetFile) -> list[str]:
        """The columns of :attr:`_table_columns` that table file ``rel`` has; those it must have checked."""
        missing = [c for c in _EPISODE_COLUMNS if c not in pf.schema_arrow.names and c != "tasks"]
        if missing:
            raise SchemaMismatchError(f"{self.files.location(rel)}: episode metadata lacks column(s) {missing}")
        return [c for c in self._table_columns if c in pf.schema_arrow.names]

    def _completed(self, table: pa.Table, present: list[str]) -> pa.Table:
        """A table file's columns read, with those it lacks added as nulls: no video columns at all (every
        episode's video is unknown); no tasks (LeRobot's convert_image_to_video_dataset writes none: the episodes'
        tasks are their frames' task_index)."""
        for c in self._table_columns:
            if c not in present:
                kind = (pa.list_(pa.string()) if c == "tasks" else pa.float64() if c.endswith("from_timestamp")
                        else pa.int64())
                table = table.append_column(c, pa.nulls(table.num_rows, kind))
        return table.select(self._table_columns)

    def _concat(self, tables: list[pa.Table]) -> pa.Table:
        try:
            return pa.concat_tables(tables, promote_options="permissive")
        except pa.ArrowException as exc:
            raise SchemaMismatchError(f"{self.files.location('meta/episodes')}: episode metadata files disagree on "
                                      f"column types ({exc})") from exc

    def _read_episodes_v3(self) -> SourceEpisodes:
        files = self.files
        where = files.location("meta/episodes")
        metas = self._table_files()
        columns, video_keys = _EPISODE_COLUMNS, self._video_keys
        video_columns = self._table_columns[len(_EPISODE_COLUMNS):]
        data_template = self._path_template("data_path", V3_DATA_PATH, ("chunk_index", "file_index"))
        video_template = (self._path_template("video_path", V3_VIDEO_PATH, ("video_key", "chunk_index", "file_index"))
                          if video_keys else "")
        tables, present, ranges = [], {}, {}
        for rel in metas:
            pf = open_parquet(files, rel)
            present[rel] = self._present(rel, pf)
            ranges[rel] = column_ranges(pf, present[rel])
        # the columns we read, of every file at once (not the per-episode stats columns, unless a small file came
        # whole: a LeRobot-written table has them between ours in every row group of 10 episodes)
        files.prefetch_ranges(ranges)
        for rel in metas:
            tables.append(self._completed(_read_table(files, rel, present[rel]), present[rel]))
        table = self._concat(tables)
        index = int_column(table, "episode_index", where)
        order = np.argsort(np.asarray(index, dtype=np.int64), kind="stable")
        if not np.array_equal(np.asarray(index, dtype=np.int64)[order], np.arange(len(index))):
            raise SchemaMismatchError(f"{where}: episode_index is not contiguous from 0")
        get = {c: int_column(table, c, where, order=order, nullable=c.startswith("videos/"))
               for c in [*columns, *video_columns] if c not in ("episode_index", "tasks")
               and not c.endswith("from_timestamp")}
        length = np.asarray(get["length"], dtype=np.int64)
        start = np.asarray(get["dataset_from_index"], dtype=np.int64)
        end = np.asarray(get["dataset_to_index"], dtype=np.int64)
        expected_start = np.concatenate([[0], np.cumsum(length)[:-1]])
        bad = np.flatnonzero((end - start != length) | (length <= 0) | (start != expected_start))
        if bad.size:
            e = int(bad[0])
            raise SchemaMismatchError(f"{where}: episode {e} has length {length[e]} and frame range [{start[e]}, "
                                      f"{end[e]}); episodes must follow each other from frame 0 with at least one "
                                      f"frame")
        data_file = [self._fill(data_template, "data", e, chunk_index=c, file_index=f)
                     for e, (c, f) in enumerate(zip(get["data/chunk_index"], get["data/file_index"], strict=True))]
        # Row of each episode inside its file: files hold episodes in global index order.
        file_row = np.zeros(len(length), dtype=np.int64)
        first_start: dict[str, int] = {}
        for e, rel in enumerate(data_file):
            file_row[e] = start[e] - first_start.setdefault(rel, int(start[e]))
        videos: dict[str, list[tuple[str, float] | None]] = {}
        for k in video_keys:
            starts = float_column(table, f"videos/{k}/from_timestamp", where, order)
            videos[k] = [None if c is None or f is None or t0 is None else
                         (self._fill(video_template, f"{k!r} video", e, video_key=k, chunk_index=c, file_index=f), t0)
                         for e, (c, f, t0) in enumerate(zip(get[f"videos/{k}/chunk_index"],
                                                            get[f"videos/{k}/file_index"], starts, strict=True))]
        return SourceEpisodes(length, start, task_lists(table.column("tasks"), where, order), data_file, file_row,
                              videos)

    def _footer_estimates(self, known: KnownEpisodes) -> dict[str, int]:
        """About how long the footer of each episode table file is (``{file: bytes}``; empty for a v2.x dataset),
        from the store's ``info``: row groups of ``_TABLE_ROW_GROUP`` episodes, a stats column per statistic of
        each feature, split between the files by their sizes; never more than a file. An estimate short of the
        footer costs one more request (the rest of it), never a wrong value."""
        files = self.files
        tables = [rel for rel in files.list("meta/episodes") if rel.endswith(".parquet")]
        if not tables:
            return {}
        if known.info is None:  # a first open: a share of each big file (the others: none, read whole)
            return {rel: min(files.size(rel), (64 << 10) + int(files.size(rel) * _FOOTER_SHARE)) for rel in tables
                    if files.size(rel) >= _FOOTER_FIRST_MIN}
        info = known.info if isinstance(known.info, dict) else {}
        features = info.get("features") if isinstance(info.get("features"), dict) else {}
        videos = sum(isinstance(f, dict) and f.get("dtype") == "video" for f in features.values())
        columns = len(_EPISODE_COLUMNS) + 2 + 4 * videos + len(STAT_NAMES) * len(features)
        groups = -(-len(known.length) // _TABLE_ROW_GROUP)
        total = (groups + 1) * columns * _FOOTER_BYTES_PER_CHUNK
        sizes = {rel: files.size(rel) for rel in tables}
        everything = max(1, sum(sizes.values()))
        return {rel: min(size, (64 << 10) + total * size // everything) for rel, size in sizes.items()}

    def _locate_v3(self, known: KnownEpisodes) -> SourceEpisodes | None:
        """The episode table for ``known.episodes`` only (see :class:`KnownEpisodes`): from the footers (fetched
        with the other metadata files), the row group holding each episode and the one where its data file begins
        (by the row groups' statistics of ``data/chunk_index`` and ``data/file_index``); then the columns an open
        reads of those row groups, all at once. None when the table does not allow it (no statistics, rows not in
        episode order, a chunk changing inside a row group): the caller then reads the whole table. Values are
        checked as the whole table's are, and against the store's starts and lengths (a first open: every episode's
        start, length and tasks from the footers and the row groups read, see :class:`KnownEpisodes`)."""
        files, where = self.files, self.files.location("meta/episodes")
        metas = self._table_files()
        pfs = {rel: open_parquet(files, rel) for rel in metas}
        present = {rel: self._present(rel, pf) for rel, pf in pfs.items()}
        groups = [(rel, g) for rel in metas for g in range(pfs[rel].metadata.num_row_groups)]
        first_row = np.concatenate([[0], np.cumsum([pfs[rel].metadata.row_group(g).num_rows for rel, g in groups])])
        first_open = known.length is None
        n = int(first_row[-1]) if first_open else len(known.length)
        if first_row[-1] != n or not known.episodes or not all(0 <= e < n for e in known.episodes):
            return self._whole_table(f"it holds {int(first_row[-1])} rows, {n} episodes known; episodes "
                                     f"{list(known.episodes)[:10]} asked for")
        undetermined: list[int] = []
        frames = None
        if first_open:
            if len(known.episodes) > max(1, n // LOCATE_MOST):
                return self._whole_table(f"{len(known.episodes)} of {n} episodes asked for")
            footer = footer_table(pfs, groups, first_row)
            if isinstance(footer, str):
                return self._whole_table(footer)
            start, length, tasks_of, undetermined, frames = footer
        else:
            start, length = np.array(known.start, dtype=np.int64), np.array(known.length, dtype=np.int64)
        # LeRobot writes episode e at row e: the row group of an episode is its row's (checked once read)
        group_of = {e: int(np.searchsorted(first_row, e, side="right") - 1) for e in known.episodes}
        last = max(group_of.values())
        pairs = [pair for rel in metas for pair in file_pair_bounds(
            pfs[rel], [g for r, g in groups[:last + 1] if r == rel])]

        def pair_at(i: int) -> tuple[int, int, int, int] | None:  # (the row groups after ``last``: as asked)
            return pairs[i] if i < len(pairs) else file_pair_bounds(pfs[groups[i][0]], [groups[i][1]])[0]

        need: dict[int, int] = {}  # episode -> the row group where its data file may begin
        begins: dict[tuple[int, int], int] = {}
        for e, at in group_of.items():
            if pairs[at] is None or pairs[at][0] != pairs[at][1]:
                return self._whole_table(f"row group {at} has no statistics of data/chunk_index and data/file_index, "
                                         f"or a data chunk changes inside it")
            begin = (pairs[at][0], pairs[at][2])  # the first (chunk, file) of the row group
            if begin not in begins:
                # the row groups before the first whose last (chunk, file) may reach it hold only earlier files
                j = next((j for j, bounds in enumerate(pairs[:at + 1])
                          if bounds is None or (bounds[1], bounds[3]) >= begin))
                if pairs[j] is None:
                    return self._whole_table(f"row group {j} has no statistics of data/chunk_index and "
                                             f"data/file_index")
                begins[begin] = j
            need[e] = begins[begin]
        read = sorted({*need.values(), *group_of.values()})
        by_file: dict[str, list[int]] = {}
        for i in read:
            by_file.setdefault(groups[i][0], []).append(groups[i][1])
        # each row group's columns in a request of its own (unless close): in flight together, one round trip, with
        # the data files' footers where the footer's statistics tell them (_data_ahead)
        table_ranges = functools.partial(files.prefetch_ranges, {
            rel: column_ranges(pfs[rel], present[rel], gs) for rel, gs in by_file.items()}, gap=_LOCATE_GAP)
        if frames is None and (length < 0).any():  # a store's unresolved episodes: their row groups' frames
            footer = footer_table(pfs, groups, first_row)
            if isinstance(footer, str):
                return self._whole_table(footer)
            frames = footer[4]
        ahead = self._data_ahead(known.episodes, pair_at, first_row, *frame_bounds(start, length, frames, first_row))
        if ahead is None:
            table_ranges()
        else:
            with ThreadPoolExecutor(2, thread_name_prefix="lerobot_zarr-fetch") as pool:
                done = [pool.submit(table_ranges), pool.submit(ahead)]
            for future in done:
                future.result()
        tables = []
        for rel, gs in by_file.items():
            try:
                table = files.parquet(rel, pfs[rel].metadata).read_row_groups(gs, columns=present[rel])
            except LeRobotZarrError:
                raise
            except (pa.ArrowException, OSError) as exc:
                raise CorruptSourceError(f"{files.location(rel)}: cannot read row groups {gs} ({exc})") from exc
            finally:
                files.release(rel)
            tables.append(self._completed(table, present[rel]))
        table = self._concat(tables)
        rows = np.concatenate([np.arange(first_row[i], first_row[i + 1]) for i in read])  # the table's rows read
        position = {int(r): p for p, r in enumerate(rows)}
        if int_column(table, "episode_index", where) != rows.tolist():
            return self._whole_table(f"the rows of row groups {read} are not in episode order")
        get = {c: int_column(table, c, where, order=range(len(rows)), nullable=c.startswith("videos/"),
                              episodes=rows)
               for c in self._table_columns if c not in ("episode_index", "tasks") and not c.endswith("from_timestamp")}
        filled: list[int] = []  # the episodes whose start and length come from the rows read
        for p, e in enumerate(rows.tolist()):
            here = (get["dataset_from_index"][p], get["dataset_to_index"][p], get["length"][p])
            if length[e] < 0:  # a row group the footer (or the store: unresolved) does not determine
                start[e], length[e] = here[0], here[2]
                filled.append(e)
            held = (int(start[e]), int(start[e] + length[e]), int(length[e]))
            if here != held and first_open:
                return self._whole_table(f"episode {e} has frames [{here[0]}, {here[1]}) (length {here[2]}), its "
                                         f"row group's statistics give [{held[0]}, {held[1]})")
            if here != held:
                raise SchemaMismatchError(f"{where}: episode {e} has frames [{here[0]}, {here[1]}) (length {here[2]}), "
                                          f"the store made from this source holds [{held[0]}, {held[1]})", episode=e)
        if first_open:  # the row groups the footer does not determine, unread: their episodes not known
            for i in set(undetermined) - set(read):
                start[first_row[i]:first_row[i + 1]] = length[first_row[i]:first_row[i + 1]] = -1
        unresolved = unresolved_groups(frames, first_row, start, length)
        if isinstance(unresolved, str):
            return self._whole_table(unresolved)
        data_template = self._path_template("data_path", V3_DATA_PATH, ("chunk_index", "file_index"))
        video_template = (self._path_template("video_path", V3_VIDEO_PATH, ("video_key", "chunk_index", "file_index"))
                          if self._video_keys else "")
        pair = list(zip(get["data/chunk_index"], get["data/file_index"], strict=True))
        data_file, file_row = [""] * n, np.full(n, -1, dtype=np.int64)
        videos: dict[str, list[tuple[str, float] | None]] = {k: [None] * n for k in self._video_keys}
        tasks: list[list[str]] = [[] for _ in range(n)]
        if first_open:  # every episode's tasks: the footer's, and those of every row read
            tasks_of.update(zip(rows.tolist(), task_lists(table.column("tasks"), where, range(len(rows)), rows),
                                strict=True))
            tasks = [tasks_of.get(e, []) for e in range(n)]  # (none: an unresolved row group's)
        else:  # the tasks of the episodes asked for, and of a store's unresolved ones read
            told = sorted({*known.episodes, *filled})
            found = task_lists(table.column("tasks"), where, [position[e] for e in told], told)
            for e, t in zip(told, found, strict=True):
                tasks[e] = t
        starts = {k: float_column(table, f"videos/{k}/from_timestamp", where, [position[e] for e in known.episodes],
                                   known.episodes) for k in self._video_keys}
        first_of: dict[tuple[int, int], int] = {}  # (chunk, file) -> the first row read with it
        file_rows: dict[str, tuple[int, int]] = {}
        end = start + length
        for q, key in enumerate(pair):
            first_of.setdefault(key, q)
        for i, e in enumerate(known.episodes):
            p, at = position[e], group_of[e]
            # the data file's first episode: the first row read with its (chunk, file), when no row left unread
            # before it can have them (the row group ``need[e]`` holds it, or the file begins after the first
            # (chunk, file) of the episode's row group)
            first = first_of[pair[p]]
            if not (first_row[need[e]] <= rows[first] < first_row[need[e] + 1]
                    or (pair[p][1] > pairs[at][2] and rows[first] >= first_row[at])):
                return self._whole_table(f"the first row of episode {e}'s data file is not among the rows read")
            data_file[e] = self._fill(data_template, "data", e, chunk_index=pair[p][0], file_index=pair[p][1])
            file_row[e] = int(start[e]) - get["dataset_from_index"][first]
            last = file_last_row(pair_at, first_row, e, pair[p]) if data_file[e] not in file_rows else None
            if last is not None and length[last[0]] > 0 and length[last[1]] > 0:  # (not an unresolved episode)
                begin = get["dataset_from_index"][first]
                file_rows[data_file[e]] = (int(end[last[0]]) - begin, int(end[last[1]]) - begin)
            for k in self._video_keys:
                c, f, t0 = get[f"videos/{k}/chunk_index"][p], get[f"videos/{k}/file_index"][p], starts[k][i]
                videos[k][e] = (None if c is None or f is None or t0 is None else
                                (self._fill(video_template, f"{k!r} video", e, video_key=k, chunk_index=c,
                                            file_index=f), t0))
        return SourceEpisodes(length, start, tasks, data_file, file_row, videos, located=frozenset(known.episodes),
                              complete=first_open and not unresolved, file_rows=file_rows, unresolved=unresolved)


    def _data_ahead(self, episodes: Sequence[int], pair_at: Callable[[int], tuple[int, int, int, int] | None],
                    first_row: np.ndarray, start: tuple[np.ndarray, np.ndarray], end: tuple[np.ndarray, np.ndarray]
                    ) -> Callable[[], None] | None:
        """What fetches the data files' footers of a few ``episodes`` with the table's row groups
        (:func:`~.data_windows.data_ahead`)."""
        template = self._path_template("data_path", V3_DATA_PATH, ("chunk_index", "file_index"))

        def path(e: int, chunk: int, file: int) -> str | None:
            try:
                return self._fill(template, "data", e, chunk_index=chunk, file_index=file)
            except LeRobotZarrError:
                return None  # (the path is checked, and refused, when the episode is located)

        return data_ahead(self.files, self.features, path, episodes, pair_at, first_row, start, end)

    def _whole_table(self, why: str) -> None:
        """Log why the episode table is read whole instead of in part (None: the caller's signal to)."""
        log.info("%s: the episode table is read whole: %s", self.files.location("meta/episodes"), why)

    def _read_episodes_v2(self) -> SourceEpisodes:
        path = self.files.location("meta/episodes.jsonl")
        rows = _read_jsonl(self.files, "meta/episodes.jsonl")
        for lineno, r in enumerate(rows, 1):
            _int(r.get("episode_index"), f"{path}:{lineno}", "episode_index")
            _int(r.get("length"), f"{path}:{lineno}", "length", low=1)
            tasks = r.get("tasks")
            if tasks is not None and not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)):
                raise CorruptSourceError(f"{path}:{lineno}: tasks must be a list of strings, got {tasks!r:.80}")
        rows.sort(key=lambda r: r["episode_index"])
        index = np.asarray([r["episode_index"] for r in rows], dtype=np.int64)
        length = np.asarray([r["length"] for r in rows], dtype=np.int64)
        if not np.array_equal(index, np.arange(len(index))):
            raise SchemaMismatchError(f"{path}: episode_index is not contiguous from 0")
        start = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
        fields = ("episode_chunk", "episode_index")
        template = self._path_template("data_path", V21_DATA_PATH, fields)
        chunks_size = self.info.get("chunks_size")
        chunks_size = 1000 if chunks_size is None else _int(chunks_size, self.files.location("meta/info.json"),
                                                              "chunks_size", low=1)
        data_file = [self._fill(template, "data", e, episode_chunk=e // chunks_size, episode_index=e)
                     for e in range(len(index))]
        tasks = [list(r.get("tasks") or []) for r in rows]
        video_keys = [k for k, v in self.features.items() if v.kind == "video"]
        video_template = (self._path_template("video_path", V21_VIDEO_PATH, ("video_key", *fields))
                          if video_keys else "")
        videos = {k: [(self._fill(video_template, f"{k!r} video", e, video_key=k, episode_chunk=e // chunks_size,
                                  episode_index=e), 0.0) for e in range(len(index))]
                  for k in video_keys}
        return SourceEpisodes(length, start, tasks, data_file, np.zeros(len(index), dtype=np.int64), videos)

    def _path_template(self, key: str, default: str, fields: Sequence[str]) -> str:
        """info.json's ``data_path`` / ``video_path`` (or LeRobot's default), checked before any use."""
        template = self.info.get(key) or default
        try:
            return check_path_template(template, fields)
        except ValueError as exc:
            raise CorruptSourceError(f"{self.files.location('meta/info.json')}: {key} {template!r:.120} cannot be "
                                     f"filled with {list(fields)} ({exc})") from None

    def _fill(self, template: str, what: str, episode: int, **fields: int | str) -> str:
        """A checked path template filled for one episode, refusing paths that leave the folder (each distinct
        filling checked once: the episodes of a v3 data file share it)."""
        key = (template, *fields.items())
        path = self._filled.get(key)
        if path is None:
            path = self._filled[key] = safe_relpath(self.files.location(), template.format(**fields),
                                                    f"episode {episode} {what}")
        return path

    @functools.cached_property
    def _filled(self) -> dict[tuple, str]:
        return {}

    def _read_tasks_v3(self) -> list[str]:
        path = self.files.location("meta/tasks.parquet")
        table = _read_table(self.files, "meta/tasks.parquet")
        names = table.column_names
        text_col = next((c for c in ("task", "__index_level_0__") if c in names), None)
        if text_col is None:
            string_cols = [c for c in names if pa.types.is_string(table.schema.field(c).type)
                           or pa.types.is_large_string(table.schema.field(c).type)]
            if len(string_cols) != 1 or "task_index" not in names:
                raise SchemaMismatchError(f"{path}: expected a task_index column and one task string column")
            text_col = string_cols[0]
        if "task_index" not in names:
            raise SchemaMismatchError(f"{path}: no task_index column")
        return self._task_list(table.column("task_index").to_pylist(), table.column(text_col).to_pylist(), path)

    def _read_tasks_v2(self) -> list[str]:
        path = self.files.location("meta/tasks.jsonl")
        rows = _read_jsonl(self.files, "meta/tasks.jsonl")
        return self._task_list([r.get("task_index") for r in rows], [r.get("task") for r in rows], path)

    @staticmethod
    def _task_list(indices: Sequence[Any], texts: Sequence[Any], path: str) -> list[str]:
        for i, text in zip(indices, texts, strict=True):
            _int(i, path, "task_index")
            if not isinstance(text, str):
                raise CorruptSourceError(f"{path}: task {i} is {text!r:.80}, expected a string")
        by_index = dict(zip(indices, texts, strict=True))
        if len(by_index) != len(indices) or sorted(by_index) != list(range(len(by_index))):
            raise SchemaMismatchError(f"{path}: task_index values are not contiguous from 0")
        return [by_index[i] for i in range(len(by_index))]

    def _read_stats(self) -> dict:
        files = self.files
        if files.exists("meta/stats.json"):
            stats = _read_json(files, "meta/stats.json")
            if not isinstance(stats, dict):
                raise CorruptSourceError(f"{files.location('meta/stats.json')}: expected a JSON object")
            return stats
        if files.exists("meta/episodes_stats.jsonl"):
            path = files.location("meta/episodes_stats.jsonl")
            rows = _read_jsonl(files, "meta/episodes_stats.jsonl")
            for lineno, r in enumerate(rows, 1):
                stats = r.get("stats")
                if not isinstance(stats, dict) or not all(isinstance(v, dict) for v in stats.values()):
                    raise CorruptSourceError(f"{path}:{lineno}: 'stats' must map each feature to its statistics")
                for key, v in stats.items():
                    if "count" not in v:
                        raise CorruptSourceError(f"{path}:{lineno}: the statistics of {key!r} have no count")
            try:
                with np.errstate(all="ignore"):
                    return merge_episode_stats([r["stats"] for r in rows])
            except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
                raise CorruptSourceError(f"{path}: unreadable per-episode stats ({exc!r:.200})") from exc
        return {}
