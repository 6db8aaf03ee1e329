"""What the doctor reports: the kinds of defect (:data:`KINDS`), their thresholds (:data:`THRESHOLDS`) and one
finding (:class:`Defect`).

Every threshold is here, with why it has the value it has; docs/guide.md lists them for users. Severities: ``error``
(LeRobot fails on it or serves other data than the rows say), ``warning`` (the data is very likely broken), ``info``
(worth knowing, often intended).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cameras.video import TOLERANCE_S
from ..errors import ArgumentError, CorruptStoreError
from ..store.tables import sorted_distinct

__all__ = ["SEVERITIES", "Kind", "KINDS", "THRESHOLDS", "Defect", "frame_ranges", "ranges_text", "check_kinds"]

SEVERITIES = ("error", "warning", "info")

#: Every threshold of the checks (read by them; kept with each report, so that a report says what it applied).
THRESHOLDS: dict[str, float] = {
    # LeRobot's tolerance_s: a timestamp and the video frame serving it, consecutive timestamps and 1/fps
    "tolerance_s": TOLERANCE_S,
    # an episode of at most this many frames (LeRobot needs at least 2 for any window with a past or future)
    "short_episode_frames": 1,
    # a vector feature whose every channel stays the same for an episode of at least this long (a stalled stream)
    "constant_seconds": 1.0,
    # a glitch ("jump"): a run of at most jump_frames frames, inside the episode (with frames before and after),
    # whose values lie beyond all the others of the episode by more than jump_ratio times the others' range (at
    # least jump_quanta of the channel's smallest step, so that a quantized sensor's one-step flicker is none). A
    # gripper that opens and closes, a command that dips and recovers, a robot standing still: none of these
    # (measured on the shared real datasets, whose largest such ratio is 1.5)
    "jump_frames": 3,
    "jump_ratio": 3.0,
    "jump_quanta": 10,
    # ... in an episode of at least this many frames (in fewer, too few others say what the channel's range is)
    "jump_min_frames": 10,
    # a camera showing the very same frame (byte for byte) for at least this long
    "frozen_seconds": 1.0,
    # a black frame: mean pixel value below this (of 255)
    "black_level": 3.0,
    # stats.json against a recomputation from the data: its mean and std within this fraction of the channel's
    # std (plus 1e-5 of the values' size: LeRobot sums float32 values in float32, which drift by that much).
    # Stale stats (computed before episodes were added or deleted) or wrong ones (a std lost to float32
    # cancellation) miss by far more
    "stats_rtol": 0.01,
    # a value outside stats.json's [min, max], and stats.json's min and max against the data's: by more than this
    # fraction of the range (min and max are exact wherever they were computed)
    "range_rtol": 1e-6,
}


@dataclass(frozen=True)
class Kind:
    """One kind of defect: its name, severity, whether its findings name an episode (``episode``: the episode can
    be dropped with ``edit --drop-defective``) or the dataset as a whole, and what it means."""

    name: str
    severity: str
    scope: str
    what: str
    where: str = "transcode"  # "transcode": checked as a store is made; "scan": by `lerobot-zarr doctor SOURCE`


KINDS: dict[str, Kind] = {k.name: k for k in (
    # values
    Kind("nan", "error", "episode", "NaN or infinite values"),
    Kind("constant", "warning", "episode", "every channel of a vector feature stays the same for the whole "
         "episode"),
    Kind("jump", "warning", "episode", "a glitch: a few frames far outside the rest of the episode, then back"),
    Kind("out_of_range", "warning", "episode", "values outside the [min, max] that stats.json gives"),
    Kind("short_episode", "warning", "episode", "an episode of 0 or 1 frame"),
    # timestamps and indices (the transcode refuses a dataset with those marked "scan": the doctor lists them all)
    Kind("timestamp_drift", "warning", "episode", "timestamps away from the frame's place / fps (frame_index / fps "
         "where frame_index is right) by more than LeRobot's tolerance"),
    Kind("timestamp_gap", "error", "episode", "consecutive timestamps more than 1/fps apart (dropped frames), or "
         "less", "scan"),
    Kind("timestamp_duplicate", "error", "episode", "two consecutive rows with the same timestamp", "scan"),
    Kind("timestamp_backwards", "error", "episode", "timestamps going backwards", "scan"),
    Kind("frame_index", "error", "episode", "frame_index is not 0, 1, ..., length - 1 in row order", "scan"),
    Kind("episode_index", "error", "episode", "rows of the episode hold another episode_index", "scan"),
    Kind("index", "error", "episode", "the index column is not the episode's contiguous range", "scan"),
    Kind("task_index", "error", "episode", "a task_index with no task in the task table", "scan"),
    Kind("episode_index_gap", "error", "dataset", "episode indices of meta/episodes are not 0, 1, ..., N - 1 "
         "(LeRobot looks an episode up by its row: a gap serves another episode's data and video)", "scan"),
    Kind("orphan_rows", "error", "dataset", "data rows that no episode of meta/episodes covers, or episodes "
         "whose rows are missing", "scan"),
    # videos against the rows
    Kind("video_missing", "warning", "episode", "the episode's video is missing or cannot be decoded"),
    Kind("video_short", "error", "episode", "the video ends before the episode's rows do"),
    Kind("video_timestamps", "error", "episode", "rows whose timestamp has no video frame within LeRobot's "
         "tolerance"),
    Kind("video_extra_frames", "warning", "episode", "video frames between the rows' timestamps that no row "
         "has"),
    Kind("frozen_frames", "warning", "episode", "a camera showing the same frame, byte for byte, for a second or "
         "more"),
    Kind("black_frames", "warning", "episode", "black camera frames"),
    # the dataset as a whole
    Kind("duplicate_episode", "warning", "episode", "the same data as an earlier episode"),
    Kind("duplicate_task", "info", "dataset", "task strings that differ only by case or whitespace"),
    Kind("stats_mismatch", "warning", "dataset", "stats.json disagrees with the data"),
    Kind("dead_channel", "info", "dataset", "a channel that has the same value in every frame of the dataset"),
)}


def check_kinds(kinds: Iterable[str] | None, *, droppable: bool = False) -> list[str]:
    """The kinds named (None: every kind; with ``droppable``, every kind whose findings name episodes), checked:
    an unknown kind, or a dataset-wide one where episodes are to be dropped, raises ``ArgumentError`` naming them."""
    if kinds is None:
        return [k for k, v in KINDS.items() if not droppable or v.scope == "episode"]
    names = list(dict.fromkeys(kinds))
    unknown = [k for k in names if k not in KINDS]
    if unknown:
        raise ArgumentError(f"unknown defect kind(s) {unknown}; the kinds: {', '.join(KINDS)}")
    if droppable:
        whole = [k for k in names if KINDS[k].scope != "episode"]
        if whole:
            raise ArgumentError(f"{whole} are defects of the dataset as a whole: dropping episodes does not remove "
                             f"them (episode kinds: {', '.join(k for k, v in KINDS.items() if v.scope == 'episode')})")
    return names


def frame_ranges(frames: np.ndarray | Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Sorted frame numbers as half-open runs ``((first, stop), ...)``."""
    f = sorted_distinct(np.asarray(frames, dtype=np.int64).reshape(-1))
    if not f.size:
        return ()
    cut = np.flatnonzero(np.diff(f) != 1) + 1
    starts, stops = f[np.r_[0, cut]], f[np.r_[cut - 1, f.size - 1]] + 1
    return tuple(zip(starts.tolist(), stops.tolist(), strict=True))


def ranges_text(ranges: Sequence[tuple[int, int]], limit: int = 6) -> str:
    """``3-5, 9, 12-20`` (inclusive, as people count), the first ``limit`` runs then ``... (N runs)``."""
    parts = [str(a) if b == a + 1 else f"{a}-{b - 1}" for a, b in ranges[:limit]]
    more = f", ... ({len(ranges)} runs)" if len(ranges) > limit else ""
    return ", ".join(parts) + more


@dataclass(frozen=True)
class Defect:
    """One finding: its ``kind`` (a name of :data:`KINDS`), the ``episode`` (None: the dataset as a whole), the
    ``feature`` and its ``channels`` (flat indices into a frame's values; empty: all or not applicable), the
    ``frames`` it concerns (half-open runs of frame numbers in the episode; of global ``index`` values for rows no
    episode owns), the measured ``figure`` and a ``detail`` saying what it is. Immutable."""

    kind: str
    episode: int | None
    feature: str | None
    frames: tuple[tuple[int, int], ...]
    figure: float
    detail: str
    channels: tuple[int, ...] = ()

    @property
    def severity(self) -> str:
        return KINDS[self.kind].severity

    @property
    def n_frames(self) -> int:
        return sum(b - a for a, b in self.frames)

    def line(self) -> str:
        """The finding on one line: severity, kind, where, and what was measured."""
        where = [f"episode {self.episode}" if self.episode is not None else "dataset"]
        if self.feature is not None:
            where.append(repr(self.feature) + (f" channels {list(self.channels)[:8]}"
                                               f"{'...' if len(self.channels) > 8 else ''}" if self.channels else ""))
        if self.frames:
            where.append(f"frames {ranges_text(self.frames)}")
        return f"{self.severity:<7} {self.kind:<19} {', '.join(where)}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "severity": self.severity, "episode": self.episode,
                               "feature": self.feature, "channels": list(self.channels),
                               "frames": [list(r) for r in self.frames],
                               "figure": self.figure if math.isfinite(self.figure) else str(self.figure),
                               "detail": self.detail}
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Defect:
        """A finding read back from a store (untrusted: every field checked)."""
        try:
            if not isinstance(doc, Mapping) or doc["kind"] not in KINDS:
                raise ValueError("not a finding of a known kind")
            episode, feature = doc.get("episode"), doc.get("feature")
            if episode is not None and (isinstance(episode, bool) or not isinstance(episode, int) or episode < 0):
                raise ValueError(f"episode {episode!r:.40}")
            if feature is not None and not isinstance(feature, str):
                raise ValueError(f"feature {feature!r:.40}")
            frames = tuple((int(a), int(b)) for a, b in doc.get("frames", ()))
            channels = tuple(int(c) for c in doc.get("channels", ()))
            figure = float(doc.get("figure", math.nan))
            return cls(doc["kind"], episode, feature, frames, figure, str(doc.get("detail", ""))[:1000], channels)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptStoreError(f"{where}: unreadable finding {str(doc)[:120]!r} ({exc})") from None
