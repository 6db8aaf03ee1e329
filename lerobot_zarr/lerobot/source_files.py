"""Where a LeRobot source's files come from: the interface, and a local folder. A Hub repository at one commit
(``hub.files``) and a folder in a bucket (``cloud.files``) read theirs by byte ranges (:mod:`.range_files`).

``source.py`` reads every file through this interface, by '/'-separated path relative to the dataset root, so
the same reader serves them all; ``lerobot_zarr.testing.source_files_tests`` is the suite every implementation
passes.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, BinaryIO

from ..errors import CorruptSourceError

if TYPE_CHECKING:  # pyarrow is imported where a parquet file is read
    import pyarrow.parquet as pq

__all__ = ["SourceFiles", "LocalFiles", "safe_relpath", "is_lerobot_folder"]


class SourceFiles(ABC):
    """Read-only access to the files of one LeRobot dataset."""

    #: short name, for progress bars and cache folder names
    name: str
    #: how many row-group reads may be in flight at once
    concurrency: int = 1
    #: a remote source's file sizes by path, those it has listed (every file of a Hub repo; a bucket's folders as
    #: they are needed: ask :meth:`size` and :meth:`list`); empty for a local folder
    sizes: Mapping[str, int] = MappingProxyType({})

    @abstractmethod
    def location(self, rel: str = "") -> str:
        """Where a file (or, without ``rel``, the dataset) is, for messages."""

    @abstractmethod
    def exists(self, rel: str) -> bool:
        """Whether the file exists."""

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """The file's content; ``FileNotFoundError`` when missing."""

    @abstractmethod
    def parquet(self, rel: str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
        """The file opened as parquet, reading only what is asked of it (footer unless given, then row groups)."""

    @abstractmethod
    def open(self, rel: str) -> BinaryIO:
        """The file as a seekable binary file object that reads only what is asked of it (videos)."""

    @abstractmethod
    def list(self, folder: str) -> list[str]:
        """Every file below ``folder``, sorted."""

    @abstractmethod
    def record(self, data_files: Iterable[str]) -> dict:
        """Identity of this source as stored in a store's attributes: a store is only reused for the same one."""

    # Hints for sources where a read costs a round trip (a Hub repo): what will be read soon, fetched at once.
    # A local folder reads on demand and ignores them.
    def prefetch(self, rels: Iterable[str], footers: Mapping[str, int] | None = None) -> None:
        """These files will be read soon (whole, or their parquet footer when big), and the parquet footers of
        ``footers`` (``{file: about how many bytes}``): all in one round trip."""

    def prefetch_footers(self, rels: Iterable[str], ranges: Mapping[str, Iterable[tuple[int, int]]] | None = None
                         ) -> None:
        """The parquet footers of these files will be read soon, and byte ranges ``[start, stop)`` of them
        (``{file: ranges}``, estimates where rows lie: fetched with the footers, read from if they hold them)."""

    def prefetch_sizes(self, rels: Iterable[str], folders: Iterable[str] = ()) -> None:
        """These files will be asked for soon (whether they exist, their size), and every file of ``folders``: a
        source that lists its folders as they are needed (a bucket) lists them now, all at once."""

    def prefetch_ranges(self, ranges: Mapping[str, Iterable[tuple[int, int]]], gap: int | None = None) -> None:
        """These byte ranges ``[start, stop)`` of files (``{file: ranges}``) will be read soon; ``gap``: ranges of a
        file closer than this are read as one (None: the source's own choice)."""

    def footer_hint(self, rel: str, nbytes: int) -> None:
        """About how long a parquet file's footer is (so that one read fetches it)."""

    def release(self, rel: str) -> None:
        """What was fetched ahead of ``rel`` is no longer needed."""

    def seed_footer(self, rel: str, metadata: pq.FileMetaData | None = None, size: int | None = None) -> None:
        """What our index file knows of a parquet footer: the footer itself, or its size in bytes (a remote source
        then reads it in one exact request)."""

    @abstractmethod
    def size(self, rel: str) -> int:
        """The file's size in bytes."""

    def matches(self, rel: str, identity: Mapping[str, str]) -> bool:
        """Whether the file is the one ``identity`` (``{"sha256", "git_sha1"}``, from our index file) describes;
        False where the source cannot tell (then the index is not used)."""
        return False

    def local_path(self, rel: str) -> Path | None:
        """The file itself when it is on this machine (to link or copy rather than read), else None."""
        return None


class LocalFiles(SourceFiles):
    """A LeRobot dataset folder on a local filesystem."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()
        self.name = self.root.name

    def location(self, rel: str = "") -> str:
        return str(self.root / rel) if rel else str(self.root)

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def read_bytes(self, rel: str) -> bytes:
        return (self.root / rel).read_bytes()

    def size(self, rel: str) -> int:
        return (self.root / rel).stat().st_size

    def parquet(self, rel: str, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.root / rel, metadata=metadata)

    def open(self, rel: str) -> BinaryIO:
        return (self.root / rel).open("rb")

    def local_path(self, rel: str) -> Path | None:
        return self.root / rel

    def list(self, folder: str) -> list[str]:
        base = self.root / folder
        return sorted(p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file())

    def record(self, data_files: Iterable[str]) -> dict:
        """Path plus a digest of the metadata files and of the data files' names, sizes and mtimes."""
        h = hashlib.sha256()
        for rel in self.list("meta"):
            h.update(rel.encode())
            h.update(self.read_bytes(rel))
        for rel in sorted(set(data_files)):
            path = self.root / rel
            st = path.stat() if path.exists() else None
            h.update(f"{rel}:{st.st_size if st else -1}:{st.st_mtime_ns if st else -1}".encode())
        return {"kind": "local", "path": str(self.root), "fingerprint": h.hexdigest()}


def safe_relpath(where: str, rel: str, what: str) -> str:
    """Refuse paths from metadata that would leave the dataset folder (absolute, ``..``, backslashes)."""
    candidate = PurePosixPath(rel)
    if candidate.is_absolute() or ".." in candidate.parts or "\\" in rel or not candidate.parts:
        raise CorruptSourceError(f"{where}: {what} path {rel!r} leaves the dataset folder")
    return candidate.as_posix()


def is_lerobot_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder holding ``meta/info.json``."""
    return (Path(path) / "meta" / "info.json").is_file()
