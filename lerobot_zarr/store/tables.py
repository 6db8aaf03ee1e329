"""The store's tables, as typed values: :class:`ArraySpec` (one stored feature), :class:`EpisodeTable` (the
committed episodes), :class:`PackLayout` (the packs), their encoded int64 columns, episode ranges, the store's
limits, and how new episodes are planned into packs (see the contract in :mod:`lerobot_zarr.store`)."""

from __future__ import annotations

import base64
import binascii
import math
import threading
import weakref
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from ..errors import CorruptStoreError
from ..lerobot.format import CAMERA_DTYPES
from .text import TEXT_CODEC, TEXT_KINDS

__all__ = ["MAX_ROWS", "MAX_EPISODES", "MAX_PACKS", "MAX_FRAMES", "MAX_FRAME_BYTES", "MAX_PACK_BYTES",
           "DEFAULT_PACK_BYTES", "Storage", "STORAGES", "ArraySpec", "array_spec", "EpisodeTable", "PackLayout",
           "location_key", "sorted_distinct", "checked_int", "frozen_ints", "appended", "to_ranges", "from_ranges", "ranges_mask",
           "ranges_of",
           "parse_ranges", "pack_rows_target", "plan_packs"]

DEFAULT_PACK_BYTES = 32 << 20
Storage = Literal["raw", "compact", "mp4"]  # how the store keeps an array
STORAGES = get_args(Storage)
_TABLE_KEYS = ("start", "length", "task_index", "chunk", "offset", "episode_index_shift", "index_shift")
MAX_ROWS = 1 << 40  # rows of one pack, frames of one episode: beyond any real dataset, and keeps ints exact
MAX_EPISODES = 1 << 20  # episodes of one store (10x DROID's; a column of the root inflates to 8 bytes each)
MAX_PACKS = 1 << 23  # pack ids ever used (retired ones included); with rows < 2**40, (pack, row) fits an int64
MAX_FRAMES = 1 << 48  # frames of a store, and what index shifts may add: sums of them cannot overflow int64
MAX_FRAME_BYTES = 1 << 32  # bytes of one frame of one feature
MAX_PACK_BYTES = 1 << 46  # bytes of one raw pack file (the address space a feature may reserve)


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
    def is_text(self) -> bool:
        """A text array (``string`` or ``language``): variable-length UTF-8 per frame, kept compact."""
        return self.kind in TEXT_KINDS

    @property
    def frame_bytes(self) -> int:
        return int(math.prod(self.frame_shape)) * self.dtype.itemsize  # (no numpy call: cheap at every write)

    @property
    def ndim(self) -> int:
        return 1 + len(self.frame_shape)


def array_spec(dtype: str, frame_shape: tuple[int, ...], names: Any = None, stored: np.dtype | None = None
               ) -> ArraySpec:
    """The store array of a LeRobot feature: ``dtype`` is LeRobot's ("float32", "image", "video", "string",
    "language"...), ``frame_shape`` the stored per-frame shape (LeRobot's shape ``[1]`` is stored as scalars: ``()``),
    ``stored`` a camera's stored dtype (uint8; a depth map's uint16 or float32). Text features are kept compact
    (:mod:`.text`)."""
    if dtype in CAMERA_DTYPES:
        dims = tuple(n if isinstance(n, str) else f"dim_{k}" for k, n in enumerate(names or ()))
        if len(dims) != 3 or len(set(dims)) != 3:
            dims = ("height", "width", "channels")
        return ArraySpec(np.dtype(stored or "uint8").newbyteorder("<"), tuple(frame_shape), dims, dtype)
    if dtype in TEXT_KINDS:
        return ArraySpec(np.dtype(object), (), (), dtype, "compact", codec=(("codec", TEXT_CODEC),))
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


def frozen_ints(values: Any) -> np.ndarray:
    """``values`` as a read-only 1-D int64 array (one already is taken as it is, else a copy)."""
    if isinstance(values, np.ndarray) and values.dtype == np.int64 and values.ndim == 1 and \
            not values.flags.writeable:
        return values
    out = np.array(values, dtype=np.int64).reshape(-1)
    out.flags.writeable = False
    return out


_filled: dict[int, int] = {}  # id of a buffer made by appended() -> its rows in use
_filled_lock = threading.Lock()


def appended(column: np.ndarray, values: Any) -> np.ndarray:
    """``column`` with ``values`` after it along the first axis, as a new read-only array, in amortized O(len(values))
    (a commit's cost must not grow with the episodes before it): the result is a view of a buffer with room to grow
    (doubling), and appending to the newest view of a buffer writes into its free rows, which no view shows yet.
    Appending to any other array (an older view, a slice) copies it into a new buffer."""
    values = np.asarray(values)
    if np.result_type(column.dtype, values.dtype) != column.dtype:  # as np.concatenate would: a wider dtype
        out = np.concatenate([column, values.reshape(-1, *column.shape[1:])])
        out.flags.writeable = False
        return out
    values = values.reshape(-1, *column.shape[1:])
    n, k = len(column), len(values)
    owner = column.base
    with _filled_lock:
        # a view of the buffer with as many rows as it has in use, of its strides, is its newest (rows [0, n))
        if owner is not None and _filled.get(id(owner)) == n and n + k <= len(owner) and \
                column.strides == owner.strides and column.dtype == owner.dtype:
            owner[n:n + k] = values
        else:
            owner = np.empty((max(16, 2 * (n + k)), *column.shape[1:]), dtype=column.dtype)
            owner[:n], owner[n:n + k] = column, values
            weakref.finalize(owner, _filled.pop, id(owner), None)
        _filled[id(owner)] = n + k
    out = owner[:n + k]
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class EpisodeTable:
    """The committed episodes: read-only int64 arrays over episodes (see :mod:`lerobot_zarr.store`)."""

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
            values = frozen_ints(getattr(self, key))
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

    def appended(self, row: tuple[int, int, int, int, int, int], *, drop: int = 0, extend: bool = False
                 ) -> EpisodeTable:
        """This table after an append: its ``drop`` oldest episodes dropped (the kept ones' shifts grow by what was
        dropped), the last one replaced when ``extend``, then ``row`` = (length, task_index, chunk, offset,
        episode_index_shift, index_shift). A plain append costs O(1) amortized (:func:`appended`)."""
        length, task, chunk, offset, shift, index_shift = (int(v) for v in row)
        n = len(self)
        if not drop and not extend:
            start = int(self.start[-1] + self.length[-1]) if n else 0
            return EpisodeTable(*(appended(getattr(self, key), [v]) for key, v in zip(
                _TABLE_KEYS, (start, length, task, chunk, offset, shift, index_shift), strict=True)))
        kept = slice(drop, n - 1 if extend else n)
        dropped = int(self.length[:drop].sum())
        return EpisodeTable.contiguous(
            np.append(self.length[kept], length), np.append(self.task_index[kept], task),
            np.append(self.chunk[kept], chunk), np.append(self.offset[kept], offset),
            np.append(self.episode_index_shift[kept] + drop, shift),
            np.append(self.index_shift[kept] + dropped, index_shift))

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
        object.__setattr__(self, "rows", frozen_ints(self.rows))

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
        return PackLayout(appended(self.rows, [int(rows)]), int(used))

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
        next_row = checked_int(doc.get("next_row"), f"{where}: packs.next_row", 0, int(rows[-1]) if len(rows) else 0)
        if (rows < 0).any() or (rows > MAX_ROWS).any():
            raise CorruptStoreError(f"{where}: packs.rows holds a negative or impossibly large row count")
        return cls(rows, next_row)


def location_key(chunk: Any, offset: Any) -> Any:
    """One int64 per episode location (pack, row): packs < 2**23 and rows < 2**40 keep it exact and ordered."""
    return (np.asarray(chunk, dtype=np.int64) << 40) | np.asarray(offset, dtype=np.int64)


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted (``np.unique`` without its import of numpy.ma: ~0.03 s of CPU
    in a fresh process's first open)."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if len(ordered) else ordered


def checked_int(value: Any, where: str, low: int | None = None, high: int | None = None) -> int:
    """``value`` from a root document, if it is an integer within ``[low, high]``."""
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


def ranges_mask(ranges: Iterable[tuple[int, int]], n: int) -> np.ndarray:
    """Boolean mask over ``n`` items, True in the half-open ``ranges``."""
    mask = np.zeros(n, dtype=bool)
    for a, b in ranges:
        mask[a:b] = True
    return mask


def ranges_of(mask: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The half-open ranges where ``mask`` is True."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return tuple((int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True))


def parse_ranges(value: Any, n: int, where: str, with_reason: bool = False) -> tuple:
    """``[first, stop]`` (or ``[first, stop, reason]``) ranges of a root document, checked within ``[0, n]``."""
    if not isinstance(value, list):
        raise CorruptStoreError(f"{where} must be a list of ranges")
    out = []
    for item in value:
        width = 3 if with_reason else 2
        if not isinstance(item, list) or len(item) != width:
            raise CorruptStoreError(f"{where}: {item!r:.60} is not a [first, stop{', reason' * with_reason}] range")
        a = checked_int(item[0], where, 0, n)
        b = checked_int(item[1], where, a, n)
        out.append((a, b, str(item[2])) if with_reason else (a, b))
    return tuple(out)


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
