"""The per-episode statistics a writer keeps (:class:`EpisodeStatsCache`, part of
:class:`~lerobot_zarr.writing.transaction.WriteTransaction`): computing them from an episode's stored values (several
episodes in one pass), their cache files in ``.episode_stats/`` (one per episode, or one per fold of the commit log:
see :mod:`lerobot_zarr.store`), reading them back (checked; recomputed from the rows when unusable), stacking the
appends committed since, and LeRobot's dataset stats merged from them."""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CorruptStoreError
from ..lerobot.format import (
    CAMERA_DTYPES,
    aggregate_stats,
    episodes_stats,
    is_float_image,
    stacked_stats,
    stats_json,
)
from ..store.state import StoreState, stats_path
from ..store.tables import ArraySpec, EpisodeTable, location_key
from ..utils.fileio import load_json, read_bounded, write_in_place
from ..utils.progress import progress_bar
from .values import stats_of_stored

__all__ = ["EpisodeStatsCache", "remove_path", "BATCH_PREFIX"]

_LOCATION_STATS = ("min", "max", "mean", "q01", "q10", "q50", "q90", "q99")
_INDEX_COLUMNS = ("episode_index", "index")  # stored values may exceed LeRobot's by the table's shifts
_MAX_STATS_FILE = 16 << 20  # bytes of one episode's stats file
_MAX_STATS_BATCH = 64 << 20  # bytes of a fold's stats file (the episodes logged since the fold before)
BATCH_PREFIX = "batch-"  # .episode_stats/batch-<generation>.json: stats of the episodes a fold made up for


class EpisodeStatsCache:
    """The per-episode stats of a writer's store, a part of :class:`~lerobot_zarr.writing.transaction.WriteTransaction`
    (which provides ``root``, ``state``, ``gaps``, ``read_episode`` and the attributes set in its ``__init__``:
    ``stats_rows``, ``_stats_appends``, ``unsaved``, ``_batches``, ``_batch_of``)."""

    root: Path
    state: StoreState
    gaps: dict[str, dict[int, str]]
    stats_rows: dict[str, dict[str, np.ndarray]] | None
    _stats_appends: list[tuple[dict | None, int, bool, dict | None]]
    unsaved: set[tuple[int, int]]
    _batches: dict[str, set[tuple[int, int]]]
    _batch_of: dict[tuple[int, int], set[str]]
    read_episode: Callable[..., dict[str, np.ndarray]]

    def write_stats_file(self, pack: int, offset: int, stats: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """Keep one episode's per-feature stats next to it (a cache: recomputed from the data when unusable)."""
        path = stats_path(self.root, pack, offset)  # in place: a torn file is not JSON, and is recomputed
        doc = {name: {k: _stats_cache_text(v) for k, v in per.items()} for name, per in stats.items()}
        write_in_place(path, json.dumps(doc).encode(), root=self.root)
        self._unbatch([(pack, offset)])  # an episode's own file is newer than a batch listing it (an edit)

    def _note_batch(self, name: str, locations: set[tuple[int, int]]) -> None:
        self._batches[name] = set(locations)
        for loc in locations:
            self._batch_of.setdefault(loc, set()).add(name)

    def _batch_locations(self, path: Path) -> set[tuple[int, int]]:
        """The episode locations a batch stats file lists (none when it is unreadable: it is then removed)."""
        try:
            return {(c, o) for c, o, _ in _batch_episodes(self._read_batch(path))}
        except (OSError, CorruptStoreError, KeyError, ValueError, TypeError):
            return set()

    def _read_batch(self, path: Path) -> Any:
        return load_json(read_bounded(path, _MAX_STATS_BATCH, root=self.root, what="episode stats"), str(path))

    def _forget_stats(self, locations: Any) -> None:
        """The stats files of episodes no longer live removed: their own files, and batch files none of whose
        episodes is live any more."""
        for loc in locations:
            remove_path(stats_path(self.root, *loc))
        self._unbatch(locations)

    def _unbatch(self, locations: Any) -> None:
        """Batch stats files no longer answer for these episodes; a batch answering for none is removed."""
        for loc in locations:
            for name in self._batch_of.pop(loc, ()):
                held = self._batches.get(name)
                if held is not None:
                    held.discard(loc)
                    if not held:
                        del self._batches[name]
                        remove_path(self.root / ".episode_stats" / name)

    def _write_stats_batch(self, table: EpisodeTable, rows: Mapping[str, Mapping[str, np.ndarray]]) -> None:
        """One file holding the stats of the episodes appended to the log since the last commit of the root
        (:attr:`unsaved`): one file per fold instead of one per episode (creating a file costs more CPU than an
        RL episode's commit otherwise takes on ext4). A cache like the episodes' own files: an episode that is in
        none (a writer killed before its fold) gets its stats recomputed from its rows."""
        unsaved, self.unsaved = self.unsaved, set()
        if not unsaved or not rows:
            return
        keys = location_key(table.chunk, table.offset)
        wanted = location_key(*np.array(sorted(unsaved), dtype=np.int64).T)
        hit = np.flatnonzero(np.isin(keys, wanted))
        if not len(hit):
            return
        doc = {"episodes": [[int(table.chunk[e]), int(table.offset[e]), int(table.length[e])] for e in hit.tolist()],
               "stats": {name: {k: {"shape": list(v.shape[1:]), "data": _stats_cache_text(v[hit])}
                                for k, v in per.items()} for name, per in rows.items()}}
        name = f"{BATCH_PREFIX}{self.state.generation}.json"
        write_in_place(self.root / ".episode_stats" / name, json.dumps(doc).encode(), root=self.root)
        self._note_batch(name, {(c, o) for c, o, _ in doc["episodes"]})

    def batched_stats(self, episodes: list[dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
        """:meth:`features_stats` of several episodes' numeric features ``{name: stored values}``, stacked (row i:
        episode i's, the same values bit for bit), in one pass over them all
        (:func:`~lerobot_zarr.lerobot.format.stacked_stats`: numpy's per-call cost, not the data, is what an RL
        episode's stats cost)."""
        names = list(episodes[0])
        lengths = np.array([len(ep[names[0]]) for ep in episodes], dtype=np.int64)
        stacked = stacked_stats([np.concatenate([np.asarray(ep[name]) for ep in episodes]) for name in names], lengths)
        return dict(zip(names, stacked, strict=True))

    def stats_of(self, pack: int, offset: int, arrays: Mapping[str, np.ndarray], episode: int | None = None
                 ) -> dict[str, dict[str, np.ndarray]]:
        """Per-episode stats of one episode's stored values, computed and kept next to it. A feature the episode
        lacks (a gap: its video was missing) gets the stats of one zero frame, which no merge counts."""
        gaps = [name for name, g in self.gaps.items() if episode in g] if episode is not None else []
        stats = {name: self.episode_stats(name, np.asarray(arrays[name][:1] if name in gaps else arrays[name]))
                 for name in self.stats_arrays()}
        self.write_stats_file(pack, offset, stats)
        return stats

    def stats_arrays(self) -> dict[str, ArraySpec]:
        """The arrays whose LeRobot stats a commit keeps (all but text features and those computed on demand)."""
        return {name: spec for name, spec in self.state.arrays.items()
                if not spec.is_text and name not in self.state.stats_on_demand}

    def episode_stats(self, name: str, values: np.ndarray) -> dict[str, np.ndarray]:
        """One episode's LeRobot stats of feature ``name`` from its stored ``values``."""
        return stats_of_stored(self.state.arrays[name], self.state.info.get("features", {}).get(name), name)(values)

    def features_stats(self, values: Mapping[str, Any]) -> dict[str, dict[str, np.ndarray]]:
        """:meth:`episode_stats` of one episode's features ``{name: stored values}``: the numeric ones in one pass
        (:func:`~lerobot_zarr.lerobot.format.episodes_stats`, the same values)."""
        numeric = [name for name in values if self.state.arrays[name].kind not in CAMERA_DTYPES
                   and not is_float_image(name, self.state.arrays[name])]
        out = dict(zip(numeric, episodes_stats([np.asarray(values[name]) for name in numeric]), strict=True))
        out.update((name, self.episode_stats(name, v)) for name, v in values.items() if name not in out)
        return {name: out[name] for name in values}

    def _stats_missing(self) -> bool:
        """Whether some episode lacks its stats file while others have one (an edit's crash dropped it)."""
        try:
            present = set(os.listdir(self.root / ".episode_stats"))
        except FileNotFoundError:
            return False
        t = self.state.table
        return any(f"{c}-{o}.json" not in present and (c, o) not in self._batch_of
                   for c, o in zip(t.chunk.tolist(), t.offset.tolist(), strict=True))

    def _probe(self, probes: dict, name: str, frames: int) -> dict[str, np.ndarray]:
        """The stats computed for feature ``name`` over ``frames`` frames have these shapes and dtypes (one
        computation per feature and kind of episode, one frame or more, memoized in ``probes``)."""
        key = (name, min(frames, 2))
        probe = probes.get(key)
        if probe is None:
            spec = self.state.arrays[name]
            probe = probes[key] = {k: np.asarray(v) for k, v in self.episode_stats(
                name, np.zeros((key[1], *spec.frame_shape), dtype=spec.dtype)).items()}
        return probe

    def _frames(self, name: str, length: int, episode: int) -> int:
        """The frames an episode's stats of ``name`` count (one for a feature the episode lacks: see
        :meth:`stats_of`)."""
        return 1 if episode in self.gaps.get(name, {}) else length

    def _checked_stats(self, doc: Any, length: int, episode: int, probes: dict) -> dict[str, dict[str, np.ndarray]]:
        """An episode's stats file (a cache of this writer's), taken only if it has every feature's stats, shaped
        as computed ones, over ``length`` frames (one for a feature the episode lacks); else ValueError (it is
        recomputed from the data)."""
        out = {}
        for name in self.stats_arrays():
            frames = self._frames(name, length, episode)
            probe = self._probe(probes, name, frames)
            got = {k: _stats_cache_values(doc[name][k], v) for k, v in probe.items()}  # KeyError: lacks k
            if any(got[k].shape != v.shape for k, v in probe.items()) or int(got["count"].reshape(-1)[0]) != frames:
                raise ValueError(f"stats of {name!r} do not fit the episode")
            out[name] = got
        return out

    def episode_stats_rows(self, episodes: Sequence[int] | None = None) -> dict[str, dict[str, np.ndarray]]:
        """Per-episode stats, stacked: of every episode (rows in episode order), or only of ``episodes`` (rows in
        that order: a deletion needs the kept ones only). Computed once where missing, with a progress bar."""
        if self.stats_rows is not None:
            if self._stats_appends:
                self.stats_rows = self._stacked_appends()
            rows = self.stats_rows
            return rows if episodes is None else {name: {k: v[list(episodes)] for k, v in stats.items()}
                                                  for name, stats in rows.items()}
        table = self.state.table
        chosen = range(len(table)) if episodes is None else [int(e) for e in episodes]
        arrays = self.stats_arrays()
        probes: dict = {}
        batches: dict[str, _Batch | None] = {}
        found: list[dict | tuple[_Batch, int] | None] = []  # an episode's stats, or its row of a batch file
        todo = []
        for i, e in enumerate(chosen):
            loc, length = (int(table.chunk[e]), int(table.offset[e])), int(table.length[e])
            got = self._batched_entry(loc, length, e, batches, probes) if loc in self._batch_of else None
            if got is None:
                try:
                    path = stats_path(self.root, *loc)
                    doc = load_json(read_bounded(path, _MAX_STATS_FILE, root=self.root, what="episode stats"),
                                    str(path))
                    got = self._checked_stats(doc, length, e, probes)
                except (FileNotFoundError, KeyError, ValueError, TypeError, AttributeError, CorruptStoreError):
                    todo.append((i, e))
            found.append(got)
        with progress_bar(sum(int(table.length[e]) for _, e in todo), f"episode stats of {self.root.name}",
                          len(todo) > 1) as bar:
            for i, e in todo:
                found[i] = self.stats_of(int(table.chunk[e]), int(table.offset[e]), self.read_episode(e), e)
                bar.update(int(table.length[e]))
        stacked = {}
        gathered = not found or any(isinstance(got, tuple) for got in found)
        for name in arrays:
            if not gathered:  # every episode's stats at hand (computed, or from its own file)
                stacked[name] = {k: np.stack([np.asarray(got[name][k]) for got in found]) for k in found[0][name]}
                continue
            kinds = [self._probe(probes, name, self._frames(name, int(table.length[e]), e)) for e in chosen]
            stacked[name] = _stack(name, found, kinds, self._probe(probes, name, 1))  # (its shapes; dtypes if none)
        if episodes is None:
            self.stats_rows = stacked
        return stacked

    def _batched_entry(self, loc: tuple[int, int], length: int, e: int, batches: dict[str, _Batch | None],
                       probes: dict) -> tuple[_Batch, int] | None:
        """Episode ``e``'s row of a batch stats file listing it at ``loc`` over ``length`` frames (the newest
        such file first), checked as an episode's own file is; None when none holds them."""
        for name in sorted(self._batch_of.get(loc, ()), key=_batch_generation, reverse=True):
            if name not in batches:
                try:
                    batches[name] = _Batch(self._read_batch(self.root / ".episode_stats" / name),
                                           {f: self._probe(probes, f, 2) for f in self.stats_arrays()})
                except (OSError, CorruptStoreError, KeyError, ValueError, TypeError, AttributeError):
                    batches[name] = None
            batch = batches[name]
            i = None if batch is None else batch.where.get((*loc, length))
            if i is not None and all(batch.fits(f, i, self._probe(probes, f, frames := self._frames(f, length, e)),
                                                frames) for f in batch.stats):
                return batch, i
        return None

    def _stacked_appends(self) -> dict[str, dict[str, np.ndarray]]:
        """:attr:`stats_rows` with the appends committed since stacked onto it: one concatenation per stat (the
        stats of appends that put them off computed first, all in one pass)."""
        rows, appends, self._stats_appends = self.stats_rows, self._stats_appends, []
        first = next((v for stats in rows.values() for v in stats.values()), None)
        if first is None:
            return rows
        start, stop, new = 0, len(first), []
        for stats, drop, extend, values in appends:
            taken = min(drop, stop - start)
            start += taken
            del new[:drop - taken]
            if extend:
                if new:
                    new.pop()
                else:
                    stop -= 1
            new.append((stats, values))
        owed = [values for stats, values in new if stats is None]
        batched = self.batched_stats(owed) if owed else {}
        runs: list[Any] = []  # each a computed episode's stats, or [first, stop) of the batched ones
        j = 0
        for stats, _ in new:
            if stats is not None:
                runs.append(stats)
            elif runs and isinstance(runs[-1], list):
                runs[-1][1] = j = j + 1
            else:
                runs.append([j, j + 1])
                j += 1

        def pieces(name: str, k: str) -> list[np.ndarray]:
            return [batched[name][k][run[0]:run[1]] if isinstance(run, list) else np.asarray(run[name][k])[None]
                    for run in runs]

        return {name: {k: np.concatenate([v[start:stop], *pieces(name, k)]) for k, v in stats.items()}
                for name, stats in rows.items()}

    def _dataset_stats(self, table: EpisodeTable, rows: dict[str, dict[str, np.ndarray]],
                       gaps_of: Mapping[str, Mapping[int, str]]) -> dict:
        """LeRobot's stats.json from per-episode stats: count-weighted merge, index columns shifted back."""
        if not len(table):
            return {}
        out = {}
        for name, stats in rows.items():
            gaps = gaps_of.get(name)
            if gaps:  # episodes without this feature's frames (zeros in the store) do not count
                keep = np.ones(len(table), dtype=bool)
                keep[[e for e in gaps if e < len(table)]] = False
                if not keep.any():
                    continue
                stats = {k: v[keep] for k, v in stats.items()}
            if name in _INDEX_COLUMNS:
                shift = (table.episode_index_shift if name == "episode_index" else table.index_shift)
                stats = dict(stats)
                for key in _LOCATION_STATS:
                    stats[key] = stats[key] - shift.reshape(-1, *[1] * (stats[key].ndim - 1))
            out[name] = stats_json(aggregate_stats(stats))
        return out


def _stats_cache_text(value: Any) -> str:
    """One statistic in an episode's stats file: its values as float64 (what reading them back gives) in
    little-endian bytes, base64: exact, and about half the CPU of JSON numbers (a float's shortest repr costs ~1 us;
    an RL buffer's episode has ~300). Writers before this format read such a file as unusable and recompute it
    from the data (it is a cache)."""
    return base64.b64encode(np.asarray(value, dtype="<f8").tobytes()).decode("ascii")


def _batch_episodes(doc: Any) -> list[tuple[int, int, int]]:
    """The (pack, offset, length) of each episode of a batch stats file, in its order."""
    out = [(int(c), int(o), int(n)) for c, o, n in doc["episodes"]]
    if any(isinstance(v, bool) for item in doc["episodes"] for v in item):
        raise ValueError("not integers")
    return out


class _Batch:
    """A batch stats file read back: its episodes' rows, each feature's statistics as float64 arrays of one row
    per episode, shaped as computed ones (``probes``: one episode's, per feature; ValueError otherwise), and which
    rows hold whole numbers where a statistic is an integer."""

    def __init__(self, doc: Any, probes: Mapping[str, Mapping[str, np.ndarray]]):
        self.where = {(c, o, n): i for i, (c, o, n) in enumerate(_batch_episodes(doc))}
        rows = len(self.where)
        self.stats = {name: {k: _float64s(doc["stats"][name][k]["data"], (rows, *v.shape), doc["stats"][name][k])
                             for k, v in probe.items()} for name, probe in probes.items()}
        self._whole: dict[tuple[str, str], np.ndarray] = {}

    def fits(self, name: str, row: int, probe: Mapping[str, np.ndarray], frames: int) -> bool:
        """Whether row ``row`` holds stats of ``name`` over ``frames`` frames, in ``probe``'s dtypes."""
        stats = self.stats[name]
        if stats["count"][row].reshape(-1)[0] != frames:
            return False
        for k, v in probe.items():
            if v.dtype.kind in "iub":
                whole = self._whole.get((name, k))
                if whole is None:
                    whole = self._whole[name, k] = _whole_rows(stats[k])
                if not whole[row]:
                    return False
        return True


def _float64s(text: Any, shape: tuple[int, ...], where: Any = None) -> np.ndarray:
    """float64 values of ``shape`` from base64 little-endian bytes (a stats file's); ValueError when malformed (a
    batch file's statistic also states its shape, ``where["shape"]``, which must be the computed one's)."""
    if where is not None and [int(d) for d in where["shape"]] != list(shape[1:]):
        raise ValueError("a statistic of another shape")
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) != 8 * int(np.prod(shape, dtype=np.int64)):
        raise ValueError("a statistic of another size")
    return np.frombuffer(raw, dtype="<f8").reshape(shape)


def _whole_rows(values: np.ndarray) -> np.ndarray:
    """Per row, whether every value is a whole number an int64 holds exactly."""
    flat = values.reshape(len(values), -1)
    return (np.isfinite(flat) & (np.abs(flat) < 2 ** 53) & (flat == np.round(flat))).all(axis=1)


def _batch_generation(name: str) -> int:
    try:
        return int(name.removeprefix(BATCH_PREFIX).removesuffix(".json"))
    except ValueError:
        return -1


def _stats_cache_values(value: Any, computed: np.ndarray) -> np.ndarray:
    """A statistic read from an episode's stats file (base64 of float64 bytes, or JSON numbers as written before:
    their shape checked by the caller) in the dtype it is ``computed`` in; ValueError when malformed, or when an
    integer statistic (``count``) is not a whole number an integer holds."""
    values = _float64s(value, computed.shape) if isinstance(value, str) else np.asarray(value, dtype=np.float64)
    if computed.dtype.kind in "iub" and not _whole_rows(values.reshape(1, -1))[0]:
        raise ValueError("an integer statistic that is not a whole number")
    return values.astype(computed.dtype)


def remove_path(path: Path | str) -> None:
    path = Path(path)
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                remove_path(child)
            path.rmdir()
        else:
            path.unlink()


def _stack(name: str, found: Sequence[Any], kinds: Sequence[Mapping[str, np.ndarray]],
           probe: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Feature ``name``'s stats of the episodes, stacked (as ``numpy.stack`` of each episode's stats in its own
    dtypes, ``kinds``): ``found`` holds each episode's stats, or its row of a batch file (taken in one gather per
    batch, cast as a single episode's would be)."""
    out = {}
    for k, v in probe.items():
        dtype = np.result_type(*{kind[k].dtype for kind in kinds}) if kinds else v.dtype
        column = np.empty((len(found), *v.shape), dtype=dtype)
        gathered: dict[tuple[int, np.dtype], tuple[Any, list[int], list[int]]] = {}
        for i, (got, kind) in enumerate(zip(found, kinds, strict=True)):
            if isinstance(got, tuple):
                batch, row = got
                entry = gathered.setdefault((id(batch), kind[k].dtype), (batch, [], []))
                entry[1].append(i)
                entry[2].append(row)
            else:
                column[i] = got[name][k]
        for (_, kind_dtype), (batch, at, rows) in gathered.items():
            column[at] = batch.stats[name][k][rows].astype(kind_dtype)
        out[k] = column
    return out
