"""A writer's transaction on its store: where new rows go (the free rows of the last pack, or a new pack), writing
them, the commit that lists them, retiring the packs no live episode needs, and compaction; with the per-episode
stats, content hashes and edit markers a commit folds in.

:class:`WriteTransaction` works on the committed :class:`~lerobot_zarr.store.state.StoreState` it was given (its
:attr:`~WriteTransaction.state`): each :meth:`~WriteTransaction.commit` takes a state with the changes and returns
the new committed one (and tells :attr:`~WriteTransaction.on_commit`, so that a sampler follows). What a change
means (an append, a deletion, a new task) is :mod:`lerobot_zarr.writing.writer`'s; how it reaches the disk safely
is this module's (see :mod:`lerobot_zarr.store` for the contract): new rows are written where no committed episode
points and flushed before the commit that lists them, packs left without a live episode are retired after it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, CorruptStoreError, DiskSpaceError, ReadOnlyStoreError, warn_user
from ..store.committing import append_commit, commit, live_matches, live_runs, repair_live
from ..store.hashes import ContentHashes
from ..store.log import FOLD_BYTES, FOLD_RECORDS, LOG_FILE, encode_record
from ..store.packs import (PackWriters, adopt_pack_file, open_array_pack, read_text_rows, remove_retired, retire_pack,
                           unadopt_pack_file)
from ..store.state import CREATING_MARKER, StoreState, apply_record, chunk_path, counted_info, read_state, stats_path
from ..store.tables import EpisodeTable, PackLayout, pack_rows_target
from ..utils.fileio import (
    atomic_write,
    check_in_store,
    copy_file,
    find_links,
    load_json,
    read_bounded,
    replace_file,
)
from ..utils.hashing import crc32c
from .stats_cache import BATCH_PREFIX, EpisodeStatsCache, remove_path
from .values import content_hash, count_arg

__all__ = ["WriteTransaction", "RETIRE_AFTER_S", "MIN_FREE_ENV", "resolve_min_free_bytes", "drop_empty_features",
           "remove_path"]

MIN_FREE_ENV = "LEROBOT_ZARR_MIN_FREE_BYTES"
_DEFAULT_MIN_FREE = 256 * 2**20
RETIRE_AFTER_S = 60.0  # how long a retired pack's files stay readable for readers of older commits
RING_PACK_BYTES = 1 << 20  # a ring buffer's packs of small frames may hold up to this much (see allocate)
_STATS_PENDING = ".stats-pending"  # stats files newer than the committed stats.json may exist
_EDITING = ".editing"  # <pack>-<offset>: features of an episode edited in place since the last commit


class WriteTransaction(EpisodeStatsCache):
    """The write path of one store, whose writer lock the caller holds: allocation, row writes, commits, retiring
    and compaction (see the module docstring). Opening it cleans up after a writer that died (debris, packs no
    commit lists, half-finished retirements); :meth:`recover` then finishes what such a writer left half done.

    Public state, read and changed by the writer between commits: :attr:`state` (the last commit), :attr:`gaps`
    (per feature, episodes without its frames), :attr:`dirty` (features of episodes edited in place since the last
    commit, by ``(pack, offset)``), :attr:`fresh` (content hashes of rows written since the last commit) and
    :attr:`stats_rows` (per-episode stats of the committed episodes, once computed).
    """

    def __init__(self, state: StoreState, *, durable: bool = True, min_free_bytes: int | None = None):
        self.root = Path(state.root)
        self.durable = bool(durable)
        self.min_free_bytes = resolve_min_free_bytes(min_free_bytes)
        self.state = drop_empty_features(state)
        compact = [name for name, spec in self.state.arrays.items() if spec.storage != "raw" and not spec.is_text]
        if compact:
            raise ReadOnlyStoreError(f"{self.root}: features {compact} are stored compact (compressed frames), "
                                     f"which cannot be written in place; use a store with raw storage to write",
                                     path=self.root)
        # episodes whose frames of a feature the source could not give (missing videos): kept by position
        self.gaps = {name: self.state.unavailable_of(name) for name in self.state.arrays
                     if self.state.unavailable_of(name)}
        self.on_commit: Callable[[StoreState], None] | None = None  # told of each new committed state
        self.stats_rows: dict[str, dict[str, np.ndarray]] | None = None  # per-episode stats of stored values
        # appends committed to the log since stats_rows was stacked: (the episode's stats, drop, extend), stacked
        # onto it when next asked (an append's commit costs no copy of every episode's stats)
        self._stats_appends: list[tuple[dict | None, int, bool, dict | None]] = []
        # episodes appended with log_commits whose stats no file holds yet (written by the next commit of the root,
        # all in one batch file): by location
        self.unsaved: set[tuple[int, int]] = set()
        self._batches: dict[str, set[tuple[int, int]]] = {}  # batch stats files: the live locations they cover
        self._batch_of: dict[tuple[int, int], set[str]] = {}
        self.fresh: dict[tuple[int, int], dict[str, int]] = {}  # content hashes of rows written since the commit
        self.adopted: dict[str, tuple[str, str]] = {}  # files made packs since the commit: (pack path, their path)
        self.pack_writers = PackWriters(self.root)  # (closed by the writer's close, or when dropped)
        # appends commit to the log (see :meth:`commit_appended`); the log's valid bytes and records
        self.log_commits = False
        self.log_at, self.log_count = state.log_records.size, len(state.log_records)
        self._cleanup()
        broken = self.state.hashes.readable()
        if broken is not None:  # not a reason to refuse writes: hashes are recorded anew from here on
            warn_user(f"{self.root}: the store's content hashes cannot be read ({broken}); the episodes committed "
                      f"so far are unverifiable (`lerobot-zarr verify --record` records them anew)")
            self.state = replace(self.state, hashes=ContentHashes())
        # (pack, offset) -> features edited since the last commit (those a writer killed midway left, on open)
        self.dirty: dict[tuple[int, int], set[str]] = self._edit_markers()

    def recover(self) -> None:
        """Finish what a writer killed midway left: a ``set_task`` (its frames rewritten: idempotent), an edit
        (its stats dropped, or written but not committed: the edited episodes' stats and content hashes
        recomputed, and committed)."""
        if self.state.pending_tasks:
            self.rewrite_task_index(list(self.state.pending_tasks))
        if self.dirty or (self.root / _STATS_PENDING).exists() or self._stats_missing() or self.state.logged:
            self.commit(self.state, self.episode_stats_rows())  # (the log folded into the root, too)

    def rewrite_task_index(self, pending: Sequence[tuple[int, int, int]]) -> None:
        """Write the ``task_index`` frames of each ``(pack, offset, task)`` listed in place, then commit (with the
        episodes' stats): the second half of a ``set_task``."""
        table = self.state.table
        position = {(int(c), int(o)): i for i, (c, o) in enumerate(zip(table.chunk.tolist(), table.offset.tolist(),
                                                                      strict=True))}
        for pack, offset, k in pending:
            e = position.get((int(pack), int(offset)))
            if e is None:
                continue
            m = self.rows_map("task_index", int(pack), int(offset), int(table.length[e]), writable=True)
            m[:] = k
            m.flush()
            del m
            remove_path(stats_path(self.root, int(pack), int(offset)))
            self.dirty.setdefault((int(pack), int(offset)), set()).add("task_index")
        self.commit(self.state, self.episode_stats_rows(), pending_tasks=())

    def frame_bytes(self) -> int:
        """Bytes of one frame of every feature."""
        return sum(spec.frame_bytes for spec in self.state.arrays.values())

    def _cleanup(self) -> None:
        """After a crash: drop pack files no commit lists, finish retiring, delete what expired, remove debris.
        First, a store holding a symbolic link anywhere is refused: a writer never follows one out of the store."""
        links = find_links(self.root)
        if links:
            raise CorruptStoreError(f"{links[0]}: is a symbolic link; a store holds none (it could point writes "
                                    f"outside the store){f' (and {len(links) - 1} more)' if len(links) > 1 else ''}; "
                                    f"`lerobot-zarr verify --repair {self.root}` removes them", path=links[0])
        for pattern in (".*.tmp-*", "*/.*.tmp-*", "*/c/**/.*.tmp-*", ".episode_stats/.*.tmp-*", CREATING_MARKER):
            for tmp in self.root.glob(pattern):  # debris of writes killed before their rename (first: a pack's
                remove_path(tmp)  # folder that held only that is empty when the packs are looked at)
        state = self.state
        n_packs = len(state.packs)
        retired = {pack for pack, _ in state.retired}
        for name in [*state.arrays, "frame_live"]:
            folder = Path(check_in_store(self.root, self.root / name / "c" / "_")).parent  # no link on the way
            if folder.is_symlink():
                raise CorruptStoreError(f"{folder}: is a symbolic link; a store's folders must be real folders",
                                        path=folder)
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if not entry.name.isdigit():
                    remove_path(entry)  # debris of a pack creation killed before its rename
                    continue
                pack = int(entry.name)
                if pack >= n_packs or (state.packs.rows[pack] == 0 and (pack not in retired or name == "frame_live")):
                    remove_path(entry)  # a pack created for an append that never committed, or retired and expired
                elif state.packs.rows[pack] == 0:
                    retire_pack(self.root, {name: state.arrays[name]}, pack)  # retired by a commit, not moved yet
        live = {(int(c), int(o)) for c, o in zip(state.table.chunk.tolist(), state.table.offset.tolist(), strict=True)}
        for folder, suffix in ((self.root / ".episode_stats", ".json"), (self.root / _EDITING, "")):
            check_in_store(self.root, folder / "_")
            if folder.is_symlink():
                remove_path(folder)
            if not folder.is_dir():
                continue
            batches, own = [], set()
            for entry in folder.iterdir():
                if suffix and entry.name.startswith(BATCH_PREFIX):
                    batches.append(entry)
                    continue
                key = tuple(entry.name.removesuffix(suffix).split("-"))
                if not (len(key) == 2 and all(k.isdigit() for k in key) and (int(key[0]), int(key[1])) in live
                        and entry.name.endswith(suffix)):
                    remove_path(entry)
                else:
                    own.add((int(key[0]), int(key[1])))
            for entry in batches:  # an episode's own file is newer than a batch listing it (written by an edit)
                covered = self._batch_locations(entry) & live - own
                if covered:
                    self._note_batch(entry.name, covered)
                else:
                    remove_path(entry)
        try:  # zarr's copies of the commit are for zarr readers only (lerobot_zarr reads the root): may wait
            if state.read_version < 3 or (self.root / ".frame_live-pending").exists():
                # upgrade the format / a commit was cut short: its zarr copies and frame_live rewritten
                self.state = commit(state, previous=state, durable=True)
            elif not all(live_matches(self.root, pack, int(state.packs.rows[pack]), runs)
                         for pack, runs in live_runs(state).items()):
                repair_live(state)  # frame_live damaged since: rewritten from the table
        except DiskSpaceError as exc:
            if state.read_version < 3:
                raise
            warn_user(f"{self.root}: zarr's copy of the last commit (frame_live, episode_*) could not be repaired "
                      f"now ({exc}); the next commit repairs it")

    def check_space(self, nbytes: int) -> None:
        """Refuse (:class:`DiskSpaceError`, nothing written) a write of ``nbytes`` that would leave less free space
        on the volume than the margin."""
        st = os.statvfs(self.root)
        free = st.f_bavail * st.f_frsize
        if free - nbytes < self.min_free_bytes:
            raise DiskSpaceError(errno.ENOSPC, f"{self.root}: writing {nbytes} bytes would leave {free - nbytes} "
                                               f"bytes free on its volume, below the margin of {self.min_free_bytes}"
                                               f" bytes (min_free_bytes= or ${MIN_FREE_ENV}); nothing was written",
                                 path=self.root)

    def rows_map(self, name: str, pack: int, offset: int, length: int, *, writable: bool = False) -> np.ndarray:
        """A memory map of one committed episode's rows of one feature (symlinks refused, size checked); a text
        feature's stored strings (an object array: text is never written in place)."""
        spec = self.state.arrays[name]
        rows = int(self.state.packs.rows[pack])
        if spec.is_text:
            if writable:
                raise ReadOnlyStoreError(f"{self.root}: feature {name!r} is {spec.kind} text, kept as variable-length "
                                         f"frames: it cannot be edited in place (delete the episode's frames and add "
                                         f"them again)", path=self.root, feature=name)
            return read_text_rows(self.root, name, spec, pack, rows, offset, length)
        fd = open_array_pack(self.root, name, spec, pack, rows, os.O_RDWR if writable else os.O_RDONLY)
        with os.fdopen(fd, "r+b" if writable else "rb") as f:
            return np.memmap(f, dtype=spec.dtype, mode="r+" if writable else "r", offset=offset * spec.frame_bytes,
                             shape=(length, *spec.frame_shape))

    def read_episode(self, e: int, table: EpisodeTable | None = None) -> dict[str, np.ndarray]:
        """Episode ``e``'s rows of every feature (zeros for a feature it has no frames of)."""
        t = self.state.table if table is None else table
        pack, offset, length = int(t.chunk[e]), int(t.offset[e]), int(t.length[e])
        gaps = self.gap_features(pack, offset)
        return {name: np.zeros((length, *spec.frame_shape), spec.dtype) if name in gaps
                else self.rows_map(name, pack, offset, length) for name, spec in self.state.arrays.items()}

    def mark_editing(self, key: tuple[int, int], names: set[str]) -> None:
        """Record, before an in-place edit writes, which features of the episode at ``key`` it edits."""
        path = self.root / _EDITING / f"{key[0]}-{key[1]}"
        check_in_store(self.root, path)
        path.parent.mkdir(exist_ok=True)
        atomic_write(path, json.dumps(sorted(names)).encode(), durable=False, root=self.root)

    def _edit_markers(self) -> dict[tuple[int, int], set[str]]:
        """Features of committed episodes an in-place edit changed without a commit after it (a writer killed
        during or after an edit block): their stats and content hashes are recomputed at the next commit."""
        folder = self.root / _EDITING
        out: dict[tuple[int, int], set[str]] = {}
        if not folder.is_dir() or folder.is_symlink():
            return out
        for entry in folder.iterdir():
            key = entry.name.split("-")
            try:
                names = load_json(read_bounded(entry, 1 << 20, root=self.root, what="edit marker"), str(entry))
            except (CorruptStoreError, OSError):
                names = list(self.state.arrays)  # unreadable: assume every feature was edited
            if len(key) == 2 and all(k.isdigit() for k in key) and isinstance(names, list):
                out[(int(key[0]), int(key[1]))] = {n for n in names if n in self.state.arrays}
        return out

    def _fold_dirty(self, table: EpisodeTable, rows: dict[str, dict[str, np.ndarray]]
                    ) -> dict[str, dict[str, np.ndarray]]:
        """``rows`` (aligned with ``table``) with the stats of edited features recomputed from the data."""
        position = {(int(c), int(o)): i for i, (c, o) in enumerate(zip(table.chunk.tolist(), table.offset.tolist(),
                                                                      strict=True))}
        rows = {name: {k: v.copy() for k, v in rows[name].items()} for name in rows}
        for (pack, offset), names in self.dirty.items():
            e = position.get((pack, offset))
            if e is None:  # deleted or moved since: its new rows got fresh stats
                continue
            length = int(table.length[e])
            for name in names:
                values = np.asarray(self.rows_map(name, pack, offset, length))
                stats = self.episode_stats(name, values)
                self.fresh.setdefault((pack, offset), {})[name] = crc32c(values)  # the edit's new content
                for k in rows[name]:
                    rows[name][k][e] = stats[k]
            self.write_stats_file(pack, offset, {name: {k: v[e] for k, v in rows[name].items()} for name in rows})
        return rows

    # committing -----------------------------------------------------------------------------------------
    def commit(self, state: StoreState, rows: dict[str, dict[str, np.ndarray]] | None, *,
               gaps: dict[str, dict[int, str]] | None = None, **changes: Any) -> StoreState:
        """One commit of ``state`` (its table, packs, tasks...) with ``changes`` applied: info counters, stats,
        source, and ``gaps`` (per feature, the positions of episodes without its frames, if they moved); packs
        left without a live episode are retired after it (expired retired packs deleted); :attr:`on_commit` is
        told. Stats of in-place edits not committed yet are folded in. Returns the new state."""
        previous = self.state
        gaps = self.gaps if gaps is None else {name: g for name, g in gaps.items() if g}
        state = replace(state, **changes)
        table = state.table
        folded = list(self.dirty)
        if self.dirty:
            # first the marker, then the edited episodes' new stats files: a writer killed in between leaves the
            # marker, and the next writer recomputes the stats.json those files make stale
            (self.root / _STATS_PENDING).touch()
            rows = self._fold_dirty(table, self.episode_stats_rows() if rows is None else rows)
        info = counted_info(state.info, table, len(state.tasks))
        now = time.time()
        packs = state.packs
        live = np.zeros(len(packs), dtype=bool)
        live[table.chunk] = True
        if len(packs):
            live[-1] |= packs.free_rows() > 0 and packs.rows[-1] > 0  # the open pack stays for the next append
        retire = np.flatnonzero(~live & (packs.rows > 0)).tolist()
        retired = [(c, t) for c, t in state.retired if now - t < RETIRE_AFTER_S]
        expired = [c for c, t in state.retired if now - t >= RETIRE_AFTER_S]
        retired += [(int(c), now) for c in retire]
        source = state.source
        if source.get("kind") not in ("recorded", "edited"):
            source = {"kind": "edited", "from": source}
        stats = self._dataset_stats(table, rows, gaps) if rows is not None else state.stats
        new = replace(state, info=info, source=source, stats=stats, retired=tuple(retired),
                      packs=packs.retire(retire), logged=self.log_commits).all_materialized()
        new = replace(new, unavailable={}).with_materialized({}, gaps).with_hashes(self.fresh)
        try:
            self.state = commit(new, previous=previous, durable=self.durable)
        except BaseException:
            self._after_failed_commit(previous)
            raise
        self.log_at = self.log_count = 0
        self.gaps = gaps
        self.fresh, self.adopted = {}, {}
        with contextlib.suppress(FileNotFoundError):
            (self.root / _STATS_PENDING).unlink()
        for pack, offset in folded:
            remove_path(self.root / _EDITING / f"{pack}-{offset}")
        self.dirty = {}
        if rows is not None:
            self.stats_rows, self._stats_appends = rows, []
        kept = {(int(c), int(o)) for c, o in zip(table.chunk.tolist(), table.offset.tolist(), strict=True)}
        gone = {(int(c), int(o)) for c, o in zip(previous.table.chunk.tolist(), previous.table.offset.tolist(),
                                                 strict=True)} - kept
        self._forget_stats(gone)
        if rows is not None:
            self._write_stats_batch(table, rows)
        for pack in retire:
            retire_pack(self.root, self.state.arrays, pack)
        for pack in expired:
            remove_retired(self.root, self.state.arrays, pack)
        if self.on_commit is not None:
            self.on_commit(self.state)
        return self.state

    def commit_appended(self, stats: dict[str, dict[str, np.ndarray]] | None, *, row: tuple[int, ...],
                        packs: PackLayout, tasks: tuple[str, ...], gaps: dict[str, dict[int, str]], drop: int,
                        extend: bool, values: dict[str, np.ndarray] | None = None) -> StoreState:
        """The commit of an append (one episode added, or the last one extended, after ``drop`` of the oldest were
        dropped): with :attr:`log_commits`, a record appended to the log (no root rewrite: its cost does not grow
        with the store), else (or when the change is more than that) :meth:`commit`. ``stats``: the new (or
        extended) episode's stats, ``row`` its row of the table (:meth:`EpisodeTable.appended`), ``gaps`` as in
        :meth:`commit`. The dataset stats in the root are those of the last fold; the log is
        folded into the root every ``FOLD_RECORDS`` records, at :meth:`fold` and when a writer opens the store.

        ``stats`` None: the episode's numeric stats are put off, ``values`` are its stored values to compute them
        from (a copy), with the other episodes' put off since, when next needed (at the fold, in one pass). With
        :attr:`log_commits`, the episode's stats go to the batch file of the next commit of the root."""
        previous = self.state
        if self.log_commits:
            self.unsaved.add((int(row[2]), int(row[3])))
        n_old = len(previous.packs)
        plain = (not self.log_commits or not previous.logged or self.dirty or any(gaps.values()) or self.gaps
                 or previous.pending_tasks or previous.source.get("kind") not in ("recorded", "edited")
                 or len(packs) < n_old
                 or not np.array_equal(packs.rows[:n_old], previous.packs.rows)
                 or tasks[:len(previous.tasks)] != previous.tasks
                 or self.log_count >= FOLD_RECORDS or self.log_at >= FOLD_BYTES)
        if plain:
            rows = self.episode_stats_rows()
            if stats is None:
                stats = {name: {k: v[0] for k, v in per.items()} for name, per in self.batched_stats([values]).items()}
            kept = slice(drop, len(previous.table) - 1 if extend else None)  # the other episodes that stay
            rows = {name: {k: np.concatenate([v[kept], stats[name][k][None]]) for k, v in rows[name].items()}
                    for name in rows}
            return self.commit(previous, rows, table=previous.table.appended(row, drop=drop, extend=extend),
                               packs=packs, tasks=tasks, gaps=gaps)
        payload = {"base": previous.generation, "generation": previous.generation + 1, "drop": drop,
                   "extend": extend, "episode": [int(v) for v in row],
                   "packs": {"new": packs.rows[n_old:].tolist(), "next_row": int(packs.next_row)},
                   "tasks": list(tasks[len(previous.tasks):]),
                   "hashes": [[c, o, {k: int(v) for k, v in h.items()}] for (c, o), h in self.fresh.items()]}
        new = apply_record(previous, payload, str(self.root / LOG_FILE))
        record = encode_record(payload)
        try:
            self.state = append_commit(new, previous=previous, record=record, at=self.log_at, drop=drop, extend=extend,
                                       durable=self.durable)
        except BaseException:
            self._after_failed_commit(previous)
            raise
        self.log_at += len(record)
        self.log_count += 1
        self.fresh, self.adopted = {}, {}
        if self.stats_rows is not None:  # (else read from the stats files when first asked, or recomputed)
            self._stats_appends.append((stats, drop, extend, values))
        self._forget_stats(zip(previous.table.chunk[:drop].tolist(), previous.table.offset[:drop].tolist(),
                               strict=True))
        if self.on_commit is not None:
            self.on_commit(self.state)
        return self.state

    def _after_failed_commit(self, previous: StoreState) -> None:
        """A commit raised (a full disk, an interrupt): if it raised after its commit point (while unflagging rows
        no longer live, say), the store holds the new commit, and this transaction takes it as its state, read
        from the store, so that the next commit builds on it (not on ``previous``, which would write its record
        over the committed one); what it left undone (rows to unflag, stats files) the next commit repairs."""
        try:
            state = read_state(self.root)
        except Exception:  # noqa: BLE001 - the store cannot tell: the next commit's checks will
            return
        if state.generation <= previous.generation:
            return
        self.state = drop_empty_features(state)
        self.log_at, self.log_count = state.log_records.size, len(state.log_records)
        self.fresh, self.adopted, self.dirty, self.stats_rows, self._stats_appends = {}, {}, {}, None, []
        self.unsaved = set()  # (their stats recomputed from the rows when next needed)
        self.gaps = {name: self.state.unavailable_of(name) for name in self.state.arrays
                     if self.state.unavailable_of(name)}
        if self.on_commit is not None:
            self.on_commit(self.state)

    def fold(self) -> None:
        """Fold the log into the root (one commit), and make the root format 3 again once :attr:`log_commits` is
        off; a no-op when there is nothing to fold."""
        if self.log_count or self.state.logged != self.log_commits:
            self.commit(self.state, self.episode_stats_rows())

    def _shared(self, pack: int) -> bool:
        """Whether the pack's files are hard links shared with another store (a copy made by :func:`fork`)."""
        for name, spec in self.state.arrays.items():
            try:
                if os.stat(chunk_path(self.root, name, pack, spec.ndim), follow_symlinks=False).st_nlink > 1:
                    return True
            except FileNotFoundError:
                pass
        return False

    def own_pack(self, pack: int) -> int:
        """The id under which pack ``pack`` is this store's own, to write in place: a pack shared with another
        store by hard links is first copied to a new pack (one commit; the other store never changes)."""
        if not self._shared(pack):
            return pack
        state = self.state
        rows = int(state.packs.rows[pack])
        new = len(state.packs)
        self.check_space(rows * self.frame_bytes())
        for name, spec in self.state.arrays.items():
            src = check_in_store(self.root, chunk_path(self.root, name, pack, spec.ndim))
            dst = Path(check_in_store(self.root, chunk_path(self.root, name, new, spec.ndim)))
            if not os.path.lexists(src):  # a camera none of the pack's episodes has
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
            copy_file(src, tmp)
            replace_file(tmp, dst)
        table = state.table
        moved = table.chunk == pack
        for offset in table.offset[moved].tolist():
            with contextlib.suppress(FileNotFoundError):
                os.replace(stats_path(self.root, pack, offset), stats_path(self.root, new, offset))
        for e in np.flatnonzero(moved).tolist():  # the same bytes under a new pack id: the same hashes
            self.fresh[(new, int(table.offset[e]))] = self._recorded_hashes(e, table)
        chunk = np.where(moved, new, table.chunk)
        self.commit(state, None, table=EpisodeTable(table.start, table.length, table.task_index, chunk,
                                                     table.offset, table.episode_index_shift, table.index_shift),
                     packs=state.packs.with_pack(rows, rows))
        return new

    def allocate(self, packs: PackLayout, n: int, room: int = 0) -> tuple[PackLayout, int, int]:
        """Rows for ``n`` new frames: the free rows of the last pack if they fit (and it is this store's own),
        else a new pack (of the target size, or ``max(n, room)`` rows for a bigger episode: ``room`` leaves space
        to extend it). Returns the new layout, the pack and the row offset."""
        if len(packs) and packs.rows[-1] > 0 and packs.free_rows() >= max(n, room) and not self._shared(
                len(packs) - 1):
            return PackLayout(packs.rows, packs.next_row + n), len(packs) - 1, packs.next_row
        target = pack_rows_target(self.state.arrays, self.state.pack_bytes)
        # a ring buffer frees a pack once all of it was evicted: keep them small (an eighth of the capacity; up to
        # a quarter while that holds less than RING_PACK_BYTES of the widest frame: small frames, an RL state's,
        # would otherwise start a new pack, a file per feature, every few episodes)
        capacity = self.state.capacity_frames
        if capacity is not None:
            small = min(capacity // 4, pack_rows_target(self.state.arrays, RING_PACK_BYTES))
            target = min(target, max(1, capacity // 8, small))
        rows = max(target, n, room)
        return packs.with_pack(rows, n), len(packs), 0

    def write_episode(self, packs: PackLayout, pack: int, offset: int, data: Mapping[str, np.ndarray],
                      skip: Sequence[str] = (), *, hashed: bool = True) -> None:
        """Write one episode's rows of every feature (but ``skip``: features it has no frames of) and note their
        content hashes for the next commit (``hashed=False``: the caller notes them)."""
        hashes = self.fresh.setdefault((pack, offset), {}) if hashed else {}
        for name, spec in self.state.arrays.items():
            if name not in skip:
                hashes[name] = self.pack_writers.write(name, spec, pack, offset, data[name], int(packs.rows[pack]),
                                                       hashed)

    def adopt_files(self, files: Mapping[str, str | os.PathLike], given: Mapping[str, Any],
                    data: Mapping[str, np.ndarray], pack: int, packs: PackLayout) -> set[str]:
        """For an episode whose rows start new pack ``pack`` (else nothing): the ``files`` of raw features whose
        frames were ``given`` as a memory map of the whole file and are stored as they are (``data`` are those
        bytes) become the pack's files by a rename (:func:`~lerobot_zarr.store.packs.adopt_pack_file`); returns
        their features. Until the next commit, :meth:`unadopt` moves them back."""
        if pack != len(self.state.packs):
            return set()
        out = set()
        for name, path in files.items():
            mapped, values, spec = given.get(name), data.get(name), self.state.arrays[name]
            if (spec.storage == "raw" and isinstance(mapped, np.memmap) and mapped.offset == 0
                    and mapped.filename is not None and os.path.samefile(mapped.filename, path)
                    and os.path.getsize(path) == mapped.nbytes and values is not None
                    and values.__array_interface__["data"][0] == mapped.__array_interface__["data"][0]
                    and values.dtype == mapped.dtype and values.nbytes == mapped.nbytes):
                self.pack_writers.release(name)
                self.adopted[name] = (adopt_pack_file(self.root, name, spec, pack, int(packs.rows[pack]), path),
                                      os.fspath(path))
                out.add(name)
        return out

    def unadopt(self) -> None:
        """After a failed append: the files it adopted back where they were, unless its commit happened (a failure
        after the commit point: the packs are the store's now)."""
        adopted, self.adopted = self.adopted, {}
        if not adopted:
            return
        try:
            committed = read_state(self.root).generation > self.state.generation
        except Exception:  # noqa: BLE001 - the store cannot tell: the files stay where the commit put them
            return
        if not committed:
            for target, path in adopted.values():
                with contextlib.suppress(OSError):
                    unadopt_pack_file(self.root, target, path)

    def room_after(self, e: int, n: int) -> bool:
        """Whether ``n`` rows fit right after episode ``e``'s in its pack: the last pack, this store's own, with no
        other episode after it there."""
        table, packs = self.state.table, self.state.packs
        pack, end = int(table.chunk[e]), int(table.offset[e] + table.length[e])
        if pack != len(packs) - 1 or end + n > int(packs.rows[pack]) or self._shared(pack):
            return False
        return not ((table.chunk == pack) & (table.offset > table.offset[e])).any()

    def relocate(self, packs: PackLayout, data: Mapping[str, np.ndarray], skip: Sequence[str] = ()
                 ) -> tuple[PackLayout, int, int]:
        """Write one episode's (possibly changed) frames into fresh rows; return the layout, pack and offset."""
        n = len(next(iter(data.values())))
        packs, pack, offset = self.allocate(packs, n)
        self.write_episode(packs, pack, offset, data, skip)
        return packs, pack, offset

    def _recorded_hashes(self, e: int, table: EpisodeTable) -> dict[str, int]:
        """The content hashes recorded for episode ``e`` of ``table`` (by its location), feature by feature."""
        one = table.take(np.array([e]))
        return {name: int(self.state.hashes.aligned(one, name)[0]) for name in self.state.arrays}

    def damaged(self, e: int, table: EpisodeTable, data: Mapping[str, np.ndarray]) -> list[str]:
        """Features of episode ``e`` (of ``table``) whose rows just read (``data``) differ from their recorded
        content hash (features without one, without frames in the episode, or edited in place since the last
        commit, are not checked)."""
        recorded = self._recorded_hashes(e, table)
        key = (int(table.chunk[e]), int(table.offset[e]))
        skip = self.gap_features(*key) | self.dirty.get(key, set())
        return [name for name, values in data.items() if name not in skip and recorded.get(name, -1) >= 0
                and content_hash(self.state.arrays[name], values) != recorded[name]]

    def gap_features(self, pack: int, offset: int) -> set[str]:
        """Features the episode at (pack, offset) has no frames of (a camera whose video the source lacked)."""
        if not self.gaps:
            return set()
        table = self.state.table
        hit = np.flatnonzero((table.chunk == pack) & (table.offset == offset))
        return {name for name, g in self.gaps.items() if len(hit) and int(hit[0]) in g}

    def compact_packs(self, table: EpisodeTable, packs: PackLayout, rows: dict[str, dict[str, np.ndarray]]
                 ) -> tuple[EpisodeTable, PackLayout]:
        """Move the live episodes of packs left mostly dead (live rows under half the pack, the last pack
        excepted) to fresh rows, so that the next commit retires those packs and their disk space is freed."""
        live_rows = np.bincount(table.chunk, weights=table.length, minlength=len(packs))
        sparse = np.flatnonzero((packs.rows > 0) & (live_rows > 0) & (live_rows * 2 < packs.rows))
        sparse = sparse[sparse != len(packs) - 1]
        if not len(sparse):
            return table, packs
        chunk, offset = table.chunk.copy(), table.offset.copy()
        moving = np.flatnonzero(np.isin(table.chunk, sparse))
        try:
            self.check_space(int(table.length[moving].sum()) * self.frame_bytes())
        except DiskSpaceError:  # compaction only frees space later: on a full volume, deletions go on without it
            return table, packs
        for e in moving.tolist():
            gaps = self.gap_features(int(table.chunk[e]), int(table.offset[e]))
            data = {name: np.asarray(v) for name, v in self.read_episode(e, table).items()}
            damaged = self.damaged(e, table, data)
            if damaged:
                warn_user(f"{self.root}: moving episode {e} (pack {int(table.chunk[e])}), its rows of {damaged} differ "
                          f"from the content hash recorded when they were committed (damaged on disk?); they keep "
                          f"that hash, so `lerobot-zarr verify` names them")
            recorded = self._recorded_hashes(e, table)
            edited = self.dirty.get((int(table.chunk[e]), int(table.offset[e])), set())  # edited, not committed
            for name in edited:
                recorded[name] = content_hash(self.state.arrays[name], data[name])
            packs, chunk[e], offset[e] = self.relocate(packs, data, gaps)
            self.fresh[(int(chunk[e]), int(offset[e]))] = recorded  # the same rows: the hashes recorded for them
            if edited:  # ``rows`` holds its stats from before the edit: recomputed from the values moved
                for name in edited:
                    fresh = self.episode_stats(name, data[name][:1] if name in gaps else data[name])
                    for k in rows[name]:
                        rows[name][k][e] = fresh[k]
            self.write_stats_file(int(chunk[e]), int(offset[e]), {name: {k: v[e] for k, v in rows[name].items()}
                                                                   for name in rows})
        return EpisodeTable(table.start, table.length, table.task_index, chunk, offset, table.episode_index_shift,
                            table.index_shift), packs


def drop_empty_features(state: StoreState) -> StoreState:
    """Drop arrays the source could give for no episode (cameras whose videos are all missing): the store then
    lists them as not materialized, as one made without them would, and stays writable."""
    n = len(state.table)
    empty = [name for name in state.arrays if n and len(state.unavailable_of(name)) == n]
    if not empty:
        return state
    not_materialized = dict(state.not_materialized)
    for name in empty:
        not_materialized[name] = f"unavailable in every episode; episode 0: {state.unavailable_of(name)[0]}"
    new_state = commit(replace(state, arrays={k: v for k, v in state.arrays.items() if k not in empty},
                               materialized={k: v for k, v in state.materialized.items() if k not in empty},
                               unavailable={k: v for k, v in state.unavailable.items() if k not in empty},
                               not_materialized=not_materialized), previous=state)
    for name in empty:
        remove_path(state.root / name)
    return new_state




def resolve_min_free_bytes(value: int | None) -> int:
    """The free-space margin writes keep: ``value``, else ``$LEROBOT_ZARR_MIN_FREE_BYTES``, else 256 MiB."""
    if value is not None:
        return count_arg("min_free_bytes", value, 0)
    raw = os.environ.get(MIN_FREE_ENV)
    if raw is None:
        return _DEFAULT_MIN_FREE
    try:
        value = int(raw)
    except ValueError:
        raise ArgumentError(f"{MIN_FREE_ENV}={raw!r} is not an integer") from None
    return count_arg(f"${MIN_FREE_ENV}", value, 0)
