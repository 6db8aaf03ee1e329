"""Exceptions raised by lerobot_zarr.

Every class also subclasses the builtin exception it refines, so callers that catch ``FileNotFoundError`` or
``ValueError`` keep working. Messages name the file, episode or feature concerned.
"""

from __future__ import annotations

__all__ = [
    "LeRobotZarrError",
    "SourceNotFoundError",
    "CorruptSourceError",
    "SchemaMismatchError",
    "UnsupportedDtypeError",
    "DeltaTimestampsError",
    "FrameIndexError",
    "NotMaterializedError",
    "StoreError",
    "StoreLockedError",
    "DiskSpaceError",
    "RepoNotFoundError",
    "RevisionNotFoundError",
    "HubAuthError",
    "HubError",
]


class LeRobotZarrError(Exception):
    """Base class of every error this package raises on purpose."""


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


class StoreError(LeRobotZarrError, ValueError):
    """A local store is missing its commit point, has an unknown format version or inconsistent metadata."""


class StoreLockedError(LeRobotZarrError, BlockingIOError):
    """Another live process holds the store's writer lock."""


class DiskSpaceError(LeRobotZarrError, OSError):
    """A write was refused because it would take the free space of the store's volume below the margin."""


class RepoNotFoundError(SourceNotFoundError):
    """A Hub dataset repository does not exist (or is private and no token can see it)."""


class RevisionNotFoundError(SourceNotFoundError):
    """A branch, tag or commit does not exist in a Hub repository."""


class _HubFields:
    """Optional keyword fields of a Hub error, like huggingface_hub's: ``repo_id``, ``revision``, ``path`` (the file
    in the repo), ``status`` (HTTP status, when there was an answer) and ``response`` (the HTTP response, if any;
    not pickled)."""

    def __init__(self, *args: object, repo_id: str | None = None, revision: str | None = None,
                 path: str | None = None, status: int | None = None, response: object = None):
        super().__init__(*args)
        self.repo_id, self.revision, self.path, self.status, self.response = repo_id, revision, path, status, response

    def __reduce__(self):
        state = {k: v for k, v in self.__dict__.items() if k != "response"}
        return (type(self), self.args, state)


class HubAuthError(_HubFields, LeRobotZarrError, PermissionError):
    """The Hub refused the request: private or gated repository without a (valid) token, or a token without write
    access for a push."""


class HubError(_HubFields, LeRobotZarrError, ConnectionError):
    """A Hub request failed after bounded retries (server error, dropped connection, stalled or trickling answer,
    a body or range other than the one asked for), the server sent something unusable (a commit id that is not a
    sha), or the request needs the network while ``HF_HUB_OFFLINE`` is set."""
