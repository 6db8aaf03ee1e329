"""The README's main job, offline: generate a LeRobot v3.0 dataset, transcode it, describe it, sample it, time it."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .api import open_dataset
from .baseline import FlatMemmapSampler
from .cli import describe
from .sample_data import write_sample_dataset

__all__ = ["run_demo"]


def _best_us(fn: Callable[[], object], n: int, repeats: int = 5) -> float:
    """Best of ``repeats`` runs of ``fn()`` (which does ``n`` samples), in µs per sample."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def run_demo(work_dir: Path | None = None, *, n_episodes: int = 300) -> None:
    """Print each step; the work folder is temporary unless ``work_dir`` (new or empty) is given."""
    if work_dir is not None:
        work_dir = Path(work_dir)
        if work_dir.exists() and any(work_dir.iterdir()):
            raise SystemExit(f"lerobot-zarr demo: {work_dir} is not empty; give a new or empty folder")
        _run(work_dir, n_episodes)
        return
    with tempfile.TemporaryDirectory(prefix="lerobot_zarr-demo-") as tmp:
        _run(Path(tmp), n_episodes)


def _run(work: Path, n_episodes: int) -> None:
    source = work / "lerobot_dataset"
    store = work / "store"
    print(f"1. writing a LeRobot v3.0 dataset: {n_episodes} episodes of 300-700 frames, state/action f32[14]")
    t0 = time.perf_counter()
    write_sample_dataset(source, n_episodes=n_episodes, lengths=(300, 700), state_dim=14, action_dim=14,
                         episodes_per_file=100)
    print(f"   done in {time.perf_counter() - t0:.1f} s -> {source}")

    print("2. transcoding it into an episode-chunked Zarr v3 store")
    t0 = time.perf_counter()
    fps = 30
    deltas = {"observation.state": [-1 / fps, 0.0], "action": [k / fps for k in range(16)]}
    ds = open_dataset(source, root=store, delta_timestamps=deltas)
    elapsed = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    print(f"   {size / 1e6:.0f} MB in {elapsed:.1f} s ({size / 1e6 / elapsed:.0f} MB/s)\n")
    print(describe(ds.meta), "\n")

    print("3. sampling with windows: state t-1..t, action t..t+15")
    item = ds[int(ds.meta.episode_start[1])]
    for key, value in item.items():
        print(f"   {key:<26} {getattr(value, 'shape', ''):} {getattr(value, 'dtype', type(value).__name__)}")

    floor_dir = work / "flat_memmap_reference"
    frames = {name: np.concatenate([ep[name] for ep in map(ds.episode, range(ds.meta.total_episodes))])
              for name in ds.meta.stored_features}
    FlatMemmapSampler.write(floor_dir, frames, ds.meta.episode_start, ds.meta.episode_length,
                            ds.meta.tasks, ds.meta.fps)
    floor = FlatMemmapSampler(floor_dir, deltas)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(ds), 2000)
    batches = [rng.integers(0, len(ds), 256) for _ in range(20)]
    for name in ("action", "observation.state_is_pad"):
        if not np.array_equal(ds.get_batch(idx[:64])[name], floor.get_batch(idx[:64])[name]):
            raise RuntimeError(f"demo: {name} differs between lerobot_zarr and the reference sampler")
    ours_item = _best_us(lambda: [ds[int(i)] for i in idx], len(idx))
    floor_item = _best_us(lambda: [floor[int(i)] for i in idx], len(idx))
    ours_batch = _best_us(lambda: [ds.get_batch(b) for b in batches], 256 * len(batches))
    floor_batch = _best_us(lambda: [floor.get_batch(b) for b in batches], 256 * len(batches))
    print("\n4. speed (best of 5, warm page cache), against a hand-written flat np.memmap sampler (the floor):")
    print(f"   {'':<22}{'lerobot_zarr':>14}{'flat memmap':>14}{'ratio':>8}")
    print(f"   {'ds[i]  µs/sample':<22}{ours_item:>14.1f}{floor_item:>14.1f}{ours_item / floor_item:>7.2f}x")
    print(f"   {'get_batch µs/sample':<22}{ours_batch:>14.3f}{floor_batch:>14.3f}"
          f"{ours_batch / floor_batch:>7.2f}x")
    print(f"   get_batch(256): {1e6 / ours_batch:,.0f} samples/s")
