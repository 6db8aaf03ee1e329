"""What a dataset offers through modules built on the reader (each imported when called, so that imports point
down the layers and a reader loads none of them until asked): export and push, verify, xarray, the doctor."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["Conveniences"]


class Conveniences:
    """The methods of :class:`~lerobot_zarr.sampling.dataset.LeRobotZarrDataset` that modules above the reader
    implement."""

    root: Path
    meta: Any

    def to_lerobot(self, path: str | os.PathLike, *, data_files_size_in_mb: int = 100,
                   video_files_size_in_mb: int = 200, videos: bool | None = None, progress: bool = True) -> Path:
        """Export the (complete) store as a LeRobot v3.0 folder at ``path``; see :mod:`lerobot_zarr.writing.export`
        (``videos``: cameras as the source had them by default, or all as videos / all as images)."""
        from ..writing.export import to_lerobot

        return to_lerobot(self, path, data_files_size_in_mb=data_files_size_in_mb,
                          video_files_size_in_mb=video_files_size_in_mb, videos=videos, progress=progress)

    def push(self, repo_id: str, *, revision: str | None = None, private: bool = False,
             token: str | bool | None = None, commit_message: str | None = None, videos: bool | None = None,
             progress: bool = True) -> str | None:
        """Publish the store to the Hub as LeRobot v3.0 in one commit tagged ``v3.0`` (only changed files are
        uploaded; an unchanged store makes no commit). Returns the commit sha, or None if nothing changed."""
        from ..writing.export import push

        return push(self, repo_id, revision=revision, private=private, token=token,
                    commit_message=commit_message, videos=videos, progress=progress)

    def verify(self, *, repair: bool = False, record: bool = False, token: str | bool | None = None,
               progress: bool = True) -> Any:
        """Re-read every committed episode of the store and check it against the content hashes recorded at commit
        (:func:`lerobot_zarr.writing.integrity.verify`); returns a
        :class:`~lerobot_zarr.writing.integrity.VerifyReport` naming what is damaged. ``repair=True`` fetches
        damaged episodes again from the store's Hub repo or folder."""
        from ..writing.integrity import verify

        return verify(self.root, repair=repair, record=record, token=token, progress=progress)

    def to_xarray(self) -> Any:
        """The selected, materialized episodes as a lazy ``xarray.Dataset`` (xarray extra): one dask chunk per
        episode; dims ``frame`` and ``<feature>.<axis>`` (named from LeRobot's ``names`` where it names an axis,
        with its labels as coordinates); ``episode_index``, ``frame_index``, ``timestamp`` and ``index`` as
        coordinates; and the episode table over dim ``episode`` (with ``episode_materialized``: a partial store
        lists the episodes it lacks instead of filling them with zeros)."""
        from ..integrations.xarray import to_xarray

        return to_xarray(self)

    @property
    def defects(self) -> Any:
        """What the dataset doctor found in the store (:class:`~lerobot_zarr.doctor.report.DoctorReport`: made as
        the store was transcoded, or by :meth:`doctor`), its findings renumbered if the store was edited since; a
        report that checked no episode (and says so) if the doctor never ran on it."""
        from ..doctor.findings import read_report
        from ..doctor.report import DoctorReport

        report = read_report(self.root)
        if report is not None:
            return report
        n = int(self.meta.total_episodes)
        return DoctorReport(str(self.root), n, (), [], ["the doctor never ran on this store (made without it, or "
                                                         "by an earlier version): ds.doctor() checks it"])

    def doctor(self, *, progress: bool = True) -> Any:
        """Run every check of the dataset doctor again over the store's data and keep the report in the store
        (:func:`lerobot_zarr.doctor.scan.doctor_store`); nothing in the data changes."""
        from ..doctor.scan import doctor_store

        return doctor_store(self.root, progress=progress)
