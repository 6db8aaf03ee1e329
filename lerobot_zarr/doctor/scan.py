"""The doctor run on its own: over a store (:func:`doctor_store`, ``ds.doctor()``: every check again from the
store's data, the videos against the rows as the transcode saw them), or over a LeRobot source
(:func:`doctor_source`, ``lerobot-zarr doctor SOURCE``: every episode read and every video decoded once, nothing
written; what the transcode refuses is reported too, all of it, with the index tables checked on their own
(:func:`scan_tables`) so that a dataset whose tables contradict each other still gets its report).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cameras.video import VideoUnavailable, have_pyav
from ..errors import LeRobotZarrError, LeRobotZarrWarning
from ..store.state import read_state
from ..store.tables import ranges_of
from ..utils.fileio import WriterLock
from ..utils.hashing import crc32c
from ..utils.progress import progress_bar
from .checkup import VIDEO_KINDS, Checkup, data_features, reductions, store_keys
from .findings import identities, read_report, recorded_findings, replace_findings, save_moments, write_report
from .kinds import Defect, frame_ranges, ranges_text
from .report import DoctorReport

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource
    from ..lerobot.source_files import SourceFiles

__all__ = ["doctor_store", "doctor_source", "scan_tables"]


def doctor_store(root: str | os.PathLike, *, progress: bool = True, locked: bool = False) -> DoctorReport:
    """Run every check again over a store's committed episodes, from its data, and keep the report in it
    (replacing the earlier one): values, timestamps, indices, cameras' frames, duplicates, stats.json against the
    data, tasks. The videos against the rows need the source's mp4 files: their findings are kept as the
    transcode made them. Nothing in the data changes. ``locked``: the caller holds the store's writer lock."""
    from ..sampling.dataset import LeRobotZarrDataset

    root = Path(root)
    state = read_state(root)
    done = np.flatnonzero(state.complete_episodes()).tolist()
    checkup = Checkup.of_store(state)
    earlier, _ = recorded_findings(root, state)
    kept_videos = {e: [d for d in found if d.kind in VIDEO_KINDS] for e, found in earlier.items()}
    cameras = [k for k, v in state.arrays.items() if v.kind in ("image", "video")]
    with warnings.catch_warnings():  # a camera some episodes lack is read where it is there
        warnings.simplefilter("ignore", LeRobotZarrWarning)
        ds = LeRobotZarrDataset(root, episodes=done) if done else None
        by_camera = {}
        for name in cameras:
            have = [e for e in done if state.materialized_mask(name)[e]]
            if have and ds is not None and name in ds.left_out:
                by_camera[name] = LeRobotZarrDataset(root, episodes=have)
    try:
        with progress_bar(int(state.table.length[done].sum()), f"checking {root.name}", progress) as bar:
            for e in done:
                frames = dict(ds.episode(e)) if ds is not None else {}
                for name, view in by_camera.items():
                    if e in set(view.episodes.tolist()):
                        frames[name] = view.episode(e, features=[name])[name]
                checkup.frames(e, {k: np.asarray(v) for k, v in frames.items()})
                bar.update(int(state.table.length[e]))
    finally:
        for view in [ds, *by_camera.values()]:
            if view is not None:
                view.close()
    found = checkup.take(done)
    for e, videos in kept_videos.items():
        found.setdefault(e, []).extend(videos)
    moments = checkup.moments
    episode_defects, dataset_defects, notes = reductions(
        store_keys(state), state.table.length, state.tasks, state.stats, checkup.ctx, moments, None)
    video_cameras = [k for k, v in state.arrays.items() if v.kind == "video"]
    if video_cameras:
        notes.append(f"videos against the rows ({', '.join(sorted(VIDEO_KINDS))}) are as the transcode found them: "
                     f"`lerobot-zarr doctor SOURCE` decodes the source's videos again")
    with contextlib.nullcontext() if locked else WriterLock(root):
        replace_findings(root, identities(state, done), found)
        save_moments(root, moments, len(state.table))
        write_report(root, state, episode_defects, dataset_defects, notes)
    report = read_report(root, state)
    assert report is not None  # just written
    return report


def doctor_source(source: str | os.PathLike | SourceFiles, *, episodes: list[int] | None = None,
                  videos: bool = True, progress: bool = True, workers: int | None = None) -> DoctorReport:
    """Check a LeRobot dataset (a folder, or any ``SourceFiles`` such as a Hub repo's) without making a store:
    every episode's rows read once and every video decoded once, checked as the transcode checks them, plus what
    the transcode refuses outright (timestamps not 1/fps apart, rows holding another episode's index, tables that
    contradict each other), all of it, not only the first. ``episodes``: only these (the checks of the dataset
    as a whole then cover only what they can); ``videos=False`` skips decoding videos. Nothing is written."""
    from ..lerobot.source import LeRobotSource
    from ..lerobot.source_files import LocalFiles, SourceFiles

    files = source if isinstance(source, SourceFiles) else LocalFiles(source)
    table_defects, notes, listed = scan_tables(files)
    try:
        src = LeRobotSource(files)
        _ = src.stored_features
    except LeRobotZarrError as exc:
        notes.append(f"the dataset cannot be read further, its episodes are not checked: {exc}")
        return DoctorReport(files.location(), listed, (), table_defects, notes)
    n = len(src.episodes)
    wanted = list(range(n)) if episodes is None else sorted({int(e) for e in episodes if 0 <= int(e) < n})
    checkup = Checkup.of_source(src, lenient=True)
    features = data_features(checkup.ctx.kinds)
    keys = np.full((n, len(features)), -1, dtype=np.int64)
    cameras = [k for k, v in src.stored_features.items() if v.kind == "video"] if videos else []
    if cameras and not have_pyav():
        notes.append(f"the videos of {cameras} were not checked: decoding them needs PyAV (pip install av)")
        cameras = []
    by_file: dict[str, list[int]] = {}
    for e in wanted:
        by_file.setdefault(src.episodes.data_file[e], []).append(e)
    read: list[int] = []
    with (progress_bar(int(src.episodes.length[wanted].sum()), f"checking {files.name}", progress) as bar,
          ThreadPoolExecutor(workers or min(8, os.cpu_count() or 1), thread_name_prefix="lerobot_zarr-doctor") as pool):
        decoding = []
        for eps in by_file.values():
            try:
                for e, frames in src.iter_episodes(eps, checked=False):
                    checkup.frames(e, frames)
                    keys[e] = [crc32c(np.ascontiguousarray(frames[k])) for k in features]
                    read.append(e)
                    decoding.extend(pool.submit(_check_video, src, checkup, e, name, frames["timestamp"])
                                    for name in cameras)
                    bar.update(int(src.episodes.length[e]))
            except LeRobotZarrError as exc:
                notes.append(f"episodes {ranges_text(frame_ranges(eps))} were not checked: {exc}")
        for future in decoding:
            with contextlib.suppress(VideoUnavailable):  # the watch told the doctor
                future.result()
    found = checkup.take(read)
    defects = [*table_defects, *(d for e in read for d in found[e])]
    episode_defects, dataset_defects, more = reductions(
        keys, src.episodes.length, src.tasks, src.stats, checkup.ctx, checkup.moments,
        lambda a, b: _same_source_rows(src, features, a, b))
    defects += episode_defects + dataset_defects
    checked = np.zeros(n, dtype=bool)
    checked[read] = True
    return DoctorReport(files.location(), n, ranges_of(checked), defects, notes + more)


def _check_video(src: LeRobotSource, checkup: Checkup, e: int, name: str, timestamps: np.ndarray) -> None:
    """Decode one episode's video (into nothing) with the doctor watching."""
    with checkup.camera(e, name, timestamps) as watch:
        src.decode_video(e, name, timestamps, watch.wrap(lambda frame: None), rewind=watch.rewinding(),
                         log=watch.log)


def _same_source_rows(src: LeRobotSource, features: list[str], a: int, b: int) -> bool:
    got = dict(src.iter_episodes([a, b], checked=False))
    return all(np.array_equal(np.asarray(got[a][k]), np.asarray(got[b][k]),
                              equal_nan=np.asarray(got[a][k]).dtype.kind == "f") for k in features)


def scan_tables(files: SourceFiles) -> tuple[list[Defect], list[str], int]:
    """The episode table against itself and the data files, read on their own (tolerant of what the source reader
    refuses): episode indices with gaps or repeated (``episode_index_gap``), rows no episode owns or episodes
    whose rows are missing (``orphan_rows``), episodes of no frame (``short_episode``). Reads ``meta/`` and the
    ``episode_index`` and ``index`` columns of every data file (``frame_index`` too where an episode's rows are not
    as many as the table gives). Returns the findings, notes on what could not be read, and how many episodes the
    table lists."""
    import pyarrow as pa

    notes: list[str] = []
    try:
        table = _episode_table(files)
    except (LeRobotZarrError, pa.ArrowException, OSError, KeyError, ValueError, TypeError) as exc:
        return [], [f"the episode table could not be read on its own ({exc})"], 0
    if table is None:
        return [], notes, 0
    index = np.asarray(table["episode_index"], dtype=np.int64)
    out: list[Defect] = []
    uniq, counts = np.unique(index, return_counts=True)
    expected = np.arange(len(index))
    if not np.array_equal(np.sort(index), expected):
        missing = np.setdiff1d(np.arange(int(index.max(initial=-1)) + 1), uniq)
        repeated = uniq[counts > 1]
        what = []
        if missing.size:
            what.append(f"missing {ranges_text(frame_ranges(missing))}")
        if repeated.size:
            what.append(f"repeated {ranges_text(frame_ranges(repeated))}")
        if index.min(initial=0) < 0:
            what.append("negative ones")
        out.append(Defect("episode_index_gap", None, "episode_index", frame_ranges(np.union1d(missing, repeated)),
                          float(missing.size),
                          f"meta/episodes lists {len(index)} episodes with indices {'; '.join(what)} (LeRobot takes "
                          f"episode k from row k: those after a gap get another episode's data)"))
    rows: dict[int, int] = {}
    held: dict[str, np.ndarray] = {}  # the episodes of each data file
    orphans = []
    for rel in files.list("data"):
        if not rel.endswith(".parquet"):
            continue
        try:
            cols = files.parquet(rel).read(columns=["episode_index", "index"])
        except (pa.ArrowException, OSError, KeyError, LeRobotZarrError) as exc:
            notes.append(f"{files.location(rel)}: its index columns cannot be read ({exc})")
            continue
        ep = cols.column("episode_index").to_numpy(zero_copy_only=False).astype(np.int64).reshape(-1)
        idx = cols.column("index").to_numpy(zero_copy_only=False).astype(np.int64).reshape(-1)
        present, count = np.unique(ep, return_counts=True)
        for e, k in zip(present.tolist(), count.tolist(), strict=True):
            rows[e] = rows.get(e, 0) + k
        held[rel] = present
        orphans.append(idx[~np.isin(ep, uniq)])
    orphans = np.sort(np.concatenate(orphans)) if orphans else np.zeros(0, np.int64)
    if orphans.size:
        out.append(Defect("orphan_rows", None, "episode_index", frame_ranges(orphans), float(orphans.size),
                          f"{orphans.size} data rows belong to no episode of meta/episodes (their global index "
                          f"values are given as frames)"))
    lengths = dict(zip(index.tolist(), np.asarray(table["length"], dtype=np.int64).tolist(), strict=False))
    out.extend(Defect("short_episode", e, None, (), float(n), f"meta/episodes gives it {n} frames (the transcode "
                                                              f"refuses an episode without frames)")
               for e, n in sorted(lengths.items()) if n <= 0)
    twice = set(uniq[counts > 1].tolist())  # named above; which of their lengths holds is anyone's guess
    wrong = {e: n for e, n in sorted(lengths.items()) if rows.get(e, 0) != n and e not in twice}
    if wrong:
        out.extend(_rows_against_table(files, wrong, rows, held, notes))
    return out, notes, len(index)


def _rows_against_table(files: SourceFiles, lengths: Mapping[int, int], rows: Mapping[int, int],
                        held: Mapping[str, np.ndarray], notes: list[str]) -> list[Defect]:
    """Episodes whose ``rows`` in the data files (``held``: the episodes of each file) are not as many as the table
    gives (``lengths``): ``orphan_rows`` naming each episode and its frames, those no row holds (by the rows'
    ``frame_index``) when rows are missing, the rows' ``frame_index`` values beyond the length or repeated when there
    are more. Reads the ``frame_index`` column of the files holding them."""
    import pyarrow as pa

    wanted = np.fromiter(lengths, dtype=np.int64)
    episodes, frame_index = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for rel, present in held.items():
        if not np.isin(present, wanted).any():
            continue
        try:
            cols = files.parquet(rel).read(columns=["episode_index", "frame_index"])
        except (pa.ArrowException, OSError, KeyError, LeRobotZarrError) as exc:
            notes.append(f"{files.location(rel)}: its frame_index column cannot be read ({exc})")
            continue
        ep, fi = (cols.column(k).to_numpy(zero_copy_only=False).astype(np.int64).reshape(-1)
                  for k in ("episode_index", "frame_index"))
        keep = np.isin(ep, wanted)
        episodes.append(ep[keep])
        frame_index.append(fi[keep])
    ep, fi = np.concatenate(episodes), np.concatenate(frame_index)
    order = np.argsort(ep, kind="stable")
    ep, fi = ep[order], fi[order]
    out = []
    for e, n in lengths.items():
        a, b = np.searchsorted(ep, [e, e + 1])
        have, n, frames = rows.get(e, 0), max(int(n), 0), fi[a:b]
        if have < n:
            gone = np.setdiff1d(np.arange(n), frames)
            detail = f"frames {ranges_text(frame_ranges(gone))} missing"
        else:
            values, counts = np.unique(frames, return_counts=True)
            gone = np.union1d(values[(values < 0) | (values >= n)], values[counts > 1])
            detail = f"frame_index {ranges_text(frame_ranges(gone))} beyond its length or repeated"
        out.append(Defect("orphan_rows", e, "episode_index", frame_ranges(gone), float(n - have),
                          f"episode {e}: meta/episodes gives it {n} rows, the data files hold {have}"
                          + (f" ({detail})" if gone.size else "")))
    return out


def _episode_table(files: SourceFiles) -> Mapping[str, Any] | None:
    """``episode_index`` and ``length`` of every row of the episode table, as written (v3.x parquet or v2.x
    jsonl); None when there is no table."""
    import pyarrow as pa

    from ..utils.fileio import load_json

    tables = [rel for rel in files.list("meta") if rel.startswith("meta/episodes/") and rel.endswith(".parquet")]
    if tables:
        parts = [files.parquet(rel).read(columns=["episode_index", "length"]) for rel in tables]
        t = pa.concat_tables(parts, promote_options="permissive")
        return {"episode_index": t.column("episode_index").to_pylist(), "length": t.column("length").to_pylist()}
    if files.exists("meta/episodes.jsonl"):
        rows = [load_json(line, files.location("meta/episodes.jsonl"), error=ValueError)
                for line in files.read_bytes("meta/episodes.jsonl").decode().splitlines() if line.strip()]
        return {"episode_index": [int(r["episode_index"]) for r in rows], "length": [int(r["length"]) for r in rows]}
    return None

