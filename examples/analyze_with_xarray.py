"""Analyse a dataset with xarray and dask: per-episode statistics, a cross-episode analysis, LeRobot's stats.

    python examples/analyze_with_xarray.py [SOURCE]      (xarray extra; SOURCE: a LeRobot folder, a store or a
                                                         Hub repo id; default: a generated dataset)

Everything below is lazy until ``.compute()``: dask reads one episode chunk per task from the local store.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import lerobot_zarr
from lerobot_zarr.integrations.xarray import lerobot_stats
from lerobot_zarr.testing.sample_data import write_sample_dataset


def main() -> None:
    if len(sys.argv) > 1:
        analyze(lerobot_zarr.open_dataset(sys.argv[1]))
        return
    with tempfile.TemporaryDirectory(prefix="lerobot_zarr-analysis-") as folder:  # a generated dataset, removed after
        tmp = Path(folder)
        source = write_sample_dataset(tmp / "src", n_episodes=30, tasks=("pick", "place", "push"))
        with lerobot_zarr.open_dataset(source, root=tmp / "store") as ds:
            analyze(ds)


def analyze(ds: lerobot_zarr.LeRobotZarrDataset) -> None:
    x = ds.to_xarray()
    print(x)
    action = next(k for k in ("action", "actions") if k in x)

    # 1. per-episode statistics: group frames by their episode (one dask chunk each)
    per_episode = x[action].groupby("episode_index")
    summary = {"mean": per_episode.mean(), "std": per_episode.std(), "max |a|": abs(x[action]).groupby(
        "episode_index").max()}
    for name, values in summary.items():
        print(f"{name} of {action} per episode (first 3 episodes, first 4 dims):")
        print(np.round(values.compute().values[:3, :4], 4))

    # 2. cross-episode: the distribution of the first action dimension per task
    task_of_frame = x["episode_task"].sel(episode=x["episode_index"]).compute()
    first_dim = x[action].isel({x[action].dims[1]: 0})
    for task in np.unique(task_of_frame.values):
        values = first_dim.where(task_of_frame == task, drop=True).compute().values
        quartiles = np.round(np.quantile(values, [0.25, 0.5, 0.75]), 4)
        print(f"task {task!r}: {values.size} frames, {action}[0] quartiles {quartiles}")

    # 3. LeRobot's stats.json recomputed with dask (per episode, then the count-weighted merge)
    recomputed = lerobot_stats(x, [action])
    theirs = ds.meta.stats.get(action, {})
    for key in ("mean", "std", "min", "max", "q50"):
        if key in theirs:
            gap = np.max(np.abs(np.asarray(recomputed[action][key]) - np.asarray(theirs[key])))
            print(f"{action} {key}: recomputed vs the dataset's stats, largest difference {gap:.3g}")


if __name__ == "__main__":
    main()
