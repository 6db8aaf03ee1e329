"""Index arithmetic of a dataset mixture, apart from any data access: which dataset and which frame each position
of the mixture's sample sequence takes, by random access, and the resumable, elastic batch sampler built on it.

The sequence: positions ``s = 0, 1, 2, ...`` each name one sample; a global batch is ``batch_size * world_size``
consecutive positions and rank ``r`` takes its ``r``-th contiguous slice. It depends only on the seed, the
weights and the datasets' sizes, never on the number of processes, so a state saved as a position restores on
any world size.

- **Dataset of a position.** Positions are cut into blocks of :data:`BLOCK` (256). The first ``s`` positions, ``s``
  a block boundary, hold exactly ``floor(s * W[d + 1]) - floor(s * W[d])`` draws of dataset ``d`` (``W``: the
  cumulative normalized weights, on a grid of 2**-40): every block holds each dataset's share to within one sample
  (stratified sampling: each sample's dataset has the weight's probability, and the realized shares never drift),
  and the draws of every dataset before any block are known in O(1). Inside a block the datasets' slots are in a
  seeded random order (a Feistel permutation keyed by the block), so the draws before any position cost O(D) plus
  one block.
- **Frame of a draw.** The ``k``-th draw of dataset ``d`` (counted over the whole sequence) is frame
  ``P[d, k // n_d](k % n_d)``, ``P`` a seeded random-access permutation of ``[0, n_d)`` (a Feistel network with
  cycle walking, :func:`permute`): each pass over a dataset shows every frame once, in a fresh order, before any
  frame repeats, and nothing of size ``n_d`` is ever materialized.
- **A batch** (sorted, so the order of its positions carries no meaning) needs only which draws it holds: draws are
  numbered in position order, so positions ``[p, q)`` hold draws ``[before_d(p), before_d(q))`` of each dataset
  ``d``. A rank's batch is those runs (cut at pass ends), permuted a whole chunk of batches at once: no per-block
  shuffle when ``p`` and ``q`` are block boundaries (``batch_size`` a multiple of 256), one block's otherwise.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, warn_user

__all__ = ["BLOCK", "MAX_BATCH", "MAX_DATASETS", "MAX_POSITION", "STATE_FORMAT", "MixtureSampler", "MixtureSchedule",
           "check_weights", "frame_weights", "permute"]

BLOCK = 256  # positions per block of the dataset schedule (a power of two: its shuffle needs no walking)
MAX_POSITION = 1 << 43  # positions of the sequence (8.8e12 samples): the schedule's integer arithmetic holds below
MAX_BATCH = 1 << 24  # indices of one rank's batch (128 MiB of int64)
MAX_DATASETS = 2**15 - 1
_GRID_BITS = 40  # weights are placed on a grid of 2**-40: exact integer arithmetic for any position
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
STATE_FORMAT = "lerobot_zarr.mixtures.sampler"
# odd multipliers of the four Feistel half-rounds, per word size (murmur3's and xxhash's constants): 32-bit words
# (twice as fast in numpy) whenever the domain fits in them, which any dataset of under 2**32 frames does
_MULTIPLIERS = {
    np.dtype(np.uint32): [np.uint32(c) for c in (0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F, 0x165667B1)],
    np.dtype(np.uint64): [np.uint64(c) for c in (0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xFF51AFD7ED558CCD,
                                                 0xC4CEB9FE1A85EC53)],
}


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic): a bijection that scrambles every bit."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _split_bits(n: int) -> tuple[int, int]:
    """``(a, b)``: the Feistel domain for a permutation of ``[0, n)`` is ``[0, 2**(a + b))``, the smallest power
    of two holding it (at least 4), cut into a high part of ``a`` bits and a low part of ``b``."""
    m = max(2, (int(n) - 1).bit_length())
    return m // 2, m - m // 2


def _word(bits: int) -> np.dtype:
    """The unsigned word the Feistel network of a domain of ``2**bits`` computes in."""
    return np.dtype(np.uint32 if bits <= 32 else np.uint64)


def _feistel(x: np.ndarray, a: Any, b: Any, key: Any) -> np.ndarray:
    """An unbalanced Feistel network over ``[0, 2**(a + b))``, elementwise in ``x``'s word (``a``, ``b``, ``key``
    scalars or arrays of it): four half-rounds, each xoring into one part the top bits of a multiply-shift hash
    of the other part and the key."""
    word = x.dtype.type
    width = word(8 * x.dtype.itemsize)
    low = (word(1) << b) - word(1)
    shift_a, shift_b = width - a, width - b
    hi, lo = x >> b, x & low
    for r, multiplier in enumerate(_MULTIPLIERS[x.dtype]):
        if r % 2 == 0:
            hi = hi ^ (((lo ^ key) * multiplier) >> shift_a)
        else:
            lo = lo ^ (((hi ^ key) * multiplier) >> shift_b)
    return (hi << b) | lo


def permute(x: np.ndarray, n: np.ndarray | int, key: np.ndarray | int) -> np.ndarray:
    """``P_key(x)`` for a seeded random-access permutation ``P_key`` of ``[0, n)``, elementwise (``0 <= x < n``;
    ``n`` and ``key`` may be arrays: one permutation per element's ``(n, key)``; keys are 64-bit). O(1) per
    element and no memory beyond the arrays: a Feistel network over the smallest power of two holding ``[0, n)``,
    walked until the value falls in ``[0, n)`` (under two steps on average)."""
    x = np.asarray(x, dtype=np.int64)
    n = np.broadcast_to(np.asarray(n, dtype=np.int64), x.shape)
    if x.size and (x.min() < 0 or (x >= n).any() or n.min() < 1):
        raise ArgumentError("permute: every x must be in [0, n)")
    sizes, where = np.unique(n, return_inverse=True)
    bits = np.array([_split_bits(v) for v in sizes.tolist()], dtype=np.int64).reshape(-1, 2)
    word = _word(int(bits.sum(axis=1).max(initial=2)))
    where = where.reshape(x.shape)
    key = _mix64(np.broadcast_to(np.asarray(key, dtype=np.uint64), x.shape))
    return _permute(x.astype(word), n.astype(word), bits[where, 0].astype(word), bits[where, 1].astype(word),
                    _key_word(key, word))


def _key_word(key: np.ndarray, word: np.dtype) -> np.ndarray:
    return (key >> np.uint64(32)).astype(word) if word == np.uint32 else key


def _permute(x: np.ndarray, n: Any, a: Any, b: Any, key: Any) -> np.ndarray:
    """The Feistel network on ``x``, walked until every value is below ``n`` (``n``, ``a``, ``b``, ``key``: arrays
    of ``x``'s shape, or scalars shared by every element)."""
    out = _feistel(x, a, b, key)
    todo = np.flatnonzero(out >= n)
    while len(todo):  # cycle walking: the cycle through x holds x < n, so it ends
        n_, a_, b_, key_ = (v if np.ndim(v) == 0 else v[todo] for v in (n, a, b, key))
        walked = _feistel(out[todo], a_, b_, key_)
        out[todo] = walked
        todo = todo[walked >= n_]
    return out.astype(np.int64)


def _as_int(value: object, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{what} must be an integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ArgumentError(f"{what} must be an integer, got {value!r:.60}") from None
    if value < minimum:
        raise ArgumentError(f"{what} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ArgumentError(f"{what} must be at most {maximum}, got {value!r:.60}")
    return value


def check_weights(weights: Sequence[float], names: Sequence[str]) -> np.ndarray:
    """The weights of the datasets ``names``, normalized and checked as the schedule needs them: 1 to
    ``MAX_DATASETS`` datasets, finite, not negative, not all zero, each 0 or at least ``1/BLOCK`` of the total (the
    schedule draws datasets in stratified blocks of ``BLOCK`` samples). Cheap: ``open_mixture`` runs it before any
    dataset opens."""
    return _shares(weights, names)[0]


def _shares(weights: Sequence[float], names: Sequence[str]) -> tuple[np.ndarray, list[int]]:
    """:func:`check_weights`, and the cumulative shares on the grid of ``2**-_GRID_BITS``."""
    if not 1 <= len(names) <= MAX_DATASETS:
        raise ArgumentError(f"a mixture holds 1 to {MAX_DATASETS} datasets, got {len(names)}")
    try:
        if isinstance(weights, (str, bytes, Mapping)):
            raise TypeError
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ArgumentError(f"weights must be a list of numbers, got {weights!r:.80}") from None
    if len(w) != len(names):
        raise ArgumentError(f"{len(w)} weights for {len(names)} datasets")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ArgumentError(f"weights must be finite, non-negative and not all zero, got {w.tolist()[:10]}")
    share = w / w.sum()
    grid = np.round(np.concatenate([[0.0], np.cumsum(share)]) * 2.0 ** _GRID_BITS)
    grid[-1] = 2.0 ** _GRID_BITS
    cuts = [int(g) for g in np.maximum.accumulate(grid)]
    # a block's quota of dataset d is the difference of two floors of cumulative shares: never negative when each
    # share of a block is at least one sample
    rare = [str(names[d]) for d in range(len(w)) if w[d] > 0 and cuts[d + 1] - cuts[d] < 2 ** _GRID_BITS // BLOCK]
    if rare:
        raise ArgumentError(f"weights of {rare[:5]}{'...' if len(rare) > 5 else ''} are below 1/{BLOCK} of the "
                            f"total: the sampler draws datasets in stratified blocks of {BLOCK} samples, so each "
                            f"weight is 0 or at least 1/{BLOCK} ({100 / BLOCK:.2f} %), and at most {BLOCK} "
                            f"datasets have one")
    return share, cuts


class MixtureSchedule:
    """The mixture's sample sequence: position -> (dataset, frame of it) by random access (see the module docs).

    ``sizes``: frames of each dataset (in the mixture's order); ``weights``: their sampling weights (normalized
    here); ``seed``: an integer in ``[0, 2**64)``; ``contents``: optional, a key per dataset identifying the frames
    it serves (:meth:`~lerobot_zarr.sampling.dataset.LeRobotZarrDataset.content_key`), kept in states so that a
    state is never restored onto other data of the same sizes."""

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], seed: int, *, names: Sequence[str] = (),
                 contents: Sequence[str] = ()):
        if isinstance(sizes, (str, bytes, Mapping)) or not isinstance(sizes, (Sequence, np.ndarray)):
            raise ArgumentError(f"sizes must be a list of frame counts, got {sizes!r:.80}")
        self.sizes = np.array([_as_int(n, "dataset size", 1, 2**62) for n in sizes], dtype=np.int64)
        self.names = [str(x) for x in names] or [f"dataset {k}" for k in range(len(self.sizes))]
        if len(self.names) != len(self.sizes):
            raise ArgumentError(f"{len(self.names)} names for {len(self.sizes)} datasets")
        self.weights, self._grid = _shares(weights, self.names)
        self.seed = _as_int(seed, "seed", 0, 2**64 - 1)
        self.contents = [str(c) for c in contents]
        if self.contents and len(self.contents) != len(self.sizes):
            raise ArgumentError(f"{len(self.contents)} content keys for {len(self.sizes)} datasets")
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        key = _mix64(np.array([self.seed], dtype=np.uint64) ^ _GOLDEN)
        self._dataset_keys = _mix64((np.arange(len(self.sizes), dtype=np.uint64) * _GOLDEN) ^ key)
        bits = np.array([_split_bits(n) for n in self.sizes.tolist()], dtype=np.int64).reshape(-1, 2)
        self._word = _word(int(bits.sum(axis=1).max()))
        self._high_bits, self._low_bits = bits[:, 0].astype(self._word), bits[:, 1].astype(self._word)
        self._usizes = self.sizes.astype(self._word)
        # shared by every dataset (often: datasets of one size class): scalars, no per-sample gathers
        self._shared_bits = ((self._high_bits[0], self._low_bits[0]) if (bits == bits[0]).all() else None)
        self._shared_size = self._usizes[0] if (self.sizes == self.sizes[0]).all() else None
        self._block_key = _mix64(key ^ _GOLDEN)
        self._block_positions = np.arange(BLOCK, dtype=np.uint32)[None, :]
        self._block_bits = tuple(np.uint32(v) for v in _split_bits(BLOCK))
        self._grid_high = np.array([g >> 20 for g in self._grid], dtype=np.uint64)
        self._grid_low = np.array([g & ((1 << 20) - 1) for g in self._grid], dtype=np.uint64)

    def draws_before(self, position: int) -> np.ndarray:
        """Draws of each dataset among positions ``[0, position)`` (exact; O(D) plus one block)."""
        return self.counts_before(np.array([_as_int(position, "position")]))[0]

    def counts_before(self, positions: np.ndarray) -> np.ndarray:
        """``(len(positions), D)``: draws of each dataset among positions ``[0, p)`` for each ``p`` (a 1-D array
        of positions in ``[0, 2**43]``): O(D) for a block boundary, plus its block's shuffle for another."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() > MAX_POSITION):
            raise ArgumentError(f"positions must be in [0, 2**43], got {int(positions.min())}..{int(positions.max())}")
        blocks, inside = np.divmod(positions, BLOCK)
        counts = np.diff(self._cuts(blocks * BLOCK), axis=1)
        partial = np.flatnonzero(inside)
        if len(partial):  # count each dataset among the first `inside` positions of the block
            d = len(self.sizes)
            distinct, row = np.unique(blocks[partial], return_inverse=True)
            datasets = self._block_datasets(distinct)[0][row]
            first = np.arange(BLOCK) < inside[partial, None]
            flat = (np.arange(len(partial))[:, None] * d + datasets)[first]
            counts[partial] += np.bincount(flat, minlength=len(partial) * d).reshape(-1, d)
        return counts

    def _cuts(self, starts: np.ndarray) -> np.ndarray:
        """``(len(starts), D + 1)``: ``floor(s * W[d])`` for each position ``s`` (W on the 2**-40 grid), exact in
        64-bit words (the grid cut in halves of 20 bits) for positions below 2**43."""
        s = np.asarray(starts, dtype=np.uint64)[:, None]
        twenty = np.uint64(20)
        return ((s * self._grid_high + ((s * self._grid_low) >> twenty)) >> twenty).astype(np.int64)

    def datasets_and_draws(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(dataset, draw number)`` of each position (a 1-D array of non-negative positions): the blocks they
        touch are computed whole, all at once. The draw number counts the draws of the dataset before it."""
        positions = np.asarray(positions, dtype=np.int64)
        if not positions.size:
            return positions.copy(), positions.copy()
        if positions.min() < 0 or positions.max() >= MAX_POSITION:
            raise ArgumentError(f"positions must be in [0, 2**43), got {int(positions.min())}..{int(positions.max())}")
        of = positions // BLOCK
        if len(of) < 2 or bool((of[1:] >= of[:-1]).all()):  # ascending (a sampler's chunk): runs, no sort
            starts = np.flatnonzero(np.concatenate([[True], of[1:] != of[:-1]]))
            blocks = of[starts]
            which = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(of))))
        else:
            blocks, which = np.unique(of, return_inverse=True)
        nb = len(blocks)
        datasets, base, quota = self._block_datasets(blocks)  # int16: the stable sort below is a radix sort
        first_slot = np.zeros((nb, len(self.sizes) + 1), dtype=np.int64)
        np.cumsum(quota, axis=1, out=first_slot[:, 1:])
        runs = quota.reshape(-1)
        # draw numbers in position order inside each block: the block's positions of each dataset, in order,
        # take the dataset's next draws (those sorted by dataset read as the runs of `table`)
        order = np.argsort(datasets, axis=1, kind="stable")
        first = np.repeat((base - first_slot[:, :-1]).reshape(-1), runs).reshape(nb, BLOCK) + np.arange(BLOCK)
        draws = np.empty((nb, BLOCK), dtype=np.int64)
        np.put_along_axis(draws, order, first, axis=1)
        if len(positions) == nb * BLOCK and positions[0] % BLOCK == 0 and positions[-1] - positions[0] == len(
                positions) - 1:  # whole blocks in order: no gather
            return datasets.reshape(-1).astype(np.int64), draws.reshape(-1)
        flat = which * BLOCK + positions % BLOCK
        return datasets.reshape(-1)[flat].astype(np.int64), draws.reshape(-1)[flat]

    def _block_datasets(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each of ``blocks`` (block numbers): the dataset of each of its positions (``(nb, BLOCK)``, int16),
        the draws of each dataset before it and in it (``(nb, D)`` each)."""
        nb, d = len(blocks), len(self.sizes)
        cuts = self._cuts(np.concatenate([blocks, blocks + 1]) * BLOCK)
        base = np.diff(cuts[:nb], axis=1)
        quota = np.diff(cuts[nb:], axis=1) - base
        # the block's slots in a seeded random order: slot j of block b goes to the dataset whose run holds it
        keys = _key_word(_mix64(blocks.astype(np.uint64) ^ self._block_key), np.dtype(np.uint32))[:, None]
        slots = _feistel(self._block_positions, self._block_bits[0], self._block_bits[1], keys).astype(np.intp)
        table = np.repeat(np.tile(np.arange(d, dtype=np.int16), nb), quota.reshape(-1)).reshape(nb, BLOCK)
        return np.take_along_axis(table, slots, axis=1), base, quota

    def frames(self, datasets: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """The frame (index inside its dataset) of the ``draws``-th draw of each ``datasets``: pass
        ``draw // n`` of a fresh permutation of the dataset's ``n`` frames."""
        passes, within = np.divmod(draws, self.sizes[datasets])
        key = (self._dataset_keys[datasets] ^ passes.astype(np.uint64)) * _GOLDEN
        key ^= key >> np.uint64(29)
        return _permute(within.astype(self._word), self._usizes[datasets], self._high_bits[datasets],
                        self._low_bits[datasets], _key_word(key, self._word))

    def indices(self, positions: np.ndarray) -> np.ndarray:
        """Mixture indices (offset of the dataset + frame inside it) of positions of the sequence."""
        datasets, draws = self.datasets_and_draws(positions)
        return self.offsets[datasets] + self.frames(datasets, draws)

    def batches(self, starts: np.ndarray, size: int) -> np.ndarray:
        """``(len(starts), size)``: the mixture indices of positions ``[start, start + size)`` for each of
        ``starts``, each row sorted: ``np.sort(indices(positions))`` row by row, computed from which samples a
        range holds rather than the order they come in. Draws are numbered in position order, so the range holds
        draws ``[before(start), before(start + size))`` of each dataset (:meth:`counts_before`): a contiguous run
        of each dataset's draws, permuted a pass at a time, with no shuffle for ranges of whole blocks."""
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        rows, d = len(starts), len(self.sizes)
        if not rows or size < 1:
            return np.zeros((rows, max(size, 0)), dtype=np.int64)
        if starts.min() < 0 or starts.max() + size > MAX_POSITION:
            raise ArgumentError(f"positions must be in [0, 2**43), got {int(starts.min())}.."
                                f"{int(starts.max()) + size - 1}")
        counts = self.counts_before(np.concatenate([starts, starts + size]))
        lo, hi = counts[:rows].reshape(-1), counts[rows:].reshape(-1)  # row-major: (row, dataset)
        datasets = np.flatnonzero(hi > lo)
        lo, hi, datasets = lo[datasets], hi[datasets], datasets % d
        n = self.sizes[datasets]
        passes = lo // n
        spans = (hi - 1) // n - passes + 1  # a run crossing passes is cut at each pass's end
        if (spans > 1).any():
            run = np.repeat(np.arange(len(lo)), spans)
            passes = passes[run] + np.arange(len(run)) - np.repeat(np.cumsum(spans) - spans, spans)
            lo, hi, n, datasets = lo[run], hi[run], n[run], datasets[run]
            lo, hi = np.maximum(lo, passes * n), np.minimum(hi, (passes + 1) * n)
        length = hi - lo
        key = (self._dataset_keys[datasets] ^ passes.astype(np.uint64)) * _GOLDEN  # as in :meth:`frames`
        key ^= key >> np.uint64(29)
        within = np.arange(rows * size, dtype=np.int64)
        within += np.repeat(lo - passes * n - (np.cumsum(length) - length), length)
        high, low = self._shared_bits or (np.repeat(self._high_bits[datasets], length),
                                          np.repeat(self._low_bits[datasets], length))
        sizes = (self._shared_size if self._shared_size is not None
                 else np.repeat(self._usizes[datasets], length))
        out = _permute(within.astype(self._word), sizes, high, low,
                       np.repeat(_key_word(key, self._word), length))
        out += np.repeat(self.offsets[datasets], length)
        out = out.reshape(rows, size)
        out.sort(axis=1)
        return out

    def state_fields(self) -> dict[str, Any]:
        return {"seed": self.seed, "weights": self.weights.tolist(), "sizes": self.sizes.tolist(),
                **({"contents": list(self.contents)} if self.contents else {})}


def _distributed() -> tuple[int, int]:
    """(rank, world size) of an initialized ``torch.distributed`` process group (as ``DistributedSampler`` takes
    them), else (0, 1). torch is not imported here: a process that has not imported it has no group."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class MixtureSampler:
    """Batches of mixture indices for one rank: an iterator of int64 arrays of ``batch_size`` indices.

    Global batch ``t`` is positions ``[t * G, (t + 1) * G)`` of the mixture's sequence (``G = batch_size *
    world_size``); rank ``r`` takes its ``r``-th contiguous slice, its indices sorted (so grouped by dataset: the
    order inside a batch carries no meaning, and sorted indices gather fastest). An epoch is
    ``batches_per_epoch`` batches (default: the mixture's frames divided by ``G``): iterating yields the batches
    up to the end of the current epoch, and iterating again continues with the next one. ``state_dict()`` is the
    position reached (plus what identifies the mixture): restoring it is O(1) and continues the same global
    sequence on any world size with the same ``G`` (another ``G`` continues the same samples, cut into batches of
    the new size)."""

    def __init__(self, schedule: MixtureSchedule, *, batch_size: int, rank: int | None = None,
                 world_size: int | None = None, batches_per_epoch: int | None = None):
        self.schedule = schedule
        self.batch_size = _as_int(batch_size, "batch_size", 1, MAX_BATCH)
        if rank is None and world_size is None:
            rank, world_size = _distributed()
        elif rank is None or world_size is None:
            raise ArgumentError("give both rank and world_size, or neither (then torch.distributed's, if "
                                "initialized, else 0 and 1)")
        self.world_size = _as_int(world_size, "world_size", 1, MAX_POSITION // self.batch_size)
        self.rank = _as_int(rank, "rank")
        if self.rank >= self.world_size:
            raise ArgumentError(f"rank must be in [0, world_size={self.world_size}), got {self.rank}")
        self.global_batch_size = self.batch_size * self.world_size
        total = int(schedule.sizes.sum())
        self.batches_per_epoch = (max(1, total // self.global_batch_size) if batches_per_epoch is None else
                                  _as_int(batches_per_epoch, "batches_per_epoch", 1,
                                          MAX_POSITION // self.global_batch_size))
        self._position = 0
        self._chunk: tuple[int, np.ndarray] = (0, np.zeros((0, self.batch_size), dtype=np.int64))

    # the sequence ---------------------------------------------------------------------------------------------
    @property
    def position(self) -> int:
        """Global samples before the next batch (``state_dict()["position"]``)."""
        return self._position

    @property
    def epoch(self) -> int:
        return self._position // (self.batches_per_epoch * self.global_batch_size)

    def batch(self, step: int) -> np.ndarray:
        """This rank's indices of global batch ``step`` (random access; does not move the position)."""
        return self._batch_at(_as_int(step, "step", 0, MAX_POSITION // self.global_batch_size - 1)
                              * self.global_batch_size)

    def _batch_at(self, position: int) -> np.ndarray:
        """This rank's slice of the global batch starting at ``position``, from a chunk of batches computed at
        once (the per-batch cost is a slice)."""
        start, chunk = self._chunk
        k, rest = divmod(position - start, self.global_batch_size)
        if rest or not 0 <= k < len(chunk):
            count = max(1, 32768 // self.batch_size)  # this many of the rank's positions at once: numpy at speed
            first = position + self.rank * self.batch_size
            # a batch's indices sorted, so grouped by dataset (and in order inside each): faster gathers
            chunk = self.schedule.batches(first + np.arange(count, dtype=np.int64) * self.global_batch_size,
                                          self.batch_size)
            chunk.flags.writeable = False
            self._chunk, k = (position, chunk), 0
        return chunk[k].copy()

    def __len__(self) -> int:
        """Batches the next iteration yields: those left in the current epoch."""
        return -(-(self._epoch_end() - self._position) // self.global_batch_size)

    def _epoch_end(self) -> int:
        span = self.batches_per_epoch * self.global_batch_size
        return (self._position // span + 1) * span

    def __iter__(self) -> Iterator[np.ndarray]:
        end = self._epoch_end()
        while self._position < end:
            batch = self._batch_at(self._position)
            self._position += self.global_batch_size
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Go to the start of ``epoch`` (as ``DistributedSampler.set_epoch`` selects an epoch's order), unless
        the position is inside that epoch already (a restored state): then it continues from there."""
        epoch = _as_int(epoch, "epoch")
        span = self.batches_per_epoch * self.global_batch_size
        if self._position // span != epoch:
            self._position = epoch * span

    # state ----------------------------------------------------------------------------------------------------
    def state_dict(self, *, since: Mapping[str, Any] | None = None, batches: int = 0) -> dict[str, Any]:
        """A small JSON-serializable state: the position reached and what identifies the mixture (its seed, weights,
        sizes and each dataset's content key). With ``since`` (an earlier state of this sampler): the state
        ``batches`` batches after it instead (a loader whose workers run ahead saves where the batches it delivered
        reached)."""
        position = self._position if since is None else _position(since) + _as_int(
            batches, "batches", 0, MAX_POSITION) * self.global_batch_size
        return {"format": STATE_FORMAT, "version": 2, "position": position, **self.schedule.state_fields(),
                "global_batch_size": self.global_batch_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (of this rank or any other, on any world size): O(1). The datasets'
        content (each one's content key: its frames and selection), sizes, weights and seed must be the ones the
        state was saved with; anything else, or a value of the wrong type, is an :class:`ArgumentError`. A state
        saved before content keys existed (version 1) is restored with a warning that its content was not checked."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ArgumentError(f"not a mixture sampler state (no format {STATE_FORMAT!r}): {str(state)[:120]}")
        version = state.get("version")
        if version not in (1, 2):
            raise ArgumentError(f"mixture sampler state version {version!r:.40} is not supported (1, 2)")
        mine = self.schedule.state_fields()
        sizes = state.get("sizes")
        if not isinstance(sizes, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in sizes):
            raise ArgumentError(f"the state's sizes must be a list of frame counts, got {sizes!r:.80}")
        if sizes != mine["sizes"]:
            if len(sizes) != len(mine["sizes"]):
                raise ArgumentError(f"the state was saved for a mixture of {len(sizes)} datasets; this one has "
                                    f"{len(mine['sizes'])}")
            d = next(d for d, (a, b) in enumerate(zip(sizes, mine["sizes"])) if a != b)
            raise ArgumentError(f"the state was saved for another mixture: {self.schedule.names[d]} had {sizes[d]} "
                                f"frames then and has {mine['sizes'][d]} now (the sequence depends on each "
                                f"dataset's frames)")
        contents = state.get("contents")
        if version == 2 and contents is not None:
            if not isinstance(contents, list) or len(contents) != len(sizes):
                raise ArgumentError(f"the state's contents must be a list of {len(sizes)} content keys, got "
                                    f"{contents!r:.80}")
            ours = mine.get("contents") or [None] * len(sizes)
            changed = [d for d, (a, b) in enumerate(zip(contents, ours)) if b is not None and a != b]
            if changed:
                d = changed[0]
                raise ArgumentError(f"the state was saved for other data of {self.schedule.names[d]}: its frames or "
                                    f"selection changed since (content key {str(contents[d])[:16]} then, "
                                    f"{str(ours[d])[:16]} now), so the next batches would hold other samples; "
                                    f"start afresh or restore that data")
        elif mine.get("contents"):
            warn_user("the mixture sampler state was saved by an earlier version, without the datasets' content "
                      "keys: it is restored by position, sizes, weights and seed only (if a dataset's frames "
                      "changed but not its size, the batches differ from those the state continued)")
        if state.get("seed") != mine["seed"]:
            raise ArgumentError(f"the state was saved with seed {state.get('seed')!r:.60}; this sampler has seed "
                                f"{mine['seed']}")
        saved = MixtureSchedule(sizes, state.get("weights", ()), mine["seed"], names=self.schedule.names)
        if saved._grid != self.schedule._grid:
            raise ArgumentError(f"the state was saved with weights {state.get('weights')}; this mixture's are "
                                f"{mine['weights']}")
        position = _position(state)
        saved_g = state.get("global_batch_size")
        if saved_g != self.global_batch_size:
            warn_user(f"the mixture sampler state was saved with batches of {saved_g!r:.40} samples in all "
                      f"(batch_size * world_size) and is restored with {self.global_batch_size}: the same sequence "
                      f"of samples continues from sample {position}, cut into batches of the new size")
        self._position = position

    def __repr__(self) -> str:
        return (f"MixtureSampler(batch_size={self.batch_size}, rank={self.rank}, world_size={self.world_size}, "
                f"seed={self.schedule.seed}, position={self._position}, epoch={self.epoch}, "
                f"batches_per_epoch={self.batches_per_epoch})")


def _position(state: Mapping[str, Any]) -> int:
    return _as_int(state.get("position"), "the state's position", 0, MAX_POSITION)


def frame_weights(sizes: Sequence[int]) -> list[float]:
    """``weights="frames"``: each dataset in proportion to its frames."""
    total = math.fsum(sizes)
    return [n / total for n in sizes]
