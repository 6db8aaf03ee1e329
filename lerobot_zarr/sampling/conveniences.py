"""What a dataset offers through the modules built on it (exports, push, verify, xarray, publishing to a bucket):
methods of :class:`~lerobot_zarr.sampling.dataset.LeRobotZarrDataset`, each importing its module when called
(imports point down)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ArgumentError

__all__ = ["Conveniences"]


class Conveniences:
    """The dataset's conveniences (mixed into :class:`~lerobot_zarr.sampling.dataset.LeRobotZarrDataset`: ``root``
    is its store, ``_remote`` the bucket it is read from, if any)."""

    root: Path
    _remote: Any

    def to_lerobot(self, path: str | os.PathLike, *, data_files_size_in_mb: int = 100,
                   video_files_size_in_mb: int = 200, videos: bool | None = None, progress: bool = True) -> Path:
        """Export the (complete) store as a LeRobot v3.0 folder at ``path``; see :mod:`lerobot_zarr.writing.export`
        (``videos``: cameras as the source had them by default, or all as videos / all as images)."""
        self._local_only("to_lerobot")
        from ..writing.export import to_lerobot

        return to_lerobot(self, path, data_files_size_in_mb=data_files_size_in_mb,
                          video_files_size_in_mb=video_files_size_in_mb, videos=videos, progress=progress)

    def push(self, repo_id: str, *, revision: str | None = None, private: bool = False,
             token: str | bool | None = None, commit_message: str | None = None, videos: bool | None = None,
             progress: bool = True) -> str | None:
        """Publish the store to the Hub as LeRobot v3.0 in one commit tagged ``v3.0`` (only changed files are
        uploaded; an unchanged store makes no commit). Returns the commit sha, or None if nothing changed."""
        self._local_only("push")
        from ..writing.export import push

        return push(self, repo_id, revision=revision, private=private, token=token,
                    commit_message=commit_message, videos=videos, progress=progress)

    def verify(self, *, repair: bool = False, record: bool = False, token: str | bool | None = None,
               progress: bool = True) -> Any:
        """Re-read every committed episode of the store and check it against the content hashes recorded at commit
        (:func:`lerobot_zarr.writing.integrity.verify`); returns a
        :class:`~lerobot_zarr.writing.integrity.VerifyReport` naming what is damaged. ``repair=True`` fetches
        damaged episodes again from the store's Hub repo or folder."""
        self._local_only("verify")
        from ..writing.integrity import verify

        return verify(self.root, repair=repair, record=record, token=token, progress=progress)

    def to_xarray(self) -> Any:
        """The selected, materialized episodes as a lazy ``xarray.Dataset`` (xarray extra): one dask chunk per
        episode; dims ``frame`` and ``<feature>.<axis>`` (named from LeRobot's ``names`` where it names an axis,
        with its labels as coordinates); ``episode_index``, ``frame_index``, ``timestamp`` and ``index`` as
        coordinates; and the episode table over dim ``episode`` (with ``episode_materialized``: a partial store
        lists the episodes it lacks instead of filling them with zeros)."""
        self._local_only("to_xarray")
        from ..integrations.xarray import to_xarray

        return to_xarray(self)

    def push_store(self, url: str, *, force: bool = False, options: Mapping[str, Any] | None = None,
                   progress: bool = True) -> Any:
        """Publish the store to a bucket folder (``s3://``...; :func:`lerobot_zarr.writing.sync.push_store`)."""
        self._local_only("push_store")
        from ..writing.sync import push_store

        return push_store(self.root, url, force=force, options=dict(options or {}), progress=progress)

    def _local_only(self, what: str) -> None:
        if self._remote is not None:  # a store in a bucket is read where it is, row by row
            url = self._remote.location()
            raise ArgumentError(f"{url}: {what} needs the store here: copy it (`lerobot-zarr sync {url} DIR`) first")
