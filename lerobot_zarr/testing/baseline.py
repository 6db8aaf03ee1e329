"""The hand-written numpy memmap sampler we measure ourselves against (the speed floor).

Each feature is one flat memory map of all frames plus the episode bounds, as a careful user would write it
for a single static dataset (no episode chunks, no partial downloads, no edits), with every shortcut we know:
plain ndarray views of the maps, ``bisect`` on a list of episode starts (a batch: its episodes' bounds in one
lookup), windows that lie inside their episode copied as one slice (one strided block per sample in a batch),
clamped gathers only at episode edges (one fused clamp whose changes are the padding). It returns
the same dict as :class:`~lerobot_zarr.LeRobotZarrDataset`, so benchmarks and the demo can compare like for like.
It is written independently of the library on purpose (no shared window code): it also checks it.
"""

from __future__ import annotations

import json
import mmap
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FlatMemmapSampler"]


def _map(path: Path, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A read-only plain ndarray view of a file's memory map (it indexes faster than ``np.memmap``), advised
    ``MADV_HUGEPAGE`` as the library's maps of a store that fits in memory are: a file read from disk then comes
    into the page cache in huge folios, mapped with huge pages."""
    if not int(np.prod(shape)):
        return np.empty(shape, dtype=dtype)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages
            pass
    return np.frombuffer(m, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


class FlatMemmapSampler:
    """Random access with LeRobot window semantics over flat memmaps written by :meth:`write`."""

    def __init__(self, folder: str | Path, delta_timestamps: Mapping[str, Sequence[float]] | None = None):
        folder = Path(folder)
        meta = json.loads((folder / "meta.json").read_text())
        self.fps = meta["fps"]
        self.tasks = np.array(meta["tasks"], dtype=object)
        self.start = np.load(folder / "episode_start.npy")
        self.end = np.load(folder / "episode_end.npy")
        self.start_list, self.end_list = self.start.tolist(), self.end.tolist()
        self.bounds = np.stack([self.start, self.end], axis=1)  # a batch's episode bounds in one lookup
        self.arrays = {name: _map(folder / f"{name}.bin", np.dtype(spec["dtype"]), tuple(spec["shape"]))
                       for name, spec in meta["arrays"].items()}
        self.windows = []
        for key, deltas in (delta_timestamps or {}).items():
            off = np.round(np.asarray(deltas) * self.fps).astype(np.int64)
            lo, hi = int(off.min()), int(off.max())
            arr = self.arrays[key]
            blocks = None
            if np.array_equal(off, np.arange(lo, hi + 1)):  # consecutive frames: one block per window
                blocks = np.lib.stride_tricks.as_strided(arr, (len(arr) - len(off) + 1, len(off), *arr.shape[1:]),
                                                         (arr.strides[0], *arr.strides), writeable=False)
            self.windows.append((key, f"{key}_is_pad", off, lo, hi, arr, blocks, np.zeros(len(off), dtype=bool)))
        self.plain = [(k, a, a.ndim == 1) for k, a in self.arrays.items()
                      if k not in (delta_timestamps or {})]
        self.task_index = self.arrays["task_index"]

    @staticmethod
    def write(folder: str | Path, arrays: Mapping[str, np.ndarray], episode_start: np.ndarray,
              episode_length: np.ndarray, tasks: Sequence[str], fps: float) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, arr in arrays.items():
            np.ascontiguousarray(arr).tofile(folder / f"{name}.bin")
        np.save(folder / "episode_start.npy", np.asarray(episode_start, dtype=np.int64))
        np.save(folder / "episode_end.npy", np.asarray(episode_start, dtype=np.int64) + episode_length)
        meta = {"fps": fps, "tasks": list(tasks),
                "arrays": {k: {"dtype": v.dtype.str, "shape": list(v.shape)} for k, v in arrays.items()}}
        (folder / "meta.json").write_text(json.dumps(meta))

    def __len__(self) -> int:
        return int(self.end[-1])

    def __getitem__(self, i: int) -> dict[str, Any]:
        e = bisect_right(self.start_list, i) - 1
        lo, hi = self.start_list[e], self.end_list[e]
        out: dict[str, Any] = {}
        for key, pad_key, off, wlo, whi, arr, blocks, no_pad in self.windows:
            if lo <= i + wlo and i + whi < hi:  # inside the episode: no clamping
                out[key] = arr[i + wlo:i + whi + 1].copy() if blocks is not None else arr[off + i]
                out[pad_key] = no_pad.copy()
            else:
                q = off + i
                out[key] = arr[np.minimum(np.maximum(q, lo), hi - 1)]
                out[pad_key] = (q < lo) | (q >= hi)
        for key, arr, scalar in self.plain:
            out[key] = arr[i] if scalar else arr[i].copy()
        out["task"] = self.tasks[self.task_index[i]]
        return out

    def get_batch(self, indices: np.ndarray) -> dict[str, Any]:
        idx = np.asarray(indices, dtype=np.int64)
        e = np.searchsorted(self.start, idx, side="right") - 1
        bounds = self.bounds[e]
        lo, last = bounds[:, 0], bounds[:, 1] - 1
        before, after = idx - lo, last - idx  # frames of the episode before and after each one
        out: dict[str, Any] = {}
        for key, pad_key, off, wlo, whi, arr, blocks, _ in self.windows:
            inside = (before >= -wlo) & (after >= whi)
            inner = np.flatnonzero(inside)
            if blocks is not None and len(inner) == len(idx):
                out[key] = blocks[idx + wlo]
                out[pad_key] = np.zeros((len(idx), len(off)), dtype=bool)
                continue
            if blocks is not None and 2 * len(inner) >= len(idx):  # mostly inside: blocks, gathers at the edges
                edge = np.flatnonzero(~inside)
                q = idx[edge, None] + off
                clamped = np.maximum(q, lo[edge, None])
                np.minimum(clamped, last[edge, None], out=clamped)
                data = np.empty((len(idx), *blocks.shape[1:]), dtype=arr.dtype)
                data[inner] = blocks[idx[inner] + wlo]
                data[edge] = arr[clamped]
                pad = np.zeros((len(idx), len(off)), dtype=bool)
                pad[edge] = q != clamped
                out[key], out[pad_key] = data, pad
                continue
            q = idx[:, None] + off  # one clamp, and the padding is what it changed
            clamped = np.maximum(q, lo[:, None])
            np.minimum(clamped, last[:, None], out=clamped)
            out[key], out[pad_key] = arr[clamped], q != clamped
        for key, arr, _ in self.plain:
            out[key] = arr[idx]
        out["task"] = self.tasks[self.task_index[idx]].tolist()
        return out
