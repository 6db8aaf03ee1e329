"""Which frames a dataset serves: episodes (or frame ranges of them) in episode order, and the arithmetic from a
dataset index ``i`` to (episode, frame inside the episode). No data access here."""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import ArgumentError, FrameIndexError
from ..store.tables import from_ranges, to_ranges

__all__ = ["EpisodeSelection", "Selection", "check_selection", "frame_range", "episode_index", "episode_ranges"]

EpisodeSelection = Sequence[int] | Mapping[int, slice | range | tuple[int, int] | None]


def frame_range(frames: slice | range | tuple[int, int] | None, n: int, where: str,
                episode: int | None = None) -> tuple[int, int]:
    """``[first, stop)`` of a frame selection of ``episode``, of ``n`` frames (None: all; negative bounds from the
    end). Bounds outside ``[-n, n]`` raise :class:`FrameIndexError`."""
    if frames is None:
        return 0, n
    if isinstance(frames, tuple):
        if len(frames) != 2:
            raise ArgumentError(f"{where}: frames must be (first, stop), got {frames!r}")
        frames = slice(*frames)
    if not isinstance(frames, (slice, range)) or frames.step not in (None, 1):
        raise ArgumentError(f"{where}: frames must be a slice, range or (first, stop) of step 1, got {frames!r:.80}")
    try:
        bounds = [None if b is None else operator.index(b) for b in (frames.start, frames.stop)]
    except TypeError:
        raise ArgumentError(f"{where}: frames must have integer bounds, got {frames!r:.80}") from None
    if any(b is not None and not -n <= b <= n for b in bounds):
        raise FrameIndexError(f"{where}: frames {frames!r:.80} reach outside the episode's {n} frames (bounds go "
                              f"from -{n} to {n}, negative ones from the end)", episode=episode)
    first, stop, _ = slice(*bounds).indices(n)
    return first, stop


def _as_index(e: object) -> int:
    if isinstance(e, (bool, np.bool_)):
        raise ArgumentError(f"episode indices must be integers, got {e!r}")
    try:
        return operator.index(e)
    except TypeError:
        raise ArgumentError(f"episode indices must be integers, got {e!r:.40} ({type(e).__name__})") from None


def episode_index(e: object, n: int, *, negative: bool = False, where: str = "") -> int:
    """``e`` checked as the index of one of ``n`` episodes: an integer (not a bool) in ``[0, n)``, or with
    ``negative`` in ``[-n, n)`` counting from the end. ``where`` (``"path: "``) starts the error message."""
    i = _as_index(e)
    if not (-n if negative else 0) <= i < n:
        raise FrameIndexError(f"{where}episode {i} does not exist ({n} episodes)", episode=i)
    return i % n if negative else i


def check_selection(episodes: EpisodeSelection | None) -> EpisodeSelection | None:
    """``episodes`` as given by a user, checked before anything uses it: a list of integer episode indices (a
    1-D array or range too) or ``{episode: frames}``; returned with plain ``int`` indices. Bounds are checked
    later, against the dataset."""
    if episodes is None:
        return None
    if isinstance(episodes, (str, bytes)) or not isinstance(episodes, (Mapping, Sequence, np.ndarray, range)):
        raise ArgumentError(f"episodes must be a list of episode indices or {{episode: frames}}, got {episodes!r:.80}")
    if isinstance(episodes, np.ndarray) and episodes.ndim != 1:
        raise ArgumentError(f"episodes must be a 1-D list of episode indices, got an array of shape {episodes.shape}")
    if isinstance(episodes, Mapping):
        return {_as_index(e): frames for e, frames in episodes.items()}
    return [_as_index(e) for e in episodes]


def episode_ranges(episodes: EpisodeSelection, lengths: np.ndarray) -> list[tuple[int, int, int]]:
    """Normalise an episode selection to sorted ``(episode, first_frame, stop_frame)`` triples.

    ``[3, 5]`` selects whole episodes; ``{3: slice(100, 200), 5: None}`` selects frames 100..199 of episode 3
    (episode-local frame indices, negative ones from the end, step 1; bounds outside the episode raise
    :class:`FrameIndexError`) and all of episode 5. Like LeRobot's
    filtering, the order given does not matter: frames come in episode order.
    """
    episodes = check_selection(episodes)
    items = episodes.items() if isinstance(episodes, Mapping) else ((e, None) for e in episodes)
    out: dict[int, tuple[int, int, int]] = {}
    for e, frames in items:
        e = episode_index(e, len(lengths))
        n = int(lengths[e])
        first, stop = frame_range(frames, n, f"episode {e}", e)
        if stop <= first:
            raise FrameIndexError(f"episode {e}: frame range {frames!r} is empty for an episode of {n} frames",
                                  episode=e)
        out[e] = (e, first, stop)
    return [out[e] for e in sorted(out)]


class Selection:
    """The selected frames: selected episode k serves its frames ``[first[k], stop[k])`` as dataset indices
    ``cum[k] .. cum[k + 1] - 1``."""

    def __init__(self, episodes: np.ndarray, first: np.ndarray, stop: np.ndarray, n_episodes: int):
        self.episodes = np.asarray(episodes, dtype=np.int64)
        self.first = np.asarray(first, dtype=np.int64)
        self._stop = np.asarray(stop, dtype=np.int64)
        self.cum = np.concatenate([[0], np.cumsum(self._stop - self.first)]).astype(np.int64)
        self.n_episodes = n_episodes
        self._to_frame = self.first - self.cum[:-1]  # dataset index + this = frame inside selected episode k
        self._all_episodes = bool(np.array_equal(self.episodes, np.arange(n_episodes)))  # k is the episode

    @functools.cached_property
    def _episode_list(self) -> list[int]:
        return self.episodes.tolist()

    @classmethod
    def of(cls, episodes: EpisodeSelection | None, lengths: np.ndarray, default: np.ndarray) -> Selection:
        """The selection ``episodes`` asks for, or every episode of the mask ``default`` (whole episodes)."""
        if episodes is None:
            chosen = np.flatnonzero(default)
            return cls(chosen, np.zeros(len(chosen), dtype=np.int64), lengths[chosen], len(lengths))
        table = np.array(episode_ranges(episodes, lengths), dtype=np.int64).reshape(-1, 3)
        return cls(table[:, 0], table[:, 1], table[:, 2], len(lengths))

    def __len__(self) -> int:
        return int(self.cum[-1])

    def whole(self, lengths: np.ndarray) -> bool:
        return bool((self.first == 0).all() and (self._stop == lengths[self.episodes]).all())

    def index_error(self, index: int) -> FrameIndexError:
        return FrameIndexError(f"frame index {index} is out of range for a dataset of {len(self)} frames")

    @functools.cached_property
    def item_lookup(self) -> tuple[list[int], list[int]]:
        """Lists for the per-item path (a list lookup costs a third of a numpy scalar lookup): dataset index ``i``
        (counted from the start) is frame ``i + to_frame[k]`` of selected episode ``k = bisect_right(cum, i) -
        1``."""
        return self.cum.tolist(), self._to_frame.tolist()

    @property
    def to_frame(self) -> np.ndarray:
        """Per selected episode k: what turns a dataset index into the frame inside the episode."""
        return self._to_frame

    def locate_many(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(episodes, frames inside them)`` of dataset indices (1-D, any integer dtype, negative from the end)."""
        k, idx = self.locate_k(indices)
        return k if self._all_episodes else self.episodes[k], idx + self._to_frame[k]

    def locate_k(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(k, index)`` of dataset indices (1-D, any integer dtype, negative from the end): the selected episode
        of each (``episodes[k]``) and the index, checked and counted from the start."""
        idx = np.asarray(indices)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.dtype.kind not in "iu":
            raise ArgumentError(f"indices must be integers, got dtype {idx.dtype}")
        if idx.ndim != 1:
            raise ArgumentError(f"indices must be 1-D, got an array of shape {idx.shape} (flatten it and reshape the "
                            f"results)")
        n = len(self)
        idx = idx.astype(np.int64, copy=False)
        if len(idx) and (idx.min() < 0 or idx.max() >= n):
            idx = np.where(idx < 0, idx + n, idx)
            bad = (idx < 0) | (idx >= n)
            if bad.any():
                raise FrameIndexError(f"frame index {int(np.asarray(indices)[np.argmax(bad)])} is out of range for "
                                      f"a dataset of {n} frames")
        return np.searchsorted(self.cum, idx, side="right") - 1, idx

    def frames_of(self, episode: int) -> range:
        hits = np.flatnonzero(self.episodes == episode)
        if not hits.size:
            raise FrameIndexError(f"episode {episode} is not selected in this dataset", episode=episode)
        k = int(hits[0])
        return range(int(self.cum[k]), int(self.cum[k + 1]))

    def to_args(self, lengths: np.ndarray) -> tuple[str, list]:
        """A compact picklable form: ``("whole", episode ranges)`` or ``("frames", [[e, first, stop], ...])``."""
        if self.whole(lengths):
            return "whole", to_ranges(self._episode_list)
        return "frames", np.stack([self.episodes, self.first, self._stop], axis=1).tolist()

    @staticmethod
    def from_args(args: tuple[str, list]) -> EpisodeSelection:
        kind, selection = args
        return from_ranges(selection) if kind == "whole" else {e: (a, b) for e, a, b in selection}
