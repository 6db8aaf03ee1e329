"""What the footer of LeRobot's episode table (``meta/episodes/*.parquet``) tells without reading its rows: the byte
ranges of column chunks, and from the row groups' statistics the data files each row group's episodes are in and,
where they determine them, every episode's start, length and task (LeRobot writes the table in row groups of 10
episodes, with per-episode stats columns between the ones an open needs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["column_ranges", "file_last_row", "file_of_row", "file_pair_bounds", "footer_table", "frame_bounds",
           "unresolved_groups"]


def _leaves(typ: pa.DataType) -> int:
    """Parquet leaf columns of an Arrow type (lists nest one, structs and maps one per field)."""
    if pa.types.is_struct(typ):
        return sum(_leaves(typ.field(i).type) for i in range(typ.num_fields))
    if pa.types.is_map(typ):
        return _leaves(typ.key_type) + _leaves(typ.item_type)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return _leaves(typ.value_type)
    return 1


def _column_leaves(pf: pq.ParquetFile) -> dict[str, range]:
    """The parquet leaf columns of each top-level column."""
    out, leaf = {}, 0
    for column in pf.schema_arrow:
        n = _leaves(column.type)
        out[column.name] = range(leaf, leaf + n)
        leaf += n
    return out


def column_ranges(pf: pq.ParquetFile, columns: Sequence[str],
                  row_groups: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """Byte ranges ``[start, stop)`` of the column chunks of ``columns`` (top-level names) in ``row_groups``
    (default all), from the footer: what reading them touches."""
    first = {name: leaves for name, leaves in _column_leaves(pf).items() if name in columns}
    md = pf.metadata
    out = []
    for g in range(md.num_row_groups) if row_groups is None else row_groups:
        group = md.row_group(g)
        for leaves in first.values():
            for c in leaves:
                chunk = group.column(c)
                start = chunk.data_page_offset
                if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                    start = chunk.dictionary_page_offset
                out.append((start, start + chunk.total_compressed_size))
    return out


def file_pair_bounds(pf: pq.ParquetFile, groups: Sequence[int]) -> list[tuple[int, int, int, int] | None]:
    """``(min, max)`` of ``data/chunk_index`` then of ``data/file_index`` in row groups of an episode table file,
    from its footer's statistics (None for a row group without them)."""
    md = pf.metadata
    leaves = {md.schema.column(i).path: i for i in range(md.num_columns)}
    at = [leaves.get(name) for name in ("data/chunk_index", "data/file_index")]
    out: list[tuple[int, int, int, int] | None] = []
    for g in groups:
        bounds: list[int] = []
        for i in at:
            stats = md.row_group(g).column(i).statistics if i is not None else None
            if stats is None or not stats.has_min_max or not isinstance(stats.min, int) \
                    or not isinstance(stats.max, int):
                break
            bounds += [stats.min, stats.max]
        out.append((bounds[0], bounds[1], bounds[2], bounds[3]) if len(bounds) == 4 else None)
    return out


def file_last_row(pairs: Callable[[int], tuple[int, int, int, int] | None], first_row: np.ndarray, row: int,
                  pair: tuple[int, int]) -> tuple[int, int] | None:
    """Bounds ``(low, high)`` of the last row of the episode table whose data file is ``pair`` (chunk, file), given
    that row ``row`` is of that file (``pairs(i)``: :func:`file_pair_bounds` of row group ``i`` in table order,
    ``first_row``: each row group's first row, then the row count), from the footer's statistics alone: rows list
    data files in order, so the file goes on through the row groups whose largest pair is ``pair``, and ends inside
    the first whose largest is beyond it (before its last row), or before the first whose smallest is. None when
    the statistics do not tell (a row group without them, spanning chunks, or not agreeing with ``row``)."""
    at = int(np.searchsorted(first_row, row, side="right")) - 1
    low = row
    for i in range(at, len(first_row) - 1):
        bounds = pairs(i)
        if bounds is None or bounds[0] != bounds[1] or ((bounds[0], bounds[2]) > pair and i == at):
            return None
        if (bounds[0], bounds[2]) > pair:  # the row group before it ended with the file
            return low, low
        if (bounds[1], bounds[3]) > pair:  # the file ends inside this row group, before its last row
            high = int(first_row[i + 1]) - 2
            return (low, high) if high >= low else None
        low = int(first_row[i + 1]) - 1  # its last row is of the file
    return low, low


def file_of_row(pairs: Callable[[int], tuple[int, int, int, int] | None], first_row: np.ndarray, row: int
                ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]] | None:
    """From the footer's statistics alone: the data file (chunk, file) of row ``row`` of the episode table, and
    bounds ``(low, high)`` of the first and of the last row of that file (``pairs``, ``first_row``: as
    :func:`file_last_row` takes them). None when they do not tell: the row's row group spans data files, or a
    row group it needs has no statistics."""
    at = int(np.searchsorted(first_row, row, side="right")) - 1
    bounds = pairs(at)
    if bounds is None or bounds[0] != bounds[1] or bounds[2] != bounds[3]:
        return None
    pair = (bounds[0], bounds[2])
    j = at  # the first row group holding rows of the file: the row groups before it end with earlier files
    while j > 0:
        before = pairs(j - 1)
        if before is None or before[0] != before[1]:
            return None
        if (before[1], before[3]) < pair:
            break
        j -= 1
    begin = pairs(j)
    if begin is None:
        return None
    # the file begins at row group j's first row, or after it where the row group begins with an earlier file
    first = (int(first_row[j]),) * 2 if (begin[0], begin[2]) == pair else (int(first_row[j]) + 1, min(
        row, int(first_row[j + 1]) - 1))
    last = file_last_row(pairs, first_row, row, pair)
    return (pair, first, last) if last is not None and first[0] <= first[1] else None


def _int_bounds(md: pq.FileMetaData, group: int, leaf: int | None) -> tuple[int, int] | None:
    """``(min, max)`` of an integer column chunk without nulls, from the footer (None: not given)."""
    stats = md.row_group(group).column(leaf).statistics if leaf is not None else None
    if (stats is None or not stats.has_min_max or not stats.has_null_count or stats.null_count
            or not isinstance(stats.min, int) or not isinstance(stats.max, int)):
        return None
    return stats.min, stats.max


def footer_table(pfs: dict[str, pq.ParquetFile], groups: Sequence[tuple[str, int]], first_row: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, dict[int, list[str]], list[int], np.ndarray] | str:
    """What the footers' statistics of the episode table determine: every episode's start and length (-1 where not
    determined), the tasks of the episodes they give, the row groups (indices into ``groups``) whose episodes'
    lengths or tasks they do not, and every row group's frame range ``[first, stop)`` (int64, (G, 2)); or why they
    cannot be used (no statistics, rows not in episode order, row groups' frame ranges not following each other from
    frame 0).

    A row group of ``r`` episodes from row ``f``: ``episode_index`` spans ``[f, f + r)``; its frames are
    ``[min(dataset_from_index), max(dataset_to_index))``; when ``min(length) == max(length) == L`` and the from/to
    bounds are those of ``r`` episodes of ``L`` frames, its episodes are ``L`` frames each, one after the other;
    when the task strings' minimum and maximum are one string ``T``, with no null or empty list and as many strings
    as rows, every episode's tasks are ``[T]``."""
    n = int(first_row[-1])
    start, length = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    tasks: dict[int, list[str]] = {}
    undetermined: list[int] = []
    frames = np.zeros((len(groups), 2), dtype=np.int64)
    leaves: dict[str, dict[str, int | None]] = {}
    for rel, pf in pfs.items():
        columns = _column_leaves(pf)
        leaves[rel] = {c: columns[c][0] if columns.get(c) else None
                       for c in ("episode_index", "dataset_from_index", "dataset_to_index", "length", "tasks")}
    end = 0
    for i, (rel, g) in enumerate(groups):
        md, leaf = pfs[rel].metadata, leaves[rel]
        rows, first = md.row_group(g).num_rows, int(first_row[i])
        bounds = {c: _int_bounds(md, g, leaf[c]) for c in ("episode_index", "dataset_from_index", "dataset_to_index",
                                                            "length")}
        missing = [c for c, b in bounds.items() if b is None]
        if missing:
            return f"row group {g} of {rel} has no statistics (min, max, no nulls) of {missing}"
        if bounds["episode_index"] != (first, first + rows - 1):
            return (f"row group {g} of {rel} holds episode_index {list(bounds['episode_index'])} in rows "
                    f"{first}..{first + rows - 1}: not in episode order")
        (f0, f1), (t0, t1), (l0, l1) = bounds["dataset_from_index"], bounds["dataset_to_index"], bounds["length"]
        if f0 != end:
            return f"row group {g} of {rel} starts at frame {f0}, where the row groups before it end at {end}"
        if not (f0 < t0 <= t1 and f0 <= f1 < t1 and t1 - f0 >= rows):
            return f"row group {g} of {rel} holds frames [{f0}, {t1}) for {rows} episodes: not one after the other"
        end = t1
        frames[i] = f0, t1
        if not (l0 == l1 >= 1 and f1 == f0 + (rows - 1) * l0 and t0 == f0 + l0 and t1 == f0 + rows * l0):
            undetermined.append(i)
            continue
        start[first:first + rows] = f0 + l0 * np.arange(rows, dtype=np.int64)
        length[first:first + rows] = l0
        if leaf["tasks"] is None:  # no tasks column: every episode's tasks are [] (as read whole)
            tasks.update((e, []) for e in range(first, first + rows))
            continue
        stats = md.row_group(g).column(leaf["tasks"]).statistics
        if (stats is None or not stats.has_min_max or not stats.has_null_count or stats.null_count
                or stats.num_values != rows or not isinstance(stats.min, str) or stats.min != stats.max):
            undetermined.append(i)  # its lengths are known; its tasks read with it
            continue
        tasks.update((e, [stats.min]) for e in range(first, first + rows))
    return start, length, tasks, undetermined, frames


def _groups_of(first_row: np.ndarray, rows: np.ndarray) -> list[int]:
    """The row groups (``first_row``: each one's first row, then the row count) holding ``rows``, in order."""
    return np.unique(np.searchsorted(first_row, rows, side="right") - 1).tolist()


def frame_bounds(start: np.ndarray, length: np.ndarray, frames: np.ndarray | None, first_row: np.ndarray
                 ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Likely bounds (low, high) of every episode's first frame and of the frame after its last: its own where known
    (a length >= 0), else where its row group's ``frames`` (:func:`footer_table`) put it if its ``r`` episodes were
    of one length, give or take ``mean * sqrt(k (r - k) / r) / 2`` for the ``k``-th (a standard deviation of where
    it lies if lengths vary by half their mean; a frame at least each): an estimate, which may miss."""
    lo, hi = start.copy(), start.copy()
    end_lo, end_hi = start + length, start + length
    for i in _groups_of(first_row, np.flatnonzero(length < 0)):
        a, b = int(first_row[i]), int(first_row[i + 1])
        (f0, f1), k, r = frames[i], np.arange(b - a + 1, dtype=np.int64), b - a  # (k = r: the row group's end)
        even = f0 + k * (f1 - f0) // r
        spread = np.ceil((f1 - f0) / r * np.sqrt(k * (r - k) / r) / 2).astype(np.int64)
        low, high = np.maximum(f0 + k, even - spread), np.minimum(f1 - (r - k), even + spread)
        lo[a:b], hi[a:b], end_lo[a:b], end_hi[a:b] = low[:-1], high[:-1], low[1:], high[1:]
    return (lo, hi), (end_lo, end_hi)


def unresolved_groups(frames: np.ndarray | None, first_row: np.ndarray, start: np.ndarray, length: np.ndarray
                      ) -> tuple[tuple[int, int, int, int], ...] | str:
    """The row groups (``first_row``: each one's first row, then the row count) whose episodes' start and length
    are not known (-1) as ``(first, stop, frame_first, frame_stop)`` (``frames``: :func:`footer_table`'s), after
    checking that every episode known and every such row group's frames follow each other from frame 0; or why
    not."""
    out = []
    for i in _groups_of(first_row, np.flatnonzero(length < 0)):
        a, b = int(first_row[i]), int(first_row[i + 1])
        if (length[a:b] >= 0).any() or frames is None:
            return f"the episodes of row group {i} are known only in part"
        out.append((a, b, int(frames[i][0]), int(frames[i][1])))
    # every episode, an unresolved row group standing for its episodes: they follow each other from frame 0
    known = length >= 0
    first = np.concatenate([start[known], np.array([f0 for _, _, f0, _ in out], dtype=np.int64)])
    stop = np.concatenate([(start + length)[known], np.array([f1 for _, _, _, f1 in out], dtype=np.int64)])
    order = np.lexsort((stop, first))
    first, stop = first[order], stop[order]
    after = np.concatenate([[0], stop[:-1]])  # the frame each should begin at
    bad = np.flatnonzero((first != after) | (stop <= first))
    if len(bad):
        i = int(bad[0])
        return (f"frames [{first[i]}, {stop[i]}) (an episode or an unread row group) follow frame {after[i]}: "
                f"episodes do not follow each other from frame 0")
    return tuple(out)
