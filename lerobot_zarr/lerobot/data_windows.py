"""Where a few episodes' rows likely lie in LeRobot data files, estimated before the files' footers are read, so
that the bytes holding them come with the footers (a round trip saved; a wrong estimate costs that round trip or the
bytes, never a value: a read takes only held bytes that hold its whole range, and what is read is checked)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .table_footer import file_of_row

if TYPE_CHECKING:
    from .source_files import SourceFiles

__all__ = ["WINDOW_EPISODES", "data_ahead", "data_footer_hint", "row_window"]

WINDOW_EPISODES = 8  # the most episodes whose rows an open fetches with their data files' footers


def data_footer_hint(features: Mapping[str, Any], row_groups: int) -> int:
    """About how long the footer of a LeRobot data file of ``row_groups`` row groups is (one per episode), given
    its features (:class:`~.source_meta.FeatureSpec` by name): ~120 B of metadata per numeric column chunk with
    statistics; an image column's hold a PNG's bytes."""
    leaves = sum(2 if v.kind == "image" else 1 for v in features.values() if v.kind != "video")
    images = sum(v.kind == "image" for v in features.values())
    return 16384 + row_groups * (192 * leaves + 8192 * images)


def row_window(size: int, hint: int, first: tuple[int, int], stop: tuple[int, int], rows: tuple[int, int],
               span: int | None = None) -> tuple[int, int]:
    """The bytes of a data file of ``size`` bytes (a footer of about ``hint``) where rows from ``first`` to
    ``stop`` likely lie, each given as bounds ``(low, high)``, as are the file's ``rows``: rows spread evenly
    between the magic and a footer of between a quarter of ``hint`` and all of it, with a margin of the rows' bytes
    (``span`` rows where the bounds are wider than the rows: default ``stop[1] - first[0]``) and 16 KiB each
    side."""
    low, high = size - 12 - hint, size - 12 - hint // 4  # the bytes of the row groups
    margin = (16 << 10) + (stop[1] - first[0] if span is None else span) / rows[0] * high
    return int(4 + first[0] / rows[1] * low - margin), int(4 + stop[1] / rows[0] * high + margin)


def data_ahead(files: SourceFiles, features: Mapping[str, Any], path: Callable[[int, int, int], str | None],
               episodes: Sequence[int], pairs: Callable[[int], tuple[int, int, int, int] | None],
               first_row: np.ndarray, start: tuple[np.ndarray, np.ndarray], end: tuple[np.ndarray, np.ndarray]
               ) -> Callable[[], None] | None:
    """What fetches the footers of the data files of a few ``episodes`` and the bytes where their rows likely lie,
    to run with the read of the episode table's row groups, where the table's footer tells which file each is in
    and bounds the rows of the file before and after it (:func:`~.table_footer.file_of_row`; ``pairs``,
    ``first_row`` as it takes them); ``start``, ``end``: bounds (low, high) of every episode's first frame and
    of the frame after its last (equal where known; an episode of a row group whose lengths are not known yet lies
    within the row group's frames, a frame at least each; a negative low bound: no guess from it);
    ``path(e, chunk, file)``: the data file's path (None: none). None where there is nothing to fetch,
    or the files are not read by ranges."""
    if len(episodes) > WINDOW_EPISODES or files.concurrency <= 1:
        return None
    guesses: dict[str, list[tuple[tuple[int, int], tuple[int, int], tuple[int, int], int]]] = {}
    most: dict[str, int] = {}  # data file -> most episodes it holds
    for e in episodes:
        found = file_of_row(pairs, first_row, e)
        if found is None:
            continue
        pair, (lo, hi), last = found
        rel = path(e, *pair)
        if rel is None or (start[0][lo:last[1] + 1] < 0).any():
            continue
        # (bounds from a row group's frames may cross: an episode holds a row at least, a file its episodes' rows)
        first = (max(0, int(start[0][e] - start[1][hi])), int(start[1][e] - start[0][lo]))
        stop = (max(first[0] + 1, int(end[0][e] - start[1][hi])), int(end[1][e] - start[0][lo]))
        rows = (max(stop[0], int(end[0][last[0]] - start[1][hi])), int(end[1][last[1]] - start[0][lo]))
        # the margin: the episode's likely rows and where its file begins (not where in its row group it lies)
        span = int(end[0][e] + end[1][e] - start[0][e] - start[1][e]) // 2 + int(start[1][hi] - start[0][lo])
        guesses.setdefault(rel, []).append((first, stop, rows, span))
        most[rel] = max(most.get(rel, 0), last[1] - lo + 1)
    if not guesses:
        return None

    def fetch() -> None:
        files.prefetch_sizes(list(guesses))
        windows = {}
        for rel, wanted in guesses.items():
            if files.exists(rel):
                hint = data_footer_hint(features, most[rel])
                files.footer_hint(rel, hint)
                windows[rel] = [row_window(files.size(rel), hint, *w) for w in wanted]
        files.prefetch_footers(list(windows), windows)

    return fetch
