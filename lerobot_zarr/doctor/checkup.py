"""One pass of the doctor over a dataset's episodes (:class:`Checkup`): fed by the transcode as the data passes by
(or by a scan of a store or a source), it runs the batch checks, watches the cameras, keeps the findings of each
episode until they are saved into the store, and runs the reductions at the end.

The transcode's hooks: :meth:`Checkup.frames` (an episode's data-file features), :meth:`camera` and
:meth:`camera_done` (around a video decode), :meth:`waiting` (before a commit: the episodes whose checks wait for
their batch, and so their commit), :meth:`save` (under the writer lock, just before a commit: the findings of the
episodes committed, one line appended) and :meth:`finish` (after the last commit: the sums kept, the reductions).

What a crash at any moment leaves: every committed episode's findings are in the store (saved before its commit);
the sums for stats.json and dead channels are kept once, at the end, and those of episodes committed by a run that
stopped before its end are read back from the store by the next run's :meth:`finish`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cameras.video import VideoUnavailable
from ..lerobot.format import DEFAULT_FEATURES
from ..store.packs import read_raw_rows
from ..store.state import StoreState
from ..utils.fileio import WriterLock
from .cameras import FrameWatch, video_defects
from .checks import Context, Moments, NumericChecks
from .findings import append_findings, identities, load_moments, save_moments, write_report
from .kinds import KINDS, THRESHOLDS, Defect, frame_ranges, ranges_text
from .reduce import dead_channels, duplicate_episodes, duplicate_tasks, stats_defects

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource

__all__ = ["Checkup", "BATCH_ROWS"]

BATCH_ROWS = 32768  # rows of consecutive episodes checked together: a few numpy passes per batch, not per episode
VIDEO_KINDS = frozenset(k for k in KINDS if k.startswith("video_"))


def _context(fps: float, arrays: Mapping[str, str], info: Mapping[str, Any], stats: Mapping[str, Any], n_tasks: int,
             starts: np.ndarray, lenient: bool, depth: set[str], nd: set[str]) -> Context:
    features = info.get("features", {}) if isinstance(info.get("features"), Mapping) else {}
    names = {k: v.get("names") for k, v in features.items() if isinstance(v, Mapping)}
    return Context(float(fps), dict(arrays), names, stats if isinstance(stats, Mapping) else {}, n_tasks,
                   np.asarray(starts, dtype=np.int64), lenient, dict(THRESHOLDS), frozenset(depth), frozenset(nd))


class Checkup:
    """The doctor's pass over the episodes of one dataset (see the module). ``lengths``: every episode's length;
    ``covered``: episodes whose moments are counted already (a resumed transcode's store)."""

    def __init__(self, ctx: Context, lengths: np.ndarray, tasks: Sequence[str], *, covered: set[int] | None = None,
                 video_starts: Mapping[str, Sequence[float | None]] | None = None, batch_rows: int = BATCH_ROWS):
        self.ctx, self.lengths, self.tasks = ctx, np.asarray(lengths, dtype=np.int64), list(tasks)
        self.video_starts = dict(video_starts or {})  # per camera and episode, where it starts in its video file
        self._numeric = [k for k, kind in ctx.kinds.items() if kind == "numeric"]
        self._cameras = [k for k, kind in ctx.kinds.items() if kind in ("image", "video")]
        self.numeric = NumericChecks(ctx)
        self.batch_rows = batch_rows
        self.covered = set(covered or ())
        self.found: dict[int, list[Defect]] = {}  # findings of the episodes fed and not saved yet
        self.moments = Moments()  # of the episodes fed, kept in the store by finish()
        self.seen: set[int] = set()
        self._pending: list[tuple[int, dict[str, np.ndarray]]] = []
        self._since = 0.0  # when the first episode of the pending batch came
        self._rows = 0
        self._lock = threading.Lock()  # cameras are watched in the decoding threads

    # making one -------------------------------------------------------------------------------------------
    @classmethod
    def of_source(cls, source: LeRobotSource, *, lenient: bool = False, covered: set[int] | None = None) -> Checkup:
        # info.json's features (their kinds and declared shapes): reading a data file's schema here would wait
        # for it before any video decode starts
        features = source.features
        ctx = _context(source.fps, {k: v.kind for k, v in features.items()}, source.info, source.stats,
                       len(source.tasks), source.episodes.start, lenient,
                       {k for k, v in features.items() if v.depth},
                       {k for k, v in features.items() if v.kind == "numeric" and len(v.shape) > 1})
        starts = {k: [None if ref is None else ref[1] for ref in refs] for k, refs in source.episodes.videos.items()}
        return cls(ctx, source.episodes.length, source.tasks, covered=covered, video_starts=starts)

    @classmethod
    def of_store(cls, state: StoreState, *, covered: set[int] | None = None) -> Checkup:
        ctx = _context(state.fps, {k: v.kind for k, v in state.arrays.items()}, state.info, state.stats,
                       len(state.tasks), state.table.start, False,
                       {k for k, v in state.arrays.items() if v.kind in ("image", "video") and v.dtype != np.uint8},
                       {k for k, v in state.arrays.items() if v.kind == "numeric" and len(v.frame_shape) > 1})
        return cls(ctx, state.table.length, state.tasks, covered=covered)

    # feeding ----------------------------------------------------------------------------------------------
    def frames(self, e: int, frames: Mapping[str, np.ndarray]) -> None:
        """Episode ``e``'s frames of the data files (numeric features, images): images are watched now, numeric
        features checked with the next batch."""
        e = int(e)
        for name in self._cameras:
            if name in frames:  # an image feature (videos are watched as they are decoded)
                watch = FrameWatch(e, name, self.ctx.fps, self.ctx.thresholds, colour=name not in self.ctx.depth)
                watch.see_all(np.asarray(frames[name]))
                self._add(e, watch.defects())
        # the episode's numeric features wait for their batch (the whole mapping where it holds nothing else)
        numeric = frames if not self._cameras else {k: frames[k] for k in self._numeric if k in frames}
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append((e, numeric))
        self.seen.add(e)
        self._rows += len(frames["timestamp"]) if "timestamp" in frames else int(self.lengths[e])
        if self._rows >= self.batch_rows:
            self.flush()

    def camera(self, e: int, name: str, timestamps: np.ndarray) -> CameraWatch:
        """A watch for the frames of camera ``name`` of episode ``e`` (rows at ``timestamps``) as they are decoded:
        decode inside ``with watch:``, into ``watch.wrap(sink)`` with ``log=watch.log``; the watch reports when the
        block ends (a :class:`~lerobot_zarr.cameras.video.VideoUnavailable` raised in it says why the camera is not
        there)."""
        starts = self.video_starts.get(name)
        start = starts[e] if starts is not None and starts[e] is not None else 0.0
        return CameraWatch(self, e, name, start + np.asarray(timestamps, dtype=np.float64).reshape(-1))

    def camera_done(self, watch: FrameWatch, queries: np.ndarray, error: str | None) -> None:
        """The decode of ``watch``'s camera ended (``error``: why the camera is unavailable in the episode, if it
        is); ``queries``: the rows' times in the video file. Thread-safe."""
        found = video_defects(watch.episode, watch.feature, queries, watch.log, error,
                              self.ctx.thresholds["tolerance_s"])
        if not any(d.kind == "video_missing" for d in found):
            found.extend(watch.defects())
        self._add(watch.episode, found)

    def _add(self, e: int, found: list[Defect]) -> None:
        with self._lock:
            self.found.setdefault(int(e), []).extend(found)

    def flush(self) -> None:
        """Check the episodes waiting for a batch."""
        if not self._pending:
            return
        episodes = [e for e, _ in self._pending]
        frames = [f for _, f in self._pending]
        self._pending, self._rows = [], 0
        found, moments = self.numeric.run(episodes, frames, skip_moments=self.covered)
        self.moments.merge(moments)
        with self._lock:
            for e in episodes:
                self.found.setdefault(e, [])
            for d in found:
                self.found[d.episode].append(d)  # type: ignore[index]

    # saving -----------------------------------------------------------------------------------------------
    def waiting(self, whole: bool, hold_s: float) -> list[int]:
        """Before a commit: the episodes whose checks wait for their batch to fill (they must not be committed
        before their findings are saved); the batch is checked now if ``whole`` (the last commit) or if its first
        episode has waited ``hold_s``."""
        if self._pending and (whole or time.monotonic() - self._since >= hold_s):
            self.flush()
        return [e for e, _ in self._pending]

    def take(self, episodes: Sequence[int]) -> dict[int, list[Defect]]:
        """The findings of ``episodes`` (checked now if they wait for their batch); they are forgotten here."""
        wanted = {int(e) for e in episodes}
        if any(e in wanted for e, _ in self._pending):
            self.flush()
        with self._lock:
            return {e: self.found.pop(e, []) for e in sorted(wanted)}

    def save(self, root: Path, state: StoreState, episodes: Sequence[int],
             hashes: Mapping[int, Mapping[str, int]]) -> None:
        """Keep in the store the findings of ``episodes``, about to be committed with these content hashes: one
        line appended. Under the store's writer lock."""
        episodes = [e for e in map(int, episodes) if e in self.seen or e in self.found]
        if episodes:
            append_findings(root, identities(state, episodes, hashes), self.take(episodes))

    def ingest(self, found: Mapping[int, list[Defect]], moments: Moments) -> None:
        """Findings and moments of episodes checked elsewhere (a worker of a distributed transcode)."""
        with self._lock:
            for e, defects in found.items():
                self.found.setdefault(int(e), []).extend(defects)
                self.seen.add(int(e))
        if not moments.covered & (self.covered | self.moments.covered):
            self.moments.merge(moments)

    def handed_over(self) -> tuple[dict[int, list[Defect]], Moments]:
        """Everything found so far, to hand to another process's :meth:`ingest` (a distributed worker's)."""
        found = self.take(sorted(self.seen | set(self.found)))
        moments, self.moments = self.moments, Moments()
        return found, moments

    # the end ----------------------------------------------------------------------------------------------
    def finish(self, root: Path, state: StoreState) -> None:
        """The sums kept in the store (with those of committed episodes it lacks, read back from the store) and
        the reductions over the store's committed episodes (duplicates by content hash, confirmed on the rows;
        tasks; stats.json and dead channels when the sums cover every episode), kept in the store."""
        self.flush()
        moments = self._keep_moments(root, state)
        episode_defects, dataset_defects, notes = reductions(
            store_keys(state), state.table.length, state.tasks, state.stats, self.ctx, moments,
            lambda a, b: _same_rows(root, state, a, b))
        write_report(root, state, episode_defects, dataset_defects, notes)

    def _keep_moments(self, root: Path, state: StoreState) -> Moments:
        """Add this run's sums to the store's, and those of the committed episodes that neither covers (committed
        by a run that stopped before its end), read back from the store; never an episode twice."""
        n = len(state.table)
        held = load_moments(root, n)
        committed = np.ones(n, dtype=bool)
        for name, kind in self.ctx.kinds.items():
            if kind == "numeric" and name in state.arrays:
                committed &= state.materialized_mask(name)
        lacking = [e for e in np.flatnonzero(committed).tolist()
                   if e not in held.covered and e not in self.moments.covered]
        parts = [self.moments, stored_moments(root, state, lacking, self.ctx)]
        with WriterLock(root):
            held = load_moments(root, n)  # another process may have kept its own meanwhile
            for part in parts:
                if part.covered and not part.covered & held.covered:
                    held.merge(part)
            save_moments(root, held, n)
        self.covered |= self.moments.covered
        self.moments = Moments()
        return held


class CameraWatch(FrameWatch):
    """A :class:`FrameWatch` that tells its :class:`Checkup` when its ``with`` block ends."""

    def __init__(self, checkup: Checkup, e: int, name: str, queries: np.ndarray):
        super().__init__(e, name, checkup.ctx.fps, checkup.ctx.thresholds, colour=name not in checkup.ctx.depth)
        self.checkup, self.queries = checkup, queries

    def __enter__(self) -> CameraWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if kind is None or issubclass(kind, VideoUnavailable):
            self.checkup.camera_done(self, self.queries, None if exc is None else str(exc))


def stored_moments(root: Path, state: StoreState, episodes: Sequence[int], ctx: Context) -> Moments:
    """The sums of ``episodes``' numeric features read back from the store (none if a numeric feature is not kept
    raw: then they stay uncounted, and the report says the stats were not checked)."""
    names = [k for k, kind in ctx.kinds.items() if kind == "numeric" and k in state.arrays]
    out = Moments()
    if not episodes or any(state.arrays[k].storage != "raw" for k in names):
        return out
    sums, t = NumericChecks(ctx, kinds=()), state.table
    batch: list[tuple[int, dict[str, np.ndarray]]] = []
    rows = 0
    for i, e in enumerate(episodes):
        pack = int(t.chunk[e])
        batch.append((e, {k: read_raw_rows(root, k, state.arrays[k], pack, int(state.packs.rows[pack]),
                                           int(t.offset[e]), int(t.length[e])) for k in names}))
        rows += int(t.length[e])
        if rows >= BATCH_ROWS or i == len(episodes) - 1:
            out.merge(sums.run([x for x, _ in batch], [f for _, f in batch])[1])
            batch, rows = [], 0
    return out


def data_features(kinds: Mapping[str, str]) -> list[str]:
    """The numeric features that say whether two episodes hold the same data (LeRobot's own columns aside)."""
    return sorted(k for k, kind in kinds.items() if kind == "numeric" and k not in DEFAULT_FEATURES)


def store_keys(state: StoreState) -> np.ndarray:
    """Each episode's content hashes of its data features (what makes duplicates): (episodes, features) int64,
    -1 where none is recorded or the episode is not committed."""
    features = data_features({k: v.kind for k, v in state.arrays.items()})
    keys = np.stack([state.episode_hashes(name) for name in features], axis=1) if features else \
        np.zeros((len(state.table), 0), np.int64)
    keys[~state.complete_episodes()] = -1
    return keys


def reductions(keys: np.ndarray, lengths: np.ndarray, tasks: Sequence[str], stats: Mapping[str, Any], ctx: Context,
               moments: Moments, same: Callable[[int, int], bool] | None
               ) -> tuple[list[Defect], list[Defect], list[str]]:
    """The checks of a dataset as a whole: ``(episode findings, dataset findings, notes)``. ``keys``: each
    episode's data hashes (see :func:`store_keys`), ``same(a, b)`` confirms two on their data."""
    lengths = np.asarray(lengths, dtype=np.int64)
    known = (keys >= 0).any(axis=1) if keys.size else np.zeros(len(lengths), bool)
    episode_defects = duplicate_episodes(np.where(known[:, None], np.column_stack([lengths, keys]), -1), lengths,
                                         same)
    dataset_defects = duplicate_tasks(tasks)
    notes = []
    missing = [e for e in range(len(lengths)) if e not in moments.covered]
    if missing:
        notes.append(f"stats.json and dead channels were not checked: the doctor's sums cover {len(moments.covered)} "
                     f"of {len(lengths)} episodes (missing {ranges_text(frame_ranges(missing))}; ds.doctor() covers "
                     f"them all)")
    else:
        dataset_defects += stats_defects({k: v for k, v in stats.items() if k not in ctx.nd}, moments, ctx.names)
        dataset_defects += dead_channels(moments, ctx.names)
    return episode_defects, dataset_defects, notes


def _same_rows(root: Path, state: StoreState, a: int, b: int) -> bool:
    """Whether episodes ``a`` and ``b`` hold the same values in every numeric feature but LeRobot's own columns
    (read from the store: only for episodes whose content hashes agree)."""
    t = state.table
    for name in data_features({k: v.kind for k, v in state.arrays.items()}):
        spec = state.arrays[name]
        if spec.storage != "raw":
            continue
        rows = [read_raw_rows(root, name, spec, int(t.chunk[e]), int(state.packs.rows[int(t.chunk[e])]),
                              int(t.offset[e]), int(t.length[e])) for e in (a, b)]
        if not np.array_equal(*rows, equal_nan=rows[0].dtype.kind == "f"):
            return False
    return True


def video_checked(found: Mapping[int, list[Defect]]) -> dict[int, list[Defect]]:
    """Of each episode's findings, those of a video against its rows (which only a decode of the source sees)."""
    return {e: [d for d in defects if d.kind in VIDEO_KINDS] for e, defects in found.items()}
