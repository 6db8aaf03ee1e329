"""RL transitions ``(state, action, reward, next_state, done, truncated, complementary_info)`` as episodes of a
store: the storage of :class:`lerobot_zarr.integrations.rl.ReplayBuffer`, in numpy (torch is not needed here).

The store is a normal lerobot_zarr store (``open_dataset``, ``to_xarray``, ``push`` work on it) with LeRobot's RL
feature names: one frame per transition holding each state key (``observation.state``,
``observation.images.front``...), ``action``, ``next.reward``, ``next.done``, ``next.truncated`` and
``complementary_info.<key>``; an episode ends at ``done`` or ``truncated``. ``next_state`` is not stored twice: it
is the next frame's state, and after an episode's last frame the row that follows in its pack holds the episode's
final observation. That row is written with the episode (``add_episode(..., tail=1)``) but is not a frame of it
(the table does not list it, ``frame_live`` says it is not live, exports leave it out); it carries the episode's
``episode_index`` and ``frame_index = length``, which readers check: an episode another writer moved (compaction
after deletions) is seen without its final observation, and its last transition then gets ``next_state = state``
(LeRobot's rule for datasets), with a warning. ``.rl_buffer.json`` in the store folder records the buffer's
layout (the shape LeRobot's buffer gives back for each key, and how each is stored), written once, before the
first episode: see :mod:`lerobot_zarr.writing.transition_layout`, which also converts values both ways.

Values come back as LeRobot's ``ReplayBuffer`` gives them: float32 (``done``/``truncated`` bool here, float in
the torch adapter), cameras float32 CHW in [0, 1]. They are stored as LeRobot's buffer holds them (float32) except
where a smaller dtype holds the same values: bool and uint8 inputs stay bool and uint8, and camera frames
(``observation.image*`` keys, float CHW in [0, 1]) are stored as uint8 HWC images like LeRobot's datasets keep them
(exact for frames that came from uint8 pixels; other values are rounded to the nearest 1/255, with a warning,
unless ``image_storage="float32"``).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..errors import (
    ArgumentError,
    EmptyStoreError,
    ReadOnlyStoreError,
    SchemaMismatchError,
    SourceMismatchError,
    StoreClosedError,
    StoreExistsError,
    StoreLockedError,
    StoreNotFoundError,
    ValueRangeError,
    warn_user,
)
from ..lerobot.format import DEFAULT_FEATURES
from ..sampling.dataset import LeRobotZarrDataset
from ..store.log import LOG_FILE
from ..store.state import has_commit_point, read_state
from ..store.zarr_meta import ROOT
from ..utils.fileio import WriterLock
from ..utils.progress import progress_bar
from .transition_layout import (
    ACTION,
    COMPLEMENTARY,
    DEFAULT_FPS,
    DEFAULT_TASK,
    DONE,
    IMAGE_STORAGES,
    LAYOUT_FILE,
    OBS_IMAGE,
    REWARD,
    TRUNCATED,
    ImageStorage,
    Layout,
    Rounding,
    as_stored,
    host_array,
    hwc,
    lerobot_png_pixels,
    lerobot_published_images,
    lerobot_values,
    scalar,
    stored_value,
)
from .transition_store import StoreTransitions
from .writer import WritableDataset, create

__all__ = ["TransitionBuffer"]

log = logging.getLogger("lerobot_zarr")
_DTYPES = {"float32": np.dtype(np.float32), "uint8": np.dtype(np.uint8), "image": np.dtype(np.uint8),
           "bool": np.dtype(np.bool_)}  # pending values by how a slot stores them (cameras CHW until committed)

class _Pending:
    """Transitions of the episode in progress not yet in the store (stored representation, cameras CHW), one row
    per transition and, after the last one, a row holding its next_state (the state the next transition must
    start from to continue the episode, and the final observation row of the episode's commit): a transition that
    continues the episode finds its state already in place and writes its next_state once."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.slots = layout.slots()
        self.state_features = [slot.feature for slot in layout.state.values()]
        self.arrays: dict[str, np.ndarray] = {}
        self.n = 0
        self.frames_after: dict[str, np.ndarray] = {}  # cameras of the last next_state as given (float CHW)

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` rows (doubling): the pending transitions and the next_state after them."""
        size = len(self.arrays[self.slots[0].feature]) if self.arrays else 0
        if rows <= size:
            return
        size = max(16, 2 * rows)
        for slot in self.slots:
            grown = np.empty((size, *slot.shape), dtype=_DTYPES[slot.stored])
            old = self.arrays.get(slot.feature)
            if old is not None:
                grown[:self.n + 1] = old[:self.n + 1]
            self.arrays[slot.feature] = grown

    def append(self, row: list[tuple[str, Any]], after: list[tuple[str, np.ndarray]],
               frames: dict[str, np.ndarray]) -> None:
        """One more transition: ``(feature, value)`` pairs of its row (a state that continues the episode is in
        place already), of the row after it (its next_state), and camera frames of its next_state as given."""
        n = self.n
        self.reserve(n + 2)
        arrays = self.arrays
        for f, v in row:
            arrays[f][n] = v
        for f, v in after:
            arrays[f][n + 1] = v
        for f, v in frames.items():
            kept = self.frames_after.get(f)
            if kept is None or kept.shape != v.shape or kept.dtype != v.dtype:
                self.frames_after[f] = np.array(v)  # (a copy: the caller may reuse its tensor)
            else:
                np.copyto(kept, v)
        self.n = n + 1

    def frames(self) -> dict[str, np.ndarray]:
        """The pending frames then one tail row: the final observation (zeros elsewhere); cameras HWC. Views of
        the pending arrays (the tail written in their row n), valid until the next append."""
        out = {}
        state = set(self.state_features)
        for slot in self.slots:
            rows = self.arrays[slot.feature][:self.n + 1]
            if slot.feature not in state:
                rows[self.n] = 0
            out[slot.feature] = hwc(rows) if slot.stored == "image" else rows
        return out

    def clear(self) -> None:
        """The pending transitions were committed: the last next_state moves to row 0 (the episode may go on)."""
        for f in self.state_features:
            a = self.arrays[f]
            a[0] = a[self.n]
        self.n = 0

    def gather(self, j: np.ndarray) -> dict[str, np.ndarray]:
        out = {slot.feature: self.arrays[slot.feature][j] for slot in self.slots}
        for slot in self.layout.state.values():
            nxt = self.arrays[slot.feature][j + 1]
            out["next:" + slot.feature] = nxt
            if slot.stored == "image":
                out[slot.feature], out["next:" + slot.feature] = hwc(out[slot.feature]), hwc(nxt)
        return out


class _DatasetTransitions:
    """A dataset's transitions through its public sampler, with LeRobot's ``from_lerobot_dataset`` rules: the next
    frame's state while the episode goes on and ``next.done`` is false, else the frame's own state."""

    def __init__(self, ds: LeRobotZarrDataset, layout: Layout):
        self.ds, self.layout = ds, layout
        lengths = ds.meta.episode_length[ds.episodes]
        if int(lengths.sum()) != len(ds):
            raise ArgumentError(f"{ds.root}: the dataset selects frame ranges of episodes; transitions need whole "
                                f"episodes (select episodes by index)")
        left_out = [k for k in (slot.feature for slot in layout.slots()) if k in ds.left_out]
        if left_out:
            raise SchemaMismatchError(f"{ds.root}: feature {left_out[0]!r} is left out of this dataset's samples: "
                                      f"{ds.left_out[left_out[0]]}", feature=left_out[0])
        if ds.delta_timestamps:
            raise ArgumentError(f"{ds.root}: the dataset has delta_timestamps (windows); transitions take one frame "
                                f"each: open it without them")
        self.ends = np.cumsum(lengths)
        self.length = lengths

    def __len__(self) -> int:
        return len(self.ds)

    def frames_before(self, episodes: int) -> int:
        return int(self.ends[episodes - 1]) if episodes else 0

    def gather(self, index: np.ndarray) -> dict[str, np.ndarray]:
        batch = self.ds.get_batch(index)
        out = {slot.feature: batch[slot.feature] for slot in self.layout.slots()}
        e = np.searchsorted(self.ends, index, side="right")
        last = index == self.ends[e] - 1
        done = np.asarray(batch[DONE]).reshape(len(index)).astype(bool) if self.layout.done else last
        after = np.where(~last & ~done, index + 1, index)
        following = self.ds.get_batch(after)
        for slot in self.layout.state.values():
            out["next:" + slot.feature] = following[slot.feature]
        if not self.layout.done:
            out[DONE] = last
        return out

    def close(self) -> None:
        self.ds.close()


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two values of one slot hold the same bytes (stored values: -0.0 differs from 0.0, a NaN equals
    itself), in one pass without copies for large ones."""
    if a.size <= 64:
        return a.tobytes() == b.tobytes()
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


class TransitionBuffer:
    """A replay buffer of RL transitions on a store: the numpy core of
    :class:`lerobot_zarr.integrations.rl.ReplayBuffer`.

    ``mode="a"`` (default) opens the buffer at ``root`` for adding, creating it at the first transition if the
    folder holds none, reopening it with every committed transition otherwise (one writer per store: another
    gets ``StoreLockedError``). ``mode="r"`` reads a buffer another process adds to: it sees what was committed,
    picking up new commits on :meth:`refresh` and, every ``refresh_interval`` seconds, by itself. See
    :mod:`lerobot_zarr.writing.transitions` for the layout.

    A writer commits each episode when it ends (``done`` or ``truncated``) and, with :meth:`checkpoint`, the
    episode in progress too (it goes on in the same episode). ``len()`` counts every transition added and kept;
    the ring buffer (``capacity``) drops the oldest whole episodes first.
    """

    def __init__(self, root: str | os.PathLike, *, mode: Literal["a", "r"] = "a", capacity: int | None = None,
                 fps: float | None = None, task: str = DEFAULT_TASK, image_storage: ImageStorage | None = None,
                 durable: bool = False, refresh_interval: float | None = 1.0):
        if mode not in ("a", "r"):
            raise ArgumentError(f"mode must be 'a' (add, creating the buffer if needed) or 'r' (read a buffer another "
                                f"process adds to), got {mode!r}")
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer))
                                     or capacity < 1):
            raise ArgumentError(f"capacity must be a positive integer (transitions), got {capacity!r:.40}")
        if image_storage is not None and image_storage not in IMAGE_STORAGES:
            raise ArgumentError(f"image_storage must be one of {IMAGE_STORAGES}, got {image_storage!r}")
        if not isinstance(task, str) or not task:
            raise ArgumentError(f"task must be a non-empty string, got {task!r:.40}")
        if refresh_interval is not None and not refresh_interval >= 0:
            raise ArgumentError(f"refresh_interval must be >= 0 seconds or None, got {refresh_interval!r}")
        self._setup(Path(root).expanduser(), mode, capacity=capacity, task=task, durable=durable,
                    refresh_interval=refresh_interval)
        self._fps, self._image_storage = fps, image_storage
        if mode == "r":
            if not self.root.is_dir():
                raise StoreNotFoundError(f"{self.root}: no such folder; a reader opens a buffer that a writer "
                                         f"(mode='a') made or is about to make there", path=self.root)
            if not self._follow():
                warn_user(f"{self.root}: holds no replay buffer yet; this reader stays empty until a writer adds "
                          f"transitions there")
        elif has_commit_point(self.root):
            self._open_writer(self._writable(self.root))
        else:
            self._claim = WriterLock(self.root, blocking=False).__enter__()  # until the store exists
            if any(p.name != ".lock" for p in self.root.iterdir()):
                self._claim.__exit__(None, None, None)
                raise StoreExistsError(f"{self.root}: the folder holds files but no store; a replay buffer needs a "
                                       f"folder of its own", path=self.root)

    def _setup(self, root: Path, mode: str, *, capacity: int | None, task: str, durable: bool,
               refresh_interval: float | None) -> None:
        self.root, self.mode, self.capacity, self.task, self.durable = root, mode, capacity, task, bool(durable)
        self.refresh_interval = refresh_interval
        self._fps, self._image_storage = None, None
        self._lock = threading.RLock()  # the committed view, the pending transitions: what samplers read
        self._write_lock = threading.RLock()  # adds and commits, one at a time
        self._writer: WritableDataset | None = None
        self._claim: WriterLock | None = None
        self._store: StoreTransitions | _DatasetTransitions | None = None
        self._pending: _Pending | None = None
        self._open_episode = False  # the last committed episode is the one in progress (checkpointed)
        self._drop = 0  # oldest committed episodes the next commit evicts: not sampled any more
        self._rounding = Rounding()
        self._split_warned = self._extra_warned = False
        self._signature: tuple | None = None
        self._checked = 0.0
        self.layout: Layout | None = None

    @classmethod
    def of_dataset(cls, ds: LeRobotZarrDataset, state_keys: Sequence[str]) -> TransitionBuffer:
        """A read-only buffer of a LeRobot dataset's transitions, read in place (``mode="view"``), with LeRobot's
        ``from_lerobot_dataset`` rules (see :class:`Layout`)."""
        self = cls.__new__(cls)
        self._setup(Path(ds.root), "view", capacity=None, task=DEFAULT_TASK, durable=False, refresh_interval=None)
        self.layout = Layout.of_dataset(ds.meta.features, ds.array_specs, state_keys, str(ds.root))
        self._store = _DatasetTransitions(ds, self.layout)
        return self

    # opening ---------------------------------------------------------------------------------------------
    def _writable(self, root: Path) -> WritableDataset:
        try:
            return WritableDataset(root, durable=self.durable)
        except StoreLockedError as exc:
            raise StoreLockedError(f"{exc}; to sample from a buffer another process adds to, open it with "
                                   f"mode='r'", path=root) from None

    def _open_writer(self, writer: WritableDataset) -> None:
        layout = Layout.read(self.root)
        if layout is None and writer.meta.total_episodes:
            writer.close()
            raise SourceMismatchError(f"{self.root}: is a store but not a replay buffer (no {LAYOUT_FILE}); read a "
                                      f"dataset as transitions with ReplayBuffer.from_lerobot_dataset", path=self.root)
        fps = writer.meta.fps
        if self._fps is not None and not math.isclose(float(self._fps), fps):
            writer.close()
            raise ArgumentError(f"{self.root}: the buffer records at fps={fps:g}; fps={self._fps!r} differs")
        cameras = {s.stored for k, s in (layout.state.items() if layout else ()) if k.startswith(OBS_IMAGE)
                   and len(s.shape) == 3 and s.stored in ("image", "float32")}
        if self._image_storage is not None and cameras - {"image" if self._image_storage == "uint8" else "float32"}:
            writer.close()
            raise ArgumentError(f"{self.root}: the buffer stores its cameras as {sorted(cameras)} (image: uint8); "
                                f"image_storage={self._image_storage!r} differs")
        if self.capacity is not None and writer.capacity_frames != self.capacity:
            lengths = writer.meta.episode_length
            if lengths.size and self.capacity < lengths.max():
                writer.close()
                raise ArgumentError(f"{self.root}: capacity={self.capacity} is below the longest episode the buffer "
                                    f"holds ({int(lengths.max())} transitions): it could keep none of that episode; "
                                    f"open it with capacity >= {int(lengths.max())} (it was "
                                    f"{writer.capacity_frames}); nothing was dropped")
            if lengths.sum() > self.capacity:
                drop = int(np.searchsorted(np.cumsum(lengths), lengths.sum() - self.capacity))
                warn_user(f"{self.root}: reopened with capacity={self.capacity} (it was {writer.capacity_frames}), "
                          f"below the {int(lengths.sum())} transitions it holds: its oldest {drop + 1} episode(s) "
                          f"are dropped, as a ring buffer drops them")
            log.info("%s: capacity %s -> %s transitions", self.root, writer.capacity_frames, self.capacity)
            writer.set_capacity(self.capacity)
        writer.fold_log(log_commits=True)  # an episode's commit appends a record: its cost does not grow
        self._writer = writer
        self.capacity = writer.capacity_frames
        if layout is not None:
            self._use_layout(layout)

    def _use_layout(self, layout: Layout) -> None:
        self.layout = layout
        self._pending = _Pending(layout)
        self._store = StoreTransitions(self.root, layout)
        self._store.load(read_state(self.root))

    def _create(self, layout: Layout) -> None:
        """The store, at the first transition: made with the layout's features, then the layout file."""
        if self._claim is not None:
            self._claim.__exit__(None, None, None)
            self._claim = None
        writer = create(self.root, fps=DEFAULT_FPS if self._fps is None else self._fps, features=layout.features(),
                        capacity_frames=self.capacity, durable=self.durable, stats_on_demand=layout.cameras())
        layout.write(self.root)
        writer.fold_log(log_commits=True)
        self._writer = writer
        self._use_layout(layout)

    # reading --------------------------------------------------------------------------------------------
    def _follow(self) -> bool:
        """A reader: load the newest commit if there is one it has not seen. Returns whether it loaded one."""
        try:
            st = os.stat(self.root / ROOT)
        except FileNotFoundError:
            return False
        try:
            log = os.stat(self.root / LOG_FILE)
            signature = (st.st_ino, st.st_mtime_ns, st.st_size, log.st_ino, log.st_size)
        except FileNotFoundError:
            signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        if signature == self._signature:
            return False
        state = read_state(self.root)
        if self._store is None:
            layout = Layout.read(self.root)
            if layout is None:
                if state.table.length.size:
                    raise SourceMismatchError(f"{self.root}: is a store but not a replay buffer (no {LAYOUT_FILE}); "
                                              f"read a dataset as transitions with "
                                              f"ReplayBuffer.from_lerobot_dataset", path=self.root)
                return False  # created, layout not written yet
            self.layout = layout
            self._store = StoreTransitions(self.root, layout)
        changed = state.generation != self._store.generation
        self._store.load(state)
        self._signature = signature
        return changed

    def refresh(self) -> bool:
        """A reader: pick up what the writer committed since (new episodes, evictions). Returns whether anything
        changed. (A writer's view is always current.)"""
        with self._lock:
            if self.mode != "r":
                return False
            self._checked = time.monotonic()
            return self._follow()

    def _maybe_refresh(self) -> None:
        if self.mode == "r" and self.refresh_interval is not None:
            now = time.monotonic()
            if now - self._checked >= self.refresh_interval:
                self._checked = now
                self._follow()

    def __len__(self) -> int:
        with self._lock:
            self._maybe_refresh()
            return self._len()

    def _len(self) -> int:
        if self._store is None:
            return 0
        pending = self._pending.n if self._pending is not None and self.mode == "a" else 0
        return len(self._store) - self._store.frames_before(self._drop) + pending

    def gather(self, index: np.ndarray) -> dict[str, Any]:
        """Transitions ``index`` (0 .. len-1, oldest first) as LeRobot's buffer gives them (numpy): ``state`` and
        ``next_state`` dicts, ``action``, ``reward`` (float32), ``done``/``truncated`` (bool), and
        ``complementary_info`` (a dict, or None when the buffer has none)."""
        with self._lock:
            raw = self._gather(np.asarray(index, dtype=np.int64))
        return self._as_lerobot(raw, len(index))

    def sample(self, batch_size: int, draw: Callable[[int, int], np.ndarray] | None = None, *,
               stored: bool = False) -> dict[str, Any] | None:
        """``min(batch_size, len)`` transitions drawn with replacement (``draw(n, size)`` gives indices in
        [0, n); default numpy's generator), as :meth:`gather` gives them (``stored``: as the store holds them, by
        feature name, ``next:<feature>`` for next states; :func:`lerobot_values` converts); None when empty."""
        with self._lock:
            self._maybe_refresh()
            n = self._len()
            if n == 0:
                return None
            size = min(int(batch_size), n)
            index = np.asarray(draw(n, size) if draw is not None else np.random.default_rng().integers(0, n, size),
                               dtype=np.int64)
            raw = self._gather(index)
        return raw if stored else self._as_lerobot(raw, size)

    def _gather(self, index: np.ndarray) -> dict[str, np.ndarray]:
        if self._store is None:
            raise ArgumentError(f"{self.root}: the buffer holds no transition yet")
        n = self._len()
        if index.ndim != 1 or (index.size and (index.min() < 0 or index.max() >= n)):
            raise ArgumentError(f"transition indices must be a 1-D array in [0, {n}), got {index!r:.80}")
        offset = self._store.frames_before(self._drop)
        committed = len(self._store) - offset
        if self.mode != "a" or self._pending.n == 0 or index.max(initial=-1) < committed:
            return self._store.gather(index + offset)
        mine = index >= committed
        if mine.all():
            return self._pending.gather(index - committed)
        a, b = self._store.gather(index[~mine] + offset), self._pending.gather(index[mine] - committed)
        raw = {}
        for key, va in a.items():
            out = np.empty((len(index), *va.shape[1:]), dtype=va.dtype)
            out[~mine], out[mine] = va, b[key]
            raw[key] = out
        return raw

    def _as_lerobot(self, raw: dict[str, np.ndarray], n: int) -> dict[str, Any]:
        layout = self.layout
        return {
            "state": {k: lerobot_values(s, raw[s.feature]) for k, s in layout.state.items()},
            "action": lerobot_values(layout.action, raw[ACTION]),
            "reward": np.asarray(raw[REWARD], dtype=np.float32).reshape(n),
            "next_state": {k: lerobot_values(s, raw["next:" + s.feature]) for k, s in layout.state.items()},
            "done": np.asarray(raw[DONE]).reshape(n).astype(bool),
            "truncated": (np.asarray(raw[TRUNCATED]).reshape(n).astype(bool) if layout.truncated
                          else np.zeros(n, dtype=bool)),
            "complementary_info": {k: lerobot_values(s, raw[s.feature]) for k, s in layout.complementary.items()}
            or None,
        }

    # writing --------------------------------------------------------------------------------------------
    def _check_writer(self) -> None:
        if self.mode == "view":
            raise ReadOnlyStoreError(f"{self.root}: this buffer reads a dataset in place and cannot add; pass root= to "
                                     f"from_lerobot_dataset to copy the dataset into a buffer that can", path=self.root)
        if self.mode != "a":
            raise ReadOnlyStoreError(f"{self.root}: this buffer was opened with mode='r' (a reader); it cannot add",
                                     path=self.root)
        if self._writer is not None and self._writer.closed:
            raise StoreClosedError(f"{self.root}: this buffer was closed", path=self.root)

    def add(self, state: Mapping[str, Any], action: Any, reward: Any, next_state: Mapping[str, Any], done: Any,
            truncated: Any, complementary_info: Mapping[str, Any] | None = None) -> None:
        """Add one transition (LeRobot's ``ReplayBuffer.add``): values are arrays or tensors with or without a
        leading batch dimension of 1. The episode is committed when ``done`` or ``truncated``."""
        with self._write_lock:
            self._check_writer()
            if self.layout is None:
                self._start(Layout.of_transition(state, action, complementary_info, self._image_storage or "uint8"))
            row, after, frames, continues, ends = self._transition(state, action, reward, next_state, done,
                                                                   truncated, complementary_info)
            pending = self._pending
            if not continues:
                self._end_episode_here()
            held = pending.n + 1 + (int(self._store.length[-1]) if self._open_episode else 0)
            if self.capacity is not None and held > self.capacity:
                raise ArgumentError(f"{self.root}: the episode in progress would reach {held} transitions without "
                                    f"done/truncated; a buffer of capacity {self.capacity} evicts whole episodes "
                                    f"and cannot hold it (make capacity several times the longest episode)")
            with self._lock:
                pending.append(row, after, frames)
                self._evict_for_pending()
            if ends:
                self._commit(end=True)

    def _start(self, layout: Layout) -> None:
        """The first transition: make the store (or take an empty one whose layout file a crash lost, if it was
        made for the same values)."""
        if self._writer is None:
            self._create(layout)
            return
        held = {k: v for k, v in self._writer.features.items() if k not in DEFAULT_FEATURES}
        if layout.features() != held:
            raise SchemaMismatchError(f"{self.root}: holds an empty buffer made for other values (features "
                                      f"{sorted(held)}); use another folder")
        layout.write(self.root)
        self._use_layout(layout)

    def _transition(self, state, action, reward, next_state, done, truncated, complementary_info
                    ) -> tuple[list, list, dict[str, np.ndarray], bool, bool]:
        """The transition's values as stored, checked (nothing is written): ``(feature, value)`` pairs for its row
        and for the row after it (its next_state), camera frames of its next_state as given (kept to tell whether
        the next transition's state repeats them), whether it continues the episode in progress (its state is the
        last next_state; True when none is in progress) and whether it ends its episode. A state that continues
        the episode is in place already (the last next_state's row); values already in their stored dtype and
        shape are taken as views, copied once into the pending rows: the per-transition cost stays near one copy
        of each value."""
        layout, pending = self.layout, self._pending
        for what, given in (("state", state), ("next_state", next_state)):
            if not (type(given) is dict or isinstance(given, Mapping)) or given.keys() != layout.state.keys():
                keys = sorted(given) if isinstance(given, Mapping) else type(given).__name__
                raise SchemaMismatchError(f"{self.root}: {what} has keys {keys}, this buffer holds "
                                          f"{sorted(layout.state)}")
        previous = pending.arrays if pending.n or self._open_episode else None
        n = pending.n
        news, row, after, frames, continues = [], [], [], {}, True
        for k, s in layout.state.items():
            f = s.feature
            if s.stored == "image":  # the frame as given, kept to tell whether the next state repeats it
                frame = host_array(state[k], f"state[{k!r}]")
                last = pending.frames_after.get(f) if previous is not None else None
                if last is None or frame.shape != last.shape or not np.array_equal(frame, last):
                    v = stored_value(s, frame, f"state[{k!r}]", self._rounding)
                    news.append((f, v))
                    continues = continues and (previous is None or _same_bytes(v, previous[f][n]))
                frame = host_array(next_state[k], f"next_state[{k!r}]")
                after.append((f, stored_value(s, frame, f"next_state[{k!r}]", self._rounding)))
                frames[f] = frame
                continue
            v = as_stored(s, state[k])
            if v is None:
                v = stored_value(s, state[k], f"state[{k!r}]", self._rounding)
            news.append((f, v))
            if previous is not None and continues:
                continues = _same_bytes(v, previous[f][n])
            v = as_stored(s, next_state[k])
            after.append((f, stored_value(s, next_state[k], f"next_state[{k!r}]", self._rounding) if v is None else v))
        if not continues or previous is None:  # the state goes in the transition's row (else it is there)
            row = news
        v = as_stored(layout.action, action)
        row.append((ACTION, stored_value(layout.action, action, "action") if v is None else v))
        row.append((REWARD, reward if type(reward) is float else scalar(reward, "reward").astype(np.float32)))
        flags = []
        for name, flag in (("done", done), ("truncated", truncated)):
            if type(flag) is not bool:
                v = scalar(flag, name)
                if v.item() not in (0, 1):
                    raise ValueRangeError(f"{name}: a bool (or 0/1) per transition, got {flag!r:.60}", feature=name)
                flag = bool(v)
            row.append((f"next.{name}", flag))
            flags.append(flag)
        info = complementary_info if type(complementary_info) is dict or isinstance(complementary_info, Mapping) \
            else dict(complementary_info or {})
        if info.keys() != layout.complementary.keys():
            missing = [k for k in layout.complementary if k not in info]
            if missing:
                raise SchemaMismatchError(f"{self.root}: complementary_info lacks {missing} (this buffer holds "
                                          f"{sorted(layout.complementary)}; LeRobot would keep stale values there)",
                                          feature=COMPLEMENTARY + missing[0])
            extra = sorted(set(info) - set(layout.complementary))
            if not self._extra_warned:
                self._extra_warned = True
                warn_user(f"{self.root}: complementary_info keys {extra} are not in this buffer (its keys come from "
                          f"the first transition: {sorted(layout.complementary)}); they are dropped, as LeRobot does")
        for key, slot in layout.complementary.items():
            v = info[key]
            if not (type(v) is float and slot.shape == () and slot.stored == "float32"):
                v = stored_value(slot, v, f"complementary_info[{key!r}]")
            row.append((slot.feature, v))
        return row, after, frames, continues, flags[0] or flags[1]

    def _end_episode_here(self) -> None:
        """The new transition does not start from the last next_state: the episode in progress ends where it is
        (its final observation kept) and a new one starts."""
        if not self._split_warned:
            self._split_warned = True
            warn_user(f"{self.root}: a transition's state differs from the previous transition's next_state while "
                      f"neither done nor truncated was set: the episode is stored as ending there (its next_state "
                      f"kept) and a new one starts (warned once)")
        if self._pending.n:
            self._commit(end=True)
        self._open_episode = False

    def _evict_for_pending(self) -> None:
        """Oldest episodes the next commit will evict, so that len() <= capacity (they are not sampled now)."""
        if self.capacity is None:
            return
        lengths = self._store.length
        held, drop = len(self._store), 0  # (its committed transitions: a cumulative sum kept)
        while held + self._pending.n > self.capacity:
            held -= int(lengths[drop])
            drop += 1
        self._drop = drop

    def _commit(self, *, end: bool) -> None:
        """Commit the pending transitions with the final observation row after them: a new episode, or more of
        the one in progress (checkpointed before). The caller holds the write lock; samplers go on meanwhile
        (with what was committed before, and the pending transitions) until the new commit is loaded."""
        pending = self._pending
        if not pending.n:
            self._open_episode = not end
            return
        frames = pending.frames()
        before = self._writer.committed_state.generation
        try:
            if self._open_episode:
                self._writer.extend_episode(frames, task=self.task, tail=1)
            else:
                self._writer.add_episode(frames, task=self.task, tail=1)
        finally:  # committed, also when it raised after its commit point: the pending transitions are the store's
            state = self._writer.committed_state  # (this writer's commit: not read back from disk)
            if state.generation != before:
                with self._lock:
                    self._store.load(state, own=True)
                    pending.clear()
                    self._drop = 0
                self._open_episode = not end

    def checkpoint(self, *, durable: bool | None = None) -> None:
        """Commit the episode in progress as it is (it goes on with the next transitions) and fold the commit log
        into the store's root: after this, a crash loses nothing added before. ``durable`` (default: the buffer's)
        also flushes it to disk (power loss)."""
        with self._write_lock:
            self._check_writer()
            writer = self._writer
            if writer is None:
                return
            keep, writer.durable = writer.durable, self.durable if durable is None else bool(durable)
            try:
                if self._pending is not None and self._pending.n:
                    self._commit(end=False)
                writer.fold_log()
            finally:
                writer.durable = keep

    def copy_from(self, view: TransitionBuffer, *, progress: bool = True) -> None:
        """Add every transition of ``view`` (a dataset read as transitions), episode by episode, each value with
        a batch dimension of 1 as LeRobot's ``from_lerobot_dataset`` adds them; the source's episodes stay
        episodes."""
        ends = view._store.ends
        with progress_bar(int(ends[-1]) if len(ends) else 0, f"transitions into {self.root.name}", progress,
                          unit="transition") as bar:
            for e, stop in enumerate(ends.tolist()):
                start = stop - int(view._store.length[e])
                b = view.gather(np.arange(start, stop))
                info = b["complementary_info"] or {}
                for i in range(stop - start):
                    one = slice(i, i + 1)
                    self.add({k: v[one] for k, v in b["state"].items()}, b["action"][one], float(b["reward"][i]),
                             {k: v[one] for k, v in b["next_state"].items()}, bool(b["done"][i]),
                             bool(b["truncated"][i]), {k: v[one] for k, v in info.items()} or None)
                with self._write_lock:
                    self._commit(end=True)
                bar.update(stop - start)

    def export(self, path: str | os.PathLike, *, fps: float | None = None, task: str | None = None,
               lerobot_images: bool = False) -> Path:
        """Write the committed transitions (a writer commits the episode in progress first) as a LeRobot v3.0
        folder at ``path``; ``fps`` / ``task`` other than the buffer's are written through a copy with them.

        ``lerobot_images``: state values that LeRobot's ``ReplayBuffer.to_lerobot_dataset`` publishes as images
        (3-D, 3 channels first) but this buffer keeps as float32 (``image_storage="float32"``) are written as its
        images are: declared ``{"dtype": "image", "shape": [3, H, W]}``, pixels ``(v * 255)`` truncated to uint8
        as its PNG writer converts them; values out of [0, 1] are refused (LeRobot's writer fails on them too)."""
        if self.mode == "a":
            self.checkpoint()
        ds = self.dataset()
        path = Path(path)
        tasks = list(ds.meta.tasks)
        images = lerobot_published_images(self.layout) if lerobot_images else set()
        if not images and (fps is None or math.isclose(float(fps), ds.meta.fps)) and (task is None or tasks == [task]):
            return ds.to_lerobot(path)
        log.info("%s: exporting through a copy at fps=%s, task=%r, images=%s", self.root, fps, task, sorted(images))
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{path.name}.copy-", dir=path.parent) as tmp:
            features = {k: v for k, v in ds.meta.features.items() if k not in DEFAULT_FEATURES}
            features.update({k: {"dtype": "image", "shape": list(features[k]["shape"])} for k in images})
            with create(Path(tmp) / "store", fps=ds.meta.fps if fps is None else fps, features=features,
                        durable=False) as copy:
                for e in range(ds.meta.total_episodes):
                    frames = ds.episode(e)
                    names = task if task is not None else [tasks[i] for i in np.asarray(frames["task_index"])]
                    copy.add_episode({k: lerobot_png_pixels(k, e, frames[k]) if k in images else frames[k]
                                      for k in features}, task=names)
                return copy.to_lerobot(path)

    def dataset(self) -> LeRobotZarrDataset:
        """The store as a dataset (what was committed): ``to_xarray()``, ``to_lerobot()``, ``push()``, samples."""
        if not has_commit_point(self.root):
            raise EmptyStoreError(f"{self.root}: no transition was added yet", path=self.root)
        return LeRobotZarrDataset(self.root)

    @property
    def writer(self) -> WritableDataset | None:
        """The writable dataset of a writer's store (None before the first transition, and for readers)."""
        return self._writer

    def close(self) -> None:
        """Commit the episode in progress (:meth:`checkpoint`), release the writer lock and the maps."""
        with self._write_lock, self._lock:
            try:
                if self.mode == "a" and self._writer is not None and not self._writer.closed:
                    self.checkpoint()
            finally:
                if self._writer is not None:
                    self._writer.close()
                if self._claim is not None:
                    self._claim.__exit__(None, None, None)
                    self._claim = None
                if self._store is not None:
                    self._store.close()
