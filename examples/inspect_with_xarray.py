"""Open a lerobot_zarr store with xarray (lazy, one dask chunk per episode) and compute per-episode statistics.

Run: python examples/inspect_with_xarray.py [STORE_OR_LEROBOT_FOLDER]   (needs the xarray extra)
"""

import sys
import tempfile
from pathlib import Path

import xarray as xr

import lerobot_zarr  # sets ZARR_ARRAY__RECTILINEAR_CHUNKS=True, which zarr needs to read episode chunks
from lerobot_zarr.sample_data import write_sample_dataset


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="lerobot_zarr-example-"))
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else write_sample_dataset(tmp / "src", n_episodes=20)
    ds = lerobot_zarr.open_dataset(source, root=None if len(sys.argv) > 1 else tmp / "store")
    x = xr.open_zarr(ds.root)
    print(x)
    action = x["action"].assign_coords(episode_index=("frame", x["episode_index"].values))
    per_episode = action.groupby("episode_index").mean().compute()
    print("mean action per episode (first 5 episodes, first 4 dims):")
    print(per_episode.values[:5, :4])


if __name__ == "__main__":
    main()
