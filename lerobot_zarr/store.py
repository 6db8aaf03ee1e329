"""The on-disk store format: a Zarr v3 group that other tools can read. This docstring is the contract.

Layout of a store folder::

    zarr.json                     root group. Its write is the COMMIT POINT (atomic rename). It holds
                                  attributes["lerobot_zarr"] (below), including the episode table, and the
                                  consolidated metadata of every array.
    <feature>/zarr.json           one array per stored feature, C order, frames first
    <feature>/c/<k>/0/...         chunk k: the frames of one episode, exactly length * frame_bytes raw
                                  little-endian bytes, no header (the codec chain is the ``bytes`` codec alone)
    episode_start/ episode_end/ episode_length/ episode_task_index/ episode_chunk/
                                  1-D int64 arrays over dimension "episode" (one chunk, ``c/0``): a copy of the
                                  committed episode table for zarr/xarray readers (lerobot_zarr reads the root)
    .episode_stats/<k>.json       per-episode statistics of chunk k (kept by writers; not part of the hierarchy)
    .retired/<feature>/<k>        chunk files of deleted episodes, kept a while for readers of older commits
    .lock                         writer lock (``flock``); not part of the zarr hierarchy
    .lerobot_zarr-creating        present only while a store is being laid out (before its first commit)
    .zarr.json.tmp-<pid>          a commit in progress (or debris of a killed one, ignored)

Chunks are numbered by a chunk id that is never reused: appending an episode writes chunk ``next_chunk``;
deleting one retires its chunk and never renames another, so a reader holding an older commit never finds a
different episode under a chunk id it knows. Episode e (the LeRobot ``episode_index``) is chunk
``chunk[e]``; chunk ids increase with the episode index. Feature arrays use zarr's rectilinear chunk grid over
chunk ids ``0 .. next_chunk - 1``: a live chunk spans its episode's frames, a retired one spans a single filler
frame (fill value, no file), so zarr and xarray read every live frame in episode order. Readers need zarr's
rectilinear extension (``ZARR_ARRAY__RECTILINEAR_CHUNKS=True``; importing lerobot_zarr sets it for its own
process). Dimension names: ``frame`` first, then ``<feature>.<axis>`` (``height``/``width``/``channels`` for
images, ``dim_<k>`` otherwise), so that xarray sees distinct dimensions for features of different widths.

``attributes["lerobot_zarr"]``:

- ``format_version``: 2 (version 1 stores, with the table in the ``episode_*`` arrays only, are read too).
- ``info``: LeRobot's ``meta/info.json`` (features, fps, robot_type, codebase_version...).
- ``tasks``: task strings by ``task_index``. ``stats``: LeRobot's ``meta/stats.json`` (or the merge of
  per-episode stats). ``source``: where the data came from: ``{"kind": "local", "path", "fingerprint"}``,
  ``{"kind": "hub", "repo_id", "commit", "endpoint"}``, ``{"kind": "recorded"}`` for a store made by
  :func:`lerobot_zarr.create`, or ``{"kind": "edited", "from": <record>}`` once a writer changed it. A store
  only ever takes data from the source it records.
- ``episodes``: the episode table, lists over episodes: ``start`` and ``length`` (frames ``[start, start +
  length)`` in LeRobot's global ``index``), ``task_index`` (first task), ``chunk``, and ``episode_index_shift`` /
  ``index_shift``: what the stored ``episode_index`` / ``index`` values of that chunk exceed the episode's
  LeRobot values by (non-zero after earlier episodes were deleted: readers subtract them).
- ``next_chunk``: the next chunk id; ``retired``: ``[[chunk, unix_time], ...]`` retired chunks whose files may
  still be in ``.retired/``; ``generation``: counts commits.
- ``features``: for each stored array, ``{"kind": "numeric"|"image"|"video", "dtype", "frame_shape",
  "episodes"}`` where ``episodes`` lists half-open ``[first, stop)`` ranges of episodes whose chunks are
  committed. Only those chunks hold data; any other chunk file may be absent or hold garbage from an interrupted
  write. Images and videos are stored alike (uint8 HWC frames); ``video`` says the source kept them as mp4.
- ``unavailable``: ``{feature: [[first, stop, reason], ...]}``: episodes whose frames of that feature the source
  cannot give (a missing or undecodable video, a timestamp without a frame), with why. They count as done.
- ``not_materialized``: ``{feature: reason}`` for features listed in ``info`` that have no array (videos...).

A store missing its root ``zarr.json`` (or whose root lacks these attributes) is not a store. Writers write chunk
files first, flush them, then replace the root ``zarr.json``; readers trust only what the root lists.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ._libc import libc
from .errors import SourceNotFoundError, StoreError, StoreLockedError

__all__ = [
    "FORMAT_VERSION",
    "ATTRS_KEY",
    "EPISODE_ARRAYS",
    "ArraySpec",
    "EpisodeTable",
    "StoreState",
    "chunk_path",
    "retired_path",
    "stats_path",
    "create_store",
    "read_root",
    "read_state",
    "commit",
    "commit_state",
    "write_zarr_copies",
    "write_chunk",
    "write_frames",
    "chunk_writer",
    "read_shard_index",
    "STORAGES",
    "open_chunk",
    "flush_filesystem",
    "atomic_write",
    "WriterLock",
    "to_ranges",
    "from_ranges",
    "check_array_name",
    "check_new_store_location",
    "has_commit_point",
]

FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
ATTRS_KEY = "lerobot_zarr"
EPISODE_ARRAYS = ("episode_start", "episode_end", "episode_length", "episode_task_index", "episode_chunk")
_TABLE_KEYS = ("start", "length", "task_index", "chunk", "episode_index_shift", "index_shift")
_ROOT = "zarr.json"
COMPACT_CODEC = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
STORAGES = ("raw", "compact")
_CREATING = ".lerobot_zarr-creating"
CREATING_MARKER = _CREATING


@dataclass(frozen=True)
class ArraySpec:
    """A frame-indexed array of the store: numpy dtype, per-frame shape and trailing dimension names."""

    dtype: np.dtype
    frame_shape: tuple[int, ...]
    dims: tuple[str, ...]
    kind: str = "numeric"
    storage: str = "raw"  # or "compact": a zarr shard per episode, one zstd-compressed frame per inner chunk

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frame_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return 1 + len(self.frame_shape)


@dataclass(frozen=True)
class EpisodeTable:
    """The committed episodes: read-only int64 arrays over episodes (see the module docstring)."""

    start: np.ndarray
    length: np.ndarray
    task_index: np.ndarray
    chunk: np.ndarray
    episode_index_shift: np.ndarray
    index_shift: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.length)
        for key in _TABLE_KEYS:
            values = np.asarray(getattr(self, key), dtype=np.int64).reshape(-1)
            if len(values) != n:
                raise StoreError(f"episode table column {key!r} has {len(values)} entries for {n} episodes")
            values = values.copy()
            values.flags.writeable = False
            object.__setattr__(self, key, values)

    @classmethod
    def contiguous(cls, length: Iterable[int], task_index: Iterable[int], chunk: Iterable[int],
                   episode_index_shift: Iterable[int] | None = None,
                   index_shift: Iterable[int] | None = None) -> EpisodeTable:
        """A table whose episodes follow each other from global index 0 (what writers keep)."""
        length = np.asarray(length, dtype=np.int64).reshape(-1)
        zeros = np.zeros(len(length), dtype=np.int64)
        start = np.cumsum(length) - length
        return cls(start, length, task_index, chunk, zeros if episode_index_shift is None else episode_index_shift,
                   zeros if index_shift is None else index_shift)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.length

    def __len__(self) -> int:
        return len(self.length)

    def to_json(self) -> dict[str, list[int]]:
        return {key: getattr(self, key).tolist() for key in _TABLE_KEYS}


@dataclass(frozen=True)
class StoreState:
    """What the committed root ``zarr.json`` says: the attributes, the episode table and the arrays."""

    root: Path
    attrs: dict
    table: EpisodeTable
    arrays: dict[str, ArraySpec]

    @property
    def episode_start(self) -> np.ndarray:
        return self.table.start

    @property
    def episode_length(self) -> np.ndarray:
        return self.table.length

    @property
    def episode_end(self) -> np.ndarray:
        return self.table.end

    @property
    def episode_task_index(self) -> np.ndarray:
        return self.table.task_index

    @property
    def next_chunk(self) -> int:
        return int(self.attrs["next_chunk"])

    @property
    def generation(self) -> int:
        return int(self.attrs.get("generation", 0))

    def materialized(self, feature: str) -> np.ndarray:
        """Boolean mask over episodes: which chunks of ``feature`` are committed."""
        mask = np.zeros(len(self.table), dtype=bool)
        for a, b in self.attrs["features"][feature]["episodes"]:
            mask[a:b] = True
        return mask

    def unavailable(self, feature: str) -> dict[int, str]:
        """Episodes whose frames of ``feature`` the source cannot give (a missing or broken video), with why."""
        return {e: reason for a, b, reason in self.attrs.get("unavailable", {}).get(feature, [])
                for e in range(a, b)}

    def complete_episodes(self) -> np.ndarray:
        """Mask of episodes done for every stored array: committed, or known to be unavailable."""
        mask = np.ones(len(self.table), dtype=bool)
        for name in self.arrays:
            done = self.materialized(name)
            done[list(self.unavailable(name))] = True
            mask &= done
        return mask


def check_array_name(name: str) -> str:
    """Refuse feature names that are not safe as a folder and zarr node name (they come from metadata)."""
    if (not name or name in (".", "..") or name.startswith("__") or name.startswith(".")
            or any(c in name for c in "/\\\0") or name in EPISODE_ARRAYS or name == _ROOT):
        raise StoreError(f"feature name {name!r} cannot be stored as a zarr array")
    return name


def chunk_path(root: str | os.PathLike, name: str, chunk: int, ndim: int) -> str:
    """Path of chunk file ``chunk`` of array ``name`` with ``ndim`` dimensions (frame axis included)."""
    return f"{os.fspath(root)}/{name}/c/{chunk}" + "/0" * (ndim - 1)


def retired_path(root: str | os.PathLike, name: str, chunk: int) -> str:
    """Where a retired chunk file waits until it is deleted."""
    return f"{os.fspath(root)}/.retired/{name}/{chunk}"


def stats_path(root: str | os.PathLike, chunk: int) -> Path:
    return Path(root) / ".episode_stats" / f"{chunk}.json"


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view):]


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename: readers see old or new, never partial.

    ``durable`` also fsyncs the file and its folder (survives power loss, not only a killed process)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        _fsync_dir(path.parent)


def write_chunk(path: str | os.PathLike, data: np.ndarray) -> None:
    """Write one chunk file: raw little-endian C-order bytes. Symlinks in place of the file are refused."""
    arr = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:  # first chunk of its folder
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        _write_all(fd, memoryview(arr.reshape(-1)))
    finally:
        os.close(fd)


class ChunkWriter:
    """Writes one raw chunk file frame by frame (a decoder's output goes straight to disk)."""

    def __init__(self, path: str | os.PathLike, n_frames: int):
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        self.n_frames, self.written = n_frames, 0

    def write(self, frame: bytes) -> None:
        _write_all(self.fd, frame)
        self.written += 1

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> ChunkWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ShardWriter(ChunkWriter):
    """Writes one compact chunk: a zarr shard of single-frame inner chunks, each compressed with zstd, and the
    shard index (offset, nbytes per frame, then its crc32c) at the end."""

    def __init__(self, path: str | os.PathLike, n_frames: int):
        super().__init__(path, n_frames)
        from numcodecs import Zstd

        self.codec = Zstd(level=COMPACT_CODEC["configuration"]["level"])
        self.index = np.zeros((n_frames, 2), dtype="<u8")
        self.offset = 0

    def write(self, frame: bytes) -> None:
        data = self.codec.encode(frame)
        _write_all(self.fd, data)
        self.index[self.written] = (self.offset, len(data))
        self.offset += len(data)
        self.written += 1

    def close(self) -> None:
        try:
            if self.written == self.n_frames:
                from numcodecs import CRC32C

                _write_all(self.fd, bytes(CRC32C().encode(self.index.tobytes())))
        finally:
            super().close()


def chunk_writer(spec: ArraySpec, path: str | os.PathLike, n_frames: int) -> ChunkWriter:
    return ShardWriter(path, n_frames) if spec.storage == "compact" else ChunkWriter(path, n_frames)


def write_frames(spec: ArraySpec, path: str | os.PathLike, frames: np.ndarray) -> None:
    """Write one episode's chunk of ``spec``'s array (raw or compact)."""
    if spec.storage != "compact":
        write_chunk(path, frames)
        return
    frames = np.ascontiguousarray(frames, dtype=spec.dtype)
    with ShardWriter(path, len(frames)) as writer:
        for frame in frames:
            writer.write(frame.tobytes())


def read_shard_index(fd: int, n_frames: int, where: str) -> np.ndarray:
    """The (offset, nbytes) of every frame of a compact chunk, checked against its crc32c and the file size."""
    from numcodecs import CRC32C

    size = os.fstat(fd).st_size
    tail = 16 * n_frames + 4
    if size < tail:
        raise StoreError(f"{where}: compact chunk of {size} bytes cannot hold the index of {n_frames} frames")
    raw = os.pread(fd, tail, size - tail)
    try:
        index = np.frombuffer(CRC32C().decode(raw), dtype="<u8").reshape(n_frames, 2).astype(np.int64)
    except RuntimeError as exc:
        raise StoreError(f"{where}: compact chunk index is corrupt ({exc})") from None
    if ((index[:, 0] + index[:, 1]) > size - tail).any() or (index < 0).any():
        raise StoreError(f"{where}: compact chunk index points outside the file")
    return index


def open_chunk(path: str | os.PathLike, nbytes: int, episode: int, feature: str, *,
               retired: str | os.PathLike | None = None, flags: int = os.O_RDONLY) -> int:
    """Open a committed chunk file (refusing a symlink) and check its size (unless ``nbytes`` < 0: compact
    chunks); return the descriptor.

    ``retired`` is where the file is found if a writer deleted the episode after the caller read its commit."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = None
        if retired is not None:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(retired, flags | os.O_NOFOLLOW)
                path = retired
        if fd is None:
            raise StoreError(f"{path}: chunk of episode {episode} of feature {feature!r} is missing (if a writer "
                             f"deleted episodes since this dataset was opened, open it again)") from None
    size = os.fstat(fd).st_size
    if nbytes >= 0 and size != nbytes:
        os.close(fd)
        raise StoreError(f"{path}: chunk of episode {episode} of feature {feature!r} holds {size} bytes, "
                         f"expected {nbytes}")
    return fd


def flush_filesystem(root: Path) -> None:
    """Flush written data of the store's filesystem to disk (``syncfs``; ``sync`` where it does not exist)."""
    syncfs = getattr(libc, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _dims(name: str, spec: ArraySpec) -> list[str]:
    return ["frame", *(f"{name}.{d}" for d in spec.dims)]


def _array_doc(shape: tuple[int, ...], dtype: np.dtype, chunk_grid: dict, dims: list[str],
               storage: str = "raw") -> dict:
    """A zarr v3 array ``zarr.json``: default chunk keys, fill value 0, and either the bytes codec alone (raw:
    chunk files are the array bytes) or a shard per chunk whose inner chunks are single frames compressed with
    zstd (compact)."""
    codec: dict = {"name": "bytes"}
    if dtype.itemsize > 1:
        codec["configuration"] = {"endian": "little"}
    codecs = [codec]
    if storage == "compact":
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [1, *shape[1:]], "codecs": [codec, COMPACT_CODEC],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}]
    fill = False if dtype.kind == "b" else 0.0 if dtype.kind == "f" else 0
    return {"shape": list(shape), "data_type": dtype.name, "chunk_grid": chunk_grid,
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": codecs, "attributes": {}, "dimension_names": dims,
            "zarr_format": 3, "node_type": "array", "storage_transformers": []}


def _run_length(values: list[int]) -> list:
    """zarr's rectilinear edge list: runs of two or more equal sizes become ``[size, count]``."""
    out: list = []
    for v in values:
        if out and isinstance(out[-1], list) and out[-1][0] == v:
            out[-1][1] += 1
        elif out and not isinstance(out[-1], list) and out[-1] == v:
            out[-1] = [v, 2]
        else:
            out.append(v)
    return out


def chunk_sizes(table: EpisodeTable, next_chunk: int) -> np.ndarray:
    """Frames of every chunk id along the zarr ``frame`` axis: the episode length, or 1 for a retired chunk."""
    sizes = np.ones(next_chunk, dtype=np.int64)
    sizes[table.chunk] = table.length
    return sizes


def _build_metadata(arrays: Mapping[str, ArraySpec], table: EpisodeTable, next_chunk: int,
                    attrs: dict) -> dict[str, dict]:
    """Every ``zarr.json`` of a store, keyed by path; the root's carries the consolidated metadata.

    Written by hand rather than through zarr-python, whose writes start an event-loop thread in the caller's
    process (which then warns on fork, as DataLoader workers do); the tests check that zarr and xarray read it.
    """
    sizes = chunk_sizes(table, next_chunk)
    total = int(sizes.sum())
    docs: dict[str, dict] = {}
    for name, spec in arrays.items():
        if next_chunk:
            grid = {"name": "rectilinear",
                    "configuration": {"kind": "inline",
                                      "chunk_shapes": [_run_length(sizes.tolist()), *([s] for s in spec.frame_shape)]}}
        else:  # no chunk yet: a rectilinear grid needs at least one edge
            grid = {"name": "regular", "configuration": {"chunk_shape": [1, *spec.frame_shape]}}
        docs[name] = _array_doc((total, *spec.frame_shape), spec.dtype, grid, _dims(name, spec), spec.storage)
    n_episodes = len(table)
    for name in EPISODE_ARRAYS:
        grid = {"name": "regular", "configuration": {"chunk_shape": [max(n_episodes, 1)]}}
        docs[name] = _array_doc((n_episodes,), np.dtype("int64"), grid, ["episode"])
    root = {"attributes": {ATTRS_KEY: attrs}, "zarr_format": 3, "node_type": "group",
            "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": docs}}
    return {_ROOT: root, **{f"{name}/{_ROOT}": doc for name, doc in docs.items()}}


def _dump(doc: dict) -> bytes:
    # NaN/Infinity in LeRobot stats are kept as Python's json (and zarr-python) read them
    return json.dumps(doc, separators=(",", ":")).encode()


def check_new_store_location(root: Path) -> None:
    """Refuse to make a store in a file, over a store, or in a folder holding anything but a half-created store."""
    if root.exists() and (root.is_symlink() or not root.is_dir()):
        raise StoreError(f"{root}: exists and is not a folder; a store needs a folder of its own")
    if (root / _ROOT).is_file():
        raise StoreError(f"{root}: is a store already (open it, e.g. open_dataset(root, mode='r+'), or choose "
                         f"another folder)")
    if root.is_dir() and not (root / _CREATING).exists():
        if any(p.name != ".lock" for p in root.iterdir()):
            raise StoreError(f"{root}: folder is not empty and is not a lerobot_zarr store; refusing to write into it")


def _features_attrs(arrays: Mapping[str, ArraySpec]) -> dict:
    return {name: {"kind": spec.kind, "dtype": spec.dtype.str.lstrip("<>|="), "frame_shape": list(spec.frame_shape),
                   "storage": spec.storage, "episodes": []} for name, spec in arrays.items()}


def create_store(root: Path, arrays: Mapping[str, ArraySpec], table: EpisodeTable, attrs: dict) -> StoreState:
    """Lay out an empty store (no chunk committed) and commit it. ``root`` must be empty or a half-created store
    (one killed before its first commit).

    The table may list episodes to come (a transcode lists its source's); their chunks are ``table.chunk``."""
    check_new_store_location(root)
    root.mkdir(parents=True, exist_ok=True)
    leftovers = [p for p in root.iterdir() if p.name not in (".lock", _CREATING)]
    (root / _CREATING).touch()
    for p in leftovers:  # debris of an earlier creation that never committed
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    for name in arrays:
        check_array_name(name)
    folded = [name.casefold() for name in arrays]
    if len(set(folded)) != len(folded):
        raise StoreError(f"{root}: feature names {sorted(arrays)} differ only by case; they would share a folder on "
                         f"case-insensitive filesystems")
    next_chunk = int(table.chunk.max()) + 1 if len(table) else 0
    attrs = dict(attrs, format_version=FORMAT_VERSION, features=_features_attrs(arrays), next_chunk=next_chunk,
                 retired=[], generation=0)
    _write_commit(root, arrays, table, attrs, durable=True)
    (root / _CREATING).unlink()
    return read_state(root)


def write_zarr_copies(root: Path, arrays: Mapping[str, ArraySpec], table: EpisodeTable, next_chunk: int) -> None:
    """Write what zarr readers without consolidated metadata read: each array's ``zarr.json`` and the episode
    table arrays. Not the commit point: our readers never read them, and a commit writes them first."""
    docs = _build_metadata(arrays, table, next_chunk, {})
    columns = {"episode_start": table.start, "episode_end": table.end, "episode_length": table.length,
               "episode_task_index": table.task_index, "episode_chunk": table.chunk}
    for name, values in columns.items():
        (root / name / "c").mkdir(parents=True, exist_ok=True)
        atomic_write(root / name / "c" / "0", np.asarray(values, dtype="<i8").tobytes(), durable=False)
    for key, doc in docs.items():
        if key != _ROOT:
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, _dump(doc), durable=False)


def _publish(root: Path, arrays: Mapping[str, ArraySpec], table: EpisodeTable, attrs: dict, *, durable: bool) -> None:
    """The commit point: flush what was written, then replace the root ``zarr.json``."""
    attrs["episodes"] = table.to_json()
    root_doc = _build_metadata(arrays, table, int(attrs["next_chunk"]), attrs)[_ROOT]
    if durable:
        flush_filesystem(root)  # chunk files reach the disk before the metadata that lists them
    atomic_write(root / _ROOT, _dump(root_doc), durable=durable)


def _write_commit(root: Path, arrays: Mapping[str, ArraySpec], table: EpisodeTable, attrs: dict, *,
                  durable: bool) -> None:
    write_zarr_copies(root, arrays, table, int(attrs["next_chunk"]))
    _publish(root, arrays, table, attrs, durable=durable)


def read_root(root: Path) -> dict:
    """The root ``zarr.json`` document of a committed store."""
    path = Path(root) / _ROOT
    try:
        doc = json.loads(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        raise SourceNotFoundError(f"{root}: not a lerobot_zarr store (no committed zarr.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: unreadable ({exc})") from exc
    attrs = doc.get("attributes", {}).get(ATTRS_KEY) if isinstance(doc, dict) else None
    if not isinstance(attrs, dict):
        raise StoreError(f"{path}: not a lerobot_zarr store (no '{ATTRS_KEY}' attributes)")
    if attrs.get("format_version") not in _READABLE_VERSIONS:
        raise StoreError(f"{path}: store format version {attrs.get('format_version')!r} is not supported "
                         f"(this lerobot_zarr reads versions {', '.join(map(str, _READABLE_VERSIONS))})")
    return doc


def has_commit_point(root: Path) -> bool:
    """Whether ``root`` holds a root ``zarr.json`` (a store, or something claiming to be one: read it to know)."""
    return (Path(root) / _ROOT).is_file()


def _version1_table(root: Path, attrs: dict) -> EpisodeTable:
    """Format 1 kept the table in the ``episode_*`` arrays only, chunk id = episode index."""
    columns = {}
    for name in ("episode_start", "episode_length", "episode_task_index"):
        try:
            columns[name] = np.fromfile(root / name / "c" / "0", dtype="<i8").astype(np.int64)
        except FileNotFoundError:
            raise StoreError(f"{root}: episode table array {name!r} is missing") from None
    n = len(columns["episode_length"])
    if not len(columns["episode_start"]) == n == len(columns["episode_task_index"]):
        raise StoreError(f"{root}: episode table arrays have different lengths")
    attrs.update(next_chunk=n, retired=[], generation=0)
    zeros = np.zeros(n, dtype=np.int64)
    return EpisodeTable(columns["episode_start"], columns["episode_length"], columns["episode_task_index"],
                        np.arange(n, dtype=np.int64), zeros, zeros)


def read_state(root: Path) -> StoreState:
    """Read the committed state: one JSON read (no zarr call, no data read)."""
    root = Path(root)
    doc = read_root(root)
    attrs = doc["attributes"][ATTRS_KEY]
    consolidated = doc.get("consolidated_metadata", {}).get("metadata", {})
    if attrs["format_version"] == 1:
        table = _version1_table(root, attrs)
    else:
        try:
            table = EpisodeTable(**{key: attrs["episodes"][key] for key in _TABLE_KEYS})
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"{root / _ROOT}: episode table unreadable ({exc!r})") from None
        if len(table) and (table.chunk.min() < 0 or table.chunk.max() >= int(attrs["next_chunk"])
                           or (np.diff(table.chunk) <= 0).any()):
            raise StoreError(f"{root / _ROOT}: episode table lists chunk ids out of order or out of range")
    arrays = {}
    for name, f in attrs["features"].items():
        check_array_name(name)
        dtype = np.dtype(f["dtype"]).newbyteorder("<")
        dims = consolidated.get(name, {}).get("dimension_names") or ["frame"]
        arrays[name] = ArraySpec(dtype, tuple(f["frame_shape"]), tuple(d.removeprefix(f"{name}.") for d in dims[1:]),
                                 f["kind"], f.get("storage", "raw"))
    return StoreState(root, attrs, table, arrays)


def commit(root: Path, *, features_episodes: Mapping[str, Iterable[int]],
           unavailable: Mapping[str, Mapping[int, str]] | None = None) -> None:
    """Make newly written chunks of listed episodes visible, and record episodes whose frames of a feature the
    source cannot give (with the reason): flush data, then atomically replace the root."""
    doc = read_root(root)
    attrs = doc["attributes"][ATTRS_KEY]
    for name, episodes in features_episodes.items():
        entry = attrs["features"][name]
        entry["episodes"] = to_ranges([*from_ranges(entry["episodes"]), *episodes])
    for name, reasons in (unavailable or {}).items():
        known = {e: r for a, b, r in attrs.setdefault("unavailable", {}).get(name, []) for e in range(a, b)}
        known.update((int(e), str(r)) for e, r in reasons.items())
        runs: list[list] = []
        for e in sorted(known):
            if runs and runs[-1][1] == e and runs[-1][2] == known[e]:
                runs[-1][1] = e + 1
            else:
                runs.append([e, e + 1, known[e]])
        attrs["unavailable"][name] = runs
    attrs["generation"] = int(attrs.get("generation", 0)) + 1
    flush_filesystem(root)  # chunk files reach the disk before the metadata that lists them
    atomic_write(root / _ROOT, _dump(doc))


def commit_state(state: StoreState, *, table: EpisodeTable | None = None, durable: bool = True,
                 copies_written: bool = False, **attrs: Any) -> StoreState:
    """Commit a new episode table and/or attributes over ``state`` (a writer's): every episode listed complete.

    ``copies_written``: the caller already wrote :func:`write_zarr_copies` for this table and ``next_chunk``."""
    table = state.table if table is None else table
    new_attrs = json.loads(json.dumps(state.attrs))  # a private copy
    new_attrs.update(attrs)
    new_attrs["format_version"] = FORMAT_VERSION
    new_attrs["generation"] = state.generation + 1
    for entry in new_attrs["features"].values():
        entry["episodes"] = [[0, len(table)]] if len(table) else []
    if not copies_written:
        write_zarr_copies(state.root, state.arrays, table, int(new_attrs["next_chunk"]))
    _publish(state.root, state.arrays, table, new_attrs, durable=durable)
    return replace(state, attrs=new_attrs, table=table)


_held_locks: weakref.WeakSet = weakref.WeakSet()


def _drop_inherited_locks() -> None:
    # A forked child shares the parent's lock: it must neither release it nor keep it alive after the parent dies.
    for lock in list(_held_locks):
        if lock._fd is not None:
            with contextlib.suppress(OSError):
                os.close(lock._fd)
            lock._fd = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)


class WriterLock:
    """Exclusive ``flock`` on ``<store>/.lock``: one writer per store, released when its process dies. A forked
    child does not inherit it (its copy is closed after the fork)."""

    def __init__(self, root: Path, *, blocking: bool = True):
        self.root = Path(root)
        self.blocking = blocking
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lock."""
        return self._fd is not None

    def __enter__(self) -> WriterLock:
        self.root.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | (0 if self.blocking else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(self._fd)
            self._fd = None
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(f"{self.root}: another process is writing this store") from None
            raise
        _held_locks.add(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _held_locks.discard(self)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
