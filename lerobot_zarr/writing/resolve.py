"""A lazy store's unresolved episodes (format 5, :attr:`~lerobot_zarr.store.state.StoreState.unresolved`): row
groups of its source's episode table that the first open read only through the table's footer, so that opening one
episode did not read every episode's length. They are resolved from the source and committed (their start, length,
first task and rows, inside the run of rows their row group holds in its pack: no data moves):

- by an open, fetch or transcode of one of their episodes (its reader reads their row groups anyway):
  :func:`commit_resolved` with what it read;
- by any reader needing every episode (``meta.episodes``, the doctor, an export, a push...): :func:`resolve_store`,
  which :func:`~lerobot_zarr.store.state.read_state` calls (registered by :mod:`.transcode`, which reaches the
  source) unless asked for the state as it is.

A writer never sees one: its store must hold every episode, and an episode is transcoded only once its row group
is resolved. A crash at any moment leaves the store at its last commit: resolving is a commit of the root like any
other; two processes resolving at once commit once (the second finds nothing left under the writer lock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CorruptSourceError, NotMaterializedError, StoreLockedError
from ..sources.registry import describe_record
from ..store.committing import commit
from ..store.state import StoreState, read_state
from ..store.tables import EpisodeTable
from ..utils.fileio import WriterLock, holds_lock

if TYPE_CHECKING:
    from ..lerobot.source import LeRobotSource
    from ..lerobot.source_meta import SourceEpisodes

__all__ = ["commit_resolved", "first_task_index", "known_lengths", "resolve_store"]


def first_task_index(tasks: Sequence[Sequence[str]], index: dict[str, int]) -> np.ndarray:
    """Each episode's first task (``tasks``: its task texts) as its index in ``index`` (-1: none, or not known)."""
    return np.array([index.get(ts[0], -1) if ts else -1 for ts in tasks], dtype=np.int64)


def known_lengths(state: StoreState) -> tuple[np.ndarray, np.ndarray]:
    """Every episode's start and length as the store knows them: -1 for unresolved episodes (not their
    placeholders), as :class:`~lerobot_zarr.lerobot.source_meta.KnownEpisodes` takes them."""
    unknown = state.unresolved_mask()
    return np.where(unknown, -1, state.table.start), np.where(unknown, -1, state.table.length)


def resolve_store(root: Path, source_of: Callable[[Path, list[int]], LeRobotSource]) -> StoreState:
    """Resolve every unresolved episode of the store at ``root`` from its recorded source (``source_of(root,
    episodes)``: a reader of it locating those episodes, :func:`~.transcode.recorded_source`) and commit them; the
    new state. ``NotMaterializedError`` when the source cannot be reached (naming why). The writer lock is taken
    for the commit only (not during the source's read)."""
    state = read_state(root, resolve=False)
    if not state.unresolved:
        return state
    if holds_lock(root):
        raise StoreLockedError(f"{root}: its unresolved episodes must be resolved before a writer holds it (this "
                               f"thread does): read it (any reader resolves them) before taking the lock",
                               path=str(root))
    try:
        source = source_of(root, [a for a, _, _, _ in state.unresolved])
    except NotMaterializedError as exc:  # (its words: "episodes ... are not in the store": not what is asked)
        spans = ", ".join(f"[{a}, {b})" for a, b, _, _ in state.unresolved[:5])
        raise NotMaterializedError(
            f"{root}: the lengths of episodes {spans}{' ...' if len(state.unresolved) > 5 else ''} are not known yet "
            f"(row groups of the episode table of {describe_record(state.source)} that the first open did not read): "
            f"what needs every episode's length (meta's episode arrays, an export, verify, push) reads them from "
            f"that source, which failed: {exc}", path=root) from exc
    state = commit_resolved(root, source.episodes)
    if state.unresolved:  # (never served as lengths: a caller asked for every one)
        raise NotMaterializedError(f"{root}: its source's reader gave no lengths for episodes "
                                   f"{[a for a, _, _, _ in state.unresolved][:20]}'s row groups", path=root)
    return state


def commit_resolved(root: Path, episodes: SourceEpisodes) -> StoreState:
    """Commit the episodes of the store's unresolved row groups that ``episodes`` (a reader of its source) knows
    every episode of, checked against the frames the store holds for them; the state committed (or as it was)."""
    with WriterLock(root):
        state = read_state(root, resolve=False)
        t = state.table
        start, length, task = t.start.copy(), t.length.copy(), t.task_index.copy()
        offset = t.offset.copy()
        index = {text: i for i, text in enumerate(state.tasks)}
        left = []
        for a, b, f0, f1 in state.unresolved:
            got_length = np.asarray(episodes.length[a:b], dtype=np.int64)
            if (got_length <= 0).any() or b > len(episodes):
                left.append((a, b, f0, f1))
                continue
            got_start = np.asarray(episodes.start[a:b], dtype=np.int64)
            if got_start[0] != f0 or (got_start[1:] != got_start[:-1] + got_length[:-1]).any() \
                    or int(got_start[-1] + got_length[-1]) != f1:
                raise CorruptSourceError(f"{root}: episodes [{a}, {b}) of its source now hold frames "
                                         f"[{int(got_start[0])}, {int(got_start[-1] + got_length[-1])}), the store "
                                         f"was made with [{f0}, {f1})")
            start[a:b], length[a:b] = got_start, got_length
            offset[a:b] = t.offset[a] + (got_start - f0)
            task[a:b] = first_task_index(episodes.tasks[a:b], index)
        if len(left) == len(state.unresolved):
            return state
        table = EpisodeTable(start, length, task, t.chunk, offset, t.episode_index_shift, t.index_shift)
        return commit(replace(state, table=table, unresolved=tuple(left)), previous=state)
