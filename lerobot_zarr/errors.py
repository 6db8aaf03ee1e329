"""Exceptions raised by lerobot_zarr.

Every class also subclasses the builtin exception it refines, so callers that catch ``FileNotFoundError`` or
``ValueError`` keep working. Messages name the file, episode or feature concerned, and the same facts are
attributes (``path``, ``episode``, ``feature``, ``repo_id``; ``revision``, ``status`` and ``response`` for Hub
errors), ``None`` where they do not apply.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Any

__all__ = [
    "LeRobotZarrError",
    "SourceNotFoundError",
    "CorruptSourceError",
    "SchemaMismatchError",
    "UnsupportedDtypeError",
    "DeltaTimestampsError",
    "FrameIndexError",
    "NotMaterializedError",
    "ArgumentError",
    "StoreError",
    "CorruptStoreError",
    "StoreExistsError",
    "StoreClosedError",
    "SourceMismatchError",
    "StoreNotFoundError",
    "EmptyStoreError",
    "ReadOnlyStoreError",
    "UnsupportedStoreError",
    "MapLimitError",
    "StoreLockedError",
    "DiskSpaceError",
    "ValueRangeError",
    "EmptyBufferError",
    "RepoNotFoundError",
    "RevisionNotFoundError",
    "HubAuthError",
    "HubError",
    "BucketError",
    "BucketAuthError",
    "ObjectChangedError",
    "CommitConflictError",
    "MissingExtraError",
    "UnknownFeatureError",
    "FrameNotWrittenError",
    "LoaderTimeoutError",
    "EncoderTimeoutError",
    "VideoEncodeError",
    "LeRobotZarrWarning",
]


class LeRobotZarrError(Exception):
    """Base class of every error this package raises on purpose."""

    path: str | None = None
    episode: int | None = None
    feature: str | None = None
    repo_id: str | None = None
    revision: str | None = None
    status: int | None = None  # Hub errors: the HTTP status, when there was an answer
    response: Any = None  # Hub errors: the HTTP response, if any (not pickled)

    def __init__(self, *args: Any, path: Any = None, episode: int | None = None, feature: str | None = None,
                 repo_id: str | None = None, **fields: Any):
        super().__init__(*args)
        self.path = None if path is None else str(path)
        self.episode, self.feature, self.repo_id = episode, feature, repo_id
        for key, value in fields.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple:
        return type(self), self.args, {k: v for k, v in self.__dict__.items() if k != "response"}


class SourceNotFoundError(LeRobotZarrError, FileNotFoundError):
    """A LeRobot dataset folder, store or one of their files does not exist."""


class CorruptSourceError(LeRobotZarrError, ValueError):
    """A source file exists but cannot be read (truncated parquet, invalid JSON, undecodable image...)."""


class SchemaMismatchError(LeRobotZarrError, ValueError):
    """A source file disagrees with the dataset's declared features or episode table."""


class UnsupportedDtypeError(LeRobotZarrError, TypeError):
    """A feature declares a dtype this package does not know how to store."""


class DeltaTimestampsError(LeRobotZarrError, ValueError):
    """``delta_timestamps`` names an unknown feature or holds a delta that is not a multiple of 1/fps."""


class FrameIndexError(LeRobotZarrError, IndexError):
    """A frame or episode index is outside the dataset."""


class NotMaterializedError(LeRobotZarrError, LookupError):
    """The data asked for is described by the metadata but not held by the local store (e.g. video frames)."""


class ArgumentError(LeRobotZarrError, TypeError, ValueError):
    """An argument has the wrong type or an invalid value (the message names it and says what is expected)."""


class StoreError(LeRobotZarrError, ValueError):
    """A local store cannot be used as asked. The subclasses say why; this is their common base."""


class CorruptStoreError(StoreError):
    """A store's files disagree with its committed metadata, or the metadata itself is malformed (the message
    names the file and key)."""


class StoreExistsError(StoreError, FileExistsError):
    """The target folder holds something else (a store, other files): nothing is written over it."""


class StoreClosedError(StoreError):
    """The dataset was closed (or is a forked copy of a writer, which may only read)."""


class SourceMismatchError(StoreError):
    """A store (or a Hub repo being pushed to) holds another dataset than the one asked for, or keeps it otherwise
    (a camera stored or sized otherwise, a dataset where a replay buffer was asked for)."""


class StoreNotFoundError(StoreError, SourceNotFoundError):
    """The folder of a store (or replay buffer) to read does not exist."""


class EmptyStoreError(StoreError):
    """The store holds no episode (a buffer no transition) where the call needs one: nothing to export or read."""


class ReadOnlyStoreError(StoreError):
    """A write to a store (or buffer) that was opened to read, keeps data in a form that cannot be written in
    place (compressed frames), or lies on a read-only volume."""


class UnsupportedStoreError(StoreError):
    """The store is outside what this lerobot_zarr's format covers: a newer format version, a codec chain or
    buffer layout it does not know, or a feature name that cannot be a zarr array (a folder) of a store."""


class MapLimitError(StoreError, MemoryError):
    """The process cannot map more of a store: its address space or the kernel's limit on memory maps
    (``vm.max_map_count``) is exhausted; open fewer datasets at once."""


class StoreLockedError(LeRobotZarrError, BlockingIOError):
    """Another live process holds the store's writer lock."""


class DiskSpaceError(LeRobotZarrError, OSError):
    """A write was refused (or failed) for lack of free space on the store's volume; nothing was committed."""


class ValueRangeError(SchemaMismatchError):
    """A value given to a writer does not fit the feature's dtype (it would be stored as another value)."""


class EmptyBufferError(LeRobotZarrError, RuntimeError):
    """A replay buffer was sampled before it held any transition."""


class RepoNotFoundError(SourceNotFoundError):
    """A Hub dataset repository does not exist (or is private and no token can see it)."""


class RevisionNotFoundError(SourceNotFoundError):
    """A branch, tag or commit does not exist in a Hub repository."""


class HubAuthError(LeRobotZarrError, PermissionError):
    """The Hub refused the request: private or gated repository without a (valid) token, or a token without write
    access for a push."""


class HubError(LeRobotZarrError, ConnectionError):
    """A Hub request failed after bounded retries (server error, dropped connection, stalled or trickling answer,
    a body or range other than the one asked for), the server sent something unusable (a commit id that is not a
    sha), or the request needs the network while ``HF_HUB_OFFLINE`` is set."""


class BucketError(LeRobotZarrError, ConnectionError):
    """An object-storage request (S3, GCS, Azure, HF Buckets) failed after bounded retries (a server error, a
    dropped connection, a stalled or trickling answer, a body or range other than the one asked for), or the store
    sent something unusable. ``path`` is the object's URL."""


class BucketAuthError(LeRobotZarrError, PermissionError):
    """The object store refused the request (no credentials, wrong ones, or not allowed to read or write there)."""


class ObjectChangedError(BucketError):
    """An object changed while it was being read (its ETag is not the one the first read saw): open it again."""


class CommitConflictError(StoreError):
    """Another writer changed the bucket's store since this one read it, or is publishing to it now: the
    conditional write of the root was refused (or not tried), so no commit was lost; nothing of this one is
    visible to readers."""


class MissingExtraError(LeRobotZarrError, ImportError):
    """An optional package is not installed (or does not import); the message names it, the pip command and the
    lerobot_zarr extra that brings it. Nothing was written because of it."""


class FrameNotWrittenError(LeRobotZarrError, FileNotFoundError):
    """Recording: frames given to ``add_frame`` could not be written (a camera frame LeRobot's image writer refuses);
    the episode cannot be saved (LeRobot's recorder fails then on the missing image files, ``FileNotFoundError``)."""


class UnknownFeatureError(LeRobotZarrError, KeyError):
    """A feature name that the dataset (or the edited episode) does not have; the message lists those it has."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


class LoaderTimeoutError(LeRobotZarrError, RuntimeError):
    """A DataLoader worker gave no batch within the loader's ``timeout`` (a worker stopped or stuck, as torch's
    ``DataLoader timed out``); the message names the worker, its pid and whether it is stopped."""


class EncoderTimeoutError(LeRobotZarrError, TimeoutError):
    """The background encoder made no progress (no segment made or growing) for the time a wait for its segments
    allows; the message names the store, the encoder's pid and what was waited for."""


class VideoEncodeError(LeRobotZarrError, ValueError):
    """The video encoder refused a camera's frames (a codec that cannot take their size or format); the message
    names the store, the camera, the episode and the encoder, and says the episodes stay in the store."""


#: import name -> (what users call it, pip requirement, lerobot_zarr extra); tests check them against pyproject.toml
OPTIONAL_PACKAGES: dict[str, tuple[str, str, str]] = {
    "av": ("PyAV", "av>=14", "video"),
    "simplejpeg": ("simplejpeg", "simplejpeg>=1.8", "jpeg"),
    "matplotlib": ("matplotlib", "matplotlib>=3.8", "viz"),
    "rerun": ("rerun-sdk", "rerun-sdk>=0.24", "viz"),
    "xarray": ("xarray", "xarray>=2025.1", "xarray"),
    "dask": ("dask", "dask[array]>=2025.1", "xarray"),
    "distributed": ("dask.distributed", "distributed>=2025.1", "xarray"),
    "torch": ("torch", "torch>=2.2", "torch"),
    "pandas": ("pandas", "pandas>=2", "lerobot"),
    "datasets": ("datasets", "datasets>=3", "lerobot"),
    "obstore": ("obstore", "obstore>=0.12", "cloud"),
    "boto3": ("boto3", "boto3>=1.34", "cloud"),
}


def missing_extra(module: str, what: str, cause: BaseException | None = None, **fields: Any) -> MissingExtraError:
    """The one-line error for ``what`` (e.g. "decoding videos") needing the optional package ``module``;
    ``cause``: the import error of a package that is installed but does not import."""
    display, requirement, extra = OPTIONAL_PACKAGES[module]
    text = f"{what} needs {display}: pip install '{requirement}' (lerobot_zarr's [{extra}] extra)"
    if cause is not None:
        text += f"; importing it failed: {' '.join(str(cause).split())}"
    return MissingExtraError(text, name=module, **fields)


def import_optional(module: str, what: str) -> ModuleType:
    """``import module``, or :class:`MissingExtraError` saying what to install for ``what``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if isinstance(exc, ModuleNotFoundError) and missing in OPTIONAL_PACKAGES:
            raise missing_extra(missing, what) from None  # itself, or the optional package it needs (dask)
        raise missing_extra(module.split(".")[0], what, exc) from None


class LeRobotZarrWarning(UserWarning):
    """Something the user should know but that does not stop the work (e.g. a camera left out of samples); shown
    once per dataset, pointing at the user's call."""


def warn_user(text: str) -> None:
    """Warn with :class:`LeRobotZarrWarning`, attributed to the user's line that called into lerobot_zarr."""
    warnings.warn(text, LeRobotZarrWarning, skip_file_prefixes=(os.path.dirname(__file__),))


_warned: set[tuple[str, str]] = set()


def warn_once(key: str, text: str) -> None:
    """:func:`warn_user` once per process for ``key`` (a dataset) and ``text``: opening the same store again with
    the same outcome says nothing new."""
    if (key, text) not in _warned:
        _warned.add((key, text))
        warn_user(text)
