"""A training-loop shaped use of lerobot_zarr: random batches of windows, as a diffusion/ACT policy samples them.

Run: python examples/train_loop.py [LEROBOT_DATASET_FOLDER]   (default: a generated sample dataset)
"""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import lerobot_zarr
from lerobot_zarr.sample_data import write_sample_dataset


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="lerobot_zarr-example-"))  # the store is kept there: reuse it, or delete it
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else write_sample_dataset(tmp / "src", n_episodes=50,
                                                                              lengths=(200, 400))
    store = lerobot_zarr.open_dataset(source, root=tmp / "store").root  # transcoded once, reused after
    fps = lerobot_zarr.LeRobotZarrDataset(store).meta.fps
    ds = lerobot_zarr.LeRobotZarrDataset(
        store, delta_timestamps={"observation.state": [-1 / fps, 0.0], "action": [k / fps for k in range(16)]}
    )
    print(ds)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(200):
        batch = ds.get_batch(rng.integers(0, len(ds), 256))
        # normalise with the dataset's stats, as a policy would
        mean = np.asarray(ds.meta.stats["action"]["mean"], dtype=np.float32)
        std = np.asarray(ds.meta.stats["action"]["std"], dtype=np.float32)
        actions = (batch["action"] - mean) / (std + 1e-8)
        valid = ~batch["action_is_pad"]
    dt = time.perf_counter() - t0
    print(f"200 batches of 256: {dt:.2f} s; last batch actions {actions.shape}, {valid.mean():.1%} not padded")


if __name__ == "__main__":
    main()
