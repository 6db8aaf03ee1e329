"""Exceptions raised by lerobot_zarr.

Every class also subclasses the builtin exception it refines, so callers that catch ``FileNotFoundError`` or
``ValueError`` keep working. Messages name the file, episode or feature concerned, and the same facts are
attributes (``path``, ``episode``, ``feature``, ``repo_id``; ``revision``, ``status`` and ``response`` for Hub
errors), ``None`` where they do not apply.
"""

from __future__ import annotations

import os
import warnings
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
    "StoreLockedError",
    "DiskSpaceError",
    "ValueRangeError",
    "RepoNotFoundError",
    "RevisionNotFoundError",
    "HubAuthError",
    "HubError",
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
    """A store (or a Hub repo being pushed to) holds another dataset than the one asked for."""


class StoreLockedError(LeRobotZarrError, BlockingIOError):
    """Another live process holds the store's writer lock."""


class DiskSpaceError(LeRobotZarrError, OSError):
    """A write was refused (or failed) for lack of free space on the store's volume; nothing was committed."""


class ValueRangeError(SchemaMismatchError):
    """A value given to a writer does not fit the feature's dtype (it would be stored as another value)."""


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


class LeRobotZarrWarning(UserWarning):
    """Something the user should know but that does not stop the work (e.g. a camera left out of samples); shown
    once per dataset, pointing at the user's call."""


def warn_user(text: str) -> None:
    """Warn with :class:`LeRobotZarrWarning`, attributed to the user's line that called into lerobot_zarr."""
    warnings.warn(text, LeRobotZarrWarning, skip_file_prefixes=(os.path.dirname(__file__),))
