"""The checks of numeric features, timestamps and indices, run on batches of consecutive episodes as the data
passes by (:class:`NumericChecks`): each check is a small function of the batch, registered in :data:`CHECKS`;
together they compute per-episode minima and maxima once and share them. Episodes come in one at a time (the
transcode's pass), so a batch costs a few vectorised numpy passes over its frames, not numpy calls per episode.

They also keep what the reductions at the end need (:class:`Moments`: per feature and channel the count, the sums
around a fixed shift, the minimum and maximum), to compare stats.json with the data and to find dead channels.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..lerobot.format import DEFAULT_FEATURES, bad_timestamp_steps
from .kinds import THRESHOLDS, Defect, frame_ranges

__all__ = ["Context", "Scratch", "Batch", "Moments", "NumericChecks", "CHECKS", "channel_names"]


@dataclass(frozen=True)
class Context:
    """What the checks know of a dataset: ``fps``; ``kinds`` of its stored features (``"numeric"``, ``"image"``,
    ``"video"``; text features are not checked) and their LeRobot ``names``; ``stats`` (stats.json); the number
    of tasks; each episode's first global ``index`` (``starts``); ``lenient``: also check what the transcode
    refuses (timestamps 1/fps apart, ``episode_index``, ``index``, ``task_index``), for the doctor's scan of a
    source; the cameras that are ``depth`` maps; the ``nd`` features (their stats.json is not LeRobot's per value:
    not compared)."""

    fps: float
    kinds: Mapping[str, str]
    names: Mapping[str, Any]
    stats: Mapping[str, Any]
    n_tasks: int
    starts: np.ndarray
    lenient: bool = False
    thresholds: Mapping[str, float] = field(default_factory=lambda: dict(THRESHOLDS))
    depth: frozenset[str] = frozenset()  # cameras whose frames are depth, not colour: never "black"
    # N-D features (frames of 2 dimensions or more): LeRobot's stats of them keep only some of the values
    nd: frozenset[str] = frozenset()

    def stat(self, feature: str, name: str, channels: int) -> np.ndarray | None:
        """stats.json's ``name`` of ``feature`` as ``channels`` float64 values, or None when it has none of that
        size (or unreadable values)."""
        try:
            value = np.asarray(self.stats[feature][name], dtype=np.float64).reshape(-1)
        except (KeyError, TypeError, ValueError):
            return None
        return value if value.size == channels else None


def channel_names(names: Any, channels: Sequence[int]) -> str:
    """``[3 'elbow', 5 'gripper']``: channel numbers with LeRobot's names where ``names`` is a flat list of them."""
    flat = names
    while isinstance(flat, list) and len(flat) == 1 and isinstance(flat[0], list):  # [[...]] (G1-policy-train)
        flat = flat[0]
    if isinstance(flat, dict) and len(flat) == 1:
        flat = next(iter(flat.values()))
    label = (lambda c: f"{c} {flat[c]!r}") if isinstance(flat, list) and all(isinstance(n, str) for n in flat) \
        else str
    shown = [label(c) if c < (len(flat) if isinstance(flat, list) else 0) else str(c) for c in channels[:6]]
    return "[" + ", ".join(shown) + (", ..." if len(channels) > 6 else "") + "]"


class Scratch:
    """Working arrays reused batch after batch (a batch's columns, its temporaries): a new array of megabytes
    costs a page fault per 4 KiB on first touch, about as much as the numpy pass that fills it."""

    def __init__(self) -> None:
        self._arrays: dict[tuple, np.ndarray] = {}

    def take(self, key: str, shape: tuple[int, ...], dtype: np.dtype, order: str = "C") -> np.ndarray:
        """An uninitialised array of ``shape`` (rows first; ``order`` "C" or "F"), a view of one kept under ``key``
        and the frame shape, dtype and order: its contents change with the next ``take`` of the same."""
        slot = (key, shape[1:], np.dtype(dtype).str, order)
        have = self._arrays.get(slot)
        if have is None or have.shape[0] < shape[0]:
            have = np.empty((shape[0] + shape[0] // 4, *shape[1:]), dtype, order=order)  # room for larger batches
            self._arrays[slot] = have
        return have[:shape[0]]


@dataclass
class Batch:
    """Consecutive episodes being checked together: their numbers, lengths, first row in the batch's arrays
    (``starts``), each numeric feature's frames concatenated as (rows, channels) (:meth:`column`) and its
    per-episode minima and maxima ((episodes, channels) each: :meth:`extremes`), each computed once."""

    episodes: np.ndarray
    lengths: np.ndarray
    frames: Sequence[Mapping[str, np.ndarray]]
    ctx: Context
    scratch: Scratch = field(default_factory=Scratch)
    _columns: dict[str, np.ndarray] = field(default_factory=dict)
    _extremes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @functools.cached_property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.lengths) - self.lengths

    @functools.cached_property
    def rows(self) -> int:
        return int(self.lengths.sum())

    def column(self, name: str) -> np.ndarray:
        """A feature's rows of every episode of the batch, (rows, channels), channel after channel in memory
        (Fortran order: the checks reduce along rows, 25 % faster so than across)."""
        if name not in self._columns:
            parts = [f[name] for f in self.frames]
            first = np.asarray(parts[0])
            if len(parts) == 1:
                whole = first
            else:
                whole = self.scratch.take(f"column {name}", (self.rows, *first.shape[1:]), first.dtype,
                                          "F" if first.ndim == 2 else "C")
                np.concatenate(parts, out=whole)
            self._columns[name] = whole.reshape(len(whole), -1)
        return self._columns[name]

    def extremes(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        if name not in self._extremes:
            x = self.column(name)
            self._extremes[name] = (np.minimum.reduceat(x, self.starts, axis=0),
                                    np.maximum.reduceat(x, self.starts, axis=0))
        return self._extremes[name]

    def rows_of(self, i: int) -> slice:
        start = int(self.starts[i])
        return slice(start, start + int(self.lengths[i]))

    @functools.cached_property
    def position(self) -> np.ndarray:
        """Each row's frame number inside its episode."""
        return np.arange(self.rows) - np.repeat(self.starts, self.lengths)

    def per_episode(self, bad_rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """``(i, frames)`` of the batch's episodes with bad rows, ``frames`` their frame numbers."""
        rows = np.flatnonzero(bad_rows)
        if not rows.size:
            return []
        which = np.searchsorted(self.starts, rows, side="right") - 1
        cut = np.flatnonzero(np.diff(which)) + 1
        return [(int(which[g[0]]), rows[g] - int(self.starts[which[g[0]]])) for g in np.split(np.arange(rows.size),
                                                                                               cut)]

    def numeric(self) -> list[str]:
        """The batch's numeric features that are not LeRobot's own columns."""
        return [k for k, kind in self.ctx.kinds.items() if kind == "numeric" and k not in DEFAULT_FEATURES
                and k in self.frames[0]]


Check = Callable[[Batch], list[Defect]]
CHECKS: dict[str, Check] = {}


def check(kind: str) -> Callable[[Check], Check]:
    """Register the batch check of a kind of defect."""
    def register(fn: Check) -> Check:
        CHECKS[kind] = fn
        return fn
    return register


@check("short_episode")
def _short(b: Batch) -> list[Defect]:
    limit = b.ctx.thresholds["short_episode_frames"]
    return [Defect("short_episode", int(e), None, ((0, int(n)),) if n else (), float(n),
                   f"{int(n)} frame{'s' if n != 1 else ''}")
            for e, n in zip(b.episodes, b.lengths, strict=True) if n <= limit]


@check("nan")
def _nan(b: Batch) -> list[Defect]:
    out = []
    for name in b.numeric():
        x = b.column(name)
        if x.dtype.kind != "f":
            continue
        low, high = b.extremes(name)
        for i in np.flatnonzero(~(np.isfinite(low) & np.isfinite(high)).all(axis=1)).tolist():
            rows = x[b.rows_of(i)]
            bad = ~np.isfinite(rows)
            channels = np.flatnonzero(bad.any(axis=0))
            frames = np.flatnonzero(bad.any(axis=1))
            out.append(Defect("nan", int(b.episodes[i]), name, frame_ranges(frames), float(bad.sum()),
                              f"{int(bad.sum())} NaN or infinite values in {frames.size} frames, channels "
                              f"{channel_names(b.ctx.names.get(name), channels.tolist())}", tuple(channels.tolist())))
    return out


@check("constant")
def _constant(b: Batch) -> list[Defect]:
    long_enough = b.lengths >= max(2, round(b.ctx.fps * b.ctx.thresholds["constant_seconds"]))
    out = []
    for name in b.numeric():
        x = b.column(name)
        if x.dtype.kind != "f" or x.shape[1] < 2:  # a scalar (reward, done) may well stay put
            continue
        low, high = b.extremes(name)
        for i in np.flatnonzero(long_enough & (low == high).all(axis=1)).tolist():
            n = int(b.lengths[i])
            out.append(Defect("constant", int(b.episodes[i]), name, ((0, n),), n / b.ctx.fps,
                              f"all {x.shape[1]} channels stay the same for {n} frames ({n / b.ctx.fps:.1f} s)"))
    return out


@check("out_of_range")
def _out_of_range(b: Batch) -> list[Defect]:
    out = []
    for name in b.numeric():
        x = b.column(name)
        lo, hi = b.ctx.stat(name, "min", x.shape[1]), b.ctx.stat(name, "max", x.shape[1])
        if lo is None or hi is None:
            continue
        slack = b.ctx.thresholds["range_rtol"] * np.maximum(hi - lo, np.abs(hi) + np.abs(lo)) + 1e-12
        low, high = b.extremes(name)
        outside = (low < lo - slack) | (high > hi + slack)
        for i in np.flatnonzero(outside.any(axis=1)).tolist():
            rows = x[b.rows_of(i)].astype(np.float64)
            bad = (rows < lo - slack) | (rows > hi + slack)
            channels = np.flatnonzero(bad.any(axis=0))
            span = np.where(hi > lo, hi - lo, np.maximum(np.abs(hi), 1.0))
            beyond = np.maximum(lo - rows, rows - hi)[:, channels] / span[channels]
            out.append(Defect("out_of_range", int(b.episodes[i]), name, frame_ranges(np.flatnonzero(bad.any(axis=1))),
                              float(beyond.max()), f"values beyond stats.json's [min, max] by up to "
                              f"{float(beyond.max()):.3g}x its range, channels "
                              f"{channel_names(b.ctx.names.get(name), channels.tolist())}", tuple(channels.tolist())))
    return out


@check("jump")
def _jump(b: Batch) -> list[Defect]:
    t = b.ctx.thresholds
    most, ratio = int(t["jump_frames"]), t["jump_ratio"]
    out = []
    for name in b.numeric():
        x = b.column(name)
        if x.dtype.kind == "b":
            continue
        if x.dtype.kind != "f":
            x = x.astype(np.float64)
        low, high = b.extremes(name)
        for i, c in _glitch_candidates(b, x, low, high, most, ratio):
            found = _glitch(x[b.rows_of(i), c].astype(np.float64), most, ratio, t["jump_quanta"])
            if found is not None:
                (first, stop), score = found
                out.append(Defect("jump", int(b.episodes[i]), name, ((first, stop),), score,
                                  f"channel {channel_names(b.ctx.names.get(name), [c])} sticks out of the rest of "
                                  f"the episode by {score:.1f}x its range", (c,)))
    return _merged_jumps(out)


def _glitch_candidates(b: Batch, x: np.ndarray, low: np.ndarray, high: np.ndarray, most: int, ratio: float
                       ) -> list[tuple[int, int]]:
    """The (episode, channel) pairs of the batch that may hold a glitch (:func:`_glitch`), by two necessary
    conditions, vectorised. A run of k <= ``most`` frames beyond the rest by E > ``ratio`` x the rest's range R:
    the episode's range is at most (k - 1) s + E + R < s (k + 1 / ratio), s its largest step (entering the run
    takes >= E, the run's own spread <= (k - 1) s); and the range is more than (1 + ratio) R, so at least n - k
    values lie within range / (1 + ratio) of the episode's minimum (the glitch up) or maximum (down)."""
    spread = high.astype(np.float64) - low
    steps = b.scratch.take("steps", x.shape, x.dtype, "F")
    np.subtract(x[1:], x[:-1], out=steps[:-1])
    steps[b.starts + b.lengths - 1] = 0  # the step from an episode's last frame to the next one's first
    np.abs(steps, out=steps)
    biggest = np.maximum.reduceat(steps, b.starts, axis=0)
    with np.errstate(invalid="ignore"):
        maybe = ((biggest >= spread / (most + 1.0 / ratio)) & (spread > 0)
                 & (b.lengths >= max(3, b.ctx.thresholds["jump_min_frames"]))[:, None])
    pairs, channels = np.nonzero(maybe)
    if not pairs.size:
        return []
    # the second condition, on the values of the pairs left only: gathered into one flat run per pair
    n = b.lengths[pairs]
    rows = np.repeat(b.starts[pairs] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
    values = x[rows, np.repeat(channels, n)].astype(np.float64)
    near = spread[pairs, channels] / (1.0 + ratio)
    firsts = np.cumsum(n) - n
    below = np.add.reduceat(values <= np.repeat(low[pairs, channels] + near, n), firsts)
    above = np.add.reduceat(values >= np.repeat(high[pairs, channels] - near, n), firsts)
    keep = (below >= n - most) | (above >= n - most)
    return list(zip(pairs[keep].tolist(), channels[keep].tolist(), strict=True))


def _glitch(v: np.ndarray, most: int, ratio: float, quanta: float) -> tuple[tuple[int, int], float] | None:
    """The run of at most ``most`` frames, inside the episode, whose values lie beyond all the others by more than
    ``ratio`` times their range (at least ``quanta`` of the smallest step), and by how much; None if there is none."""
    n = len(v)
    if not np.isfinite(v).all():
        return None
    moves = np.abs(np.diff(v))
    moves = moves[moves > 0]
    floor = quanta * float(moves.min()) if moves.size else 0.0
    order = np.argsort(v, kind="stable")
    best = None
    for k in range(1, min(most, n - 2) + 1):
        for top in (True, False):
            run = order[n - k:] if top else order[:k]
            rest_lo, rest_hi = (v[order[0]], v[order[n - k - 1]]) if top else (v[order[k]], v[order[n - 1]])
            excess = (v[order[n - k]] - rest_hi) if top else (rest_lo - v[order[k - 1]])
            scale = max(rest_hi - rest_lo, floor)
            first, last = int(run.min()), int(run.max())
            if excess > ratio * scale and last - first == k - 1 and first >= 1 and last <= n - 2:
                score = excess / scale if scale > 0 else float("inf")
                if best is None or score > best[1]:
                    best = ((first, last + 1), float(score))
        if best is not None:
            return best
    return None


def _merged_jumps(found: list[Defect]) -> list[Defect]:
    """One finding per episode, feature and run: the channels that jump there together."""
    by: dict[tuple, list[Defect]] = {}
    for d in found:
        by.setdefault((d.episode, d.feature, d.frames), []).append(d)
    out = []
    for (e, name, frames), group in by.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        channels = tuple(sorted(c for d in group for c in d.channels))
        score = max(d.figure for d in group)
        out.append(Defect("jump", e, name, frames, score, f"channels {list(channels)[:8]} stick out of the rest of "
                                                          f"the episode by up to {score:.1f}x its range", channels))
    return out


@check("timestamps")
def _timestamps(b: Batch) -> list[Defect]:
    """Drift from frame number / fps (after the transcode's own check that steps are 1/fps); in a lenient scan
    also steps that are not 1/fps: gaps, duplicates, backwards."""
    if "timestamp" not in b.frames[0]:
        return []
    ts = b.column("timestamp").reshape(-1)
    tol = b.ctx.thresholds["tolerance_s"]
    out, stepped = [], set()
    if b.ctx.lenient:
        bad = bad_timestamp_steps(ts, b.ctx.fps)
        inside = bad[~np.isin(bad + 1, b.starts)]  # not the step from one episode to the next
        if inside.size:
            step = ts[inside + 1].astype(np.float64) - ts[inside].astype(np.float64)
            slack = tol + (2 * np.spacing(np.abs(ts[inside + 1])).astype(np.float64) if ts.dtype.kind == "f" else 0)
            kinds = np.where(step < -slack, 0, np.where(np.abs(step) <= slack, 1, 2))
            names = ("timestamp_backwards", "timestamp_duplicate", "timestamp_gap")
            for kind in range(3):
                mask = np.zeros(len(ts), dtype=bool)
                mask[inside[kinds == kind] + 1] = True
                for i, frames in b.per_episode(mask):
                    rows = frames + int(b.starts[i])
                    worst = (ts[rows].astype(np.float64) - ts[rows - 1].astype(np.float64))
                    worst_step = float(worst[np.argmax(np.abs(worst - 1 / b.ctx.fps))])
                    stepped.add(i)
                    out.append(Defect(names[kind], int(b.episodes[i]), "timestamp", frame_ranges(frames), worst_step,
                                      f"{frames.size} steps not 1/fps = {1 / b.ctx.fps:.6f} s apart (the worst: "
                                      f"{worst_step:.6f} s, into frame {int(frames[0])} first)"))
    expected = b.position / b.ctx.fps
    slack = tol + (2 * np.spacing(np.abs(ts)).astype(np.float64) if ts.dtype.kind == "f" else 0.0)
    off = np.abs(ts.astype(np.float64) - expected)
    for i, frames in b.per_episode(~(off <= slack)):
        if i in stepped:
            continue
        seen = off[frames + int(b.starts[i])]
        worst = float(np.nanmax(seen)) if np.isfinite(seen).any() else float("nan")
        out.append(Defect("timestamp_drift", int(b.episodes[i]), "timestamp", frame_ranges(frames), worst,
                          f"{frames.size} timestamps off frame_index / fps by more than {tol} s (up to {worst:.6f} s)"))
    return out


@check("indices")
def _indices(b: Batch) -> list[Defect]:
    """``frame_index``, ``episode_index``, ``index`` and ``task_index`` against the episode table, in a lenient scan
    (the transcode refuses them)."""
    out: list[Defect] = []
    if not b.ctx.lenient:
        return out
    position = b.position
    expected = {"frame_index": position, "episode_index": np.repeat(b.episodes, b.lengths),
                "index": np.repeat(b.ctx.starts[b.episodes], b.lengths) + position}
    for name, want in expected.items():
        if name not in b.frames[0]:
            continue
        got = b.column(name).reshape(-1)
        for i, frames in b.per_episode(got != want):
            out.append(Defect(name, int(b.episodes[i]), name, frame_ranges(frames), float(frames.size),
                              f"{frames.size} rows hold another {name} than expected (first: frame {int(frames[0])} "
                              f"holds {int(got[frames[0] + int(b.starts[i])])}, not "
                              f"{int(want[frames[0] + int(b.starts[i])])})"))
    if "task_index" in b.frames[0]:
        got = b.column("task_index").reshape(-1)
        for i, frames in b.per_episode((got < 0) | (got >= b.ctx.n_tasks)):
            out.append(Defect("task_index", int(b.episodes[i]), "task_index", frame_ranges(frames), float(frames.size),
                              f"{frames.size} rows hold a task_index outside the {b.ctx.n_tasks} tasks (first: "
                              f"{int(got[frames[0] + int(b.starts[i])])})"))
    return out


@dataclass
class Moments:
    """Per numeric feature and channel, over the frames of the episodes seen (``covered``): ``count``, the sums of
    ``x - shift`` and of its square (``shift``: stats.json's mean, for precision), ``low`` and ``high``. Merged
    across batches and runs; compared with stats.json and searched for dead channels at the end."""

    covered: set[int] = field(default_factory=set)
    features: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def add(self, name: str, part: Mapping[str, np.ndarray]) -> None:
        """Add the moments of other frames of ``name`` (taken around the same shift, or brought to it)."""
        have = self.features.get(name)
        if have is None:
            self.features[name] = {k: np.array(v, dtype=np.float64) for k, v in part.items()}
            return
        moved = np.asarray(part["shift"]) - have["shift"]  # sums around another shift, brought to ours
        total = part["sum"] + part["count"] * moved
        have["sumsq"] = have["sumsq"] + part["sumsq"] + 2 * moved * part["sum"] + part["count"] * moved ** 2
        have["sum"] = have["sum"] + total
        have["count"] = have["count"] + part["count"]
        have["low"] = np.minimum(have["low"], part["low"])  # NaN stays: such a channel has no min
        have["high"] = np.maximum(have["high"], part["high"])

    def merge(self, other: Moments) -> None:
        """Add ``other``'s episodes (none of which this covers already)."""
        for name, part in other.features.items():
            if name in self.features and self.features[name]["count"].size != part["count"].size:
                continue  # another shape of the feature (a store changed since): the covered check tells
            self.add(name, part)
        self.covered |= other.covered


class NumericChecks:
    """Every registered check over a batch of consecutive episodes, and the moments of their numeric features."""

    def __init__(self, ctx: Context, kinds: Sequence[str] | None = None):
        self.ctx = ctx
        self.checks = [fn for k, fn in CHECKS.items() if kinds is None or k in kinds]
        self.scratch = Scratch()

    def run(self, episodes: Sequence[int], frames: Sequence[Mapping[str, np.ndarray]],
            skip_moments: set[int] | frozenset = frozenset()) -> tuple[list[Defect], Moments]:
        """The findings in these episodes (each ``frames[i]`` one episode's ``{feature: frames}``), and the
        moments of those not in ``skip_moments`` (episodes whose moments are counted already)."""
        b = Batch(np.asarray(episodes, dtype=np.int64),
                  np.array([len(np.asarray(f["timestamp"]).reshape(-1)) if "timestamp" in f else
                            len(next(iter(f.values()))) for f in frames], dtype=np.int64), frames, self.ctx,
                  self.scratch)
        found: list[Defect] = []
        for fn in self.checks:
            found.extend(fn(b))
        return found, self._moments(b, skip_moments)

    def _moments(self, b: Batch, skip: set[int] | frozenset) -> Moments:
        keep = np.array([int(e) not in skip for e in b.episodes], dtype=bool)
        moments = Moments(covered={int(e) for e in b.episodes[keep]})
        if not keep.any():
            return moments
        rows = None if keep.all() else np.repeat(keep, b.lengths)
        for name, kind in self.ctx.kinds.items():
            if kind != "numeric" or name not in b.frames[0]:
                continue
            x = b.column(name)
            if name in b._extremes:  # the checks' per-episode extremes (LeRobot's own columns have none)
                low, high = b.extremes(name)
                if rows is not None:
                    low, high = low[keep], high[keep]
                low, high = low.min(axis=0), high.max(axis=0)
            if rows is not None:
                x = x[rows]
            if name not in b._extremes:
                low, high = x.min(axis=0), x.max(axis=0)
            shift = self.ctx.stat(name, "mean", x.shape[1])
            part: dict[str, np.ndarray] = {"count": np.full(x.shape[1], float(len(x))),
                                           "low": low.astype(np.float64), "high": high.astype(np.float64)}
            if shift is not None:  # sums only where stats.json has something to compare them with
                # float features summed in their own precision, a batch at a time (per batch the error stays far
                # below stats_rtol; batches add up in float64); integers in float64
                kind = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
                shift = shift.astype(kind)
                d = b.scratch.take("centred", x.shape, kind, "F")
                np.subtract(x, shift, out=d, dtype=kind)
                part.update(shift=shift.astype(np.float64), sum=np.einsum("ij->j", d).astype(np.float64),
                            sumsq=np.einsum("ij,ij->j", d, d).astype(np.float64))
            else:
                part.update(shift=np.zeros(x.shape[1]), sum=np.zeros(x.shape[1]), sumsq=np.zeros(x.shape[1]))
            moments.add(name, part)
        return moments
