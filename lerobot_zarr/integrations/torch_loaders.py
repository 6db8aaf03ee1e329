"""The torch datasets and loaders over a store, a mixture or a stream: :class:`TorchDataset` (map-style),
:func:`batch_loader` (whole index batches, one ``get_batch`` each, crossing from workers through shared memory),
:class:`TorchStream` and :func:`stream_loader` (resumable, over :func:`lerobot_zarr.stream`)."""

from __future__ import annotations

import collections
import itertools
import os
import uuid
import warnings
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import LeRobotZarrWarning, LoaderTimeoutError, import_optional

torch = import_optional("torch", "lerobot_zarr.integrations.torch (the torch adapter and LeRobotDataset drop-in)")
from torch.utils.data import (  # noqa: E402
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    Sampler,
    default_collate,
    get_worker_info,
)

from ..sampling.dataset import LeRobotZarrDataset  # noqa: E402
from ..sampling.streams import SampleStream  # noqa: E402
from .torch_collate import batch_items  # noqa: E402
from .torch_memory import Ring, aligned, to_tensors  # noqa: E402

__all__ = ["BatchLoader", "IndexBatches", "StreamLoader", "TorchDataset", "TorchStream", "batch_loader",
           "stream_loader", "WORKER_TIMEOUT_S"]

#: batch_loader's default ``timeout`` with workers: a worker that gives no batch for this long (stopped, stuck) is
#: an error naming it, not a hang (torch's DataLoader waits for ever by default)
WORKER_TIMEOUT_S = 600.0
_LOOKAHEAD = 2  # batches drawn ahead of the one being made, without workers (their frames prefetched)


class TorchDataset(Dataset):
    """A map-style torch dataset over a :class:`~lerobot_zarr.LeRobotZarrDataset`.

    ``tds[i]`` is ``ds[i]`` as tensors; ``tds[[i, j, ...]]`` (what :func:`batch_loader`'s batch sampler asks for)
    is ``ds.get_batch([i, j, ...])`` as tensors, stacked along a leading axis.
    """

    def __init__(self, dataset: LeRobotZarrDataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int | Sequence[int]) -> dict[str, Any]:
        if (isinstance(i, Sequence) and not isinstance(i, str)) or getattr(i, "ndim", 0) > 0:
            return to_tensors(self.dataset.get_batch(np.asarray(i, dtype=np.int64)))
        return to_tensors(self.dataset[int(i)])

    def __getitems__(self, indices: list[int]) -> Sequence[dict[str, Any]]:
        """What ``DataLoader(batch_size=B)`` asks for: one ``get_batch``, handed to the collate function as items
        that share the batch's columns (``default_collate`` takes them back in one step, no tensor per item)."""
        return batch_items(self.dataset.get_batch(np.asarray(indices, dtype=np.int64)))


class IndexBatches(Sampler):
    """Whole index batches as numpy arrays (no per-index Python work): a fresh permutation each epoch when
    ``shuffle`` (from ``generator``, else from torch's global RNG, as ``RandomSampler`` does)."""

    def __init__(self, n: int, batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                 generator: torch.Generator | None = None):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.n, self.batch_size, self.shuffle, self.drop_last = int(n), int(batch_size), shuffle, drop_last
        self.generator = generator

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.shuffle:
            generator = self.generator
            if generator is None:
                generator = torch.Generator().manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
            order = torch.randperm(self.n, generator=generator).numpy()
        else:
            order = np.arange(self.n, dtype=np.int64)
        stop = len(self) * self.batch_size if self.drop_last else self.n
        for k in range(0, stop, self.batch_size):
            yield order[k:k + self.batch_size]


_GROWTH = 4  # a worker's rings may grow to this many times the first one when the user holds many batches


def _shipped(value: Any) -> bool:
    """Whether a ``get_batch`` value goes through a ring (numeric and bool arrays; the rest is pickled)."""
    return type(value) is np.ndarray and value.ndim > 0 and value.dtype.kind in "biufc"


# main process: the rings of one loader iteration's workers (by the iteration's token), by ring id
_RINGS: dict[str, dict[str, Ring]] = {}


class _InRing:
    """A batch a worker put in its ring: pickles to the slot, the layout and the non-array values (and the ring
    itself the first time); unpickling it in the main process gives the batch as tensors viewing the slot."""

    __slots__ = ("extras", "layout", "ring", "slot", "token")

    def __init__(self, token: str, ring: Ring, slot: int, layout: tuple, extras: dict):
        self.token, self.ring, self.slot, self.layout, self.extras = token, ring, slot, layout, extras

    def __reduce__(self) -> tuple:
        ring, memory = self.ring, None
        if not ring.sent:  # the worker's queue thread pickles in order: its first message carries the ring
            memory, ring.sent = ring.memory, True
        return _receive, (self.token, ring.id, len(ring.slots), ring.slot_bytes, memory, self.slot, self.layout,
                          self.extras)


def _receive(token: str, ring_id: str, slots: int, slot_bytes: int, memory: torch.Tensor | None, slot: int,
             layout: tuple, extras: dict) -> dict[str, Any]:
    ring = _RINGS.get(token, {}).get(ring_id)
    if ring is None:
        if memory is None:
            raise RuntimeError("lerobot_zarr.integrations.torch: a batch arrived from a DataLoader worker whose shared "
                               "memory this loader no longer knows (its iteration has ended)")
        ring = _RINGS.setdefault(token, {})[ring_id] = Ring(slots, slot_bytes, memory, ring_id)
    mem = ring.lease(slot)
    extras = to_tensors(extras)
    return {key: extras[key] if offset < 0 else torch.from_numpy(np.ndarray(shape, dtype, buffer=mem, offset=offset))
            for key, offset, dtype, shape in layout}


class _Copied:
    """A batch that crosses pickled (no ring slot for it): unpickles to tensors too."""

    __slots__ = ("batch",)

    def __init__(self, batch: dict[str, Any]):
        self.batch = batch

    def __reduce__(self) -> tuple:
        return to_tensors, (self.batch,)


class _BatchRequests(Dataset):
    """Answers a request (a list of index batches) with their ``get_batch`` dicts. In a DataLoader worker the
    numeric arrays go into one of the worker's :class:`Ring` s and cross as a slot number. When every slot is in
    use (the user holds more batches than planned) the worker adds a ring, up to ``_GROWTH`` times the first one's
    size and a quarter of the free shared memory (``/dev/shm``); past that, or in a container with little shared
    memory, a batch crosses pickled instead."""

    def __init__(self, dataset: LeRobotZarrDataset, batch_size: int, slots: int):
        self.dataset, self.batch_size, self.ring_slots = dataset, int(batch_size), int(slots)
        self.token: str | None = None  # set by the loader before its workers start
        self._rings: list[Ring] = []  # (worker) the first made with the first batch
        self._room = 0  # (worker) bytes the rings may still grow by
        self._held: dict | None = None  # (worker) the last batch made

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_rings": [], "_room": 0, "_held": None}

    def __len__(self) -> int:
        return len(self.dataset)

    def batch(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """One batch: ``get_batch`` of the indices (numpy)."""
        return self.dataset.get_batch(np.asarray(indices, dtype=np.int64))

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """Batches to come (the sampler's lookahead): a store in a bucket fetches their frames in the background."""
        ahead = getattr(self.dataset, "prefetch", None)
        if ahead is not None:
            ahead(np.asarray(indices, dtype=np.int64))

    def __getitem__(self, request: Sequence[Sequence[int] | np.ndarray]) -> list[Any]:
        """The batches of ``request``: numpy dicts in the main process; in a worker, objects that unpickle to
        dicts of tensors. The request's later batches are fetched ahead while its first is made."""
        if len(request) > 1:
            self.prefetch(np.concatenate([np.asarray(ix, dtype=np.int64) for ix in request[1:]]))
        many = getattr(self.dataset, "get_batches", None)  # a mixture gathers a request's batches at once
        batches = many(request) if many is not None else [self.batch(ix) for ix in request]
        if get_worker_info() is None:
            return batches
        # Keep the last batch until the next request is made: freed with the others, it would leave the top of the
        # heap free for malloc to give back to the system, and the next request would take that memory again a
        # page fault at a time (which doubled the workers' CPU with 3 MB batches).
        self._held = batches[-1]
        return [self._ship(b) for b in batches]

    def _ship(self, batch: dict[str, Any]) -> _InRing | _Copied:
        ring, slot = self._slot(batch)
        if ring is None:
            return _Copied(batch)
        mem, size, offset, layout, extras = ring.slots[slot], ring.slot_bytes, 0, [], {}
        for key, value in batch.items():
            if _shipped(value) and offset + value.nbytes <= size:
                np.ndarray(value.shape, value.dtype, buffer=mem, offset=offset)[...] = value
                layout.append((key, offset, value.dtype.str, value.shape))  # a str pickles cheaper than a dtype
                offset = aligned(offset + value.nbytes)
            else:
                layout.append((key, -1, None, None))
                extras[key] = value
        if not offset:
            ring.flags[slot] = 0
            return _Copied(batch)
        return _InRing(self.token, ring, slot, tuple(layout), extras)

    def _slot(self, batch: dict[str, Any]) -> tuple[Ring | None, int]:
        """A free slot of one of this worker's rings (marked in use), adding a ring if none is free and there
        is room; (None, -1) otherwise."""
        for ring in self._rings:
            slot = ring.acquire()
            if slot is not None:
                return ring, slot
        if self.token is None:
            return None, -1
        slot_bytes = sum(aligned(-(-v.nbytes // max(len(v), 1)) * max(self.batch_size, len(v)))
                         for v in batch.values() if _shipped(v))  # a full batch, scaled from this one
        if not slot_bytes:
            return None, -1
        if not self._rings:
            self._room = _GROWTH * self.ring_slots * slot_bytes
        else:
            slot_bytes = self._rings[0].slot_bytes
        slots = min(self.ring_slots if not self._rings else max(1, self.ring_slots // 2), self._room // slot_bytes)
        try:
            st = os.statvfs("/dev/shm")
            slots = min(slots, st.f_bavail * st.f_frsize // 4 // slot_bytes)
        except OSError:
            pass
        if slots < 1:
            return None, -1
        try:
            ring = Ring(int(slots), slot_bytes)
        except (OSError, RuntimeError) as exc:  # no usable shared memory here: batches cross pickled
            warnings.warn(f"lerobot_zarr.integrations.torch: DataLoader worker could not make shared memory for its "
                          f"batches ({exc}); they cross pickled instead (slower)", LeRobotZarrWarning, stacklevel=2)
            self.token = None
            return None, -1
        self._rings.append(ring)
        self._room -= slots * slot_bytes
        return ring, ring.acquire()


class _Requests(Sampler):
    """The index batches of ``batches``, ``k`` to a request: one DataLoader message to and from a worker per ``k``
    batches (a message costs the main process about as much as gathering a small batch)."""

    def __init__(self, batches: Sampler, k: int):
        self.batches, self.k = batches, int(k)

    def __len__(self) -> int:
        return (len(self.batches) + self.k - 1) // self.k

    def __iter__(self) -> Iterator[list]:
        request = []
        for batch in self.batches:
            request.append(batch)
            if len(request) == self.k:
                yield request
                request = []
        if request:
            yield request


def _as_is(batch: Any) -> Any:
    return batch


class BatchLoader(DataLoader):
    """A ``DataLoader`` over whole index batches (see :func:`batch_loader`), yielding dicts of tensors;
    ``len()`` counts batches. Over a batch sampler with a state (a mixture's), ``state_dict()`` is its state after
    the batches this loader has delivered (not those its workers prefetched), and ``load_state_dict()`` restores it
    before an iteration."""

    def __init__(self, requests: _BatchRequests, batches: Sampler, k: int, **kwargs: Any):
        self._batches = batches
        self._since: dict | None = None  # the batch sampler's state when the current (or last) iteration started
        self._delivered = 0  # batches that iteration delivered
        super().__init__(requests, batch_size=None, sampler=_Requests(batches, k), collate_fn=_as_is, **kwargs)

    def __len__(self) -> int:
        return len(self._batches)

    def state_dict(self) -> dict[str, Any]:
        if not hasattr(self._batches, "state_dict"):
            raise TypeError("this loader's batches have no state to save (a mixture's sampler has: "
                            "batch_loader(mix, ...) or batch_sampler=mix.sampler(...))")
        return self._batches.state_dict(since=self._since, batches=self._delivered)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._batches.load_state_dict(state)
        self._since, self._delivered = None, 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        requests: _BatchRequests = self.dataset
        if self.num_workers == 0:
            # in this process the DataLoader's machinery adds nothing (no collation, no pinning: a batch is one
            # get_batch) but its cost per batch (a profiler record, the fetcher): the batches come straight
            return self._in_process(requests)
        return self._from_workers(requests)

    def _in_process(self, requests: _BatchRequests) -> Iterator[dict[str, Any]]:
        if hasattr(self._batches, "state_dict"):
            self._since, self._delivered = self._batches.state_dict(), 0
        # the sampler's lookahead: the next _LOOKAHEAD batches are drawn before the current one is made and each is
        # handed to prefetch once (a store in a bucket fetches their frames meanwhile; the state saved counts
        # delivered batches, not drawn ones)
        batches = iter(self._batches)
        ahead: collections.deque = collections.deque(itertools.islice(batches, _LOOKAHEAD + 1))
        for indices in list(ahead)[1:]:
            requests.prefetch(indices)
        while ahead:
            indices = ahead.popleft()
            following = next(batches, None)
            if following is not None:
                ahead.append(following)
                requests.prefetch(following)
            batch = to_tensors(requests.batch(indices))
            self._delivered += 1
            yield batch

    def _from_workers(self, requests: _BatchRequests) -> Iterator[dict[str, Any]]:
        token = None
        if self.num_workers > 0 and not (self.persistent_workers and self._iterator is not None):
            requests.token = token = uuid.uuid4().hex  # the workers about to start ship under this token
            if self.persistent_workers:
                weakref.finalize(self, _RINGS.pop, token, None)
                token = None
        if hasattr(self._batches, "state_dict"):  # before the workers start taking batches ahead
            self._since, self._delivered = self._batches.state_dict(), 0
        answers = super().__iter__()
        try:
            while True:
                try:
                    answer = next(answers)
                except StopIteration:
                    return
                except RuntimeError as exc:  # torch's "DataLoader timed out after N seconds": say which worker
                    if self.timeout and str(exc).startswith("DataLoader timed out"):
                        raise _stuck_worker(answers, self.timeout) from exc
                    raise
                answer.reverse()
                while answer:  # keep no delivered batch: its slot frees as soon as the user drops it
                    self._delivered += 1
                    yield answer.pop()
        finally:
            if token is not None:  # this iteration's workers end with it (not persistent)
                del answers
                _RINGS.pop(token, None)


def _stuck_worker(answers: Any, timeout: float) -> LoaderTimeoutError:
    """The worker whose batch the loader waited for in vain (torch's iterator knows which; else every worker), with
    its pid and state."""
    workers = list(getattr(answers, "_workers", []))
    awaited = getattr(answers, "_task_info", {}).get(getattr(answers, "_rcvd_idx", None), ())
    chosen = [awaited[0]] if awaited and isinstance(awaited[0], int) and awaited[0] < len(workers) else \
        range(len(workers))
    named = ", ".join(f"{k} (pid {workers[k].pid}{_process_state(workers[k].pid)})" for k in chosen)
    return LoaderTimeoutError(f"DataLoader worker {named or '?'} gave no batch in {timeout:g} s (batch_loader's "
                              f"timeout=, default {WORKER_TIMEOUT_S:g} s): a stopped or stuck worker; timeout=0 "
                              f"waits for ever")


def _process_state(pid: int | None) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
    return {b"T": ", stopped", b"t": ", stopped by a debugger", b"D": ", waiting on a disk", b"Z": ", dead"}.get(
        state, "")


class _LeRobotBatches:
    """The batches of the ``LeRobotDataset`` drop-in as a plain ``DataLoader(ds, batch_size=B)`` gives them
    (LeRobot's: its ``__getitems__``, collated), as numpy arrays so that they cross from workers as ``get_batch``
    dicts do."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def get_batch(self, indices: Sequence[int] | np.ndarray) -> dict[str, Any]:
        batch = default_collate(self.dataset.__getitems__(np.asarray(indices, dtype=np.int64).tolist()))
        return {key: value.numpy() if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


def batch_loader(dataset: LeRobotZarrDataset | TorchDataset | Any, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False, generator: torch.Generator | None = None,
                 sampler: Sampler | None = None, batch_sampler: Any = None, batches_per_request: int | None = None,
                 **kwargs: Any) -> BatchLoader:
    """A ``DataLoader`` yielding dicts of batched tensors (the ``get_batch`` dict), each batch one ``get_batch``.

    Its sampler hands the dataset whole index batches (:class:`IndexBatches`, or ``BatchSampler(sampler)`` for a
    ``sampler`` of your own such as a ``DistributedSampler``, or ``batch_sampler`` as it is) and it runs with
    ``batch_size=None``: no per-item work, no collation. ``dataset`` may be anything with ``__len__`` and
    ``get_batch`` that pickles; a mixture (``open_mixture``) is sampled by its own sampler by default,
    ``dataset.sampler(batch_size, seed=0)`` (this process's rank of ``torch.distributed`` when initialized): pass
    ``batch_sampler=mix.sampler(...)`` for another seed or rank. The loader's ``state_dict()`` then saves where
    the delivered batches reached, for the training checkpoint. Other keyword arguments (``num_workers``,
    ``persistent_workers``, ``prefetch_factor``, ...) go to ``DataLoader``; ``pin_memory`` does not apply (call
    ``.pin_memory()`` on the tensors if needed).

    With ``num_workers > 0`` a worker is asked for ``batches_per_request`` batches at a time (default: as many as
    fit in 12 MiB, 1 to 16; a mixture gathers them with one ``get_batches``, also without workers) and puts them
    in shared memory of its own; the main process gets slot numbers and makes tensors viewing the slots. A slot is
    reused only once every tensor of its batch is freed, so a batch stays valid as long as you hold it (hold many
    and further batches arrive by copy instead). A worker that gives no batch for ``timeout`` seconds (default
    ``WORKER_TIMEOUT_S``, 10 minutes; 0: wait for ever, torch's default) raises :class:`LoaderTimeoutError` naming it.

    ``dataset`` may also be the ``LeRobotDataset`` drop-in (what LeRobot code holds): its batches are then LeRobot's
    (cameras float32 CHW, ``image_transforms`` applied), as ``DataLoader(ds, batch_size=...)`` gives them."""
    from .lerobot_dataset import LeRobotDataset

    if isinstance(dataset, LeRobotDataset):
        dataset = _LeRobotBatches(dataset)
    ds = dataset.dataset if isinstance(dataset, TorchDataset) else dataset
    if batch_sampler is None and sampler is None and callable(getattr(ds, "sampler", None)):  # a mixture
        if not shuffle:
            raise ValueError("a mixture's sampler draws by weight (it always shuffles): shuffle=False does not apply; "
                             "pass batch_sampler= for batches of your own")
        batch_sampler = ds.sampler(batch_size, seed=0 if generator is None else generator.initial_seed())
    if batch_sampler is not None:
        if sampler is not None:
            raise ValueError("give sampler= or batch_sampler=, not both")
        batches: Any = batch_sampler
    elif sampler is None:
        batches = IndexBatches(len(ds), batch_size, shuffle=shuffle, drop_last=drop_last, generator=generator)
    else:
        batches = BatchSampler(sampler, batch_size=int(batch_size), drop_last=drop_last)
    kwargs.pop("pin_memory", None)
    if int(kwargs.get("num_workers", 0)) > 0:
        kwargs.setdefault("timeout", WORKER_TIMEOUT_S)
    k = 1
    if int(kwargs.get("num_workers", 0)) > 0 or hasattr(ds, "get_batches"):
        k = _default_request(ds, batch_size) if batches_per_request is None else int(batches_per_request)
        if k < 1:
            raise ValueError(f"batches_per_request must be positive, got {batches_per_request}")
    prefetch = kwargs.get("prefetch_factor") or 2
    # a worker's slots in use: its requests in flight, the one being yielded, the batch before it (still held)
    requests = _BatchRequests(ds, batch_size, slots=(prefetch + 1) * k + 1)
    return BatchLoader(requests, batches, k, **kwargs)


def _default_request(ds: LeRobotZarrDataset, batch_size: int) -> int:
    """Batches per worker request: as many as fit in 12 MiB, 1 to 16. A request costs a DataLoader message each way
    (about 0.2 ms of CPU on either side), which must stay small next to the work on the batches it carries."""
    if not len(ds):
        return 1
    one = ds.get_batch(np.zeros(1, dtype=np.int64))
    nbytes = sum(v.nbytes for v in one.values() if isinstance(v, np.ndarray)) * int(batch_size)
    return max(1, min(16, (12 << 20) // max(nbytes, 1)))


class TorchStream(IterableDataset):
    """An iterable torch dataset over :func:`lerobot_zarr.stream`: each DataLoader worker reads its own share of
    the episodes (no duplicates, no gaps); call :meth:`set_epoch` before each epoch for a new shuffle. A stream
    made with ``batch_size=B`` yields batches: use ``DataLoader(TorchStream(s), batch_size=None)``."""

    def __init__(self, samples: SampleStream):
        self.samples = samples

    def set_epoch(self, epoch: int) -> None:
        self.samples.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (to_tensors(item) for item in self.samples)


class StreamLoader(DataLoader):
    """A ``DataLoader`` over ``TorchStream(samples)`` (``batch_size=None``: the stream's samples or batches as they
    come) that counts what it delivers: ``state_dict()`` is where the delivered items reached (not what the workers
    prefetched), ``load_state_dict()`` resumes an interrupted epoch exactly, with the same ``num_workers``.
    Iterating again continues an interrupted epoch, or starts the next one (see :func:`stream_loader`)."""

    def __init__(self, samples: SampleStream, **kwargs: Any):
        super().__init__(TorchStream(samples), batch_size=None, **kwargs)
        self.samples = samples
        self._epoch, self._delivered = samples.epoch, 0

    def _workers(self) -> int:
        return max(1, self.num_workers)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration runs; the one it is in (a restored state) continues where it was."""
        if int(epoch) != self._epoch:
            self._epoch, self._delivered = int(epoch), 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch, samples = self._epoch, self.samples
        if self._delivered:
            samples.load_state_dict(samples.state_at(epoch, self._delivered, num_workers=self._workers()))
        else:
            samples.set_epoch(epoch)
        for item in super().__iter__():
            self._delivered += 1
            yield item
        self._epoch, self._delivered = epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        return self.samples.state_at(self._epoch, self._delivered, num_workers=self._workers())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("num_workers") != self._workers():
            raise ValueError(f"the stream state was saved with {state.get('num_workers')} DataLoader workers per "
                             f"rank (0 counts as 1) and this loader has {self._workers()}; the order depends on it")
        self.samples.load_state_dict(state)
        self._epoch, self._delivered = int(state["epoch"]), int(state["items"])


def stream_loader(samples: SampleStream, **kwargs: Any) -> StreamLoader:
    """A resumable ``DataLoader`` over a stream (:class:`StreamLoader`); keyword arguments go to ``DataLoader``
    (``num_workers``, ``prefetch_factor``, ...). Save ``loader.state_dict()`` with the training checkpoint and call
    ``loader.load_state_dict(state)`` on restart: the interrupted epoch continues with no sample repeated or
    skipped, on every rank (their states are equal)."""
    return StreamLoader(samples, **kwargs)
