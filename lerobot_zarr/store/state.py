"""The store's root state: :class:`StoreState` (the episode table, packs, features, hashes), reading and
validating it, and its one commit (see the contract in :mod:`lerobot_zarr.store`)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import json
import math
import os
import shutil
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from ..utils.fileio import (
    WriterLock,
    atomic_write,
    check_in_store,
    create_sized,
    data_ranges,
    disk_error,
    flush_filesystem,
    load_json,
    open_nofollow,
    pwrite_all,
    read_bounded,
)
from ..utils.hashing import ALGORITHM, crc32c
from .zarr_meta import EPISODE_ARRAYS, LIVE_ARRAY, ROOT, dump, metadata_documents
from ..errors import CorruptStoreError, SourceNotFoundError, StoreExistsError, UnsupportedStoreError
from ..lerobot.format import CAMERA_DTYPES

__all__ = [
    "FORMAT_VERSION",
    "MAX_EPISODES",
    "MAX_FRAMES",
    "MAX_FRAME_BYTES",
    "MAX_PACK_BYTES",
    "MAX_PACKS",
    "MAX_ROOT_BYTES",
    "MAX_ROWS",
    "ATTRS_KEY",
    "LIVE_ARRAY",
    "EPISODE_ARRAYS",
    "DEFAULT_PACK_BYTES",
    "STORAGES",
    "Storage",
    "ArraySpec",
    "array_spec",
    "EpisodeTable",
    "PackLayout",
    "StoreState",
    "chunk_path",
    "retired_path",
    "live_path",
    "stats_path",
    "to_ranges",
    "from_ranges",
    "check_array_name",
    "check_new_store_location",
    "repair_live",
    "live_runs",
    "live_matches",
    "ContentHashes",
    "location_key",
    "root_hash",
    "has_commit_point",
    "read_root",
    "read_state",
    "create_store",
    "commit",
    "plan_packs",
    "pack_rows_target",
    "WriterLock",
]

FORMAT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)
ATTRS_KEY = "lerobot_zarr"
DEFAULT_PACK_BYTES = 32 << 20
Storage = Literal["raw", "compact", "mp4"]  # how the store keeps an array
STORAGES = get_args(Storage)
_KINDS = ("numeric", *sorted(CAMERA_DTYPES))
_TABLE_KEYS = ("start", "length", "task_index", "chunk", "offset", "episode_index_shift", "index_shift")
_CREATING = ".lerobot_zarr-creating"
CREATING_MARKER = _CREATING
_LIVE_PENDING = ".frame_live-pending"
MAX_ROWS = 1 << 40  # rows of one pack, frames of one episode: beyond any real dataset, and keeps ints exact
MAX_EPISODES = 1 << 20  # episodes of one store (10x DROID's; a column of the root inflates to 8 bytes each)
MAX_PACKS = 1 << 23  # pack ids ever used (retired ones included); with rows < 2**40, (pack, row) fits an int64
MAX_FRAMES = 1 << 48  # frames of a store, and what index shifts may add: sums of them cannot overflow int64
MAX_FRAME_BYTES = 1 << 32  # bytes of one frame of one feature
MAX_PACK_BYTES = 1 << 46  # bytes of one raw pack file (the address space a feature may reserve)
MAX_ROOT_BYTES = 512 << 20  # the root zarr.json (about 60 bytes per episode and feature at most)


@dataclass(frozen=True)
class ArraySpec:
    """A frame-indexed array of the store: numpy dtype, per-frame shape and trailing dimension names."""

    dtype: np.dtype
    frame_shape: tuple[int, ...]
    dims: tuple[str, ...]
    kind: str = "numeric"
    storage: Storage = "raw"
    shard_index: Literal["start", "end"] = "start"  # compact storage: where each pack's shard index is
    codec: tuple[tuple[str, Any], ...] = ()  # compact storage: the frame codec (FrameCodec.describe() items)
    resize: tuple[tuple[str, Any], ...] = ()  # cameras resized from the source: {"from", "size", "crop", ...}

    @property
    def codec_spec(self) -> dict[str, Any]:
        """The frame codec of a compact array (formats before the codec was recorded: zstd level 3)."""
        return dict(self.codec) if self.codec else {"codec": "zstd", "level": 3}

    @property
    def resize_spec(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.resize}

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frame_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return 1 + len(self.frame_shape)


def array_spec(dtype: str, frame_shape: tuple[int, ...], names: Any = None) -> ArraySpec:
    """The store array of a LeRobot feature: ``dtype`` is LeRobot's ("float32", "image", "video"...), ``frame_shape``
    the stored per-frame shape (LeRobot's shape ``[1]`` is stored as scalars: ``()``)."""
    if dtype in CAMERA_DTYPES:
        dims = tuple(n if isinstance(n, str) else f"dim_{k}" for k, n in enumerate(names or ()))
        if len(dims) != 3 or len(set(dims)) != 3:
            dims = ("height", "width", "channels")
        return ArraySpec(np.dtype("uint8"), tuple(frame_shape), dims, dtype)
    return ArraySpec(np.dtype(dtype).newbyteorder("<"), tuple(frame_shape),
                     tuple(f"dim_{k}" for k in range(len(frame_shape))))


def _encode_column(values: np.ndarray) -> str:
    diffs = np.diff(np.asarray(values, dtype=np.int64), prepend=np.int64(0)).astype("<i8")
    return base64.b64encode(zlib.compress(diffs.tobytes(), 1)).decode("ascii")


def _decode_column(text: Any, where: str, max_items: int, *, exactly: int | None = None) -> np.ndarray:
    """An encoded int64 column of at most ``max_items`` entries (``exactly`` that many when given): decompressed
    with a bound, so a small root cannot ask for gigabytes (a zlib "bomb")."""
    if not isinstance(text, str):
        raise CorruptStoreError(f"{where}: expected an encoded int64 column (a string), got {type(text).__name__}")
    limit = 8 * (max_items if exactly is None else exactly)
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(text.encode("ascii"), validate=True), limit + 1)
    except (binascii.Error, zlib.error, UnicodeEncodeError, ValueError) as exc:
        raise CorruptStoreError(f"{where}: undecodable int64 column ({exc})") from None
    if len(raw) > limit or inflater.unconsumed_tail:
        raise CorruptStoreError(f"{where}: int64 column of more than {limit // 8} entries"
                                + (" (the store's episode count)" if exactly is not None else ""))
    if not inflater.eof:
        raise CorruptStoreError(f"{where}: undecodable int64 column (truncated compressed data)")
    if len(raw) % 8 or (exactly is not None and len(raw) != limit):
        raise CorruptStoreError(f"{where}: int64 column of {len(raw)} bytes, expected "
                                + (f"{limit} ({exactly} entries)" if exactly is not None else "a multiple of 8"))
    with np.errstate(over="ignore"):
        values = np.cumsum(np.frombuffer(raw, dtype="<i8")).astype(np.int64)
    return values


def _frozen(values: Any) -> np.ndarray:
    out = np.array(values, dtype=np.int64).reshape(-1)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class EpisodeTable:
    """The committed episodes: read-only int64 arrays over episodes (see the module docstring)."""

    start: np.ndarray
    length: np.ndarray
    task_index: np.ndarray
    chunk: np.ndarray
    offset: np.ndarray
    episode_index_shift: np.ndarray
    index_shift: np.ndarray

    def __post_init__(self) -> None:
        n = len(np.asarray(self.length).reshape(-1))
        for key in _TABLE_KEYS:
            values = _frozen(getattr(self, key))
            if len(values) != n:
                raise CorruptStoreError(f"episode table column {key!r} has {len(values)} entries for {n} episodes")
            object.__setattr__(self, key, values)

    @classmethod
    def contiguous(cls, length: Iterable[int], task_index: Iterable[int], chunk: Iterable[int],
                   offset: Iterable[int], episode_index_shift: Iterable[int] | None = None,
                   index_shift: Iterable[int] | None = None) -> EpisodeTable:
        """A table whose episodes follow each other from global index 0 (what writers keep)."""
        length = np.asarray(list(length) if not isinstance(length, np.ndarray) else length, dtype=np.int64)
        zeros = np.zeros(len(length), dtype=np.int64)
        return cls(np.cumsum(length) - length, length, task_index, chunk, offset,
                   zeros if episode_index_shift is None else episode_index_shift,
                   zeros if index_shift is None else index_shift)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.length

    def __len__(self) -> int:
        return len(self.length)

    def take(self, keep: np.ndarray) -> EpisodeTable:
        """The rows ``keep`` (a mask or indices), columns unchanged."""
        return EpisodeTable(*(getattr(self, key)[keep] for key in _TABLE_KEYS))

    def to_json(self) -> dict[str, str]:
        return {key: _encode_column(getattr(self, key)) for key in _TABLE_KEYS}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> EpisodeTable:
        if not isinstance(doc, Mapping):
            raise CorruptStoreError(f"{where}: 'episodes' must be an object of encoded columns")
        missing = [key for key in _TABLE_KEYS if key not in doc]
        if missing:
            raise CorruptStoreError(f"{where}: 'episodes' lacks the column(s) {missing}")
        length = _decode_column(doc["length"], f"{where}: episodes.length", MAX_EPISODES)
        columns = {key: length if key == "length" else
                   _decode_column(doc[key], f"{where}: episodes.{key}", MAX_EPISODES, exactly=len(length))
                   for key in _TABLE_KEYS}
        return cls(*(columns[key] for key in _TABLE_KEYS))


@dataclass(frozen=True)
class PackLayout:
    """Rows of every pack id (0: retired) and the rows used so far in the last pack."""

    rows: np.ndarray
    next_row: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", _frozen(self.rows))

    def __len__(self) -> int:
        return len(self.rows)

    def zarr_sizes(self) -> np.ndarray:
        """Frames of each pack along zarr's ``frame`` axis: its rows, or one filler row for a retired pack."""
        return np.maximum(self.rows, 1)

    def zarr_starts(self) -> np.ndarray:
        sizes = self.zarr_sizes()
        return np.cumsum(sizes) - sizes

    def free_rows(self) -> int:
        """Unused rows at the end of the last pack (where appends go)."""
        return int(self.rows[-1]) - self.next_row if len(self.rows) else 0

    def with_pack(self, rows: int, used: int) -> PackLayout:
        """One more pack of ``rows`` rows, the first ``used`` of them in use."""
        return PackLayout(np.append(self.rows, int(rows)), int(used))

    def retire(self, packs: Iterable[int]) -> PackLayout:
        rows = self.rows.copy()
        rows[list(packs)] = 0
        return PackLayout(rows, self.next_row if len(rows) and rows[-1] else 0)

    def to_json(self) -> dict[str, Any]:
        return {"rows": _encode_column(self.rows), "next_row": self.next_row}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> PackLayout:
        if not isinstance(doc, Mapping) or "rows" not in doc:
            raise CorruptStoreError(f"{where}: 'packs' must be an object with 'rows' and 'next_row'")
        rows = _decode_column(doc["rows"], f"{where}: packs.rows", MAX_PACKS)
        next_row = _integer(doc.get("next_row"), f"{where}: packs.next_row", 0, int(rows[-1]) if len(rows) else 0)
        if (rows < 0).any() or (rows > MAX_ROWS).any():
            raise CorruptStoreError(f"{where}: packs.rows holds a negative or impossibly large row count")
        return cls(rows, next_row)


def location_key(chunk: Any, offset: Any) -> Any:
    """One int64 per episode location (pack, row): packs < 2**23 and rows < 2**40 keep it exact and ordered."""
    return (np.asarray(chunk, dtype=np.int64) << 40) | np.asarray(offset, dtype=np.int64)


class ContentHashes:
    """The content hash (CRC-32C, :mod:`lerobot_zarr.utils.hashing`) of each committed episode and feature, keyed by the episode's
    location (pack, row offset): rows are never given to another episode, so a hash stays with its rows while
    deletions renumber episodes, and an episode moved to other rows carries its hash explicitly. ``-1``: none
    recorded (an episode not fetched yet, a camera unavailable in it, or a store made before hashes existed).
    ``files``: hashes of fixed metadata files of the store (``<camera>/mp4.json``). Immutable.

    Read from a root, the columns are decoded when first used (writers, ``verify``): sampling never needs them,
    and opening a store of 100,000 episodes should not pay for them."""

    def __init__(self, keys: np.ndarray | None = None, values: Mapping[str, np.ndarray] | None = None,
                 files: Mapping[str, int] | None = None, *, pending: tuple | None = None):
        self._keys = np.zeros(0, np.int64) if keys is None else keys  # sorted, unique
        self._values = dict(values or {})  # feature -> int64 aligned with keys
        self._files = dict(files or {})
        self._pending = pending  # (doc, table, names, where): decoded on first use

    def _decoded(self) -> None:
        if self._pending is not None:
            self._keys, self._values, self._files = _decode_hashes(*self._pending)
            self._pending = None

    def readable(self) -> CorruptStoreError | None:
        """None if the columns decode, else the error saying what is wrong with them."""
        try:
            self._decoded()
        except CorruptStoreError as exc:
            return exc
        return None

    @property
    def keys(self) -> np.ndarray:
        self._decoded()
        return self._keys

    @property
    def values(self) -> Mapping[str, np.ndarray]:
        self._decoded()
        return self._values

    @property
    def files(self) -> Mapping[str, int]:
        self._decoded()
        return self._files

    def aligned(self, table: EpisodeTable, name: str, where: tuple[np.ndarray, np.ndarray] | None = None
                ) -> np.ndarray:
        """Hash of every episode of ``table`` for feature ``name`` (-1 where none is recorded); ``where``: the
        table's :meth:`positions`, when several features are looked up."""
        out = np.full(len(table), -1, dtype=np.int64)
        column = self.values.get(name)
        if column is None or not len(self.keys) or not len(table):
            return out
        at, hit = self.positions(table) if where is None else where
        out[hit] = column[at[hit]]
        return out

    def positions(self, table: EpisodeTable) -> tuple[np.ndarray, np.ndarray]:
        """Where each episode of ``table`` is among the keys, and whether it is there at all."""
        want = location_key(table.chunk, table.offset)
        at = np.minimum(np.searchsorted(self.keys, want), max(len(self.keys) - 1, 0))
        return at, (self.keys[at] == want) if len(self.keys) else np.zeros(len(table), dtype=bool)

    def updated(self, entries: Mapping[tuple[int, int], Mapping[str, int]], files: Mapping[str, int] | None = None
                ) -> ContentHashes:
        """These hashes with ``entries`` ``{(pack, offset): {feature: hash}}`` recorded (replacing earlier ones)."""
        if not entries and not files:
            return self
        names = sorted({*self.values, *(n for per in entries.values() for n in per)})
        new_keys = np.unique(location_key([c for c, _ in entries], [o for _, o in entries])) if entries else \
            np.zeros(0, np.int64)
        if not len(self.keys) or (len(new_keys) and new_keys[0] > self.keys[-1]):  # appends: no sort
            keys = np.concatenate([self.keys, new_keys])
            old_at = np.arange(len(self.keys))
        else:
            keys = np.union1d(self.keys, new_keys)
            old_at = np.searchsorted(keys, self.keys)
        values = {}
        for name in names:
            column = np.full(len(keys), -1, dtype=np.int64)
            if name in self.values:
                column[old_at] = self.values[name]
            values[name] = column
        for (chunk, offset), per in entries.items():
            i = int(np.searchsorted(keys, (int(chunk) << 40) | int(offset)))
            for name, value in per.items():
                values[name][i] = -1 if value is None else int(value)
        return ContentHashes(keys, values, {**self.files, **(files or {})})

    def restricted(self, table: EpisodeTable, names: Iterable[str]) -> ContentHashes:
        """Only the hashes of ``table``'s episodes and of ``names``."""
        names = [n for n in names if n in self.values]
        want = np.unique(location_key(table.chunk, table.offset)) if len(table) else np.zeros(0, np.int64)
        keep = np.isin(self.keys, want)
        return ContentHashes(self.keys[keep], {n: self.values[n][keep] for n in names}, dict(self.files))

    def to_json(self, table: EpisodeTable, names: Iterable[str]) -> dict[str, Any]:
        features = {}
        where = self.positions(table) if len(self.keys) and len(table) else None
        for name in names:
            column = self.aligned(table, name, where)
            missing = _ranges_of(column < 0)
            features[name] = {ALGORITHM: base64.b64encode(column.astype("<u4").tobytes()).decode("ascii"),
                              "missing": [list(r) for r in missing]}
        return {"algorithm": ALGORITHM, "features": features, "files": dict(self.files)}

    @classmethod
    def from_json(cls, doc: Any, table: EpisodeTable, names: Iterable[str], where: str) -> ContentHashes:
        """Hashes read from a root: the structure checked now, the columns decoded (and checked) when used."""
        if doc is None:
            return cls()
        if not isinstance(doc, Mapping) or doc.get("algorithm") != ALGORITHM:
            raise CorruptStoreError(f"{where}: 'hashes' must be an object with algorithm {ALGORITHM!r}")
        features, files = doc.get("features", {}), doc.get("files", {})
        if not isinstance(features, Mapping) or not isinstance(files, Mapping):
            raise CorruptStoreError(f"{where}: hashes.features and hashes.files must be objects")
        root = doc.get("root")
        if root is not None:
            _integer(root, f"{where}: hashes.root", 0, 2**32 - 1)
        return cls(pending=(doc, table, tuple(names), where))


def _decode_hashes(doc: Mapping, table: EpisodeTable, names: tuple[str, ...], where: str
                   ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, int]]:
    n = len(table)
    keys = location_key(table.chunk, table.offset)
    order = None if not n or (np.diff(keys) > 0).all() else np.argsort(keys, kind="stable")
    if order is not None and len(np.unique(keys)) != n:
        raise CorruptStoreError(f"{where}: two episodes share a location (episodes.chunk/offset)")
    values = {}
    for name in names:
        entry = doc["features"].get(name)
        if entry is None:
            continue
        at = f"{where}: hashes.features[{name!r}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get(ALGORITHM), str):
            raise CorruptStoreError(f"{at} must be an object with an encoded {ALGORITHM!r} column")
        text = entry[ALGORITHM]
        if len(text) != 4 * ((4 * n + 2) // 3):
            raise CorruptStoreError(f"{at}: a column of {len(text)} characters for {n} episodes")
        try:
            raw = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise CorruptStoreError(f"{at}: undecodable column ({exc})") from None
        if len(raw) != 4 * n:
            raise CorruptStoreError(f"{at}: a column of {len(raw)} bytes for {n} episodes")
        column = np.frombuffer(raw, dtype="<u4").astype(np.int64)
        for a, b in _parse_ranges(entry.get("missing", []), n, f"{at}.missing"):
            column[a:b] = -1
        values[name] = column if order is None else column[order]
    files = {str(key): _integer(value, f"{where}: hashes.files[{str(key)!r:.60}]", 0, 2**32 - 1)
             for key, value in doc["files"].items()}
    return (keys if order is None else keys[order]), values, files


def _integer(value: Any, where: str, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptStoreError(f"{where}: expected an integer, got {value!r:.80}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise CorruptStoreError(f"{where}: {value} is outside [{low}, {high}]")
    return value


def to_ranges(indices: Iterable[int]) -> list[list[int]]:
    """Sorted unique integers -> half-open ``[first, stop)`` ranges."""
    out: list[list[int]] = []
    for i in sorted(set(int(i) for i in indices)):
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def from_ranges(ranges: Iterable[Iterable[int]]) -> list[int]:
    return [i for a, b in ranges for i in range(a, b)]


def _mask(ranges: Iterable[tuple[int, int]], n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for a, b in ranges:
        mask[a:b] = True
    return mask


def _ranges_of(mask: np.ndarray) -> tuple[tuple[int, int], ...]:
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return tuple((int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True))


@dataclass(frozen=True)
class StoreState:
    """The committed root state of a store (the root ``zarr.json``), typed and validated. Immutable: writers make
    the next state with :func:`dataclasses.replace` and publish it with :func:`commit`."""

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
    # read from disk: whether the root matches its recorded hash (asked, once, before a commit builds on it)
    root_intact: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

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
        return _mask(self.materialized.get(feature, ()), len(self.table))

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
            materialized[name] = _ranges_of(mask)
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
            materialized[name] = _ranges_of(mask)
        return replace(self, materialized=materialized)

    def all_materialized(self) -> StoreState:
        """This state with every episode committed for every array (what a writer's commit says)."""
        full = ((0, len(self.table)),) if len(self.table) else ()
        return replace(self, materialized={name: full for name in self.arrays})

    # JSON ---------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "info": self.info,
            "tasks": list(self.tasks),
            "stats": self.stats,
            "source": self.source,
            "not_materialized": dict(self.not_materialized),
            "features": {name: {"kind": spec.kind, "dtype": spec.dtype.str.lstrip("<>|="),
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
        if kind != "numeric" and (dtype != np.uint8 or len(shape) != 3 or shape[2] not in (1, 3, 4)):
            raise CorruptStoreError(f"{at}: cameras are stored as uint8 (height, width, 1, 3 or 4 channels) frames, "
                                    f"got {dtype}{shape}")
        spec = ArraySpec(dtype, tuple(shape), tuple(dims), kind, storage, shard_index,
                         tuple((str(k), _frozen_json(v)) for k, v in codec.items()),
                         tuple((str(k), _frozen_json(v)) for k, v in resize.items()))
        if storage == "compact":
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


def _parse_ranges(value: Any, n: int, where: str, with_reason: bool = False) -> tuple:
    if not isinstance(value, list):
        raise CorruptStoreError(f"{where} must be a list of ranges")
    out = []
    for item in value:
        width = 3 if with_reason else 2
        if not isinstance(item, list) or len(item) != width:
            raise CorruptStoreError(f"{where}: {item!r:.60} is not a [first, stop{', reason' * with_reason}] range")
        a = _integer(item[0], where, 0, n)
        b = _integer(item[1], where, a, n)
        out.append((a, b, str(item[2])) if with_reason else (a, b))
    return tuple(out)


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
    if version == 3:
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
    materialized = {name: _parse_ranges(features[name].get("episodes", []), n, f"{where}: features[{name!r}].episodes")
                    for name in arrays}
    unavailable = {}
    for name, runs in _key(attrs, "unavailable", dict, where, {}).items():
        if name in arrays:
            unavailable[name] = _parse_ranges(runs, n, f"{where}: unavailable[{name!r}]", with_reason=True)
    not_materialized = {str(k): str(v) for k, v in _key(attrs, "not_materialized", dict, where, {}).items()}
    retired = []
    for item in _key(attrs, "retired", list, where, []):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], (int, float))):
            raise CorruptStoreError(f"{where}: retired entries are [pack, unix_time], got {item!r:.60}")
        retired.append((_integer(item[0], f"{where}: retired", 0, max(len(packs) - 1, 0)), float(item[1])))
    capacity = _key(attrs, "capacity_frames", (int, type(None)), where, None)
    if capacity is not None and (isinstance(capacity, bool) or capacity < 1):
        raise CorruptStoreError(f"{where}: capacity_frames must be a positive integer or null")
    pending = []
    for item in _key(attrs, "pending_tasks", (list, type(None)), where, None) or []:
        if not (isinstance(item, list) and len(item) in (2, 3)):
            raise CorruptStoreError(f"{where}: pending_tasks entries are [chunk, offset, task_index]")
        if len(item) == 2:  # format 2: [chunk, task_index], one episode per chunk at row 0
            item = [item[0], 0, item[1]]
        pending.append((_integer(item[0], f"{where}: pending_tasks", 0, max(len(packs) - 1, 0)),
                        _integer(item[1], f"{where}: pending_tasks", 0, MAX_ROWS),
                        _integer(item[2], f"{where}: pending_tasks", 0, len(tasks) - 1)))
    hashes = ContentHashes.from_json(attrs.get("hashes"), table, arrays, where)
    return StoreState(
        root=root, info=info, tasks=tuple(tasks), stats=stats, source=source, arrays=arrays, table=table,
        packs=packs, materialized=materialized, unavailable=unavailable, not_materialized=not_materialized,
        retired=tuple(retired), generation=_integer(attrs.get("generation", 0), f"{where}: generation", 0),
        pack_bytes=_integer(attrs.get("pack_bytes", DEFAULT_PACK_BYTES), f"{where}: pack_bytes", 1),
        capacity_frames=capacity, pending_tasks=tuple(pending), read_version=version, hashes=hashes)


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
    next_chunk = _integer(attrs.get("next_chunk"), f"{where}: next_chunk", 0, MAX_PACKS)
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


def read_state(root: str | os.PathLike) -> StoreState:
    """Read and validate the committed state: one JSON read (no zarr call, no data read)."""
    root = Path(root)
    doc = read_root(root)
    consolidated = doc.get("consolidated_metadata", {})
    consolidated = consolidated.get("metadata", {}) if isinstance(consolidated, dict) else {}
    attrs = doc["attributes"][ATTRS_KEY]
    state = StoreState.from_json(root, attrs, consolidated)
    recorded = attrs["hashes"].get("root") if isinstance(attrs.get("hashes"), dict) else None
    return state if recorded is None else replace(state, root_intact=functools.cache(
        lambda: root_hash(attrs) == recorded))


# packs ------------------------------------------------------------------------------------------------------
def pack_rows_target(arrays: Mapping[str, ArraySpec], pack_bytes: int) -> int:
    """Rows of a new pack: as many frames of the widest raw feature as fit ``pack_bytes`` (at least one)."""
    widest = max((s.frame_bytes for s in arrays.values() if s.storage == "raw"), default=1)
    return max(1, int(pack_bytes) // max(widest, 1))


def plan_packs(lengths: np.ndarray, target_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Consecutive episodes grouped into packs of at most ``target_rows`` rows (an episode longer than that alone):
    ``(pack of each episode, row offset of each episode, rows of each pack)``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    chunk = np.empty(len(lengths), dtype=np.int64)
    offset = np.empty(len(lengths), dtype=np.int64)
    rows: list[int] = []
    used = target_rows  # forces a first pack
    for e, n in enumerate(lengths.tolist()):
        if used + n > target_rows and used > 0:
            rows.append(0)
            used = 0
        chunk[e], offset[e] = len(rows) - 1, used
        used += n
        rows[-1] = used
    return chunk, offset, np.asarray(rows, dtype=np.int64)


# creating and committing --------------------------------------------------------------------------------------
def check_new_store_location(root: Path) -> None:
    """Refuse to make a store in a file, over a store, or in a folder holding anything but a half-created store."""
    if root.exists() and (root.is_symlink() or not root.is_dir()):
        raise StoreExistsError(f"{root}: exists and is not a folder; a store needs a folder of its own", path=root)
    if (root / ROOT).is_file():
        raise StoreExistsError(f"{root}: is a store already (open it, e.g. open_dataset(root, mode='r+'), or choose "
                               f"another folder)", path=root)
    if root.is_dir() and not (root / _CREATING).exists():
        if any(p.name != ".lock" for p in root.iterdir()):
            raise StoreExistsError(f"{root}: folder is not empty and is not a lerobot_zarr store; refusing to write "
                                   f"into it", path=root)


def remove_creation_debris(root: Path) -> None:
    """Mark ``root`` as a store being created and empty it of an earlier creation that never committed."""
    root.mkdir(parents=True, exist_ok=True)
    leftovers = [p for p in root.iterdir() if p.name not in (".lock", _CREATING)]
    (root / _CREATING).touch()
    for p in leftovers:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def create_store(state: StoreState, *, keep_files: bool = False) -> StoreState:
    """Lay out a store at ``state.root`` and make its first commit. The folder must be empty or a half-created
    store (one killed before its first commit), whose debris is removed unless ``keep_files`` (the caller put the
    pack files its state lists there first, as a copy does). The table may list episodes to come (a transcode
    lists its source's, with their planned packs)."""
    root = state.root
    check_new_store_location(root)
    for name in state.arrays:
        check_array_name(name)
    folded = [name.casefold() for name in state.arrays]
    if len(set(folded)) != len(folded):
        raise UnsupportedStoreError(f"{root}: feature names {sorted(state.arrays)} differ only by case; they would "
                                    f"share a folder on case-insensitive filesystems", path=root)
    if keep_files:
        (root / _CREATING).touch()
    else:
        remove_creation_debris(root)
    state = commit(replace(state, generation=-1, read_version=FORMAT_VERSION), previous=None)
    (root / _CREATING).unlink()
    return state


def _write_zarr_copies(state: StoreState) -> None:
    """What zarr readers without consolidated metadata read: each array's ``zarr.json`` and the episode table
    arrays. Not the commit point: our readers never read them, and a commit writes them first."""
    root, table = state.root, state.table
    columns = {"episode_start": table.start, "episode_end": table.end, "episode_length": table.length,
               "episode_task_index": table.task_index, "episode_chunk": table.chunk, "episode_offset": table.offset,
               "episode_frame": state.episode_frame()}
    for name, values in columns.items():
        _make_folder(root, root / name / "c")
        _write_changed(root, root / name / "c" / "0", np.asarray(values, dtype="<i8").tobytes())
    for key, doc in metadata_documents(state, None).items():
        path = root / key
        _make_folder(root, path.parent)
        _write_changed(root, path, dump(doc))


def _make_folder(root: Path, folder: Path) -> None:
    """``folder`` inside the store made (with its parents) after checking no existing one is a link."""
    check_in_store(root, folder / "_")
    folder.mkdir(parents=True, exist_ok=True)


def _write_changed(root: Path, path: Path, data: bytes) -> None:
    """``atomic_write`` unless the file holds ``data`` already (most arrays' metadata is the same from one commit to
    the next, and a rename costs far more than a read)."""
    try:
        fd = open_nofollow(path, os.O_RDONLY, root=root)
    except OSError:
        same = False
    else:
        try:
            same = os.pread(fd, len(data) + 1, 0) == data
        finally:
            os.close(fd)
    if not same:
        atomic_write(path, data, durable=False, root=root)


def _live_runs(state: StoreState) -> np.ndarray:
    """(pack, offset, length) of every row run that is live in ``state``: its complete episodes."""
    t = state.table
    done = state.complete_episodes()
    return np.stack([t.chunk[done], t.offset[done], t.length[done]], axis=1) if len(t) else np.zeros((0, 3), np.int64)


def _set_live(root: Path, packs: PackLayout, runs: np.ndarray, value: bool) -> None:
    for pack, offset, length in runs.tolist():
        rows = int(packs.rows[pack])
        if not rows:
            continue
        path = live_path(root, pack)
        create_sized(path, rows, root=root)
        fd = open_nofollow(path, os.O_WRONLY, root=root)
        try:
            _write_flags(fd, offset, length, value, path)
        finally:
            os.close(fd)


_FLAG_BLOCK = 8 << 20  # frame_live bytes written or compared at a time: a huge declared pack allocates nothing


def _write_flags(fd: int, offset: int, length: int, value: bool, path: str) -> None:
    block = (b"\1" if value else b"\0") * min(length, _FLAG_BLOCK)
    for at in range(offset, offset + length, _FLAG_BLOCK):
        pwrite_all(fd, block[:min(_FLAG_BLOCK, offset + length - at)], at, path)


def _runs_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of ``a`` (pack, offset, length) that ``b`` does not hold (a run of ``b`` at the same place holds the
    first rows of a longer one: an episode extended in place)."""
    if not len(a) or not len(b):
        return a
    kb = location_key(b[:, 0], b[:, 1])
    ka = location_key(a[:, 0], a[:, 1])
    order = np.argsort(kb)
    position = np.minimum(np.searchsorted(kb[order], ka), len(b) - 1)
    held = np.where(kb[order][position] == ka, b[order[position], 2], 0)
    rest = a.copy()
    rest[:, 1] += held
    rest[:, 2] -= held
    return rest[rest[:, 2] > 0]


def repair_live(state: StoreState) -> None:
    """Rewrite every pack's ``frame_live`` that differs from the table (after a crash between a commit and its
    flags, or damage); the table is what lerobot_zarr reads, ``frame_live`` is for zarr and xarray readers."""
    for pack, runs in live_runs(state).items():
        rows = int(state.packs.rows[pack])
        if live_matches(state.root, pack, rows, runs):
            continue
        path = Path(live_path(state.root, pack))
        _make_folder(state.root, path.parent)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, root=state.root)
        try:
            os.ftruncate(fd, rows)
            for offset, length in runs:
                _write_flags(fd, offset, length, True, str(path))
        except OSError as exc:
            os.close(fd)
            os.unlink(tmp)
            raise disk_error(exc, path) from None
        os.close(fd)
        os.replace(tmp, path)


def live_runs(state: StoreState) -> dict[int, list[tuple[int, int]]]:
    """What ``frame_live`` must hold: per pack with rows, the ``(offset, length)`` runs of rows of complete
    committed episodes, in order (every other row is 0)."""
    out: dict[int, list[tuple[int, int]]] = {int(k): [] for k in np.flatnonzero(state.packs.rows > 0).tolist()}
    for pack, offset, length in sorted(_live_runs(state).tolist()):
        if pack in out:
            out[pack].append((offset, length))
    return out


def live_matches(root: Path, pack: int, rows: int, runs: list[tuple[int, int]]) -> bool:
    """Whether pack ``pack``'s ``frame_live`` file (``rows`` bytes) is 1 exactly at ``runs`` (a missing file holds
    no live row). Holes of a sparse file are not read."""
    path = live_path(root, pack)
    try:
        fd = open_nofollow(path, os.O_RDONLY, root=root)
    except FileNotFoundError:
        return not runs
    except CorruptStoreError:  # a link on the way
        return False
    try:
        if os.fstat(fd).st_size != rows:
            return False
        ranges = data_ranges(fd, rows)
        covered = 0
        for offset, length in runs:  # live rows must lie in data, never in a hole
            while covered < len(ranges) and ranges[covered][1] <= offset:
                covered += 1
            if covered == len(ranges) or ranges[covered][0] > offset or ranges[covered][1] < offset + length:
                return False
        starts = np.array([r[0] for r in runs], dtype=np.int64)
        ends = np.array([r[0] + r[1] for r in runs], dtype=np.int64)
        for a, b in ranges:
            for at in range(a, b, _FLAG_BLOCK):
                stop = min(b, at + _FLAG_BLOCK)
                want = np.zeros(stop - at, dtype=np.uint8)
                first = int(np.searchsorted(ends, at, side="right"))
                for s, e in zip(starts[first:].tolist(), ends[first:].tolist(), strict=True):
                    if s >= stop:
                        break
                    want[max(s, at) - at:min(e, stop) - at] = 1
                if os.pread(fd, stop - at, at) != want.tobytes():
                    return False
        return True
    finally:
        os.close(fd)


def root_hash(attrs: Mapping[str, Any]) -> int:
    """Content hash of the root state (every attribute but ``hashes``, in a canonical JSON form): damage to the
    root that still parses (a changed task string, stats, fps...) shows in ``verify``."""
    body = {k: v for k, v in attrs.items() if k != "hashes"}
    return crc32c(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def commit(state: StoreState, *, previous: StoreState | None, durable: bool = True) -> StoreState:
    """THE commit: publish ``state`` as the store's new committed state and return it (generation + 1).

    Order: zarr's copies of the metadata, rows becoming live flagged in ``frame_live``, a flush of everything
    written (``durable``: to disk), the atomic replacement of the root ``zarr.json``, then rows no longer live
    unflagged. ``previous`` is the state this one replaces (None when creating the store)."""
    root = state.root
    if previous is not None and previous.root_intact is not None and not previous.root_intact():
        raise CorruptStoreError(f"{root / ROOT}: its content differs from the hash recorded at its commit (damaged "
                                f"since?); nothing is committed on top of it (`lerobot-zarr verify {root}`; restore "
                                f"the store from a copy or make it again from its source)", path=root / ROOT)
    base = -1 if previous is None else previous.generation
    state = replace(state, generation=base + 1, read_version=FORMAT_VERSION, root_intact=None)
    pending = root / _LIVE_PENDING
    repair = pending.exists() or previous is None or previous.read_version < FORMAT_VERSION
    new_runs = _live_runs(state)
    old_runs = _live_runs(previous) if previous is not None else np.zeros((0, 3), np.int64)
    gone = _runs_difference(old_runs, new_runs)
    if len(gone) and not pending.exists():
        pending.touch()
    _write_zarr_copies(state)
    if not repair:
        _set_live(root, state.packs, _runs_difference(new_runs, old_runs), True)
    attrs = state.to_json()
    attrs["hashes"]["root"] = root_hash(attrs)
    root_doc = metadata_documents(state, {ATTRS_KEY: attrs})[ROOT]
    if durable:
        flush_filesystem(root)  # data reaches the disk before the metadata that lists it
    atomic_write(root / ROOT, dump(root_doc), durable=durable)
    if repair:
        repair_live(state)
    else:
        _set_live(root, state.packs, gone, False)
    with contextlib.suppress(FileNotFoundError):
        pending.unlink()
    return state
