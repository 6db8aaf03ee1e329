"""LeRobot's RL replay buffer on a store (``pip install lerobot_zarr[torch]``): crash-safe, shared between
processes, publishable.

:class:`ReplayBuffer` takes ``lerobot.rl.buffer.ReplayBuffer``'s arguments (plus ``root``) and methods (``add``,
``sample``, ``get_iterator``, ``len``, ``from_lerobot_dataset``, ``to_lerobot_dataset``) and gives the same
``BatchTransition`` batches (keys, shapes, float32 dtypes, devices, DrQ augmentation of ``observation.image*``
keys), so LeRobot's ``OnlineOfflineMixer`` and learner take it. The transitions live in a lerobot_zarr store at
``root`` (:mod:`lerobot_zarr.writing.transitions` describes the layout): each finished episode is one atomic commit,
:meth:`ReplayBuffer.checkpoint` commits the episode in progress too, a buffer reopens with every committed
transition, another process samples it with ``mode="r"``, and :meth:`ReplayBuffer.push` publishes it as a
LeRobot dataset. See ``docs/rl.md``.
"""

from __future__ import annotations

import atexit
import functools
import os
import queue
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import numpy as np

from ..errors import ArgumentError, EmptyBufferError, EmptyStoreError, import_optional, warn_user

torch = import_optional("torch", "lerobot_zarr.integrations.rl (LeRobot's replay buffer on a store)")
import torch.nn.functional as F  # noqa: E402, N812

from ..store.state import has_commit_point  # noqa: E402
from ..writing.transition_layout import (  # noqa: E402
    ACTION,
    DEFAULT_TASK,
    DONE,
    OBS_IMAGE,
    REWARD,
    TRUNCATED,
    ImageStorage,
    Slot,
    lerobot_values,
)
from ..writing.transitions import TransitionBuffer  # noqa: E402
from .lerobot_meta import lerobot_home  # noqa: E402

__all__ = ["ReplayBuffer", "BatchTransition", "random_shift", "random_crop_vectorized"]


class BatchTransition(TypedDict):
    """A batch of transitions, as LeRobot's ``lerobot.rl.buffer.BatchTransition``."""

    state: dict[str, torch.Tensor]
    action: torch.Tensor
    reward: torch.Tensor
    next_state: dict[str, torch.Tensor]
    done: torch.Tensor
    truncated: torch.Tensor
    complementary_info: NotRequired[dict[str, torch.Tensor] | None]


def random_crop_vectorized(images: torch.Tensor, output_size: tuple[int, int]) -> torch.Tensor:
    """A random ``output_size`` crop of each image of a (B, C, H, W) batch, in one gather."""
    b, _, h, w = images.shape
    crop_h, crop_w = output_size
    if crop_h > h or crop_w > w:
        raise ValueError(f"crop size ({crop_h}, {crop_w}) is bigger than the images ({h}, {w})")
    top = torch.randint(0, h - crop_h + 1, (b,), device=images.device)
    left = torch.randint(0, w - crop_w + 1, (b,), device=images.device)
    rows = (torch.arange(crop_h, device=images.device)[None] + top[:, None])[:, :, None].expand(-1, -1, crop_w)
    cols = (torch.arange(crop_w, device=images.device)[None] + left[:, None])[:, None, :].expand(-1, crop_h, -1)
    picked = images.permute(0, 2, 3, 1)[torch.arange(b, device=images.device)[:, None, None], rows, cols]
    return picked.permute(0, 3, 1, 2)


def random_shift(images: torch.Tensor, pad: int = 4) -> torch.Tensor:
    """DrQ's augmentation: pad each (B, C, H, W) image by repeating its edges, then crop it back at random."""
    h, w = images.shape[-2:]
    return random_crop_vectorized(F.pad(images, (pad, pad, pad, pad), mode="replicate"), (h, w))


def _default_augmentation() -> Callable[[torch.Tensor], torch.Tensor]:
    """DrQ's ``random_shift`` with ``pad=4``, LeRobot's default augmentation. LeRobot wraps it in ``torch.compile``;
    here it runs eagerly: the same draws, without the compile's first-call stall (about a minute on a 2-core CPU,
    for no speed-up measured there). Pass ``torch.compile(functools.partial(random_shift, pad=4))`` to compile."""
    return functools.partial(random_shift, pad=4)


class ReplayBuffer:
    """``lerobot.rl.buffer.ReplayBuffer`` on a lerobot_zarr store at ``root``.

    LeRobot's arguments keep their meaning: ``capacity`` (transitions; the oldest whole episodes are dropped
    first), ``device`` (where batches go), ``state_keys`` (the keys ``from_lerobot_dataset`` reads; ``add`` stores
    every key of ``state``, as LeRobot does), ``image_augmentation_function`` and ``use_drq``. Storage is the store
    on disk (the page cache serves samples), so ``storage_device`` and ``optimize_memory`` change nothing
    (``next_state`` is never stored twice, and always comes back exact).

    Our own, keyword-only:
        root: the buffer's folder: created at the first transition, reopened with every committed transition
            if it holds one. None: a temporary folder, deleted when the buffer is (no persistence).
        mode: ``"a"`` to add (one writer per buffer), ``"r"`` to sample a buffer another process adds to.
        fps: the environment's frame rate, recorded in the store (default 30 for a new buffer; a buffer keeps its
            own). ``to_lerobot_dataset`` / ``push`` publish it.
        task: the task string of its episodes (LeRobot's ``to_lerobot_dataset`` names them "from_replay_buffer").
        image_storage: how camera keys (``observation.image*``, float CHW) are stored: ``"float32"`` (the
            default of a new buffer: exact for any values, as LeRobot's buffer keeps them) or ``"uint8"`` (images
            as LeRobot's datasets keep them, a quarter of the disk: exact for frames made from uint8 pixels, others
            rounded to 1/255 with a warning, values out of [0, 1] refused). A buffer reopened keeps its own.
        durable: flush every commit to disk (survives power loss; a killed process never loses a commit either
            way).
        refresh_interval: a reader (``mode="r"``) picks up new commits by itself at most this often, in seconds
            (None: only on :meth:`refresh`).
    """

    def __init__(self, capacity: int, device: str = "cuda:0", state_keys: Sequence[str] | None = None,
                 image_augmentation_function: Callable | None = None, use_drq: bool = True,
                 storage_device: str = "cpu", optimize_memory: bool = False, *,
                 root: str | os.PathLike | None = None, mode: Literal["a", "r"] = "a", fps: float | None = None,
                 task: str = DEFAULT_TASK, image_storage: ImageStorage | None = None, durable: bool = False,
                 refresh_interval: float | None = 1.0):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise ArgumentError(f"Capacity must be greater than 0. (capacity: an integer, got {capacity!r:.40})")
        self._configure(device, state_keys, image_augmentation_function, use_drq, storage_device, optimize_memory)
        if root is None:
            if mode != "a":
                raise ArgumentError("mode='r' reads the buffer of another process: pass its root=")
            root = tempfile.mkdtemp(prefix="lerobot_zarr-replay-")
            self._temporary = weakref.finalize(self, shutil.rmtree, root, True)
            root = Path(root) / "buffer"
        if image_storage is None and mode == "a" and not has_commit_point(Path(root).expanduser()):
            image_storage = "float32"  # a new buffer keeps images exactly, as LeRobot's does
        self._buffer = TransitionBuffer(root, mode=mode, capacity=capacity if mode == "a" else None, fps=fps,
                                        task=task, image_storage=image_storage, durable=durable,
                                        refresh_interval=refresh_interval)
        self.capacity = int(capacity) if self._buffer.capacity is None else int(self._buffer.capacity)

    @classmethod
    def _over(cls, buffer: TransitionBuffer, *, device: str, state_keys: Sequence[str] | None,
              image_augmentation_function: Callable | None, use_drq: bool, storage_device: str,
              optimize_memory: bool, capacity: int) -> ReplayBuffer:
        self = cls.__new__(cls)
        self._configure(device, state_keys, image_augmentation_function, use_drq, storage_device, optimize_memory)
        self._buffer = buffer
        self.capacity = int(capacity)
        return self

    def _configure(self, device: str, state_keys: Sequence[str] | None, image_augmentation_function: Callable | None,
                   use_drq: bool, storage_device: str, optimize_memory: bool) -> None:
        """LeRobot's attributes."""
        self.device, self.storage_device, self.optimize_memory = device, storage_device, optimize_memory
        self.state_keys = list(state_keys) if state_keys is not None else []
        self.use_drq = use_drq
        self.image_augmentation_function = (image_augmentation_function if image_augmentation_function is not None
                                            else _default_augmentation())
        if torch.device(storage_device).type != "cpu":
            warn_user(f"storage_device={storage_device!r}: transitions live in the store on disk (the page cache "
                      f"serves samples); batches go to device={device!r}")
        self._temporary = None
        self._held: tuple | None = None  # optimize_memory: a transition added with next_state=None, until the next

    # LeRobot's interface ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._buffer) + (self._held is not None)

    @property
    def size(self) -> int:
        """Transitions held (LeRobot's attribute)."""
        return len(self)

    @property
    def initialized(self) -> bool:
        """Whether the buffer knows its transitions' layout (after the first ``add``, or when reopened)."""
        return self._buffer.layout is not None

    def add(self, state: dict[str, torch.Tensor], action: torch.Tensor, reward: float,
            next_state: dict[str, torch.Tensor] | None, done: bool, truncated: bool,
            complementary_info: dict[str, torch.Tensor | float | int] | None = None) -> None:
        """Add one transition (LeRobot's signature: tensors with a leading batch dimension of 1, or without).
        Its episode is committed to the store when ``done`` or ``truncated``.

        With ``optimize_memory=True``, ``next_state`` may be None, as LeRobot's buffer takes it: the transition's
        next state is then the ``state`` of the next ``add``, and the transition is stored (and sampled) from that
        add on, as LeRobot samples the latest transition of such a buffer only once another follows. A done or
        truncated one waiting so is stored with its own state as next state (LeRobot's rule at an episode's end)
        when the buffer is checkpointed, closed or exported."""
        if next_state is None and not self.optimize_memory:
            raise ArgumentError("next_state=None: only a buffer made with optimize_memory=True takes it (each "
                                "transition's next state is then the next add's state)")
        if self._held is not None:
            held, self._held = self._held, None
            self._buffer.add(held[0], held[1], held[2], state, *held[3:])
        if next_state is None:
            self._held = (state, action, reward, done, truncated, complementary_info)
            return
        self._buffer.add(state, action, reward, next_state, done, truncated, complementary_info)

    def _store_held(self, *, closing: bool = False) -> None:
        """Store a transition waiting for its next state when its episode ended (its own state is its next)."""
        if self._held is None:
            return
        state, action, reward, done, truncated, info = self._held
        if bool(done) or bool(truncated):
            self._held = None
            self._buffer.add(state, action, reward, state, done, truncated, info)
        elif closing:
            self._held = None
            warn_user(f"{self.root}: the last transition, added with next_state=None, is not stored: no add() "
                      f"followed to give its next state")

    def sample(self, batch_size: int) -> BatchTransition:
        """``batch_size`` transitions drawn uniformly with replacement (``torch.randint``, as LeRobot), as float32
        tensors on ``device``; cameras DrQ-augmented when ``use_drq``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ArgumentError(f"batch_size must be a positive integer, got {batch_size!r:.40}")
        raw = self._buffer.sample(int(batch_size), _torch_indices, stored=True)
        if raw is None:
            raise EmptyBufferError(f"{self._buffer.root}: Cannot sample from an empty buffer. Add transitions first.",
                                   path=self._buffer.root)
        layout, device = self._buffer.layout, self.device
        n = len(raw[REWARD])
        images = [k for k in layout.state if k.startswith(OBS_IMAGE)] if self.use_drq else []
        shapes = {layout.state[k].shape for k in images}
        both = None
        if len(shapes) == 1:  # state and next_state of every camera into one batch, for one augmentation call
            both = np.empty((2 * len(images) * n, *shapes.pop()), dtype=np.float32)
            for i, k in enumerate(images):
                slot = layout.state[k]
                lerobot_values(slot, raw[slot.feature], both[2 * i * n:(2 * i + 1) * n])
                lerobot_values(slot, raw["next:" + slot.feature], both[(2 * i + 1) * n:(2 * i + 2) * n])
        state = {k: _values(s, raw[s.feature]).to(device) for k, s in layout.state.items()
                 if both is None or k not in images}
        next_state = {k: _values(s, raw["next:" + s.feature]).to(device) for k, s in layout.state.items()
                      if both is None or k not in images}
        if images and both is None:  # cameras of different shapes: LeRobot's torch.cat refuses them too
            both = torch.cat([t for k in images for t in (state[k], next_state[k])])
        if images:
            augmented = self.image_augmentation_function(torch.as_tensor(both).to(device))
            for i, k in enumerate(images):
                state[k] = augmented[2 * i * n:(2 * i + 1) * n]
                next_state[k] = augmented[(2 * i + 1) * n:(2 * i + 2) * n]
        info = {k: _values(s, raw[s.feature]).to(device) for k, s in layout.complementary.items()}
        return BatchTransition(
            state={k: state[k] for k in layout.state}, action=_values(layout.action, raw[ACTION]).to(device),
            reward=torch.from_numpy(np.asarray(raw[REWARD], dtype=np.float32).reshape(n)).to(device),
            next_state={k: next_state[k] for k in layout.state},
            done=torch.from_numpy(np.asarray(raw[DONE]).reshape(n)).to(device).float(),
            truncated=(torch.from_numpy(np.asarray(raw[TRUNCATED]).reshape(n)).to(device).float() if layout.truncated
                       else torch.zeros(n, device=device)),
            complementary_info=info or None)

    def get_iterator(self, batch_size: int, async_prefetch: bool = True, queue_size: int = 2
                     ) -> Iterator[BatchTransition]:
        """An endless iterator of ``sample(batch_size)`` batches; ``async_prefetch`` samples ``queue_size`` batches
        ahead in a thread. An error while sampling is raised here (not swallowed)."""
        if not async_prefetch:
            while True:
                yield self.sample(batch_size)
        ready: queue.Queue = queue.Queue(maxsize=max(1, int(queue_size)))
        stop = threading.Event()

        def produce() -> None:
            while not stop.is_set():
                try:
                    item: Any = self.sample(batch_size)
                except BaseException as exc:  # noqa: BLE001  (handed to the consumer, which raises it)
                    item = _Failure(exc)
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if isinstance(item, _Failure):
                    return

        thread = threading.Thread(target=produce, name="lerobot_zarr-replay-prefetch", daemon=True)
        thread.start()
        _prefetchers[thread] = stop
        try:
            while True:
                item = ready.get()
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            stop.set()
            thread.join(timeout=2.0)
            _prefetchers.pop(thread, None)

    @classmethod
    def from_lerobot_dataset(cls, lerobot_dataset: Any, device: str = "cuda:0", state_keys: Sequence[str] | None = None,
                             capacity: int | None = None, image_augmentation_function: Callable | None = None,
                             use_drq: bool = True, storage_device: str = "cpu", optimize_memory: bool = False, *,
                             root: str | os.PathLike | None = None, episodes: Sequence[int] | None = None,
                             revision: str | None = None, token: str | bool | None = None,
                             progress: bool = True) -> ReplayBuffer:
        """A buffer of a LeRobot dataset's transitions, with LeRobot's rules (``next.reward``; ``next.done``, else
        each episode's end; ``next_state`` the next frame's state while the episode goes on and ``done`` is
        false, else the frame's own; ``complementary_info.*`` features; ``next.truncated`` where the dataset has
        it, else false).

        ``lerobot_dataset``: LeRobot's ``LeRobotDataset`` (its local folder is read), a lerobot_zarr dataset, our
        torch ``LeRobotDataset``, or what ``open_dataset`` takes: a Hub repo id (only ``episodes`` are downloaded,
        by range reads), a LeRobot folder or a store. Without ``root`` the buffer reads the dataset in place (no
        copy, read-only: ``add`` raises); with ``root`` the transitions are copied into a new buffer there, which
        then takes ``add`` like LeRobot's (its offline buffer gets intervention transitions)."""
        if state_keys is None:
            raise ArgumentError("state_keys must be given to read a dataset as transitions (as LeRobot requires)")
        ds = _as_dataset(lerobot_dataset, episodes=episodes, revision=revision, token=token)
        view = TransitionBuffer.of_dataset(ds, state_keys)
        n = len(view)
        if capacity is None:
            capacity = max(n, 1)
        if capacity < n:
            raise ArgumentError(f"capacity={capacity} is smaller than the dataset's {n} transitions (LeRobot's rule: "
                                f"the buffer must hold the whole dataset)")
        options = dict(device=device, state_keys=state_keys, image_augmentation_function=image_augmentation_function,
                       use_drq=use_drq, storage_device=storage_device, optimize_memory=optimize_memory)
        if root is None:
            return cls._over(view, capacity=capacity, **options)
        buf = cls(capacity, **options, root=root, fps=ds.meta.fps)
        buf._buffer.copy_from(view, progress=progress)
        view.close()
        return buf

    def to_lerobot_dataset(self, repo_id: str, fps: float = 1, root: str | os.PathLike | None = None,
                           task_name: str | None = None) -> Any:
        """Write the buffer (the episode in progress committed first) as a LeRobot v3.0 dataset folder at ``root``
        (default ``$HF_LEROBOT_HOME/<repo_id>``, as LeRobot), and return it as LeRobot's ``LeRobotDataset`` when
        lerobot is installed, else as lerobot_zarr's torch ``LeRobotDataset``. ``fps`` defaults to 1, as LeRobot's
        (pass the buffer's, ``buffer.dataset.meta.fps``, to keep it); ``task_name`` to the buffer's task.

        Images are published as LeRobot's buffer publishes them: a 3-D state value with 3 channels first is an
        ``image`` feature of shape ``[3, H, W]``, its float values turned into PNG pixels as LeRobot's writer
        turns them (``(v * 255)`` truncated to uint8; values out of [0, 1] are refused). A buffer storing its
        cameras as uint8 publishes those pixels."""
        self._store_held()
        if len(self._buffer) == 0:  # LeRobot's words, its ValueError
            raise EmptyStoreError(f"{self.root}: The replay buffer is empty. Cannot convert to a dataset.",
                                  path=self.root)
        path = Path(root) if root is not None else lerobot_home() / repo_id
        self._buffer.export(path, fps=fps, task=task_name, lerobot_images=True)
        try:
            from lerobot.datasets.lerobot_dataset import LeRobotDataset
        except ImportError:
            from .lerobot_dataset import LeRobotDataset
        return LeRobotDataset(repo_id, root=path)

    # lerobot_zarr's own ----------------------------------------------------------------------------------
    def push(self, repo_id: str, *, revision: str | None = None, private: bool = False,
             token: str | bool | None = None, commit_message: str | None = None, videos: bool | None = None,
             progress: bool = True) -> str | None:
        """Publish the buffer to the Hub as a LeRobot v3.0 dataset (the episode in progress committed first; one
        commit; see ``LeRobotZarrDataset.push``). Returns the commit sha, or None if nothing changed."""
        if self._buffer.mode == "a":
            self.checkpoint()
        return self.dataset.push(repo_id, revision=revision, private=private, token=token,
                                 commit_message=commit_message, videos=videos, progress=progress)

    def checkpoint(self, *, durable: bool | None = None) -> None:
        """Commit the episode in progress (it goes on with the next ``add``): after this a crash loses nothing
        added before. Costs the new transitions' writes and one commit, not the buffer's size."""
        self._store_held()
        self._buffer.checkpoint(durable=durable)

    def refresh(self) -> bool:
        """A reader (``mode="r"``): pick up the writer's new commits now. Returns whether anything changed."""
        return self._buffer.refresh()

    @property
    def root(self) -> Path:
        """The buffer's store folder."""
        return self._buffer.root

    @property
    def dataset(self) -> Any:
        """The committed transitions as a dataset (``to_xarray()``, ``to_lerobot()``, ``push()``, samples)."""
        return self._buffer.dataset()

    def close(self) -> None:
        """Commit the episode in progress, release the store (and delete a temporary one)."""
        if self._buffer.mode == "a":
            self._store_held(closing=True)
        self._buffer.close()
        if self._temporary is not None:
            self._temporary()

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ReplayBuffer(root={str(self.root)!r}, transitions={len(self)}, capacity={self.capacity})"

    def __getstate__(self) -> Any:
        raise TypeError(f"a ReplayBuffer does not pickle (it holds its store's writer lock and maps); in another "
                        f"process open it with ReplayBuffer(..., root={str(self.root)!r}, mode='r')")


_prefetchers: dict[threading.Thread, threading.Event] = {}


@atexit.register
def _stop_prefetchers() -> None:
    # an iterator left unfinished keeps its thread sampling; stopped here, before the interpreter (and torch's
    # thread pools) go away under it
    for thread, stop in list(_prefetchers.items()):
        stop.set()
        thread.join(timeout=2.0)


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _values(slot: Slot, gathered: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(lerobot_values(slot, gathered))


def _torch_indices(n: int, size: int) -> np.ndarray:
    return torch.randint(0, n, (size,)).numpy()


def _as_dataset(source: Any, *, episodes: Sequence[int] | None, revision: str | None,
                token: str | bool | None) -> Any:
    """A lerobot_zarr dataset (one frame per sample, uint8 cameras) of what ``from_lerobot_dataset`` was given."""
    from ..api import open_dataset
    from ..sampling.dataset import LeRobotZarrDataset

    for attribute in ("dataset", "reader"):  # our LeRobotDataset drop-in; a WritableDataset
        inner = getattr(source, attribute, None)
        if isinstance(inner, LeRobotZarrDataset):
            source = inner
    if isinstance(source, LeRobotZarrDataset):
        chosen = source.episodes.tolist() if episodes is None else list(episodes)
        return open_dataset(source.root, episodes=chosen)
    if isinstance(source, (str, os.PathLike)):
        return open_dataset(source, episodes=episodes, revision=revision, token=token)
    folder, chosen = getattr(source, "root", None), getattr(source, "episodes", None)
    if folder is not None and hasattr(source, "meta"):  # LeRobot's LeRobotDataset: read its local folder
        return open_dataset(folder, episodes=episodes if episodes is not None else chosen)
    raise ArgumentError(f"from_lerobot_dataset takes a LeRobotDataset, a lerobot_zarr dataset, a Hub repo id or a "
                        f"folder, got {type(source).__name__}")
