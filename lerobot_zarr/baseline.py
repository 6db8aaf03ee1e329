"""The hand-written numpy memmap sampler we measure ourselves against (the speed floor).

Each feature is one flat ``np.memmap`` of all frames plus the episode bounds, as a careful user would write it
for a single static dataset (no episode chunks, no partial downloads, no edits). It returns the same dict as
:class:`~lerobot_zarr.LeRobotZarrDataset`, so benchmarks and the demo can compare like for like.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FlatMemmapSampler"]


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
        self.arrays = {name: np.memmap(folder / f"{name}.bin", dtype=spec["dtype"], mode="r",
                                       shape=tuple(spec["shape"])).view(np.ndarray)  # plain views index faster
                       for name, spec in meta["arrays"].items()}
        self.offsets = {k: np.round(np.asarray(v) * self.fps).astype(np.int64)
                        for k, v in (delta_timestamps or {}).items()}
        self.span = {k: (int(v.min()), int(v.max())) for k, v in self.offsets.items()}
        self.plain = [k for k in self.arrays if k not in self.offsets]

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
        for key, off in self.offsets.items():
            q = off + i
            if lo <= i + self.span[key][0] and i + self.span[key][1] < hi:  # inside the episode: no clamping
                out[f"{key}_is_pad"] = np.zeros(len(off), dtype=bool)
                out[key] = self.arrays[key][q]
            else:
                out[f"{key}_is_pad"] = (q < lo) | (q >= hi)
                out[key] = self.arrays[key][np.minimum(np.maximum(q, lo), hi - 1)]
        for key in self.plain:
            value = self.arrays[key][i]
            out[key] = np.array(value) if isinstance(value, np.ndarray) else value
        out["task"] = self.tasks[out["task_index"]]
        return out

    def get_batch(self, indices: np.ndarray) -> dict[str, Any]:
        idx = np.asarray(indices, dtype=np.int64)
        e = np.searchsorted(self.start, idx, side="right") - 1
        lo, hi = self.start[e][:, None], self.end[e][:, None]
        out: dict[str, Any] = {}
        for key, off in self.offsets.items():
            q = idx[:, None] + off[None, :]
            out[f"{key}_is_pad"] = (q < lo) | (q >= hi)
            out[key] = self.arrays[key][np.clip(q, lo, hi - 1)]
        for key in self.plain:
            out[key] = self.arrays[key][idx]
        out["task"] = self.tasks[out["task_index"]].tolist()
        return out
