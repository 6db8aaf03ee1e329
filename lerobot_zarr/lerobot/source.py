"""Reading LeRobot dataset folders (codebase v3.x and v2.x) into numpy, one episode at a time
(:class:`LeRobotSource`).

Its metadata (info.json, the features, the episode table, tasks and stats) is read and checked when the source is
opened, by :mod:`.source_meta`; the columns of its data files become numpy frames through :mod:`.source_columns`.
This module reads the row groups holding the episodes asked for (several at a time from a Hub repository) and
decodes their videos. It never writes.

What it checks as each episode is read (so at transcode time, when the store is filled), so that bad input is a
typed error naming the file and episode rather than a raw Python error or silently wrong frames: the data file's
schema and row count, ``episode_index`` / ``index`` / ``frame_index`` / ``task_index`` against the episode table
(``frame_index`` counts 0, 1, ... in row order), and timestamps:
consecutive timestamps of an episode 1/fps apart within LeRobot's 1e-4 s (a dropped frame would otherwise make
every window after it silently return another time than asked).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..cameras.video import TOLERANCE_S, DecodeLog, VideoUnavailable, decode_into
from ..errors import CorruptSourceError, LeRobotZarrError, SchemaMismatchError, SourceNotFoundError, warn_user
from ..utils.background import in_threads
from .data_windows import WINDOW_EPISODES, data_footer_hint, row_window
from .format import bad_timestamp_steps
from .source_columns import COLOUR_DEPTH_MODES, column_to_numpy, frame_shape_from_arrow, recorded_image_shape
from .source_files import LocalFiles, SourceFiles, is_lerobot_folder
from .source_meta import FeatureSpec, KnownEpisodes, LeRobotMetadata, SourceEpisodes, open_parquet

__all__ = ["FeatureSpec", "SourceEpisodes", "LeRobotSource", "is_lerobot_folder"]


class LeRobotSource:
    """A LeRobot dataset (a local folder, or any ``SourceFiles``): metadata parsed on construction, frames read
    on demand per episode. ``known``: what a store made from it holds of its episode table; then only the episodes
    it names are located, and only they can be read (:class:`~.source_meta.KnownEpisodes`)."""

    def __init__(self, source: str | os.PathLike | SourceFiles, known: KnownEpisodes | None = None):
        if isinstance(source, SourceFiles):
            files = source
        else:
            if not Path(source).is_dir():
                raise SourceNotFoundError(f"{Path(source).resolve()}: no such dataset folder")
            files = LocalFiles(source)
        meta = LeRobotMetadata(files, known)
        self.files, self.info, self.major, self.fps = files, meta.info, meta.major, meta.fps
        self.features, self.episodes, self.tasks, self.stats = meta.features, meta.episodes, meta.tasks, meta.stats
        self._refused = meta.refused

    def will_read(self, episodes: Sequence[int]) -> None:
        """The episodes about to be read: stored frame shapes come from the first one's data file, whose footer is
        fetched with the footers of the others' data files, all at once, when the shapes are first needed (a
        partial open reads no other footer). Only before that."""
        located = self.episodes.located
        self._will_read = sorted({int(e) for e in episodes if located is None or int(e) in located})

    def _prefetch_footers(self, episodes: Sequence[int]) -> None:
        """Fetch the footers of the data files of ``episodes`` at once, each in one request where the estimate of
        its length holds (a row group per episode, LeRobot's way)."""
        videos = [ref[0] for refs in self.episodes.videos.values() for e in episodes if (ref := refs[e]) is not None]
        located = self.episodes.located is not None  # the episodes of each file are not known: its share of the bytes
        self.files.prefetch_sizes([*(self.episodes.data_file[e] for e in episodes), *videos],
                                  folders=["data"] if located else ())  # (their folders listed, all at once)
        rels = [rel for rel in dict.fromkeys(self.episodes.data_file[e] for e in episodes) if self.files.exists(rel)]
        share = None
        if located:
            data = [r for r in self.files.list("data") if r.endswith(".parquet")]
            share = len(self.episodes) / max(1, sum(self.files.size(r) for r in data))
        hints = {}
        for rel in rels:
            groups = len(self._episodes_of_file.get(rel, ()))
            if share is not None:
                groups = max(groups, round(share * self.files.size(rel)))
            hints[rel] = data_footer_hint(self.features, groups)
            self.files.footer_hint(rel, hints[rel])
        self.files.prefetch_footers(rels, self._row_windows(episodes, hints))

    def _row_windows(self, episodes: Sequence[int], hints: dict[str, int]) -> dict[str, list[tuple[int, int]]]:
        """Where the rows of a few ``episodes`` likely lie in their data files, estimated before the footers
        (:func:`~.data_windows.row_window`; where only some episodes were located, the file's rows are between the
        bounds the episode table's footer gives, :attr:`SourceEpisodes.file_rows`): fetched with the footers, they
        save the round trip of reading them after (a wrong estimate costs that round trip, never a value: reads take
        only held bytes that hold the whole range). None for more than ``WINDOW_EPISODES`` episodes (an open of many
        reads whole runs of row groups), nor for a file whose rows are not bounded."""
        if len(episodes) > WINDOW_EPISODES:
            return {}
        t, out = self.episodes, {}
        for e in episodes:
            rel = t.data_file[e]
            if rel not in hints:
                continue
            if t.located is None:
                fewest = most = int(max(t.file_row[i] + t.length[i] for i in self._episodes_of_file[rel]))
            elif rel in t.file_rows:
                fewest, most = t.file_rows[rel]
            else:
                continue
            first, stop = int(t.file_row[e]), int(t.file_row[e] + t.length[e])
            out.setdefault(rel, []).append(row_window(self.files.size(rel), hints[rel], (first, first), (stop, stop),
                                                      (fewest, most)))
        return out

    def _resolve_frame_shapes(self) -> None:
        """Fix each feature's stored per-frame shape from a data file's schema (every file must agree)."""
        located = self.episodes.located
        wanted = getattr(self, "_will_read", None) or [0 if located is None else min(located)]
        e = wanted[0]
        self._prefetch_footers(wanted)
        rel = self.episodes.data_file[e]
        first = self.files.location(rel)
        if not self.files.exists(rel):
            raise SourceNotFoundError(f"{first}: data file of episode {e} not found")
        schema = open_parquet(self.files, rel).schema_arrow
        for name, spec in list(self.features.items()):
            if spec.kind == "video":  # a video's frame shape is info.json's (fixed when it was read)
                continue
            if name not in schema.names:
                raise SchemaMismatchError(f"{first}: feature {name!r} declared in info.json has no column")
            self.features[name] = spec.with_frame_shape(frame_shape_from_arrow(spec, schema.field(name).type, first))
        self._resolve_image_shapes(rel, e)

    def _resolve_image_shapes(self, rel: str, e: int) -> None:
        """Image features whose frames have another height and width than info.json declares (as many pixels) are
        stored as recorded, as LeRobot serves them, with a warning: the header of episode ``e``'s first image
        says (one read of that row group's image columns, which the transcode reads next)."""
        images = [name for name, spec in self.features.items() if spec.kind == "image"]
        if not images:
            return
        pf = open_parquet(self.files, rel)
        row = int(self.episodes.file_row[e])
        starts = np.cumsum([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)])
        group = int(np.searchsorted(starts, row, side="right"))
        if group >= pf.num_row_groups:
            return  # fewer rows than the episode table says: reading the episode reports it
        columns = [name for name, spec in self.features.items() if spec.kind != "video"]
        try:  # as the transcode reads it, which takes this table instead of reading it again (_read_unit)
            table = self.files.parquet(rel, pf.metadata).read_row_groups([group], columns=columns)
        except LeRobotZarrError:
            raise
        except (pa.ArrowException, OSError) as exc:
            raise CorruptSourceError(f"{self.files.location(rel)}: cannot read row group {group} ({exc})") from exc
        self._probed = (rel, [group], columns, table)
        offset = row - (int(starts[group - 1]) if group else 0)
        for name in images:
            spec = self.features[name]
            shape, mode = recorded_image_shape(table.column(name).slice(offset, 1), spec)
            if spec.depth and mode in COLOUR_DEPTH_MODES:
                warn_user(f"{self.files.location(rel)}: image feature {name!r} is declared a depth map "
                          f"({spec.numpy_dtype}, {spec.depth_unit or 'unknown unit'}) but its frames are 8-bit "
                          f"{mode} images: stored as recorded and served as LeRobot serves them (pixels / 255 as "
                          f"float32, {shape[-1]} channels), not as depth")
                spec = self.features[name] = replace(spec, depth=False)
            if shape != spec.frame_shape:
                warn_user(f"{self.files.location(rel)}: image feature {name!r} has frames of {shape[0]}x{shape[1]} "
                          f"pixels where info.json declares {spec.shape}: stored and served as recorded (as "
                          f"LeRobot serves them)")
                self.features[name] = spec.with_frame_shape(shape)

    # data -----------------------------------------------------------------------------------------------
    @functools.cached_property
    def stored_features(self) -> dict[str, FeatureSpec]:
        """The features a store holds (all but those :attr:`not_materialized` names), with their stored per-frame
        shape (read from the first data file's schema on first use: metadata-only readers never touch data
        files)."""
        self._resolve_frame_shapes()
        return dict(self.features)

    @functools.cached_property
    def _record(self) -> dict:
        if self.episodes.located is not None:  # the files of every episode are not known: every one listed (lazily:
            # a source whose identity is not its files, a Hub commit or a bucket's metadata, lists none)
            return self.files.record(rel for folder in ("data", "videos") for rel in self.files.list(folder))
        videos = {ref[0] for refs in self.episodes.videos.values() for ref in refs if ref is not None}
        return self.files.record([*self.episodes.data_file, *sorted(videos)])

    def record(self) -> dict:
        """Identity of the source, kept in the store's attributes (path and content digest, or repo and commit)."""
        return dict(self._record)

    def iter_episodes(self, episodes: Sequence[int], *, checked: bool = True
                      ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Yield ``(episode, {feature: frames})`` for the given episodes, reading only the row groups holding them
        (the features of the data files: cameras kept as videos come from :meth:`decode_video`).

        Work is split into runs of consecutive row groups, read ``files.concurrency`` at a time (several range
        requests in flight for a Hub repository). Frames are checked against the episode table, unless
        ``checked=False`` (the dataset doctor's scan, which reports every such defect instead of the first).
        """
        self.episodes.check_located(episodes, self.files.location())
        by_file: dict[str, list[int]] = {}
        for e in sorted(set(int(e) for e in episodes)):
            by_file.setdefault(self.episodes.data_file[e], []).append(e)
        specs = {k: v for k, v in self.stored_features.items() if v.kind != "video"}
        self._prefetch_footers([eps[0] for eps in by_file.values()])
        units = [unit for rel, eps in by_file.items() for unit in self._plan_file(rel, eps, specs)]
        workers = min(self.files.concurrency, len(units))
        if workers <= 1:
            for unit in units:
                yield from self._read_unit(*unit, specs, checked)
            return
        for _, read in in_threads(lambda u: list(self._read_unit(*u, specs, checked)), units, workers,
                                  ahead=2 * workers, name="lerobot_zarr-fetch"):
            yield from read

    def _plan_file(self, rel: str, eps: list[int], specs: dict[str, FeatureSpec]) -> list[tuple]:
        """Check a data file's schema (footer only) and split the episodes asked for into row-group runs."""
        path = self.files.location(rel)
        if not self.files.exists(rel):
            raise SourceNotFoundError(f"{path}: data file of episode(s) {eps[:5]}{'...' if len(eps) > 5 else ''} "
                                      f"not found")
        pf = open_parquet(self.files, rel)
        names = pf.schema_arrow.names
        missing = [k for k in specs if k not in names]
        if missing:
            raise SchemaMismatchError(f"{path}: no column for feature(s) {missing}")
        for k, spec in specs.items():
            frame_shape_from_arrow(spec, pf.schema_arrow.field(k).type, path)
        rg_rows = np.array([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)], dtype=np.int64)
        rg_start = np.concatenate([[0], np.cumsum(rg_rows)])
        t = self.episodes
        in_file = self._episodes_of_file.get(rel, eps)
        rows = int(max(t.file_row[e] + t.length[e] for e in in_file))
        # (where only some episodes were located, their rows must be in the file; their values are checked as read)
        if rows != rg_start[-1] and (t.located is None or rows > rg_start[-1]):
            raise SchemaMismatchError(f"{path}: holds {rg_start[-1]} rows, the episode table gives it {rows} "
                                      f"(episodes {in_file[0]}..{in_file[-1]})")
        needed: set[int] = set()
        for e in eps:
            first = int(np.searchsorted(rg_start, t.file_row[e], side="right") - 1)
            last = int(np.searchsorted(rg_start, t.file_row[e] + t.length[e], side="left"))
            needed.update(range(first, last))
        runs: list[list[int]] = []
        for g in sorted(needed):
            if runs and runs[-1][-1] == g - 1:
                runs[-1].append(g)
            else:
                runs.append([g])
        units = []
        for run in runs:
            base, stop = int(rg_start[run[0]]), int(rg_start[run[-1] + 1])
            unit_eps = [e for e in eps if base <= t.file_row[e] and t.file_row[e] + t.length[e] <= stop]
            units.append((rel, pf.metadata, run, base, unit_eps))
        return units

    @functools.cached_property
    def _episodes_of_file(self) -> dict[str, list[int]]:
        """Every episode of each data file, from the episode table."""
        out: dict[str, list[int]] = {}
        located = self.episodes.located
        for e, rel in enumerate(self.episodes.data_file):
            if located is None or e in located:
                out.setdefault(rel, []).append(e)
        return out

    def _read_unit(self, rel: str, metadata: pq.FileMetaData, run: list[int], base: int, eps: list[int],
                   specs: dict[str, FeatureSpec], checked: bool = True) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Read one run of row groups and cut it into episodes."""
        path = self.files.location(rel)
        t = self.episodes
        probed, self._probed = getattr(self, "_probed", None), None
        try:
            table = probed[3] if probed is not None and probed[:3] == (rel, run, list(specs)) else \
                self.files.parquet(rel, metadata).read_row_groups(run, columns=list(specs))
        except LeRobotZarrError:  # a Hub failure naming the file (HubError, HubAuthError), not a corrupt file
            raise
        except (pa.ArrowException, OSError) as exc:
            raise CorruptSourceError(f"{path}: cannot read row groups {run[0]}..{run[-1]} ({exc})") from exc
        # numeric columns: converted once per run (zero copy from Arrow where possible), sliced per episode
        columns = {k: column_to_numpy(table.column(k), spec, path, base)
                   for k, spec in specs.items() if spec.kind == "numeric"}
        for e in eps:
            r0, n = int(t.file_row[e]) - base, int(t.length[e])
            frames = {k: col[r0:r0 + n] for k, col in columns.items()}
            for k, spec in specs.items():
                if spec.kind != "numeric":  # images and text converted per episode: bounded memory
                    frames[k] = column_to_numpy(table.column(k).slice(r0, n), spec, f"{path} (episode {e})",
                                                r0 + base)
            if checked:
                self._check_episode(frames, e, path)
            yield e, frames

    def _check_episode(self, frames: dict[str, np.ndarray], e: int, path: str) -> None:
        n = int(self.episodes.length[e])
        ep = frames["episode_index"].reshape(n)
        idx = frames["index"].reshape(n)
        start = int(self.episodes.start[e])
        if ep.shape[0] != n or (ep != e).any():
            raise SchemaMismatchError(f"{path}: rows for episode {e} hold episode_index {int(ep[ep != e][0])}")
        if not np.array_equal(idx, np.arange(start, start + n)):
            raise SchemaMismatchError(
                f"{path}: episode {e} 'index' column is not the contiguous range [{start}, {start + n})")
        frame = frames["frame_index"].reshape(n) if "frame_index" in frames else np.arange(n)
        if not np.array_equal(frame, np.arange(n)):  # rows out of order: every window would take other frames
            row = int(np.flatnonzero(frame != np.arange(n))[0])
            raise SchemaMismatchError(f"{path}: episode {e} 'frame_index' is not 0..{n - 1} in row order (row {row} "
                                      f"holds {int(frame[row])})")
        task_index = frames["task_index"].reshape(n)
        if len(task_index) and (task_index.min() < 0 or task_index.max() >= len(self.tasks)):
            raise SchemaMismatchError(f"{path}: episode {e} has a task_index outside the {len(self.tasks)} tasks")
        self._check_timestamps(frames["timestamp"].reshape(n), e, path)

    def _check_timestamps(self, ts: np.ndarray, e: int, path: str) -> None:
        """Consecutive timestamps of an episode are 1/fps apart, within LeRobot's 1e-4 s (as its
        ``check_timestamps_sync``; plus the rounding of the stored float type, which float32 makes coarser than
        1e-4 s past ~2000 s). A dropped or repeated frame would otherwise shift every window after it: the store
        addresses frames by index, so ``t + k/fps`` would silently be another time."""
        bad = bad_timestamp_steps(ts, self.fps)
        if bad.size:
            i = int(bad[0])
            step = float(ts[i + 1]) - float(ts[i])
            raise SchemaMismatchError(
                f"{path}: episode {e} frames {i} and {i + 1} have timestamps {float(ts[i]):.6f} s and "
                f"{float(ts[i + 1]):.6f} s, {step:.6f} s apart instead of 1/fps = {1 / self.fps:.6f} s "
                f"(tolerance {TOLERANCE_S} s): a dropped or repeated frame, or timestamps at another fps")

    def decode_video(self, episode: int, key: str, timestamps: np.ndarray, sink: Callable[[bytes], None], *,
                     rewind: Callable[[], None] | None = None, log: DecodeLog | None = None) -> None:
        """Decode camera ``key`` of ``episode`` at the episode's dataset ``timestamps``, frame by frame into
        ``sink`` (HWC bytes: uint8, or a depth camera's uint16 codes); ``rewind()``: start over (see
        :func:`~lerobot_zarr.cameras.video.decode_into`); ``log`` notes what the decode saw
        (:class:`~lerobot_zarr.cameras.video.DecodeLog`).

        Raises :class:`~lerobot_zarr.cameras.video.VideoUnavailable` (with the reason) when the video is not listed, not
        there, cannot be decoded or has no frame close enough to a timestamp; network errors propagate."""
        where = f"episode {episode}, camera {key!r}"
        missing = self.video_missing(episode, key)
        if missing is not None:
            raise VideoUnavailable(f"{where}: {missing}")
        rel, from_timestamp = self.episodes.videos[key][episode]
        queries = from_timestamp + np.asarray(timestamps, dtype=np.float64).reshape(-1)
        spec = self.features[key]
        with self.files.open(rel) as f:
            decode_into(f, sink, queries, spec.frame_shape, f"{self.files.location(rel)} ({where})",
                        depth=spec.depth, rewind=rewind, log=log)

    def video_missing(self, episode: int, key: str, exists: Callable[[str], bool] | None = None) -> str | None:
        """Why camera ``key`` of ``episode`` has no video, known without decoding anything (the episode table lists
        none, or its file is not there), or None. ``exists``: the file check (a cached one for many episodes)."""
        self.episodes.check_located([episode], self.files.location())
        ref = self.episodes.videos.get(key, [None] * (episode + 1))[episode]
        if ref is None:
            return "meta/episodes lists no video file"
        if not (exists or self.files.exists)(ref[0]):
            return f"video file {self.files.location(ref[0])} not found"
        return None

    @property
    def not_materialized(self) -> dict[str, str]:
        """Features listed in info.json that a store never holds, with the reason (a dtype LeRobot does not write,
        a depth map it cannot read). Whether PyAV is installed is this process's business, not the dataset's:
        videos are always stored (decoded when it is)."""
        return dict(self._refused)
