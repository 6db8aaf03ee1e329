"""The on-disk store format: a Zarr v3 group that other tools can read. This docstring is the contract.

Layout of a store folder::

    zarr.json                     root group. Its write is the COMMIT POINT (atomic rename). It holds
                                  attributes["lerobot_zarr"] (below) and the consolidated metadata of every array.
    <feature>/zarr.json           one array per stored feature, shape (total_frames, *frame_shape), C order
    <feature>/c/<e>/0/...         the chunk of episode e: exactly length_e * frame_bytes raw little-endian bytes,
                                  no header (the codec chain is the ``bytes`` codec alone, no compressor)
    episode_start/ episode_end/ episode_length/ episode_task_index/
                                  1-D int64 arrays over dimension "episode" (one chunk, ``c/0``): the episode
                                  table. Episode e covers frames [episode_start[e], episode_end[e]) of every
                                  feature array; e is the LeRobot ``episode_index``.
    .lock                         writer lock (``flock``); not part of the zarr hierarchy
    .lerobot_zarr-creating        present only while a store is being laid out (before its first commit)
    .zarr.json.tmp-<pid>          a commit in progress (or debris of a killed one, ignored)

Feature arrays use zarr's rectilinear chunk grid: along ``frame`` the chunk sizes are the episode lengths, so
one chunk is one episode; trailing axes are one chunk. Readers need zarr's rectilinear extension enabled
(``ZARR_ARRAY__RECTILINEAR_CHUNKS=True``; importing lerobot_zarr sets it for its own process). Dimension names:
``frame`` first, then ``<feature>.<axis>`` (``height``/``width``/``channels`` for images, ``dim_<k>`` otherwise),
so that xarray sees distinct dimensions for features of different widths.

``attributes["lerobot_zarr"]``:

- ``format_version``: 1.
- ``info``: LeRobot's ``meta/info.json`` of the source as read (features, fps, robot_type, codebase_version...).
- ``tasks``: task strings by ``task_index``. ``stats``: LeRobot's ``meta/stats.json`` (or the merge of v2.1
  per-episode stats). ``source``: where the data came from: ``{"kind": "local", "path", "fingerprint"}`` (a
  digest of the metadata files and of the data files' names, sizes and mtimes) or ``{"kind": "hub", "repo_id",
  "commit", "endpoint"}``. A store only ever takes data from the source it records.
- ``features``: for each stored array, ``{"kind": "numeric"|"image", "dtype", "frame_shape", "episodes"}``
  where ``episodes`` lists half-open ``[first, stop)`` ranges of episodes whose chunks are committed. Only those
  chunks hold data; any other chunk file may be absent or hold garbage from an interrupted write.
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
    "StoreState",
    "chunk_path",
    "create_store",
    "read_state",
    "commit",
    "write_chunk",
    "open_chunk",
    "WriterLock",
    "to_ranges",
    "from_ranges",
    "check_array_name",
    "check_new_store_location",
    "has_commit_point",
]

FORMAT_VERSION = 1
ATTRS_KEY = "lerobot_zarr"
EPISODE_ARRAYS = ("episode_start", "episode_end", "episode_length", "episode_task_index")
_ROOT = "zarr.json"
_CREATING = ".lerobot_zarr-creating"


@dataclass(frozen=True)
class ArraySpec:
    """A frame-indexed array of the store: numpy dtype, per-frame shape and trailing dimension names."""

    dtype: np.dtype
    frame_shape: tuple[int, ...]
    dims: tuple[str, ...]
    kind: str = "numeric"

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frame_shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class StoreState:
    """What the committed root ``zarr.json`` says: the attributes and the episode table."""

    root: Path
    attrs: dict
    episode_start: np.ndarray
    episode_length: np.ndarray
    episode_task_index: np.ndarray
    arrays: dict[str, ArraySpec]

    @property
    def episode_end(self) -> np.ndarray:
        return self.episode_start + self.episode_length

    def materialized(self, feature: str) -> np.ndarray:
        """Boolean mask over episodes: which chunks of ``feature`` are committed."""
        mask = np.zeros(len(self.episode_length), dtype=bool)
        for a, b in self.attrs["features"][feature]["episodes"]:
            mask[a:b] = True
        return mask

    def complete_episodes(self) -> np.ndarray:
        """Mask of episodes committed for every stored array."""
        mask = np.ones(len(self.episode_length), dtype=bool)
        for name in self.arrays:
            mask &= self.materialized(name)
        return mask


def check_array_name(name: str) -> str:
    """Refuse feature names that are not safe as a folder and zarr node name (they come from metadata)."""
    if (not name or name in (".", "..") or name.startswith("__") or name.startswith(".")
            or any(c in name for c in "/\\\0") or name in EPISODE_ARRAYS or name == _ROOT):
        raise StoreError(f"feature name {name!r} cannot be stored as a zarr array")
    return name


def chunk_path(root: str | os.PathLike, name: str, episode: int, ndim: int) -> str:
    """Path of the chunk file of ``episode`` in array ``name`` with ``ndim`` dimensions (frame axis included)."""
    return f"{os.fspath(root)}/{name}/c/{episode}" + "/0" * (ndim - 1)


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


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename: readers see old or new, never partial."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
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
        view = memoryview(arr.reshape(-1)).cast("B")
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def open_chunk(path: str | os.PathLike, nbytes: int, episode: int, feature: str) -> int:
    """Open a committed chunk file read-only (refusing a symlink) and check its size; return the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise StoreError(f"{path}: chunk of episode {episode} of feature {feature!r} is missing") from None
    size = os.fstat(fd).st_size
    if size != nbytes:
        os.close(fd)
        raise StoreError(f"{path}: chunk of episode {episode} of feature {feature!r} holds {size} bytes, "
                         f"expected {nbytes}")
    return fd


def _flush_filesystem(root: Path) -> None:
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


def _array_doc(shape: tuple[int, ...], dtype: np.dtype, chunk_grid: dict, dims: list[str]) -> dict:
    """A zarr v3 array ``zarr.json``: bytes codec only (no compressor), default chunk keys, fill value 0."""
    codec: dict = {"name": "bytes"}
    if dtype.itemsize > 1:
        codec["configuration"] = {"endian": "little"}
    fill = False if dtype.kind == "b" else 0.0 if dtype.kind == "f" else 0
    return {"shape": list(shape), "data_type": dtype.name, "chunk_grid": chunk_grid,
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": [codec], "attributes": {}, "dimension_names": dims,
            "zarr_format": 3, "node_type": "array", "storage_transformers": []}


def _build_metadata(arrays: Mapping[str, ArraySpec], lengths: np.ndarray, attrs: dict) -> dict[str, dict]:
    """Every ``zarr.json`` of a store, keyed by path; the root's carries the consolidated metadata.

    Written by hand rather than through zarr-python, whose writes start an event-loop thread in the caller's
    process (which then warns on fork, as DataLoader workers do); the tests check that zarr and xarray read it.
    """
    total = int(lengths.sum())
    docs: dict[str, dict] = {}
    for name, spec in arrays.items():
        grid = {"name": "rectilinear",
                "configuration": {"kind": "inline",
                                  "chunk_shapes": [[int(n) for n in lengths], *([s] for s in spec.frame_shape)]}}
        docs[name] = _array_doc((total, *spec.frame_shape), spec.dtype, grid, _dims(name, spec))
    n_episodes = len(lengths)
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
    """Refuse to make a store in a file or in a folder holding anything but a half-created store."""
    if root.exists() and (root.is_symlink() or not root.is_dir()):
        raise StoreError(f"{root}: exists and is not a folder; a store needs a folder of its own")
    if root.is_dir() and not (root / _CREATING).exists():
        if any(p.name != ".lock" for p in root.iterdir()):
            raise StoreError(f"{root}: folder is not empty and is not a lerobot_zarr store; refusing to write into it")


def create_store(root: Path, arrays: Mapping[str, ArraySpec], episode_start: np.ndarray,
                 episode_length: np.ndarray, episode_task_index: np.ndarray, attrs: dict) -> StoreState:
    """Lay out an empty store (no episode committed) and commit it. ``root`` must be empty or a half-created store."""
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
    attrs = dict(attrs, format_version=FORMAT_VERSION,
                 features={name: {"kind": spec.kind, "dtype": spec.dtype.str.lstrip("<>|="),
                                  "frame_shape": list(spec.frame_shape), "episodes": []}
                           for name, spec in arrays.items()})
    docs = _build_metadata(arrays, episode_length, attrs)
    table = {"episode_start": episode_start, "episode_end": episode_start + episode_length,
             "episode_length": episode_length, "episode_task_index": episode_task_index}
    for name, values in table.items():
        write_chunk(root / name / "c" / "0", np.asarray(values, dtype="<i8"))
    for key, doc in docs.items():
        if key != _ROOT:
            path = root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, _dump(doc))
    _flush_filesystem(root)
    _atomic_write(root / _ROOT, _dump(docs[_ROOT]))
    (root / _CREATING).unlink()
    return read_state(root)


def read_root(root: Path) -> dict:
    """The root ``zarr.json`` document of a committed store."""
    path = root / _ROOT
    try:
        doc = json.loads(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError):
        raise SourceNotFoundError(f"{root}: not a lerobot_zarr store (no committed zarr.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: unreadable ({exc})") from exc
    attrs = doc.get("attributes", {}).get(ATTRS_KEY) if isinstance(doc, dict) else None
    if not isinstance(attrs, dict):
        raise StoreError(f"{path}: not a lerobot_zarr store (no '{ATTRS_KEY}' attributes)")
    if attrs.get("format_version") != FORMAT_VERSION:
        raise StoreError(f"{path}: store format version {attrs.get('format_version')!r} is not supported "
                         f"(this lerobot_zarr reads version {FORMAT_VERSION})")
    return doc


def has_commit_point(root: Path) -> bool:
    """Whether ``root`` holds a root ``zarr.json`` (a store, or something claiming to be one: read it to know)."""
    return (Path(root) / _ROOT).is_file()


def read_state(root: Path) -> StoreState:
    """Read the committed state: one JSON read plus the episode table chunks (no zarr call, no data read)."""
    root = Path(root)
    doc = read_root(root)
    attrs = doc["attributes"][ATTRS_KEY]
    consolidated = doc.get("consolidated_metadata", {}).get("metadata", {})
    table = {}
    for name in ("episode_start", "episode_length", "episode_task_index"):
        path = root / name / "c" / "0"
        try:
            table[name] = np.fromfile(path, dtype="<i8").astype(np.int64, copy=False)
        except FileNotFoundError:
            raise StoreError(f"{root}: episode table array {name!r} is missing") from None
    if not (len(table["episode_start"]) == len(table["episode_length"]) == len(table["episode_task_index"])):
        raise StoreError(f"{root}: episode table arrays have different lengths")
    arrays = {}
    for name, f in attrs["features"].items():
        check_array_name(name)
        dtype = np.dtype(f["dtype"]).newbyteorder("<")
        dims = consolidated.get(name, {}).get("dimension_names") or ["frame"]
        arrays[name] = ArraySpec(dtype, tuple(f["frame_shape"]), tuple(d.removeprefix(f"{name}.") for d in dims[1:]),
                                 f["kind"])
    for values in table.values():
        values.flags.writeable = False
    return StoreState(root, attrs, table["episode_start"], table["episode_length"],
                      table["episode_task_index"], arrays)


def commit(root: Path, *, features_episodes: Mapping[str, Iterable[int]]) -> None:
    """Make newly written chunks visible: flush data, then atomically replace the root ``zarr.json``."""
    doc = read_root(root)
    attrs = doc["attributes"][ATTRS_KEY]
    for name, episodes in features_episodes.items():
        entry = attrs["features"][name]
        entry["episodes"] = to_ranges([*from_ranges(entry["episodes"]), *episodes])
    _flush_filesystem(root)  # chunk files reach the disk before the metadata that lists them
    _atomic_write(root / _ROOT, _dump(doc))


class WriterLock:
    """Exclusive ``flock`` on ``<store>/.lock``: one writer per store, released when its process dies."""

    def __init__(self, root: Path, *, blocking: bool = True):
        self.root = Path(root)
        self.blocking = blocking
        self._fd: int | None = None

    def __enter__(self) -> WriterLock:
        self.root.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | (0 if self.blocking else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(self._fd)
            self._fd = None
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(f"{self.root}: another process is writing this store") from None
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
