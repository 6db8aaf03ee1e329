"""In-place edits of a writer's committed frames (:meth:`lerobot_zarr.writing.writer.WritableDataset.edit`): each
feature's frames memory-mapped writable on first use, every assignment checked before it is written, and the
edited features of the episode marked, so that the next commit (or the next writer, after a crash) recomputes the
episode's stats and content hashes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import SchemaMismatchError, StoreClosedError, UnknownFeatureError
from ..lerobot.format import DEFAULT_FEATURES
from ..store.state import stats_path
from .transaction import WriteTransaction, remove_path
from .values import check_assignable

__all__ = ["EditFrames", "EditMaps"]


class EditFrames:
    """One feature's frames of an episode being edited (what ``ds.edit(...)[feature]`` gives): reading gives
    read-only numpy views; assignments (``ep[k][10:20] = x``, ``ep[k] += 1``) are checked first (values of another
    shape raise :class:`~lerobot_zarr.errors.SchemaMismatchError`, values the feature's dtype cannot hold
    :class:`~lerobot_zarr.errors.ValueRangeError`) and then written in place. A scalar feature (LeRobot shape
    ``[1]``) also takes ``(T, 1)`` values, as :meth:`WritableDataset.add_episode` does."""

    def __init__(self, name: str, frames: np.ndarray, kind: str, episode: int):
        self.name, self._kind, self.episode = name, kind, episode
        self._frames: np.ndarray | None = frames  # None once the edit block has ended

    def end(self) -> None:
        """End the edit block: from now on any use raises :class:`StoreClosedError`."""
        self._frames = None

    def _live(self) -> np.ndarray:
        if self._frames is None:
            raise StoreClosedError(f"feature {self.name!r}, episode {self.episode}: its edit block has ended; edit in "
                                   f"a new `with ds.edit(...)` block", feature=self.name, episode=self.episode)
        return self._frames

    @property
    def shape(self) -> tuple[int, ...]:
        return self._live().shape

    @property
    def dtype(self) -> np.dtype:
        return self._live().dtype

    @property
    def ndim(self) -> int:
        return self._live().ndim

    def __len__(self) -> int:
        return len(self._live())

    def _read_only(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            value = value.view(np.ndarray)
            value.flags.writeable = False
        return value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._read_only(self._live())
        return out.astype(dtype) if dtype is not None else (out.copy() if copy else out)

    def __getitem__(self, key: Any) -> Any:
        return self._read_only(self._live()[key])

    def __setitem__(self, key: Any, value: Any) -> None:
        value = np.asarray(value.__array__() if isinstance(value, EditFrames) else value)
        check_assignable(self.name, value, self.dtype, self.episode)
        self._live()[key] = self._shaped(value, key)

    def _shaped(self, value: np.ndarray, key: Any) -> np.ndarray:
        """``value`` broadcast to the frames ``self[key]``; a scalar feature also takes values with a trailing axis
        of 1, as :meth:`WritableDataset.add_episode` does."""
        target = np.broadcast_to(np.empty((), np.bool_), self.shape)[key].shape
        given = value.shape
        if self.ndim == 1 and value.ndim == len(target) + 1 and given[-1:] == (1,):
            value = value[..., 0]
        try:
            return np.broadcast_to(value, target)
        except ValueError:
            raise SchemaMismatchError(f"feature {self.name!r}, episode {self.episode}: values of shape {given} cannot "
                                      f"be assigned to frames of shape {target}", feature=self.name,
                                      episode=self.episode) from None

    def _inplace(self, op: Any, other: Any) -> EditFrames:
        with np.errstate(all="ignore"):
            self[...] = op(np.asarray(self), self._shaped(np.asarray(other), ...))
        return self

    def __iadd__(self, other: Any) -> EditFrames:
        return self._inplace(np.add, other)

    def __isub__(self, other: Any) -> EditFrames:
        return self._inplace(np.subtract, other)

    def __imul__(self, other: Any) -> EditFrames:
        return self._inplace(np.multiply, other)

    def __itruediv__(self, other: Any) -> EditFrames:
        return self._inplace(np.true_divide, other)

    def __repr__(self) -> str:
        if self._frames is None:
            return f"EditFrames({self.name!r}, episode={self.episode}, edit block ended)"
        return f"EditFrames({self.name!r}, episode={self.episode}, shape={self.shape}, dtype={self.dtype})"


class EditMaps(Mapping):
    """What ``edit`` yields: each feature's frames mapped writable on first lookup (as :class:`EditFrames`),
    flushed at the end, and the episode's stats marked for recomputation for the features looked up. When the
    block ends, it and its frames refuse any use (``StoreClosedError``)."""

    def __init__(self, tx: WriteTransaction, episode: int, frames: slice, names: list[str]):
        table = tx.state.table
        self.tx, self.root, self.episode, self.frames, self.names = tx, tx.root, episode, frames, names
        self.key = (int(table.chunk[episode]), int(table.offset[episode]))
        self.length = int(table.length[episode])
        self.maps: dict[str, np.memmap] = {}
        self.views: dict[str, EditFrames] = {}
        self.ended = False

    def __getitem__(self, name: str) -> EditFrames:
        if self.ended:
            raise StoreClosedError(f"{self.root}: the edit block of episode {self.episode} has ended; edit in a "
                                   f"new `with ds.edit(...)` block", path=self.root, episode=self.episode,
                                   feature=str(name))
        if name not in self.views:
            if name not in self.names:
                own = "LeRobot's own columns change with set_task, delete_episodes, delete_frames; " \
                    if name in DEFAULT_FEATURES else ""
                raise UnknownFeatureError(f"{self.root}: no feature {name!r} to edit in episode {self.episode} "
                                          f"({own}editable here: {self.names})", path=self.root,
                                          episode=self.episode, feature=str(name))
            self.maps[name] = self.tx.rows_map(name, *self.key, self.length, writable=True)
            dirty = self.tx.dirty.setdefault(self.key, set())
            if name not in dirty:  # a writer after a crash recomputes the stats and hashes of what it lists
                self.tx.mark_editing(self.key, dirty | {name})
            if not dirty:  # until recomputed its stats are gone from disk
                remove_path(stats_path(self.root, *self.key))
            dirty.add(name)
            self.views[name] = EditFrames(name, self.maps[name][self.frames], self.tx.state.arrays[name].kind,
                                          self.episode)
        return self.views[name]

    def __setitem__(self, name: str, value: Any) -> None:
        """``ep[k] = values`` (or the result of ``ep[k] += x``): every selected frame of the feature."""
        target = self[name]
        if value is not target:
            target[...] = value

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def close(self) -> None:
        """End the block: flush the maps, and refuse any further use of it and its frames."""
        self.ended = True
        for m in self.maps.values():
            m.flush()
        for view in self.views.values():
            view.end()
        self.maps.clear()
        self.views.clear()
