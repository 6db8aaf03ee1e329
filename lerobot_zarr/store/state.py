"""The store's root state: :class:`StoreState` (the episode table, packs, features, hashes), the paths of its files,
and reading and validating the root (see the contract in :mod:`lerobot_zarr.store`; the commit that writes it is
:mod:`.committing`)."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CorruptStoreError, NotMaterializedError, SourceNotFoundError, UnsupportedStoreError
from ..lerobot.format import CAMERA_DTYPES
from ..utils.fileio import load_json, read_bounded
from .hashes import ContentHashes, root_hash
from .log import LOG_FILE, LogRecords, parse_records, read_log
from .tables import (
    DEFAULT_PACK_BYTES,
    MAX_EPISODES,
    MAX_FRAME_BYTES,
    MAX_FRAMES,
    MAX_PACK_BYTES,
    MAX_PACKS,
    MAX_ROWS,
    STORAGES,
    ArraySpec,
    EpisodeTable,
    PackLayout,
    appended,
    checked_int,
    parse_ranges,
    ranges_mask,
    ranges_of,
)
from .text import TEXT_CODEC, TEXT_DATA_TYPE, TEXT_KINDS
from .zarr_meta import EPISODE_ARRAYS, LIVE_ARRAY, ROOT

__all__ = ["FORMAT_VERSION", "LOGGED_FORMAT_VERSION", "ATTRS_KEY", "MAX_ROOT_BYTES", "CREATING_MARKER",
           "LIVE_PENDING_MARKER", "StoreState", "check_array_name", "chunk_path", "retired_path", "live_path",
           "stats_path", "read_root", "has_commit_point", "read_state", "counted_info", "apply_record",
           "on_demand_capable", "UNRESOLVED_FORMAT_VERSION", "set_resolver", "unresolved_table"]

FORMAT_VERSION = 3
LOGGED_FORMAT_VERSION = 4  # a root whose store may hold commits in its log: older versions refuse to read it
# a root listing unresolved row groups (their episodes' table entries are placeholders): older versions refuse it
UNRESOLVED_FORMAT_VERSION = 5
_READABLE_VERSIONS = (1, 2, 3, 4, 5)
ATTRS_KEY = "lerobot_zarr"
_KINDS = ("numeric", *sorted(CAMERA_DTYPES), *TEXT_KINDS)
_CAMERA_STORED = {np.dtype("uint8"): (1, 3, 4), np.dtype("<u2"): (1,), np.dtype("<f4"): (1,)}  # dtype: channels
CREATING_MARKER = ".lerobot_zarr-creating"  # a store being laid out (before its first commit)
LIVE_PENDING_MARKER = ".frame_live-pending"  # frame_live may lag the last commit
MAX_ROOT_BYTES = 512 << 20  # the root zarr.json (about 60 bytes per episode and feature at most)


@dataclass(frozen=True)
class StoreState:
    """The committed root state of a store (the root ``zarr.json``), typed and validated. Immutable: writers make
    the next state with :func:`dataclasses.replace` and publish it with :func:`.committing.commit`."""

    root: Path
    info: dict
    tasks: tuple[str, ...]
    stats: dict
    source: dict
    arrays: dict[str, ArraySpec]
    table: EpisodeTable
    packs: PackLayout
    materialized: dict[str, tuple[tuple[int, int], ...]]
    unavailable: dict[str, tuple[tuple[int, int, str], ...]] = field(default_factory=dict)
    not_materialized: dict[str, str] = field(default_factory=dict)
    retired: tuple[tuple[int, float], ...] = ()
    generation: int = 0
    pack_bytes: int = DEFAULT_PACK_BYTES
    capacity_frames: int | None = None
    pending_tasks: tuple[tuple[int, int, int], ...] = ()
    read_version: int = FORMAT_VERSION  # the format the root was written in (1 and 2 are upgraded at the next commit)
    hashes: ContentHashes = field(default_factory=ContentHashes)
    # numeric features whose stats are computed when asked (:mod:`.stats`), not at each commit: absent from ``stats``
    stats_on_demand: tuple[str, ...] = ()
    # read from disk: whether the root matches its recorded hash (asked, once, before a commit builds on it)
    root_intact: Callable[[], bool] | None = field(default=None, compare=False, repr=False)
    # the root is format 4: commits after it may be in the log (.commit-log); log_records of them were applied
    logged: bool = False
    log_records: LogRecords = field(default_factory=LogRecords, compare=False, repr=False)
    # set by this process's commit of this state: zarr's copies it wrote (path in the store -> bytes), so that the
    # next commit writes only those that change; None when read from disk (the next commit compares the files)
    zarr_copies: dict[str, bytes] | None = field(default=None, compare=False, repr=False)
    # episodes of the source whose start, length and task are not known yet: ``(first, stop, frame_first,
    # frame_stop)`` (a row group of LeRobot's episode table read only through its footer). Their table entries are
    # placeholders laying out the row group's frames in its pack (``unresolved_table``); read_state resolves them
    # unless asked not to
    unresolved: tuple[tuple[int, int, int, int], ...] = ()

    def unresolved_mask(self) -> np.ndarray:
        """Boolean mask over episodes: those of :attr:`unresolved` row groups."""
        mask = np.zeros(len(self.table), dtype=bool)
        for a, b, _, _ in self.unresolved:
            mask[a:b] = True
        return mask

    def episode_hashes(self, name: str) -> np.ndarray:
        """The content hash of every episode's rows of ``name`` (-1 where none is recorded)."""
        return self.hashes.aligned(self.table, name)

    def with_hashes(self, entries: Mapping[tuple[int, int], Mapping[str, int]],
                    files: Mapping[str, int] | None = None) -> StoreState:
        """This state with content hashes recorded for episodes at ``(pack, offset)`` (and for files)."""
        return replace(self, hashes=self.hashes.updated(entries, files))

    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def episode_start(self) -> np.ndarray:
        return self.table.start

    @property
    def episode_length(self) -> np.ndarray:
        return self.table.length

    @property
    def episode_end(self) -> np.ndarray:
        return self.table.end

    def materialized_mask(self, feature: str) -> np.ndarray:
        """Boolean mask over episodes: which episodes' rows of ``feature`` are committed."""
        return ranges_mask(self.materialized.get(feature, ()), len(self.table))

    def unavailable_of(self, feature: str) -> dict[int, str]:
        """Episodes whose frames of ``feature`` the source cannot give (a missing or broken video), with why."""
        return {e: reason for a, b, reason in self.unavailable.get(feature, ()) for e in range(a, b)}

    def done_mask(self, feature: str) -> np.ndarray:
        """Mask of episodes done for ``feature``: committed, or known to be unavailable."""
        done = self.materialized_mask(feature)
        for a, b, _ in self.unavailable.get(feature, ()):
            done[a:b] = True
        return done

    def complete_episodes(self, skip: Iterable[str] = ()) -> np.ndarray:
        """Mask of episodes done for every stored array (but those in ``skip``): committed, or known to be
        unavailable."""
        mask = np.ones(len(self.table), dtype=bool)
        skip = set(skip)
        for name in self.arrays:
            if name not in skip:
                mask &= self.done_mask(name)
        return mask

    def episode_frame(self) -> np.ndarray:
        """Row along zarr's ``frame`` axis of each episode's first frame."""
        return self.packs.zarr_starts()[self.table.chunk] + self.table.offset if len(self.table) else \
            np.zeros(0, dtype=np.int64)

    def with_materialized(self, done: Mapping[str, Iterable[int]],
                          unavailable: Mapping[str, Mapping[int, str]] | None = None) -> StoreState:
        """This state with more episodes committed per feature (and episodes known unavailable, with why)."""
        materialized = dict(self.materialized)
        for name, episodes in done.items():
            mask = self.materialized_mask(name)
            mask[list(episodes)] = True
            materialized[name] = ranges_of(mask)
        gaps = dict(self.unavailable)
        for name, reasons in (unavailable or {}).items():
            known = self.unavailable_of(name)
            known.update((int(e), str(r)) for e, r in reasons.items())
            runs: list[list] = []
            for e in sorted(known):
                if runs and runs[-1][1] == e and runs[-1][2] == known[e]:
                    runs[-1][1] = e + 1
                else:
                    runs.append([e, e + 1, known[e]])
            gaps[name] = tuple((a, b, r) for a, b, r in runs)
        return replace(self, materialized=materialized, unavailable=gaps)

    def without_materialized(self, episodes: Mapping[str, Iterable[int]]) -> StoreState:
        """This state with episodes no longer committed per feature (to be fetched again)."""
        materialized = dict(self.materialized)
        for name, gone in episodes.items():
            mask = self.materialized_mask(name)
            mask[list(gone)] = False
            materialized[name] = ranges_of(mask)
        return replace(self, materialized=materialized)

    def all_materialized(self) -> StoreState:
        """This state with every episode committed for every array (what a writer's commit says)."""
        full = ((0, len(self.table)),) if len(self.table) else ()
        return replace(self, materialized={name: full for name in self.arrays})

    # JSON ---------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": (UNRESOLVED_FORMAT_VERSION if self.unresolved else
                               LOGGED_FORMAT_VERSION if self.logged else FORMAT_VERSION),
            "info": self.info,
            "tasks": list(self.tasks),
            "stats": self.stats,
            "source": self.source,
            "not_materialized": dict(self.not_materialized),
            "features": {name: {"kind": spec.kind,
                                "dtype": TEXT_DATA_TYPE if spec.is_text else spec.dtype.str.lstrip("<>|="),
                                "frame_shape": list(spec.frame_shape), "storage": spec.storage,
                                "shard_index": spec.shard_index, "dims": list(spec.dims),
                                **({"codec": spec.codec_spec} if spec.storage == "compact" else {}),
                                **({"resize": spec.resize_spec} if spec.resize else {}),
                                "episodes": [list(r) for r in self.materialized.get(name, ())]}
                         for name, spec in self.arrays.items()},
            "unavailable": {name: [list(r) for r in runs] for name, runs in self.unavailable.items() if runs},
            "episodes": self.table.to_json(),
            "packs": self.packs.to_json(),
            "pack_bytes": self.pack_bytes,
            "retired": [list(r) for r in self.retired],
            "generation": self.generation,
            "capacity_frames": self.capacity_frames,
            "pending_tasks": [list(p) for p in self.pending_tasks],
            "hashes": self.hashes.to_json(self.table, self.arrays),
            **({"stats_on_demand": list(self.stats_on_demand)} if self.stats_on_demand else {}),
            **({"unresolved": [list(u) for u in self.unresolved]} if self.unresolved else {}),
        }

    @classmethod
    def from_json(cls, root: Path, attrs: Any, consolidated: Mapping[str, Any]) -> StoreState:
        """Validate the root attributes of any readable format version; errors name the key."""
        where = str(Path(root) / ROOT)
        if not isinstance(attrs, Mapping):
            raise CorruptStoreError(f"{where}: not a lerobot_zarr store (no '{ATTRS_KEY}' attributes)", path=where)
        version = attrs.get("format_version")
        if version not in _READABLE_VERSIONS:
            raise UnsupportedStoreError(f"{where}: store format version {version!r} is not supported (this "
                                        f"lerobot_zarr reads versions {', '.join(map(str, _READABLE_VERSIONS))})",
                                        path=where)
        try:
            return _parse_state(Path(root), attrs, consolidated, version, where)
        except CorruptStoreError as exc:
            if where in str(exc):
                raise
            raise CorruptStoreError(f"{where}: {exc}", path=where, episode=exc.episode) from None
        except (KeyError, IndexError, TypeError, ValueError, OverflowError, AttributeError) as exc:
            raise CorruptStoreError(f"{where}: malformed root attributes ({type(exc).__name__}: {exc})",
                                    path=where) from None


def _key(attrs: Mapping, key: str, kind: type | tuple[type, ...], where: str, default: Any = ...) -> Any:
    if key not in attrs:
        if default is ...:
            raise CorruptStoreError(f"{where}: root attribute {key!r} is missing")
        return default
    value = attrs[key]
    if not isinstance(value, kind):
        raise CorruptStoreError(f"{where}: root attribute {key!r} has the wrong type ({type(value).__name__})")
    return value


def _parse_arrays(features: Mapping, consolidated: Mapping, where: str) -> dict[str, ArraySpec]:
    arrays = {}
    for name, f in features.items():
        check_array_name(name)
        at = f"{where}: features[{name!r}]"
        if not isinstance(f, Mapping):
            raise CorruptStoreError(f"{at} must be an object")
        text = f.get("kind") in TEXT_KINDS
        if text:
            if f.get("dtype") != TEXT_DATA_TYPE or f.get("frame_shape") != [] or f.get("storage") != "compact" \
                    or f.get("codec") != {"codec": TEXT_CODEC}:
                raise CorruptStoreError(f"{at}: a {f.get('kind')} array is kept as {TEXT_DATA_TYPE!r} frames of shape "
                                        f"[], compact, codec {TEXT_CODEC!r}")
            dtype = np.dtype(object)
        else:
            try:
                dtype = np.dtype(str(f["dtype"])).newbyteorder("<")
            except (KeyError, TypeError) as exc:
                raise CorruptStoreError(f"{at}.dtype is missing or unknown ({exc})") from None
            if dtype.kind not in "biuf":
                raise CorruptStoreError(f"{at}.dtype {dtype} cannot be stored raw")
        shape = f.get("frame_shape")
        if not isinstance(shape, list) or len(shape) > 8 or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 < s < MAX_ROWS for s in shape):
            raise CorruptStoreError(f"{at}.frame_shape must be a list of positive integers, got {shape!r:.80}")
        if math.prod(shape) * dtype.itemsize > MAX_FRAME_BYTES:
            raise CorruptStoreError(f"{at}.frame_shape {shape} makes frames of more than {MAX_FRAME_BYTES} bytes")
        kind, storage = f.get("kind"), f.get("storage", "raw")
        if kind not in _KINDS:
            raise CorruptStoreError(f"{at}.kind must be one of {_KINDS}, got {kind!r:.40}")
        if storage not in STORAGES:
            raise CorruptStoreError(f"{at}.storage must be one of {STORAGES}, got {storage!r:.40}")
        shard_index = f.get("shard_index", "end")  # format 2 wrote compact shards with their index at the end
        if shard_index not in ("start", "end"):
            raise CorruptStoreError(f"{at}.shard_index must be 'start' or 'end'")
        dims = f.get("dims")
        if dims is None:  # formats 1 and 2 kept them in the arrays' metadata only
            names = consolidated.get(name, {}).get("dimension_names") if isinstance(consolidated, Mapping) else None
            dims = [d.removeprefix(f"{name}.") for d in (names or ["frame"])[1:]] if isinstance(names, list) else []
        if not isinstance(dims, list) or len(dims) != len(shape) or not all(isinstance(d, str) for d in dims):
            dims = [f"dim_{k}" for k in range(len(shape))]
        codec, resize = f.get("codec", {}), f.get("resize", {})
        if not isinstance(codec, Mapping) or not isinstance(resize, Mapping):
            raise CorruptStoreError(f"{at}.codec and .resize must be objects")
        if storage == "mp4" and kind != "video":
            raise CorruptStoreError(f"{at}: only video features can be kept as mp4")
        if kind in CAMERA_DTYPES and (len(shape) != 3 or shape[2] not in _CAMERA_STORED.get(dtype, ())):
            raise CorruptStoreError(f"{at}: cameras are stored as uint8 (height, width, 1, 3 or 4 channels) frames, "
                                    f"depth maps as uint16 or float32 (height, width, 1), got {dtype}{shape}")
        spec = ArraySpec(dtype, tuple(shape), tuple(dims), kind, storage, shard_index,
                         tuple((str(k), _frozen_json(v)) for k, v in codec.items()),
                         tuple((str(k), _frozen_json(v)) for k, v in resize.items()))
        if storage == "compact" and not text:
            _check_codec(spec, at)
        if resize:
            _check_resize(spec, at)
        arrays[name] = spec
    return arrays


def _check_codec(spec: ArraySpec, at: str) -> None:
    """A compact camera's frame codec must be one this package writes, with valid options."""
    from ..cameras.frame_codecs import frame_codec

    try:
        frame_codec(spec.codec_spec, spec.frame_shape)
    except ImportError:  # a codec whose library is not installed here: said when a frame is read
        pass
    except (ValueError, TypeError) as exc:
        raise CorruptStoreError(f"{at}.codec {spec.codec_spec!r:.120} is not a frame codec lerobot_zarr reads "
                                f"({exc})") from None


def _check_resize(spec: ArraySpec, at: str) -> None:
    """A resized camera records the source's frame shape (``from``) and the stored size."""
    how = spec.resize_spec
    source, size = how.get("from"), how.get("size")
    if not (isinstance(source, list) and len(source) == 3 and all(isinstance(v, int) and 0 < v < 1 << 16
                                                                   for v in source)
            and source[2] == spec.frame_shape[2] and size == list(spec.frame_shape[:2])):
        raise CorruptStoreError(f"{at}.resize {how!r:.120} does not describe frames of {list(spec.frame_shape)} "
                                f"resized from a source shape (height, width, channels)")


def _frozen_json(value: Any) -> Any:
    return tuple(_frozen_json(v) for v in value) if isinstance(value, list) else value


def _check_table(table: EpisodeTable, packs: PackLayout, n_tasks: int, where: str) -> None:
    if not len(table):
        return
    bad = (table.length <= 0) | (table.length > MAX_ROWS)
    if bad.any():
        e = int(np.argmax(bad))
        raise CorruptStoreError(f"{where}: episode {e} has length {int(table.length[e])}, not in [1, {MAX_ROWS}] "
                                f"(episodes.length)", episode=e)
    if float(table.length.astype(np.float64).sum()) > MAX_FRAMES:
        raise CorruptStoreError(f"{where}: the episodes hold more than {MAX_FRAMES} frames (episodes.length)")
    expected = np.cumsum(table.length) - table.length
    if (table.start != expected).any():
        e = int(np.argmax(table.start != expected))
        raise CorruptStoreError(f"{where}: episode {e} starts at global index {int(table.start[e])}, expected "
                                f"{int(expected[e])}: episodes follow each other from index 0 (episodes.start)",
                                episode=e)
    for key, high in (("offset", MAX_ROWS), ("episode_index_shift", MAX_FRAMES), ("index_shift", MAX_FRAMES)):
        values = getattr(table, key)
        bad = (values < 0) | (values > high)
        if bad.any():
            e = int(np.argmax(bad))
            raise CorruptStoreError(f"{where}: episode {e} has {key} {int(values[e])}, not in [0, {high}] "
                                    f"(episodes.{key})", episode=e)
    if ((table.task_index < -1) | (table.task_index >= max(n_tasks, 0))).any() and n_tasks >= 0:
        bad = int(np.argmax((table.task_index < -1) | (table.task_index >= n_tasks)))
        raise CorruptStoreError(f"{where}: episode {bad} has task_index {int(table.task_index[bad])} outside the "
                                f"{n_tasks} tasks (episodes.task_index)", episode=bad)
    if (table.chunk < 0).any() or (table.chunk >= len(packs)).any():
        raise CorruptStoreError(f"{where}: the episode table lists packs outside the {len(packs)} packs "
                                f"(episodes.chunk)")
    if (table.offset + table.length > packs.rows[table.chunk]).any():
        bad = int(np.argmax(table.offset + table.length > packs.rows[table.chunk]))
        raise CorruptStoreError(f"{where}: episode {bad} (rows {int(table.offset[bad])}+{int(table.length[bad])}) "
                                f"does not fit pack {int(table.chunk[bad])} of {int(packs.rows[table.chunk[bad]])} "
                                f"rows", episode=bad)
    order = np.lexsort((table.offset, table.chunk))
    chunk, offset, end = table.chunk[order], table.offset[order], (table.offset + table.length)[order]
    overlap = (chunk[1:] == chunk[:-1]) & (offset[1:] < end[:-1])
    if overlap.any():
        raise CorruptStoreError(f"{where}: episodes {int(order[np.argmax(overlap)])} and "
                                f"{int(order[np.argmax(overlap) + 1])} overlap in pack {int(chunk[1:][overlap][0])}")


def _parse_state(root: Path, attrs: Mapping, consolidated: Mapping, version: int, where: str) -> StoreState:
    info = _key(attrs, "info", dict, where)
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
        raise CorruptStoreError(f"{where}: info.fps must be a finite positive number, got {fps!r:.40}")
    if not isinstance(info.get("features", {}), dict):
        raise CorruptStoreError(f"{where}: info.features must be an object")
    tasks = _key(attrs, "tasks", list, where)
    if not all(isinstance(t, str) for t in tasks):
        raise CorruptStoreError(f"{where}: tasks must be strings")
    stats = _key(attrs, "stats", dict, where, {})
    source = _key(attrs, "source", dict, where)
    arrays = _parse_arrays(_key(attrs, "features", dict, where), consolidated, where)
    if version >= 3:
        packs = PackLayout.from_json(_key(attrs, "packs", dict, where), where)
        table = EpisodeTable.from_json(_key(attrs, "episodes", dict, where), where)
    else:
        table, packs = _legacy_table(root, attrs, where, version)
    _check_table(table, packs, len(tasks), where)
    widest = max((spec.frame_bytes for spec in arrays.values() if spec.storage == "raw"), default=0)
    if len(packs) and int(packs.rows.max()) * widest > MAX_PACK_BYTES:
        raise CorruptStoreError(f"{where}: a pack of {int(packs.rows.max())} rows of {widest}-byte frames is more "
                                f"than {MAX_PACK_BYTES} bytes (packs.rows)")
    n = len(table)
    features = attrs["features"]
    materialized = {name: parse_ranges(features[name].get("episodes", []), n, f"{where}: features[{name!r}].episodes")
                    for name in arrays}
    unavailable = {}
    for name, runs in _key(attrs, "unavailable", dict, where, {}).items():
        if name in arrays:
            unavailable[name] = parse_ranges(runs, n, f"{where}: unavailable[{name!r}]", with_reason=True)
    not_materialized = {str(k): str(v) for k, v in _key(attrs, "not_materialized", dict, where, {}).items()}
    retired = []
    for item in _key(attrs, "retired", list, where, []):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], (int, float))):
            raise CorruptStoreError(f"{where}: retired entries are [pack, unix_time], got {item!r:.60}")
        retired.append((checked_int(item[0], f"{where}: retired", 0, max(len(packs) - 1, 0)), float(item[1])))
    capacity = _key(attrs, "capacity_frames", (int, type(None)), where, None)
    if capacity is not None and (isinstance(capacity, bool) or capacity < 1):
        raise CorruptStoreError(f"{where}: capacity_frames must be a positive integer or null")
    pending = []
    for item in _key(attrs, "pending_tasks", (list, type(None)), where, None) or []:
        if not (isinstance(item, list) and len(item) in (2, 3)):
            raise CorruptStoreError(f"{where}: pending_tasks entries are [chunk, offset, task_index]")
        if len(item) == 2:  # format 2: [chunk, task_index], one episode per chunk at row 0
            item = [item[0], 0, item[1]]
        pending.append((checked_int(item[0], f"{where}: pending_tasks", 0, max(len(packs) - 1, 0)),
                        checked_int(item[1], f"{where}: pending_tasks", 0, MAX_ROWS),
                        checked_int(item[2], f"{where}: pending_tasks", 0, len(tasks) - 1)))
    hashes = ContentHashes.from_json(attrs.get("hashes"), table, arrays, where)
    on_demand = _key(attrs, "stats_on_demand", list, where, [])
    for name in on_demand:
        spec = arrays.get(name) if isinstance(name, str) else None
        if spec is None or not on_demand_capable(spec):
            raise CorruptStoreError(f"{where}: stats_on_demand names {name!r:.60}, not a raw numeric feature or "
                                    f"uint8 camera")
    unresolved = (_parse_unresolved(attrs.get("unresolved"), table, where) if version == UNRESOLVED_FORMAT_VERSION
                  else ())
    return StoreState(
        root=root, info=info, tasks=tuple(tasks), stats=stats, source=source, arrays=arrays, table=table,
        packs=packs, materialized=materialized, unavailable=unavailable, not_materialized=not_materialized,
        retired=tuple(retired), generation=checked_int(attrs.get("generation", 0), f"{where}: generation", 0),
        pack_bytes=checked_int(attrs.get("pack_bytes", DEFAULT_PACK_BYTES), f"{where}: pack_bytes", 1),
        capacity_frames=capacity, pending_tasks=tuple(pending), read_version=version, hashes=hashes,
        stats_on_demand=tuple(on_demand),
        logged=version == LOGGED_FORMAT_VERSION, unresolved=unresolved)


def unresolved_table(length: np.ndarray, unresolved: Iterable[tuple[int, int, int, int]]) -> np.ndarray:
    """``length`` (-1 for the episodes of ``unresolved`` row groups) with the placeholders a store keeps for them:
    each row group's frames laid out as its first episode's but one frame for each of the others, so that the
    table's checks hold and the row group's rows are one run of its pack (its episodes' own rows, once resolved)."""
    out = np.array(length, dtype=np.int64)
    for a, b, f0, f1 in unresolved:
        out[a:b] = 1
        out[a] = f1 - f0 - (b - a - 1)
    return out


def _parse_unresolved(value: Any, table: EpisodeTable, where: str) -> tuple[tuple[int, int, int, int], ...]:
    """The ``unresolved`` row groups of a format-5 root: in order, apart, each a run of rows of one pack holding
    frames ``[frame_first, frame_stop)`` in its placeholders (:func:`unresolved_table`)."""
    if not isinstance(value, list) or not value:
        raise CorruptStoreError(f"{where}: unresolved must be a non-empty list of [first, stop, frame_first, "
                                f"frame_stop] (format {UNRESOLVED_FORMAT_VERSION})")
    out, at, n = [], 0, len(table)
    for item in value:
        if not isinstance(item, list) or len(item) != 4:
            raise CorruptStoreError(f"{where}: unresolved entry {item!r:.60} is not [first, stop, frame_first, "
                                    f"frame_stop]")
        a = checked_int(item[0], f"{where}: unresolved", at, n - 1)
        b = checked_int(item[1], f"{where}: unresolved", a + 1, n)
        f0, f1 = (checked_int(v, f"{where}: unresolved", 0, MAX_FRAMES) for v in item[2:])
        t = table
        if (int(t.start[a]), int(t.start[b - 1] + t.length[b - 1])) != (f0, f1) or (t.chunk[a:b] != t.chunk[a]).any() \
                or (t.offset[a + 1:b] != t.offset[a] + np.cumsum(t.length[a:b - 1])).any() \
                or (t.length[a + 1:b] != 1).any():
            raise CorruptStoreError(f"{where}: unresolved episodes [{a}, {b}) are not one run of frames [{f0}, {f1}) "
                                    f"in their pack (episodes.*)", episode=a)
        out.append((a, b, f0, f1))
        at = b
    return tuple(out)


def on_demand_capable(spec: ArraySpec) -> bool:
    """Whether a feature's stats can be computed when asked (:mod:`.stats`): a raw numeric feature, or a raw uint8
    camera (whose stats LeRobot computes from a sample of its frames, in any unit: no depth conversion)."""
    return spec.storage == "raw" and not spec.is_text and (spec.kind not in CAMERA_DTYPES or spec.dtype == np.uint8)


def _legacy_table(root: Path, attrs: Mapping, where: str, version: int) -> tuple[EpisodeTable, PackLayout]:
    """Formats 1 and 2: one chunk per episode (chunk k = pack k holding one episode at row 0), retired chunks
    shown as one filler row."""
    if version == 1:  # the table lived in the episode_* arrays only, chunk id = episode index
        columns = {}
        for name in ("episode_start", "episode_length", "episode_task_index"):
            path = root / name / "c" / "0"
            try:
                raw = read_bounded(path, 8 * MAX_EPISODES, root=root, what=f"episode table array {name!r}")
            except FileNotFoundError:
                raise CorruptStoreError(f"{root}: episode table array {name!r} is missing") from None
            if len(raw) % 8:
                raise CorruptStoreError(f"{path}: {len(raw)} bytes, not int64 values", path=path)
            columns[name] = np.frombuffer(raw, dtype="<i8").astype(np.int64)
        n = len(columns["episode_length"])
        if not len(columns["episode_start"]) == n == len(columns["episode_task_index"]):
            raise CorruptStoreError(f"{root}: episode table arrays have different lengths")
        zeros = np.zeros(n, dtype=np.int64)
        table = EpisodeTable(columns["episode_start"], columns["episode_length"], columns["episode_task_index"],
                             np.arange(n), zeros, zeros, zeros)
        return table, PackLayout(table.length, int(table.length[-1]) if n else 0)
    episodes = _key(attrs, "episodes", dict, where)
    columns = {}
    for key in ("start", "length", "task_index", "chunk", "episode_index_shift", "index_shift"):
        values = episodes.get(key)
        if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise CorruptStoreError(f"{where}: episodes.{key} must be a list of integers")
        columns[key] = np.asarray(values, dtype=np.int64)
    next_chunk = checked_int(attrs.get("next_chunk"), f"{where}: next_chunk", 0, MAX_PACKS)
    chunk = columns["chunk"]
    if len(chunk) and (chunk.min() < 0 or chunk.max() >= next_chunk or (np.diff(chunk) <= 0).any()):
        raise CorruptStoreError(f"{where}: episodes.chunk lists chunk ids out of order or out of range")
    rows = np.zeros(next_chunk, dtype=np.int64)
    rows[chunk] = columns["length"]
    table = EpisodeTable(columns["start"], columns["length"], columns["task_index"], chunk,
                         np.zeros(len(chunk), dtype=np.int64), columns["episode_index_shift"], columns["index_shift"])
    return table, PackLayout(rows, int(rows[-1]) if next_chunk else 0)


# paths ----------------------------------------------------------------------------------------------------
def check_array_name(name: str) -> str:
    """Refuse feature names that are not safe as a folder and zarr node name (they come from metadata)."""
    if (not isinstance(name, str) or not name or name in (".", "..") or name.startswith("__") or name.startswith(".")
            or any(c in name for c in "/\\\0") or name in EPISODE_ARRAYS or name in (LIVE_ARRAY, ROOT)):
        raise UnsupportedStoreError(f"feature name {name!r:.80} cannot be stored as a zarr array",
                                    feature=str(name))
    return name


def chunk_path(root: str | os.PathLike, name: str, pack: int, ndim: int) -> str:
    """Path of pack ``pack`` of array ``name`` with ``ndim`` dimensions (frame axis included)."""
    return f"{os.fspath(root)}/{name}/c/{pack}" + "/0" * (ndim - 1)


def retired_path(root: str | os.PathLike, name: str, pack: int) -> str:
    """Where a retired pack file waits until it is deleted."""
    return f"{os.fspath(root)}/.retired/{name}/{pack}"


def live_path(root: str | os.PathLike, pack: int) -> str:
    return f"{os.fspath(root)}/{LIVE_ARRAY}/c/{pack}"


def stats_path(root: str | os.PathLike, pack: int, offset: int) -> Path:
    return Path(root) / ".episode_stats" / f"{pack}-{offset}.json"


# reading ----------------------------------------------------------------------------------------------------
def read_root(root: Path) -> dict:
    """The root ``zarr.json`` document of a committed store (JSON only; :func:`read_state` validates it)."""
    path = Path(root) / ROOT
    try:
        data = read_bounded(path, MAX_ROOT_BYTES, what="root zarr.json")
    except (FileNotFoundError, NotADirectoryError):
        raise SourceNotFoundError(f"{root}: not a lerobot_zarr store (no committed zarr.json)", path=root) from None
    except IsADirectoryError:
        raise CorruptStoreError(f"{path}: is a folder, not the store's root file", path=path) from None
    doc = load_json(data, str(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("attributes"), dict) \
            or not isinstance(doc["attributes"].get(ATTRS_KEY), dict):
        raise CorruptStoreError(f"{path}: not a lerobot_zarr store (no '{ATTRS_KEY}' attributes)", path=path)
    return doc


def has_commit_point(root: str | os.PathLike) -> bool:
    """Whether ``root`` holds a root ``zarr.json`` (a store, or something claiming to be one: read it to know)."""
    return (Path(root) / ROOT).is_file()


_resolver: Callable[[Path], StoreState] | None = None


def set_resolver(resolve: Callable[[Path], StoreState]) -> None:
    """Who resolves a store's unresolved episodes (:attr:`StoreState.unresolved`) when read: reads them from the
    store's source and commits them, returning the new state (the writing layer's, which reaches the source)."""
    global _resolver
    _resolver = resolve


def read_state(root: str | os.PathLike, *, log: bool = True, resolve: bool | Iterable[int] = True) -> StoreState:
    """Read and validate the committed state: one JSON read (no zarr call, no data read), then the commits of the
    log applied (a format-4 root; ``log=False``: the root's state alone). A store with unresolved episodes (format
    5) has them resolved first (a read of its source and a commit: :func:`set_resolver`); ``resolve=False``: as
    it is, their table entries placeholders (what an open of other episodes needs); episode indices: only if some
    of them are unresolved (indices outside the store ignored)."""
    root = Path(root)
    for _ in range(100):  # the root read and the log read must be of one commit (a writer folding meanwhile)
        before = _identity(root / ROOT)
        doc = read_root(root)
        attrs = doc["attributes"][ATTRS_KEY]
        logged = log and attrs.get("format_version") == LOGGED_FORMAT_VERSION
        data = read_log(root) if logged else b""
        if not logged or _identity(root / ROOT) == before:
            break
    consolidated = doc.get("consolidated_metadata", {})
    consolidated = consolidated.get("metadata", {}) if isinstance(consolidated, dict) else {}
    state = StoreState.from_json(root, attrs, consolidated)
    recorded = attrs["hashes"].get("root") if isinstance(attrs.get("hashes"), dict) else None
    if recorded is not None:
        state = replace(state, root_intact=functools.cache(lambda: root_hash(attrs) == recorded))
    if logged:
        where = str(root / LOG_FILE)
        records = parse_records(data, where)
        for i, record in enumerate(records):
            state = apply_record(state, record, f"{where}: record {i}")
        _check_table(state.table, state.packs, len(state.tasks), where)
        state = replace(state, log_records=records)
    if state.unresolved and not isinstance(resolve, bool):
        mask = state.unresolved_mask()
        resolve = any(0 <= e < len(mask) and mask[e] for e in map(int, resolve))
    if state.unresolved and resolve:
        if _resolver is None:
            raise NotMaterializedError(f"{root}: episodes of {len(state.unresolved)} row groups of the source's "
                                       f"episode table are not resolved yet, and nothing here can read them",
                                       path=root)
        return _resolver(root)
    return state


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def counted_info(info: Mapping[str, Any], table: EpisodeTable, n_tasks: int) -> dict:
    """``info`` with the counters LeRobot keeps in it (episodes, frames, tasks, the train split) for ``table``."""
    return dict(info, total_episodes=len(table), total_frames=int(table.length.sum()), total_tasks=n_tasks,
                splits={"train": f"0:{len(table)}"} if len(table) else {})


def apply_record(state: StoreState, record: Mapping[str, Any], where: str) -> StoreState:
    """``state`` with one commit of the log applied (a record of a generation it already holds changes nothing):
    one episode appended, or the last one extended, after ``drop`` of the oldest were dropped (a ring buffer); new
    packs and tasks; the content hashes of the rows written. What a writer's append commits (see
    :mod:`lerobot_zarr.writing.transaction`); the writer makes its own next state with this function too."""
    try:
        generation = checked_int(record["generation"], f"{where}: generation", 0)
        if generation <= state.generation:
            return state
        base = checked_int(record["base"], f"{where}: base", 0)
        if base != state.generation:
            raise CorruptStoreError(f"{where}: a commit on generation {base}, but the store is at generation "
                                    f"{state.generation} there (a log of another store, or damaged)")
        table, n = state.table, len(state.table)
        drop = checked_int(record["drop"], f"{where}: drop", 0, n)
        extend = record["extend"]
        if not isinstance(extend, bool) or (extend and drop >= n):
            raise CorruptStoreError(f"{where}: extend must be a bool, and an extended episode must exist")
        row = record["episode"]
        if not isinstance(row, list) or len(row) != 6:
            raise CorruptStoreError(f"{where}: episode must be [length, task_index, chunk, offset, "
                                    f"episode_index_shift, index_shift]")
        length, task, chunk, offset, shift, index_shift = (
            checked_int(v, f"{where}: episode", -1 if k == 1 else 0, MAX_FRAMES) for k, v in enumerate(row))
        packs = record["packs"]
        new_rows = [checked_int(v, f"{where}: packs.new", 0, MAX_ROWS) for v in packs["new"]]
        next_row = checked_int(packs["next_row"], f"{where}: packs.next_row", 0, MAX_ROWS)
        tasks = record["tasks"]
        if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
            raise CorruptStoreError(f"{where}: tasks must be strings")
        entries = {}
        for item in record["hashes"]:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], Mapping)):
                raise CorruptStoreError(f"{where}: hashes entries are [pack, offset, {{feature: crc32c}}]")
            entries[(checked_int(item[0], f"{where}: hashes", 0, MAX_PACKS),
                     checked_int(item[1], f"{where}: hashes", 0, MAX_ROWS))] = {
                name: checked_int(v, f"{where}: hashes", 0, 2**32 - 1) for name, v in item[2].items()
                if name in state.arrays}
    except (KeyError, TypeError, AttributeError) as exc:
        raise CorruptStoreError(f"{where}: malformed commit record ({type(exc).__name__}: {exc})") from None
    new_table = table.appended((length, task, chunk, offset, shift, index_shift), drop=drop, extend=extend)
    all_tasks = (*state.tasks, *tasks)
    rows = appended(state.packs.rows, new_rows) if new_rows else state.packs.rows
    new = replace(state, table=new_table, tasks=all_tasks, generation=generation, packs=PackLayout(rows, next_row),
                  info=counted_info(state.info, new_table, len(all_tasks)), zarr_copies=None)
    return new.all_materialized().with_hashes(entries)
