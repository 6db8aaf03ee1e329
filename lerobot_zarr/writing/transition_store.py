"""The committed transitions of an RL buffer store, read through memory maps of its packs: what
:class:`lerobot_zarr.writing.transitions.TransitionBuffer` samples (see that module for the layout). Following a
commit that appended one episode costs the same however many episodes the store holds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CorruptStoreError, warn_user
from ..sampling.maps import PackMaps
from ..store.tables import appended, location_key, pack_rows_target
from .transition_layout import Layout

__all__ = ["StoreTransitions"]

_MAX_MAPS = 4096


class StoreTransitions:
    """The committed transitions of an RL buffer store, gathered through memory maps of its packs (one fancy
    index per value; ``next_state`` is the row after, the final observation row at an episode's end)."""

    def __init__(self, root: Path, layout: Layout):
        self.root, self.layout = root, layout
        self.names = [slot.feature for slot in layout.slots()]
        self._maps: PackMaps | None = None
        self._arrays: dict | None = None  # the features of the state loaded (checked)
        self._warned_tails = False
        self.generation = -1
        self.length = self.chunk = self.offset = self.pack_rows = np.zeros(0, dtype=np.int64)
        self.all_tails = True
        self.tail_ok = np.zeros(0, dtype=bool)

    def load(self, state: Any, *, own: bool = False) -> None:
        """Follow a committed state: its episode table, and maps of its packs. After a commit that appended one
        episode to the state loaded before (a writer's own, or a reader's next), only that episode is looked at;
        ``own``: the writer's own commit of the episode with its final observation row (not read back). Otherwise
        the final observation rows are read only for episodes not held before at the same place with the same
        length (a row once given to an episode is never given to another): a checkpoint, which extends the last
        episode, reads one, however many the buffer holds."""
        if state.arrays is not self._arrays:
            self.layout.check(state.info.get("features", {}), str(self.root))
            for name in [*self.names, "frame_index", "episode_index"]:
                spec = state.arrays.get(name)
                if spec is None or spec.storage != "raw":
                    raise CorruptStoreError(f"{self.root}: feature {name!r} of the buffer is not a raw array of the "
                                            f"store", path=self.root, feature=name)
            self._arrays = state.arrays
        t = state.table
        previous = (self.chunk, self.offset, self.length, self.tail_ok) if self._maps is not None else None
        appended_one = (self._maps is not None and state.packs.rows is self.pack_rows
                        and all(_one_more(getattr(t, k), getattr(self, k)) for k in ("length", "chunk", "offset")))
        if not appended_one:
            self._follow_packs(state)
        self.length, self.chunk, self.offset = t.length, t.chunk, t.offset
        self.generation = state.generation
        if appended_one:  # (in a pack the state before had: no new maps, the pack's mapped if it was not)
            e = len(t) - 1
            if self._all_mapped:
                self._maps.ensure(t.chunk[e:])
            self.ends = appended(self.ends, [int(self.ends[-1]) + int(t.length[e]) if e else int(t.length[e])])
            self.starts = appended(self.starts, [int(self.ends[e]) - int(t.length[e])])
            self.tail_ok = appended(self.tail_ok, [True] if own else self._tail_rows(np.array([e]),
                                                                                   t.episode_index_shift))
        else:
            self.ends = np.cumsum(t.length)
            self.starts = self.ends - t.length
            self.tail_ok = self._known_tails(t, previous)
        self.all_tails = self.all_tails and bool(self.tail_ok[-1]) if appended_one else bool(self.tail_ok.all())

    def _known_tails(self, t: Any, previous: tuple | None) -> np.ndarray:
        """Whether each episode of table ``t`` has its final observation row: as found before for an episode held
        at the same place with the same length, read for the others."""
        keys = location_key(t.chunk, t.offset)
        known = np.zeros(len(t), dtype=bool)
        out = np.zeros(len(t), dtype=bool)
        if previous is not None and len(previous[0]) and len(t):
            old_chunk, old_offset, old_lengths, old_tails = previous
            old_keys = location_key(old_chunk, old_offset)
            order = np.argsort(old_keys, kind="stable")
            at = np.minimum(np.searchsorted(old_keys[order], keys), len(order) - 1)
            match = order[at]
            known = (old_keys[match] == keys) & (old_lengths[match] == t.length)
            out[known] = old_tails[match[known]]
        todo = np.flatnonzero(~known)
        out[todo] = self._tail_rows(todo, t.episode_index_shift)
        return out

    def _follow_packs(self, state: Any) -> None:
        """Maps of the state's packs (the maps before, followed where they can be)."""
        if self._maps is None or not self._maps.update(state.packs):
            if self._maps is not None:
                self._maps.close()
            specs = {name: state.arrays[name] for name in [*self.names, "frame_index", "episode_index"]}
            headroom = int(state.packs.rows.sum() + 4 * pack_rows_target(specs, state.pack_bytes))
            self._maps = PackMaps(self.root, specs, state.packs, max_packs=max(1, _MAX_MAPS // len(specs)),
                                  headroom_rows=headroom)
        live = np.unique(state.table.chunk)
        self._all_mapped = len(live) <= self._maps.max_packs  # (a ring buffer has a few packs)
        if self._all_mapped:
            self._maps.ensure(live)
        self.pack_rows = state.packs.rows

    def _tail_rows(self, episodes: np.ndarray, shift: np.ndarray) -> np.ndarray:
        """Whether the row after each of ``episodes`` holds its final observation: inside the pack, with the
        episode's ``episode_index`` and ``frame_index == length`` (rows another writer reused or left hold other
        values)."""
        chunk, length = self.chunk[episodes], self.length[episodes]
        end = self.offset[episodes] + length
        ok = end < self.pack_rows[chunk]
        if ok.any():
            hit = np.flatnonzero(ok)
            frame = self._read("frame_index", chunk[hit], end[hit])
            episode = self._read("episode_index", chunk[hit], end[hit])
            ok[hit] = (frame == length[hit]) & (episode == episodes[hit] + shift[episodes[hit]])
        if not ok.all() and not self._warned_tails:
            self._warned_tails = True
            lacking = episodes[~ok]
            warn_user(f"{self.root}: {len(lacking)} episodes (first: {int(lacking[0])}) lack their final observation "
                      f"(moved by another writer, e.g. after deletions): their last transition's next_state is its "
                      f"state, LeRobot's rule for datasets")
        return ok

    def _read(self, name: str, chunk: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Values of feature ``name`` at (pack, row) pairs, mapping packs as needed (within the maps' budget)."""
        maps = self._maps
        view, base = maps.views[name], maps.base_rows(name)
        if self._all_mapped:
            return view[base[chunk] + rows]
        unique = np.unique(chunk)
        if len(unique) <= maps.max_packs:
            maps.ensure(unique)
            return view[base[chunk] + rows]
        out = np.empty((len(chunk), *view.shape[1:]), dtype=view.dtype)
        for part in np.array_split(unique, math.ceil(len(unique) / maps.max_packs)):
            maps.ensure(part)
            hit = np.isin(chunk, part)
            out[hit] = view[base[chunk[hit]] + rows[hit]]
        return out

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def frames_before(self, episodes: int) -> int:
        return int(self.ends[episodes - 1]) if episodes else 0

    def gather(self, index: np.ndarray) -> dict[str, np.ndarray]:
        """Stored values of transitions ``index`` (0 .. len-1 over every committed episode): the rows of their
        frames, and the rows after them for ``next_state`` (an episode's last frame: its final observation)."""
        e = np.searchsorted(self.ends, index, side="right")
        local = index - self.starts[e]
        chunk, row = self.chunk[e], self.offset[e] + local
        after = row + 1 if self.all_tails else row + 1 - ((local == self.length[e] - 1) & ~self.tail_ok[e])
        out = {name: self._read(name, chunk, row) for name in self.names}
        for slot in self.layout.state.values():
            out["next:" + slot.feature] = self._read(slot.feature, chunk, after)
        return out

    def close(self) -> None:
        if self._maps is not None:
            self._maps.close()
            self._maps = None


def _one_more(new: np.ndarray, old: np.ndarray) -> bool:
    """Whether ``new`` is ``old`` with one more row: both views of one buffer from its start (rows a view shows
    never change: :func:`~lerobot_zarr.store.tables.appended`)."""
    return (new.base is not None and new.base is old.base and len(new) == len(old) + 1 and new.strides == old.strides
            and new.__array_interface__["data"][0] == old.__array_interface__["data"][0])
